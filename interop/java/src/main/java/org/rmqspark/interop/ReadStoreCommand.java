package org.rmqspark.interop;

import com.alibaba.fastjson2.JSONObject;
import java.io.File;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentMap;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.store.CommitLog;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.DispatchRequest;
import org.apache.rocketmq.store.GetMessageResult;
import org.apache.rocketmq.store.SelectMappedBufferResult;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.queue.ConsumeQueueInterface;
import org.apache.rocketmq.store.queue.CqUnit;
import org.apache.rocketmq.store.queue.ReferredIterator;

/**
 * {@code read-store DIR}: opens an existing store with a real DefaultMessageStore and reports
 * what RocketMQ sees. The CommitLog file size is taken from the first commitlog file (RocketMQ
 * refuses files of another size); the ConsumeQueue file size from the first CQ file, if any.
 *
 * <p>Output lines ({@code "event"}): {@code load} (load() result, lastExitOK, min/max/confirm
 * offsets after recovery, and the checkpoint's confirmPhyOffset as recovery set it);
 * {@code message} per record found by walking the CommitLog from the min offset with
 * CommitLog.checkMessageAndReturnSize (CRC checked, as recovery does) and decoded by
 * MessageDecoder; {@code bad_record} if the walk meets one; {@code walk_end} (where and why the
 * walk stopped); after start(): {@code cq_unit} per ConsumeQueue unit, {@code get_message} per
 * queue (count read via getMessage), and {@code end}.
 * The directory is modified (RocketMQ writes CQ/index files and the checkpoint) and left as
 * after a crash (no shutdown, {@code abort} present): pass a copy.
 */
final class ReadStoreCommand {
    private ReadStoreCommand() {
    }

    static int run(String[] args, PrintStream out) throws Exception {
        if (args.length < 1) {
            System.err.println("usage: read-store DIR");
            return 2;
        }
        Path root = Path.of(args[0]);
        int segmentBytes = firstFileSize(root.resolve("commitlog"), 64 * 1024);
        int cqBytes = cqFileSize(root.resolve("consumequeue"), StoreFactory.CQ_UNITS_PER_FILE * 20);
        boolean lastExitOK = !Files.exists(root.resolve("abort"));
        MessageStoreConfig config = StoreFactory.config(root, segmentBytes, cqBytes);
        // 5.2+: verify the __CRC32# record CRC property of every record (a record without it
        // then fails), for stores whose records all carry it: set by the Python tests.
        config.setForceVerifyPropCRC("1".equals(System.getenv("RMQ_INTEROP_FORCE_VERIFY_PROP_CRC")));
        DefaultMessageStore store = StoreFactory.open(config);
        boolean loaded = store.load();
        CommitLog commitLog = store.getCommitLog();
        JSONObject load = new JSONObject();
        load.put("event", "load");
        load.put("ok", loaded);
        load.put("lastExitOK", lastExitOK);
        load.put("segmentBytes", segmentBytes);
        load.put("cqFileBytes", cqBytes);
        if (loaded) {
            load.put("minOffset", store.getMinPhyOffset());
            load.put("maxOffset", store.getMaxPhyOffset());
            load.put("confirmOffset", commitLog.getConfirmOffset());
            // What recovery put into the checkpoint's confirmPhyOffset (written at shutdown).
            load.put("checkpointConfirmPhyOffset", store.getStoreCheckpoint().getConfirmPhyOffset());
        }
        out.println(load.toJSONString());
        if (!loaded) {
            return 1;
        }
        int bad = walk(commitLog, store.getMinPhyOffset(), store.getMaxPhyOffset(), out);

        store.start();
        int cqUnits = 0;
        int viaGetMessage = 0;
        ConcurrentMap<String, ConcurrentMap<Integer, ConsumeQueueInterface>> table = store.getConsumeQueueTable();
        for (String topic : new TreeMap<>(table).keySet()) {
            for (Map.Entry<Integer, ConsumeQueueInterface> q : new TreeMap<>(table.get(topic)).entrySet()) {
                ConsumeQueueInterface cq = q.getValue();
                long min = cq.getMinOffsetInQueue();
                long max = cq.getMaxOffsetInQueue();
                ReferredIterator<CqUnit> it = cq.iterateFrom(min);
                if (it != null) {
                    try {
                        while (it.hasNext()) {
                            CqUnit unit = it.next();
                            JSONObject u = new JSONObject();
                            u.put("event", "cq_unit");
                            u.put("topic", topic);
                            u.put("queueId", q.getKey());
                            u.put("queueOffset", unit.getQueueOffset());
                            u.put("physicalOffset", unit.getPos());
                            u.put("size", unit.getSize());
                            u.put("tagsCode", unit.getTagsCode());
                            out.println(u.toJSONString());
                            cqUnits++;
                        }
                    } finally {
                        it.release();
                    }
                }
                int got = 0;
                long offset = min;
                while (offset < max) {
                    GetMessageResult r = store.getMessage("rmq-interop", topic, q.getKey(), offset, 32, null);
                    if (r == null || r.getMessageCount() == 0) {
                        break;
                    }
                    got += r.getMessageCount();
                    offset = r.getNextBeginOffset();
                    r.release();
                }
                JSONObject g = new JSONObject();
                g.put("event", "get_message");
                g.put("topic", topic);
                g.put("queueId", q.getKey());
                g.put("minQueueOffset", min);
                g.put("maxQueueOffset", max);
                g.put("count", got);
                out.println(g.toJSONString());
                viaGetMessage += got;
            }
        }
        JSONObject end = new JSONObject();
        end.put("event", "end");
        end.put("maxOffset", store.getMaxPhyOffset());
        end.put("cqUnits", cqUnits);
        end.put("getMessageCount", viaGetMessage);
        end.put("badRecords", bad);
        out.println(end.toJSONString());
        // No store.shutdown(): it sleeps 3 s, and the directory is a throw-away copy. Main
        // exits the JVM, which stops RocketMQ's service threads.
        // Bad records are reported as "bad_record" lines; the exit code stays 0.
        return 0;
    }

