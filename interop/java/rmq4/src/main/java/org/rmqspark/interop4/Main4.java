package org.rmqspark.interop4;

import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import java.io.File;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.PrintStream;
import java.net.Inet6Address;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.SocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Base64;
import java.util.HashMap;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentMap;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.MQVersion;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.sysflag.MessageSysFlag;
import org.apache.rocketmq.store.AppendMessageResult;
import org.apache.rocketmq.store.CommitLog;
import org.apache.rocketmq.store.ConsumeQueue;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.DispatchRequest;
import org.apache.rocketmq.store.GetMessageResult;
import org.apache.rocketmq.store.MessageExtBrokerInner;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.SelectMappedBufferResult;
import org.apache.rocketmq.store.config.BrokerRole;
import org.apache.rocketmq.store.config.FlushDiskType;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.stats.BrokerStatsManager;

/**
 * The RocketMQ 4.9.8 harness: {@code write-store DIR N [SEGMENT_BYTES]},
 * {@code read-store DIR} and {@code version}, with the same JSON lines as the 5.x harness
 * (org.rmqspark.interop.Main), so that the Python tests compare both the same way.
 *
 * <p>Differences from 5.x that matter here: 4.x writes v1 records only and refuses topics
 * longer than 127 chars; it drops the trailing property separator; its store itself turns a
 * DELAY message into a SCHEDULE_TOPIC_XXXX record (so write-store uses level 18, 2 h, which
 * never falls due while it runs); and read-store runs the store as SLAVE so that the 4.x
 * ScheduleMessageService (started by a master store) never redelivers anything.
 */
public final class Main4 {
    static final long BORN_TIMESTAMP_BASE = 1_700_000_000_000L;
    static final int CQ_FILE_BYTES = 1000 * 20;

    private Main4() {
    }

    public static void main(String[] args) throws Exception {
        PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
        System.setOut(System.err);
        int rc;
        try {
            rc = run(args, out);
        } catch (Throwable e) {
            // Exit even so: RocketMQ's non-daemon threads would keep the JVM alive.
            e.printStackTrace();
            rc = 1;
        } finally {
            out.flush();
        }
        System.exit(rc);
    }

    static int run(String[] args, PrintStream out) throws Exception {
        if (args.length == 0) {
            System.err.println("usage: write-store DIR N [SEGMENT_BYTES] | read-store DIR | version");
            return 2;
        }
        switch (args[0]) {
            case "write-store":
                return writeStore(Path.of(args[1]), Integer.parseInt(args[2]),
                    args.length > 3 ? Integer.parseInt(args[3]) : 64 * 1024, out);
            case "read-store":
                return readStore(Path.of(args[1]), out);
            case "version": {
                JSONObject o = new JSONObject();
                o.put("rocketmq", MQVersion.getVersionDesc(MQVersion.CURRENT_VERSION));
                out.println(o.toJSONString());
                return 0;
            }
            default:
                System.err.println("unknown command: " + args[0]);
                return 2;
        }
    }

    // --- store set-up --------------------------------------------------------------------------

    static DefaultMessageStore open(Path root, int segmentBytes, BrokerRole role) throws Exception {
        MessageStoreConfig config = new MessageStoreConfig();
        config.setStorePathRootDir(root.toString());
        config.setStorePathCommitLog(root.resolve("commitlog").toString());
        config.setMappedFileSizeCommitLog(segmentBytes);
        config.setMappedFileSizeConsumeQueue(CQ_FILE_BYTES);
        config.setFlushDiskType(FlushDiskType.SYNC_FLUSH);
        config.setMaxHashSlotNum(1024);
        config.setMaxIndexNum(4096);
        config.setBrokerRole(role);
        try (ServerSocket socket = new ServerSocket(0)) {
            config.setHaListenPort(socket.getLocalPort());
        }
        BrokerConfig brokerConfig = new BrokerConfig();
        brokerConfig.setBrokerName("rmq-interop4");
        return new DefaultMessageStore(config, new BrokerStatsManager("rmq-interop4", true),
            (topic, queueId, logicOffset, tagsCode, msgStoreTime, filterBitMap, properties) -> { },
            brokerConfig);
    }

    // --- write-store -----------------------------------------------------------------------------

