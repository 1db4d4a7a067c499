package org.rmqspark.interop;

import com.alibaba.fastjson2.JSON;
import com.alibaba.fastjson2.JSONObject;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Base64;
import java.util.HashMap;
import java.util.Map;
import java.util.TreeMap;
import org.apache.rocketmq.common.UtilAll;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageExtBrokerInner;
import org.apache.rocketmq.common.message.MessageId;
import org.apache.rocketmq.common.message.MessageVersion;
import org.apache.rocketmq.common.sysflag.MessageSysFlag;
import org.apache.rocketmq.store.MessageExtEncoder;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.index.IndexFile;

/**
 * {@code encode}: answers one JSON request per stdin line with RocketMQ's own code.
 *
 * <p>Requests ({@code "op"} selects; an optional {@code "id"} is echoed back):
 * <ul>
 *   <li>{@code record}: a CommitLog record made by {@link MessageExtEncoder#encode} and then
 *       patched exactly as {@code CommitLog.DefaultAppendMessageCallback.doAppend} does
 *       (QUEUEOFFSET, PHYSICALOFFSET, STORETIMESTAMP; optional record CRC property).
 *       Fields: topic, queueId, body (base64), properties (map, serialised through a
 *       {@code HashMap(128)} like the broker) or propertiesString (verbatim), flag, sysFlag,
 *       bornTimestamp, bornHost, storeTimestamp, storeHost, reconsumeTimes,
 *       preparedTransactionOffset, queueOffset, physicalOffset, optional version (1|2,
 *       default: the CommitLog rule, v2 iff topic.length() &gt; 127) and appendPropCrc
 *       (bool). Answer: hex, plus the record decoded again by MessageDecoder.</li>
 *   <li>{@code string}: s -&gt; String.hashCode, tagsCode, IndexFile.indexKeyHashMethod,
 *       UtilAll.crc32 of its UTF-8 bytes.</li>
 *   <li>{@code bytes}: b64 -&gt; UtilAll.crc32.</li>
 *   <li>{@code msgid}: host, offset -&gt; MessageDecoder.createMessageId and its decoding.</li>
 *   <li>{@code props}: properties (map) -&gt; messageProperties2String; or string -&gt;
 *       string2messageProperties.</li>
 *   <li>{@code decode}: hex (one record) -&gt; MessageDecoder.decode with the CRC check on;
 *       {@code "decoded": null} when RocketMQ cannot decode it.</li>
 * </ul>
 */
final class EncodeCommand {
    private final MessageStoreConfig plainConfig = new MessageStoreConfig();
    private MessageExtEncoder plainEncoder;
    private MessageExtEncoder crcEncoder;
    private IndexFile indexFile;
    private Path indexDir;

    private EncodeCommand() {
    }

    static int run(String[] args, PrintStream out) throws Exception {
        EncodeCommand command = new EncodeCommand();
        try {
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            String line;
            while ((line = in.readLine()) != null) {
                if (line.isBlank()) {
                    continue;
                }
                JSONObject request = JSON.parseObject(line);
                JSONObject answer;
                try {
                    answer = command.answer(request);
                } catch (Exception e) {
                    answer = new JSONObject();
                    answer.put("error", e.toString());
                }
                answer.put("op", request.getString("op"));
                if (request.containsKey("id")) {
                    answer.put("id", request.get("id"));
                }
                out.println(answer.toJSONString());
            }
        } finally {
            command.close();
        }
        // A bad request is answered with {"error": ...}; the exit code stays 0.
        return 0;
    }

    private JSONObject answer(JSONObject request) throws Exception {
        String op = request.getString("op");
        switch (op == null ? "" : op) {
            case "record":
                return record(request);
            case "string":
                return string(request.getString("s"));
            case "bytes": {
                JSONObject o = new JSONObject();
                byte[] data = Base64.getDecoder().decode(request.getString("b64"));
                o.put("crc32", UtilAll.crc32(data));
                return o;
            }
            case "msgid":
                return msgId(request);
            case "props":
                return props(request);
            case "decode": {
                JSONObject o = new JSONObject();
                byte[] record = UtilAll.string2bytes(request.getString("hex"));
                MessageExt decoded = Records.decode(ByteBuffer.wrap(record));
                o.put("decoded", decoded == null ? null : Records.toJson(decoded));
                return o;
            }
            default:
                throw new IllegalArgumentException("unknown op: " + op);
        }
    }