    /** Walk records from min to max offset as RocketMQ's recovery does; returns bad-record count. */
    private static int walk(CommitLog commitLog, long minOffset, long maxOffset, PrintStream out) {
        long offset = Math.max(minOffset, 0);
        String stop = "reached max offset";
        int bad = 0;
        int records = 0;
        while (offset < maxOffset) {
            SelectMappedBufferResult data = commitLog.getData(offset, false);
            if (data == null) {
                stop = "no mapped file at offset";
                break;
            }
            try {
                ByteBuffer buf = data.getByteBuffer();
                DispatchRequest request = commitLog.checkMessageAndReturnSize(buf.duplicate(), true, false, true);
                if (request.isSuccess() && request.getMsgSize() == 0) {
                    offset = commitLog.rollNextFile(offset);
                    continue;
                }
                if (!request.isSuccess() || request.getMsgSize() < 0) {
                    JSONObject o = new JSONObject();
                    o.put("event", "bad_record");
                    o.put("physicalOffset", offset);
                    o.put("size", request.getMsgSize());
                    out.println(o.toJSONString());
                    bad++;
                    stop = "checkMessageAndReturnSize failed";
                    break;
                }
                ByteBuffer one = buf.duplicate();
                one.limit(one.position() + request.getMsgSize());
                MessageExt msg = Records.decode(one.slice());
                JSONObject o = msg == null ? new JSONObject() : Records.toJson(msg);
                o.put("event", "message");
                o.put("decodedByMessageDecoder", msg != null);
                o.put("physicalOffset", offset);
                o.put("size", request.getMsgSize());
                o.put("dispatchTopic", request.getTopic());
                o.put("dispatchQueueId", request.getQueueId());
                o.put("dispatchQueueOffset", request.getConsumeQueueOffset());
                o.put("tagsCode", request.getTagsCode());
                o.put("keys", request.getKeys());
                o.put("uniqKey", request.getUniqKey());
                out.println(o.toJSONString());
                records++;
                offset += request.getMsgSize();
            } finally {
                data.release();
            }
        }
        JSONObject end = new JSONObject();
        end.put("event", "walk_end");
        end.put("offset", offset);
        end.put("records", records);
        end.put("reason", stop);
        out.println(end.toJSONString());
        return bad;
    }

    private static int firstFileSize(Path dir, int fallback) {
        File[] files = dir.toFile().listFiles(File::isFile);
        if (files == null || files.length == 0) {
            return fallback;
        }
        Arrays.sort(files);
        return (int) files[0].length();
    }

    private static int cqFileSize(Path dir, int fallback) throws Exception {
        if (!Files.isDirectory(dir)) {
            return fallback;
        }
        try (var paths = Files.walk(dir)) {
            return paths.filter(Files::isRegularFile).findFirst()
                .map(p -> (int) p.toFile().length()).orElse(fallback);
        }
    }
}