    static int writeStore(Path root, int count, int segmentBytes, PrintStream out) throws Exception {
        Files.createDirectories(root);
        DefaultMessageStore store = open(root, segmentBytes, BrokerRole.ASYNC_MASTER);
        if (!store.load()) {
            System.err.println("DefaultMessageStore.load() failed for " + root);
            return 1;
        }
        store.start();
        int failures = 0;
        long preparedOffset = -1;
        for (int i = 0; i < count; i++) {
            MessageExtBrokerInner msg = message(i, preparedOffset);
            PutMessageResult result = store.putMessage(msg);
            JSONObject o = new JSONObject(true);
            o.put("event", "put");
            o.put("index", i);
            o.put("status", result.getPutMessageStatus().name());
            if (!result.isOk()) {
                failures++;
                out.println(o.toJSONString());
                continue;
            }
            AppendMessageResult append = result.getAppendMessageResult();
            if (MessageSysFlag.getTransactionValue(msg.getSysFlag()) == MessageSysFlag.TRANSACTION_PREPARED_TYPE) {
                preparedOffset = append.getWroteOffset();
            }
            o.put("physicalOffset", append.getWroteOffset());
            o.put("size", append.getWroteBytes());
            o.put("queueOffset", append.getLogicsOffset());
            o.put("msgId", append.getMsgId());
            o.put("storeTimestamp", append.getStoreTimestamp());
            o.put("topic", msg.getTopic());
            o.put("queueId", msg.getQueueId());
            o.put("flag", msg.getFlag());
            o.put("sysFlag", msg.getSysFlag());
            o.put("bornTimestamp", msg.getBornTimestamp());
            o.put("bornHost", format(msg.getBornHost()));
            o.put("storeHost", format(msg.getStoreHost()));
            o.put("reconsumeTimes", msg.getReconsumeTimes());
            o.put("preparedTransactionOffset", msg.getPreparedTransactionOffset());
            o.put("bodyCrc", msg.getBodyCRC());
            o.put("body", Base64.getEncoder().encodeToString(msg.getBody()));
            o.put("propertiesString", msg.getPropertiesString());
            o.put("magicVersion", 1);
            o.put("tagsCode", msg.getTagsCode());
            out.println(o.toJSONString());
        }
        long minOffset = store.getMinPhyOffset();
        long maxOffset = store.getMaxPhyOffset();
        store.shutdown();
        JSONObject end = new JSONObject(true);
        end.put("event", "shutdown");
        end.put("minOffset", minOffset);
        end.put("maxOffset", maxOffset);
        end.put("segmentBytes", segmentBytes);
        JSONArray files = new JSONArray();
        File[] names = root.resolve("commitlog").toFile().listFiles();
        if (names != null) {
            Arrays.sort(names);
            for (File f : names) {
                files.add(f.getName() + ":" + f.length());
            }
        }
        end.put("commitlogFiles", files);
        end.put("abortFileExists", Files.exists(root.resolve("abort")));
        out.println(end.toJSONString());
        return failures == 0 ? 0 : 1;
    }

    /** Message number i, varied like the 5.x harness's, within what 4.x accepts. */
    static MessageExtBrokerInner message(int i, long preparedOffset) throws Exception {
        MessageExtBrokerInner msg = new MessageExtBrokerInner();
        Map<String, String> props = new HashMap<>();
        String topic = "TopicA";
        int queueId = i % 4;
        byte[] body = ("message " + i).getBytes(StandardCharsets.UTF_8);
        String tags = "TagA";
        SocketAddress bornHost = parse("192.168.7." + (i % 250 + 1) + ":" + (40000 + i));
        SocketAddress storeHost = parse("10.0.0.5:10911");
        int sysFlag = 0;
        switch (i % 6) {
            case 0:
                props.put(MessageConst.PROPERTY_KEYS, "key-" + i + " order-" + i);
                break;
            case 1:
                topic = "TopicB";
                tags = "TagB";
                body = ("héllo wörld ✓ 🚀 " + i).getBytes(StandardCharsets.UTF_8);
                props.put("color", "red");
                props.put("ключ", "значение");
                break;
            case 2:
                body = new byte[0];
                tags = null;
                break;
            case 3:
                body = pattern(3000, i);
                bornHost = parse("[2001:db8::" + Integer.toHexString(i) + "]:" + (40000 + i));
                break;
            case 4:
                bornHost = parse("[::1]:" + (40000 + i));
                storeHost = parse("[fe80::1]:10911");
                tags = "TagV6";
                break;
            default:
                body = pattern(9000, i);
                msg.setFlag(7);
                msg.setReconsumeTimes(2);
                tags = "TagBig";
                break;
        }
        if (tags != null) {
            props.put(MessageConst.PROPERTY_TAGS, tags);
        }
        props.put(MessageConst.PROPERTY_WAIT_STORE_MSG_OK, "true");
        props.put(MessageConst.PROPERTY_CLUSTER, "DefaultCluster");
        msg.setTopic(topic);
        msg.setQueueId(queueId);
        msg.setBody(body);
        MessageAccessor.setProperties(msg, props);
        MessageClientIDSetter.setUniqID(msg);
        if (i == 3) {
            // The 4.x CommitLog itself moves this to SCHEDULE_TOPIC_XXXX, queue 17.
            MessageAccessor.putProperty(msg, MessageConst.PROPERTY_DELAY_TIME_LEVEL, "18");
        }
        if (i == 8) {
            sysFlag = MessageSysFlag.TRANSACTION_PREPARED_TYPE;
            MessageAccessor.putProperty(msg, MessageConst.PROPERTY_TRANSACTION_PREPARED, "true");
        }
        if (i == 9 && preparedOffset >= 0) {
            sysFlag = MessageSysFlag.TRANSACTION_COMMIT_TYPE;
            msg.setPreparedTransactionOffset(preparedOffset);
        }
        msg.setSysFlag(sysFlag);
        msg.setBornTimestamp(BORN_TIMESTAMP_BASE + i);
        msg.setBornHost(bornHost);
        msg.setStoreHost(storeHost);
        msg.setTagsCode(MessageExtBrokerInner.tagsString2tagsCode(tags));
        msg.setPropertiesString(MessageDecoder.messageProperties2String(msg.getProperties()));
        return msg;
    }

