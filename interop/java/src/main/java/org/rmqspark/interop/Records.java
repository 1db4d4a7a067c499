package org.rmqspark.interop;

import com.alibaba.fastjson2.JSONObject;
import java.nio.ByteBuffer;
import java.util.Base64;
import java.util.Map;
import java.util.TreeMap;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;

/** MessageExt (as decoded by RocketMQ's MessageDecoder) to a JSON object. */
final class Records {
    private Records() {
    }

    /** Decode one CommitLog record with RocketMQ's decoder, CRC check on; null if it fails. */
    static MessageExt decode(ByteBuffer record) {
        return MessageDecoder.decode(record, true, false, false, true, true);
    }

    static JSONObject toJson(MessageExt msg) {
        JSONObject o = new JSONObject();
        o.put("storeSize", msg.getStoreSize());
        o.put("bodyCrc", msg.getBodyCRC());
        o.put("topic", msg.getTopic());
        o.put("queueId", msg.getQueueId());
        o.put("flag", msg.getFlag());
        o.put("queueOffset", msg.getQueueOffset());
        o.put("physicalOffset", msg.getCommitLogOffset());
        o.put("sysFlag", msg.getSysFlag());
        o.put("bornTimestamp", msg.getBornTimestamp());
        o.put("bornHost", Hosts.format(msg.getBornHost()));
        o.put("storeTimestamp", msg.getStoreTimestamp());
        o.put("storeHost", Hosts.format(msg.getStoreHost()));
        o.put("reconsumeTimes", msg.getReconsumeTimes());
        o.put("preparedTransactionOffset", msg.getPreparedTransactionOffset());
        byte[] body = msg.getBody() == null ? new byte[0] : msg.getBody();
        o.put("body", Base64.getEncoder().encodeToString(body));
        Map<String, String> props = new TreeMap<>();
        if (msg.getProperties() != null) {
            props.putAll(msg.getProperties());
        }
        String raw = props.remove("propertiesString");
        o.put("propertiesString", raw == null ? "" : raw);
        o.put("properties", props);
        o.put("msgId", msg.getMsgId());
        return o;
    }
}