    private JSONObject record(JSONObject spec) throws Exception {
        MessageExtBrokerInner msg = new MessageExtBrokerInner();
        String topic = spec.getString("topic");
        msg.setTopic(topic);
        msg.setQueueId(spec.getIntValue("queueId"));
        msg.setFlag(spec.getIntValue("flag"));
        byte[] body = Base64.getDecoder().decode(spec.getString("body") == null ? "" : spec.getString("body"));
        msg.setBody(body);
        if (spec.containsKey("propertiesString")) {
            String raw = spec.getString("propertiesString");
            MessageAccessor.setProperties(msg, MessageDecoder.string2messageProperties(raw));
            msg.setPropertiesString(raw);
        } else {
            Map<String, String> map = new HashMap<>(128);
            JSONObject given = spec.getJSONObject("properties");
            if (given != null) {
                for (String key : given.keySet()) {
                    map.put(key, given.getString(key));
                }
            }
            MessageAccessor.setProperties(msg, map);
            msg.setPropertiesString(MessageDecoder.messageProperties2String(map));
        }
        InetSocketAddress bornHost = Hosts.parse(spec.getString("bornHost"));
        InetSocketAddress storeHost = Hosts.parse(spec.getString("storeHost"));
        msg.setBornTimestamp(spec.getLongValue("bornTimestamp"));
        msg.setBornHost(bornHost);
        msg.setStoreTimestamp(spec.getLongValue("storeTimestamp"));
        msg.setStoreHost(storeHost);
        msg.setReconsumeTimes(spec.getIntValue("reconsumeTimes"));
        msg.setPreparedTransactionOffset(spec.getLongValue("preparedTransactionOffset"));
        msg.setQueueOffset(spec.getLongValue("queueOffset"));
        msg.setSysFlag(spec.getIntValue("sysFlag"));
        // As CommitLog.asyncPutMessage: body CRC, version rule, IPv6 flags from the addresses.
        msg.setBodyCRC(UtilAll.crc32(body));
        msg.setVersion(MessageVersion.MESSAGE_VERSION_V1);
        if (topic.length() > Byte.MAX_VALUE) {
            msg.setVersion(MessageVersion.MESSAGE_VERSION_V2);
        }
        if (spec.containsKey("version")) {
            msg.setVersion(spec.getIntValue("version") == 2
                ? MessageVersion.MESSAGE_VERSION_V2 : MessageVersion.MESSAGE_VERSION_V1);
        }
        if (Hosts.isV6(bornHost)) {
            msg.setBornHostV6Flag();
        }
        if (Hosts.isV6(storeHost)) {
            msg.setStoreHostAddressV6Flag();
        }
        boolean appendPropCrc = spec.getBooleanValue("appendPropCrc");
        MessageExtEncoder encoder = encoder(appendPropCrc);
        PutMessageResult rejected = encoder.encode(msg);
        if (rejected != null) {
            JSONObject o = new JSONObject();
            o.put("rejected", rejected.getPutMessageStatus().name());
            return o;
        }
        ByteBuffer buf = encoder.getEncoderBuffer();
        int length = buf.getInt(0);
        byte[] record = new byte[length];
        buf.get(0, record);
        ByteBuffer patched = ByteBuffer.wrap(record);
        patchLikeDoAppend(patched, msg, spec.getLongValue("physicalOffset"), appendPropCrc);

        JSONObject o = new JSONObject();
        o.put("hex", UtilAll.bytes2string(record).toLowerCase());
        o.put("length", length);
        o.put("propertiesString", msg.getPropertiesString() == null ? "" : msg.getPropertiesString());
        o.put("sysFlag", msg.getSysFlag());
        o.put("magicVersion", msg.getVersion() == MessageVersion.MESSAGE_VERSION_V2 ? 2 : 1);
        MessageExt decoded = Records.decode(ByteBuffer.wrap(record));
        o.put("decoded", decoded == null ? null : Records.toJson(decoded));
        return o;
    }

