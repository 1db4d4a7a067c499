// Writes RocketMQ 5.3.3's config files with the broker's own classes (what a broker persists,
// ConfigManager.persist -> encode(true)), and reads files back with the broker's decoders.
//   java ConfigSamples write DIR   -> DIR/{topics,subscriptionGroup,consumerOffset,delayOffset}.json
//   java ConfigSamples read DIR    -> one canonical line per file: what RocketMQ understood
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentMap;
import org.apache.rocketmq.broker.offset.ConsumerOffsetManager;
import org.apache.rocketmq.broker.schedule.DelayOffsetSerializeWrapper;
import org.apache.rocketmq.broker.subscription.SubscriptionGroupManager;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.constant.PermName;
import org.apache.rocketmq.remoting.protocol.DataVersion;
import org.apache.rocketmq.remoting.protocol.RemotingSerializable;
import org.apache.rocketmq.remoting.protocol.body.TopicConfigSerializeWrapper;
import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;

public class ConfigSamples {
    static DataVersion version(long counter) {
        DataVersion v = new DataVersion();
        v.setTimestamp(1764115200000L);
        v.setCounter(new java.util.concurrent.atomic.AtomicLong(counter));
        v.setStateVersion(0L);
        return v;
    }

    static void write(Path dir) throws Exception {
        Files.createDirectories(dir);
        TopicConfigSerializeWrapper topics = new TopicConfigSerializeWrapper();
        ConcurrentMap<String, TopicConfig> table = new ConcurrentHashMap<>();
        table.put("TopicTest", new TopicConfig("TopicTest", 4, 4, PermName.PERM_READ | PermName.PERM_WRITE));
        TopicConfig fifo = new TopicConfig("ns%Orders", 8, 8, 6);
        fifo.setOrder(true);
        fifo.getAttributes().put("message.type", "FIFO");
        table.put("ns%Orders", fifo);
        table.put("%RETRY%group-a", new TopicConfig("%RETRY%group-a", 1, 1, 6));
        topics.setTopicConfigTable(table);
        topics.setDataVersion(version(3));
        Files.write(dir.resolve("topics.json"), topics.toJson(true).getBytes(StandardCharsets.UTF_8));

        SubscriptionGroupManager groups = new SubscriptionGroupManager();
        SubscriptionGroupConfig a = new SubscriptionGroupConfig();
        a.setGroupName("group-a");
        groups.getSubscriptionGroupTable().put("group-a", a);
        SubscriptionGroupConfig b = new SubscriptionGroupConfig();
        b.setGroupName("fifo-group");
        b.setConsumeMessageOrderly(true);
        b.setRetryMaxTimes(5);
        groups.getSubscriptionGroupTable().put("fifo-group", b);
        groups.setDataVersion(version(2));
        Files.write(dir.resolve("subscriptionGroup.json"), groups.encode(true).getBytes(StandardCharsets.UTF_8));

        ConsumerOffsetManager offsets = new ConsumerOffsetManager();
        ConcurrentMap<Integer, Long> q = new ConcurrentHashMap<>();
        q.put(0, 12L);
        q.put(1, 3L);
        q.put(10, 70000000000L);
        offsets.getOffsetTable().put("TopicTest@group-a", q);
        ConcurrentMap<Integer, Long> r = new ConcurrentHashMap<>();
        r.put(0, 0L);
        offsets.getOffsetTable().put("%RETRY%group-a@group-a", r);
        offsets.getDataVersion().assignNewOne(version(5));
        Files.write(dir.resolve("consumerOffset.json"), offsets.encode(true).getBytes(StandardCharsets.UTF_8));

        DelayOffsetSerializeWrapper delay = new DelayOffsetSerializeWrapper();
        ConcurrentMap<Integer, Long> levels = new ConcurrentHashMap<>();
        levels.put(1, 1L);
        levels.put(3, 11L);
        levels.put(18, 0L);
        delay.setOffsetTable(levels);
        delay.setDataVersion(version(7));
        Files.write(dir.resolve("delayOffset.json"), delay.toJson(true).getBytes(StandardCharsets.UTF_8));
    }

    static String text(Path path) throws Exception {
        return new String(Files.readAllBytes(path), StandardCharsets.UTF_8);
    }

    static void read(Path dir) throws Exception {
        TopicConfigSerializeWrapper topics = RemotingSerializable.fromJson(text(dir.resolve("topics.json")), TopicConfigSerializeWrapper.class);
        Map<String, String> t = new TreeMap<>();
        for (Map.Entry<String, TopicConfig> e : topics.getTopicConfigTable().entrySet()) {
            TopicConfig c = e.getValue();
            t.put(e.getKey(), c.getTopicName() + "," + c.getReadQueueNums() + "," + c.getWriteQueueNums() + "," + c.getPerm() + "," + c.getTopicFilterType() + "," + c.getTopicSysFlag() + "," + c.isOrder() + "," + new TreeMap<>(c.getAttributes()));
        }
        System.out.println("topics " + t + " counter=" + topics.getDataVersion().getCounter());

        SubscriptionGroupManager groups = new SubscriptionGroupManager();
        groups.decode(text(dir.resolve("subscriptionGroup.json")));
        Map<String, String> g = new TreeMap<>();
        for (Map.Entry<String, SubscriptionGroupConfig> e : groups.getSubscriptionGroupTable().entrySet()) {
            SubscriptionGroupConfig c = e.getValue();
            g.put(e.getKey(), c.getGroupName() + "," + c.getRetryMaxTimes() + "," + c.isConsumeMessageOrderly() + "," + c.isConsumeEnable() + "," + c.getRetryQueueNums());
        }
        System.out.println("groups " + g);

        ConsumerOffsetManager offsets = new ConsumerOffsetManager();
        offsets.decode(text(dir.resolve("consumerOffset.json")));
        Map<String, Object> o = new TreeMap<>();
        for (Map.Entry<String, ConcurrentMap<Integer, Long>> e : offsets.getOffsetTable().entrySet()) {
            o.put(e.getKey(), new TreeMap<>(e.getValue()));
        }
        System.out.println("offsets " + o);

        DelayOffsetSerializeWrapper delay = RemotingSerializable.fromJson(text(dir.resolve("delayOffset.json")), DelayOffsetSerializeWrapper.class);
        System.out.println("delay " + new TreeMap<>(delay.getOffsetTable()));
    }

    public static void main(String[] args) throws Exception {
        Path dir = Paths.get(args[1]);
        if (args[0].equals("write")) {
            write(dir);
        } else {
            read(dir);
        }
    }
}
