package org.rmqspark.interop;

import com.alibaba.fastjson2.JSONArray;
import com.alibaba.fastjson2.JSONObject;
import java.io.File;
import java.io.PrintStream;
import java.io.RandomAccessFile;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Base64;
import java.util.HashMap;
import java.util.Map;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExtBrokerInner;
import org.apache.rocketmq.common.sysflag.MessageSysFlag;
import org.apache.rocketmq.common.topic.TopicValidator;
import org.apache.rocketmq.store.AppendMessageResult;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.config.MessageStoreConfig;

/**
 * {@code write-store DIR N [SEGMENT_BYTES]}: a real DefaultMessageStore (SYNC_FLUSH,
 * CommitLog files of SEGMENT_BYTES, default 64 KiB, so that files roll) stores N varied
 * messages, then shuts down cleanly. Prints one JSON line per put ({@code "event":"put"})
 * and a final {@code "event":"shutdown"} line.
 *
 * <p>The variety: v1 and v2 (topic longer than 127 chars) records, empty / unicode / large
 * bodies, tags, keys, user properties, UNIQ_KEY, an IPv6 born host, an IPv6 store host, a
 * delayed message transformed exactly as the 5.x broker's HookUtils.transformDelayLevelMessage
 * does (topic SCHEDULE_TOPIC_XXXX, queueId = level - 1, REAL_TOPIC and REAL_QID added), a
 * transaction PREPARED record and a COMMIT record pointing at it.
 */
final class WriteStoreCommand {
    static final long BORN_TIMESTAMP_BASE = 1_700_000_000_000L;
    static final String LONG_TOPIC = "LongTopic_" + "x".repeat(130);

    private WriteStoreCommand() {
    }

    static int run(String[] args, PrintStream out) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: write-store DIR N [SEGMENT_BYTES]");
            return 2;
        }
        Path root = Path.of(args[0]);
        int count = Integer.parseInt(args[1]);
        int segmentBytes = args.length > 2 ? Integer.parseInt(args[2]) : 64 * 1024;
        Files.createDirectories(root);
        MessageStoreConfig config = StoreFactory.config(root, segmentBytes,
            StoreFactory.CQ_UNITS_PER_FILE * 20);
        DefaultMessageStore store = StoreFactory.open(config);
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
            JSONObject o = new JSONObject();
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
            o.put("bornHost", Hosts.format(msg.getBornHost()));
            o.put("storeHost", Hosts.format(msg.getStoreHost()));
            o.put("reconsumeTimes", msg.getReconsumeTimes());
            o.put("preparedTransactionOffset", msg.getPreparedTransactionOffset());
            o.put("bodyCrc", msg.getBodyCRC());
            o.put("body", Base64.getEncoder().encodeToString(msg.getBody()));
            o.put("propertiesString", msg.getPropertiesString());
            o.put("magicVersion", msg.getVersion().getMagicCode() == MessageDecoder.MESSAGE_MAGIC_CODE_V2 ? 2 : 1);
            o.put("tagsCode", msg.getTagsCode());
            out.println(o.toJSONString());
        }
        long minOffset = store.getMinPhyOffset();
        long maxOffset = store.getMaxPhyOffset();
        store.shutdown();
        JSONObject end = new JSONObject();
        end.put("event", "shutdown");
        end.put("minOffset", minOffset);
        end.put("maxOffset", maxOffset);
        end.put("segmentBytes", segmentBytes);
        end.put("checkpoint", checkpoint(root.resolve("checkpoint")));
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

    static JSONObject checkpoint(Path path) throws Exception {
        JSONObject o = new JSONObject();
        if (!Files.exists(path)) {
            return o;
        }
        try (RandomAccessFile f = new RandomAccessFile(path.toFile(), "r")) {
            o.put("size", f.length());
            o.put("physicMsgTimestamp", f.readLong());
            o.put("logicsMsgTimestamp", f.readLong());
            o.put("indexMsgTimestamp", f.readLong());
            o.put("masterFlushedOffset", f.readLong());
            o.put("confirmPhyOffset", f.readLong());
        }
        return o;
    }

    /** Message number i; all choices are deterministic except UNIQ_KEY and store time. */
    static MessageExtBrokerInner message(int i, long preparedOffset) throws Exception {
        MessageExtBrokerInner msg = new MessageExtBrokerInner();
        Map<String, String> props = new HashMap<>(128);
        String topic = "TopicA";
        int queueId = i % 4;
        byte[] body = ("message " + i).getBytes(StandardCharsets.UTF_8);
        String tags = "TagA";
        InetSocketAddress bornHost = Hosts.parse("192.168.7." + (i % 250 + 1) + ":" + (40000 + i));
        InetSocketAddress storeHost = Hosts.parse("10.0.0.5:10911");
        int sysFlag = 0;
        switch (i % 7) {
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
                bornHost = Hosts.parse("[2001:db8::" + Integer.toHexString(i) + "]:" + (40000 + i));
                props.put(MessageConst.PROPERTY_KEYS, "v6-" + i);
                break;
            case 4:
                topic = LONG_TOPIC;
                queueId = 0;
                tags = "TagLong";
                break;
            case 5:
                bornHost = Hosts.parse("[::1]:" + (40000 + i));
                storeHost = Hosts.parse("[fe80::1]:10911");
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
            // Delayed by level 3: the 5.x broker's transformDelayLevelMessage.
            MessageAccessor.putProperty(msg, MessageConst.PROPERTY_DELAY_TIME_LEVEL, "3");
            MessageAccessor.putProperty(msg, MessageConst.PROPERTY_REAL_TOPIC, msg.getTopic());
            MessageAccessor.putProperty(msg, MessageConst.PROPERTY_REAL_QUEUE_ID, String.valueOf(msg.getQueueId()));
            msg.setTopic(TopicValidator.RMQ_SYS_SCHEDULE_TOPIC);
            msg.setQueueId(3 - 1);
        }
        if (i == 8) {
            sysFlag = MessageSysFlag.TRANSACTION_PREPARED_TYPE;
            MessageAccessor.putProperty(msg, MessageConst.PROPERTY_TRANSACTION_PREPARED, "true");
            MessageAccessor.putProperty(msg, MessageConst.PROPERTY_PRODUCER_GROUP, "txGroup");
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
}