    static byte[] pattern(int size, int seed) {
        byte[] data = new byte[size];
        int x = seed + 17;
        for (int k = 0; k < size; k++) {
            x = x * 1103515245 + 12345;
            data[k] = (byte) (x >>> 16);
        }
        return data;
    }

    // --- read-store ------------------------------------------------------------------------------

    static int readStore(Path root, PrintStream out) throws Exception {
        int segmentBytes = firstFileSize(root.resolve("commitlog"), 64 * 1024);
        boolean lastExitOK = !Files.exists(root.resolve("abort"));
        DefaultMessageStore store = open(root, segmentBytes, BrokerRole.SLAVE);
        boolean loaded = store.load();
        CommitLog commitLog = store.getCommitLog();
        JSONObject load = new JSONObject(true);
        load.put("event", "load");
        load.put("ok", loaded);
        load.put("lastExitOK", lastExitOK);
        load.put("segmentBytes", segmentBytes);
        if (loaded) {
            load.put("minOffset", store.getMinPhyOffset());
            load.put("maxOffset", store.getMaxPhyOffset());
        }
        out.println(load.toJSONString());
        if (!loaded) {
            return 1;
        }
        int bad = walk(commitLog, store.getMinPhyOffset(), store.getMaxPhyOffset(), out);
        store.start();  // builds the ConsumeQueues (reput) and waits until it caught up
        int cqUnits = 0;
        int viaGetMessage = 0;
        ConcurrentMap<String, ConcurrentMap<Integer, ConsumeQueue>> table = store.getConsumeQueueTable();
        for (String topic : new TreeMap<>(table).keySet()) {
            for (Map.Entry<Integer, ConsumeQueue> q : new TreeMap<>(table.get(topic)).entrySet()) {
                ConsumeQueue cq = q.getValue();
                long min = cq.getMinOffsetInQueue();
                long max = cq.getMaxOffsetInQueue();
                for (long index = min; index < max; index++) {
                    SelectMappedBufferResult unit = cq.getIndexBuffer(index);
                    if (unit == null) {
                        break;
                    }
                    try {
                        ByteBuffer buf = unit.getByteBuffer();
                        JSONObject u = new JSONObject(true);
                        u.put("event", "cq_unit");
                        u.put("topic", topic);
                        u.put("queueId", q.getKey());
                        u.put("queueOffset", index);
                        u.put("physicalOffset", buf.getLong());
                        u.put("size", buf.getInt());
                        u.put("tagsCode", buf.getLong());
                        out.println(u.toJSONString());
                        cqUnits++;
                    } finally {
                        unit.release();
                    }
                }
                int got = 0;
                long offset = min;
                while (offset < max) {
                    GetMessageResult r = store.getMessage("rmq-interop4", topic, q.getKey(), offset, 32, null);
                    if (r == null || r.getMessageCount() == 0) {
                        break;
                    }
                    got += r.getMessageCount();
                    offset = r.getNextBeginOffset();
                    r.release();
                }
                JSONObject g = new JSONObject(true);
                g.put("event", "get_message");
                g.put("topic", topic);
                g.put("queueId", q.getKey());
                g.put("count", got);
                out.println(g.toJSONString());
                viaGetMessage += got;
            }
        }
        JSONObject end = new JSONObject(true);
        end.put("event", "end");
        end.put("maxOffset", store.getMaxPhyOffset());
        end.put("cqUnits", cqUnits);
        end.put("getMessageCount", viaGetMessage);
        end.put("badRecords", bad);
        out.println(end.toJSONString());
        // Bad records are reported as "bad_record" lines; the exit code stays 0.
        return 0;
    }

