// RocketMQ 4.9.8's Java client consuming from an rmq-spark broker over remoting, driven line by
// line on stdin so one JVM runs every scenario of a test module. Commands:
//   push <id> <group> <topic> <CLUSTERING|BROADCASTING> <plain|poison|orderly|sql>
//        start a DefaultMQPushConsumer (instance name <id>, from the first offset)
//   assigned <id> <topic>      -> ASSIGNED <id> <queue ids, comma separated, or ->
//   stop <id>                  -> STOPPED <id>
//   lite <group> <topic> <queueId> <stored> <offset> <count>
//        DefaultLitePullConsumer: assign, poll the queue's <stored> messages (RECV litefirst),
//        seek back to <offset> and poll <count> messages (RECV lite) -> LITEDONE <count polled>
//   send <group> <topic> <count> <prefix>
//        DefaultMQProducer sync sends -> SENT <msgId> <queueId> <queueOffset> <body>
//   quit
// Every delivery prints RECV <id> <topic> <queueId> <queueOffset> <reconsumeTimes> <body> <msgId>.
// "poison" fails every message whose body starts with "poison" (retry after delay level 1, at
// most 2 reconsumes); "orderly" is a MessageListenerOrderly that suspends the queue once on a
// body starting with "again"; "sql" subscribes with the SQL92 selector "n > 2". Each command answers OK <command> or ERR <command> <message>.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.protocol.heartbeat.MessageModel;

public class ConsumeDriver {
    private static final Map<String, DefaultMQPushConsumer> PUSH = new ConcurrentHashMap<>();
    private static final Set<String> SUSPENDED = ConcurrentHashMap.newKeySet();
    private static String namesrv;

    private static synchronized void out(String line) {
        System.out.println(line);
        System.out.flush();
    }

    private static void recv(String id, MessageExt m) {
        String body = new String(m.getBody(), StandardCharsets.UTF_8).replace(' ', '_');
        out("RECV " + id + " " + m.getTopic() + " " + m.getQueueId() + " " + m.getQueueOffset()
            + " " + m.getReconsumeTimes() + " " + body + " " + m.getMsgId());
    }

    private static void push(String[] a) throws Exception {
        String id = a[1];
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(a[2]);
        c.setNamesrvAddr(namesrv);
        c.setInstanceName(id);
        c.setMessageModel(MessageModel.valueOf(a[4]));
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPollNameServerInterval(1000);
        c.setPersistConsumerOffsetInterval(1000);
        c.setSuspendCurrentQueueTimeMillis(200);
        String mode = a[5];
        if (mode.equals("sql")) {
            c.subscribe(a[3], MessageSelector.bySql("n > 2"));
        } else {
            c.subscribe(a[3], "*");
        }
        if (mode.equals("orderly")) {
            c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    recv(id, m);
                    String body = new String(m.getBody(), StandardCharsets.UTF_8);
                    if (body.startsWith("again") && SUSPENDED.add(m.getMsgId())) {
                        return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT;
                    }
                }
                return ConsumeOrderlyStatus.SUCCESS;
            });
        } else {
            boolean poison = mode.equals("poison");
            if (poison) {
                c.setMaxReconsumeTimes(2);
            }
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    recv(id, m);
                    if (poison && new String(m.getBody(), StandardCharsets.UTF_8).startsWith("poison")) {
                        ctx.setDelayLevelWhenNextConsume(1);
                        return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                    }
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
        }
        c.start();
        PUSH.put(id, c);
    }

    private static void assigned(String[] a) {
        DefaultMQPushConsumer c = PUSH.get(a[1]);
        Set<Integer> ids = new TreeSet<>();
        for (MessageQueue q : c.getDefaultMQPushConsumerImpl().getRebalanceImpl()
                .getProcessQueueTable().keySet()) {
            if (q.getTopic().equals(a[2])) {
                ids.add(q.getQueueId());
            }
        }
        List<String> names = new ArrayList<>();
        for (Integer i : ids) {
            names.add(String.valueOf(i));
        }
        out("ASSIGNED " + a[1] + " " + (names.isEmpty() ? "-" : String.join(",", names)));
    }

    private static void lite(String[] a) throws Exception {
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(a[1]);
        c.setNamesrvAddr(namesrv);
        c.setInstanceName("lite-" + a[1]);
        c.setAutoCommit(false);
        c.start();
        try {
            MessageQueue target = null;
            for (MessageQueue q : c.fetchMessageQueues(a[2])) {
                if (q.getQueueId() == Integer.parseInt(a[3])) {
                    target = q;
                }
            }
            c.assign(Collections.singletonList(target));
            // Seek only once the queue is read to its end: a seek racing the pull that
            // assign() starts can let that pull's messages through (a 4.9.8 client race,
            // against any broker); a pull past the end has nothing to let through.
            pollInto(c, "litefirst", Integer.parseInt(a[4]));
            c.seek(target, Long.parseLong(a[5]));
            int got = pollInto(c, "lite", Integer.parseInt(a[6]));
            c.commitSync();
            out("LITEDONE " + got);
        } finally {
            c.shutdown();
        }
    }

    private static int pollInto(DefaultLitePullConsumer c, String id, int want) {
        int got = 0;
        long end = System.currentTimeMillis() + 30_000;
        while (got < want && System.currentTimeMillis() < end) {
            for (MessageExt m : c.poll(1000)) {
                recv(id, m);
                got++;
            }
        }
        return got;
    }

    private static void send(String[] a) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer(a[1]);
        p.setNamesrvAddr(namesrv);
        p.setInstanceName("producer-" + a[1]);
        p.start();
        try {
            for (int i = 0; i < Integer.parseInt(a[3]); i++) {
                String body = a[4] + "-" + i;
                SendResult r = p.send(new Message(a[2], body.getBytes(StandardCharsets.UTF_8)));
                out("SENT " + r.getMsgId() + " " + r.getMessageQueue().getQueueId() + " "
                    + r.getQueueOffset() + " " + body);
            }
        } finally {
            p.shutdown();
        }
    }

    public static void main(String[] args) throws Exception {
        namesrv = args[0];
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        out("READY");
        String line;
        while ((line = in.readLine()) != null) {
            String[] a = line.trim().split(" ");
            try {
                switch (a[0]) {
                    case "push": push(a); break;
                    case "assigned": assigned(a); break;
                    case "stop": PUSH.remove(a[1]).shutdown(); break;
                    case "lite": lite(a); break;
                    case "send": send(a); break;
                    case "quit":
                        for (DefaultMQPushConsumer c : PUSH.values()) {
                            c.shutdown();
                        }
                        out("OK quit");
                        System.exit(0);
                        break;
                    default: throw new IllegalArgumentException("unknown command");
                }
                out("OK " + a[0]);
            } catch (Exception e) {
                out("ERR " + a[0] + " " + e.toString().replace('\n', ' '));
            }
        }
    }
}