    /** The field patches of CommitLog.DefaultAppendMessageCallback.doAppend (5.3.3). */
    private static void patchLikeDoAppend(ByteBuffer record, MessageExtBrokerInner msg, long physicalOffset,
        boolean appendPropCrc) {
        long queueOffset = msg.getQueueOffset();
        int tranType = MessageSysFlag.getTransactionValue(msg.getSysFlag());
        if (tranType == MessageSysFlag.TRANSACTION_PREPARED_TYPE
            || tranType == MessageSysFlag.TRANSACTION_ROLLBACK_TYPE) {
            queueOffset = 0L;
        }
        int pos = 4 + 4 + 4 + 4 + 4;
        record.putLong(pos, queueOffset);
        pos += 8;
        record.putLong(pos, physicalOffset);
        pos += 8;
        int ipLen = (msg.getSysFlag() & MessageSysFlag.BORNHOST_V6_FLAG) == 0 ? 4 + 4 : 16 + 4;
        pos += 4 + 8 + ipLen;
        record.putLong(pos, msg.getStoreTimestamp());
        if (appendPropCrc) {
            int reserved = org.apache.rocketmq.store.CommitLog.CRC32_RESERVED_LEN;
            int checkSize = record.capacity() - reserved;
            ByteBuffer tmp = record.duplicate();
            tmp.position(0);
            tmp.limit(checkSize);
            int crc32 = UtilAll.crc32(tmp);
            tmp.limit(checkSize + reserved);
            MessageDecoder.createCrc32(tmp, crc32);
        }
    }

    private MessageExtEncoder encoder(boolean appendPropCrc) {
        if (appendPropCrc) {
            if (crcEncoder == null) {
                MessageStoreConfig config = new MessageStoreConfig();
                config.setEnabledAppendPropCRC(true);
                crcEncoder = new MessageExtEncoder(config);
            }
            return crcEncoder;
        }
        if (plainEncoder == null) {
            plainEncoder = new MessageExtEncoder(plainConfig);
        }
        return plainEncoder;
    }

    private JSONObject string(String s) throws Exception {
        JSONObject o = new JSONObject();
        o.put("hashCode", s.hashCode());
        o.put("tagsCode", MessageExtBrokerInner.tagsString2tagsCode(s));
        o.put("indexKeyHash", indexFile().indexKeyHashMethod(s));
        o.put("crc32Utf8", UtilAll.crc32(s.getBytes(StandardCharsets.UTF_8)));
        return o;
    }

    private JSONObject msgId(JSONObject request) throws Exception {
        InetSocketAddress host = Hosts.parse(request.getString("host"));
        long offset = request.getLongValue("offset");
        String id = MessageDecoder.createMessageId(host, offset);
        MessageId back = MessageDecoder.decodeMessageId(id);
        JSONObject o = new JSONObject();
        o.put("msgId", id);
        o.put("decodedHost", Hosts.format(back.getAddress()));
        o.put("decodedOffset", back.getOffset());
        return o;
    }

    private JSONObject props(JSONObject request) {
        JSONObject o = new JSONObject();
        if (request.containsKey("string")) {
            o.put("properties", new TreeMap<>(MessageDecoder.string2messageProperties(request.getString("string"))));
            return o;
        }
        Map<String, String> map = new HashMap<>(128);
        JSONObject given = request.getJSONObject("properties");
        for (String key : given.keySet()) {
            map.put(key, given.getString(key));
        }
        o.put("string", MessageDecoder.messageProperties2String(map));
        return o;
    }

    private IndexFile indexFile() throws Exception {
        if (indexFile == null) {
            indexDir = Files.createTempDirectory("rmq-interop-index");
            indexFile = new IndexFile(indexDir.resolve("00000000000000000000").toString(), 4, 4, 0, 0);
        }
        return indexFile;
    }

    private void close() throws Exception {
        if (indexFile != null) {
            indexFile.destroy(0);
        }
        if (indexDir != null) {
            Files.deleteIfExists(indexDir.resolve("00000000000000000000"));
            Files.deleteIfExists(indexDir);
        }
    }
}