    static int walk(CommitLog commitLog, long minOffset, long maxOffset, PrintStream out) {
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
                DispatchRequest request = commitLog.checkMessageAndReturnSize(buf.duplicate(), true, true);
                if (request.isSuccess() && request.getMsgSize() == 0) {
                    offset = commitLog.rollNextFile(offset);
                    continue;
                }
                if (!request.isSuccess() || request.getMsgSize() < 0) {
                    JSONObject o = new JSONObject(true);
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
                ByteBuffer record = one.slice();
                MessageExt msg = MessageDecoder.decode(record.duplicate(), true, false, false);
                JSONObject o = msg == null ? new JSONObject(true) : toJson(msg, record);
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
        JSONObject end = new JSONObject(true);
        end.put("event", "walk_end");
        end.put("offset", offset);
        end.put("records", records);
        end.put("reason", stop);
        out.println(end.toJSONString());
        return bad;
    }

    /** MessageExt to JSON; 4.x's decoder has no raw-properties option: slice it from the bytes. */
    static JSONObject toJson(MessageExt msg, ByteBuffer record) {
        JSONObject o = new JSONObject(true);
        o.put("storeSize", msg.getStoreSize());
        o.put("bodyCrc", msg.getBodyCRC());
        o.put("topic", msg.getTopic());
        o.put("queueId", msg.getQueueId());
        o.put("flag", msg.getFlag());
        o.put("queueOffset", msg.getQueueOffset());
        o.put("physicalOffset", msg.getCommitLogOffset());
        o.put("sysFlag", msg.getSysFlag());
        o.put("bornTimestamp", msg.getBornTimestamp());
        o.put("bornHost", format(msg.getBornHost()));
        o.put("storeTimestamp", msg.getStoreTimestamp());
        o.put("storeHost", format(msg.getStoreHost()));
        o.put("reconsumeTimes", msg.getReconsumeTimes());
        o.put("preparedTransactionOffset", msg.getPreparedTransactionOffset());
        byte[] body = msg.getBody() == null ? new byte[0] : msg.getBody();
        o.put("body", Base64.getEncoder().encodeToString(body));
        o.put("propertiesString", rawProperties(record, msg.getSysFlag()));
        o.put("properties", msg.getProperties() == null ? new TreeMap<>() : new TreeMap<>(msg.getProperties()));
        o.put("msgId", msg.getMsgId());
        return o;
    }

    static String rawProperties(ByteBuffer record, int sysFlag) {
        int bornHost = (sysFlag & MessageSysFlag.BORNHOST_V6_FLAG) == 0 ? 8 : 20;
        int storeHost = (sysFlag & MessageSysFlag.STOREHOSTADDRESS_V6_FLAG) == 0 ? 8 : 20;
        int bodyLengthAt = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + bornHost + 8 + storeHost + 4 + 8;
        int bodyLength = record.getInt(bodyLengthAt);
        int topicLengthAt = bodyLengthAt + 4 + bodyLength;
        int topicLength = record.get(topicLengthAt);
        int propsLengthAt = topicLengthAt + 1 + topicLength;
        int propsLength = record.getShort(propsLengthAt);
        byte[] props = new byte[Math.max(propsLength, 0)];
        record.get(propsLengthAt + 2, props);
        return new String(props, StandardCharsets.UTF_8);
    }

    // --- small helpers ---------------------------------------------------------------------------

    static InetSocketAddress parse(String text) throws Exception {
        int colon = text.lastIndexOf(':');
        String host = text.substring(0, colon);
        if (host.startsWith("[") && host.endsWith("]")) {
            host = host.substring(1, host.length() - 1);
        }
        return new InetSocketAddress(InetAddress.getByName(host), Integer.parseInt(text.substring(colon + 1)));
    }

    static String format(SocketAddress address) {
        InetSocketAddress inet = (InetSocketAddress) address;
        String ip = inet.getAddress().getHostAddress();
        return inet.getAddress() instanceof Inet6Address ? "[" + ip + "]:" + inet.getPort() : ip + ":" + inet.getPort();
    }

    static int firstFileSize(Path dir, int fallback) {
        File[] files = dir.toFile().listFiles(File::isFile);
        if (files == null || files.length == 0) {
            return fallback;
        }
        Arrays.sort(files);
        return (int) files[0].length();
    }
}
