// RocketMQ 4.9.8's Java client under a broker crash (test_kill9_java.py), driven line by line
// on stdin (java_driver.Driver). Commands:
//   push <id> <group> <topic>   a DefaultMQPushConsumer (instance <id>, from the first offset,
//                               offsets persisted every second)
//   produce <topic> <threads>   <threads> DefaultMQProducer sync senders, sending until
//                               stopproduce; bodies "<thread>-<i>"
//   stopproduce                 stop the senders and wait for them
//   stop <id>                   shut the consumer down (it persists its offsets)
//   quit
// Every SEND_OK prints ACK <body> <queueId> <queueOffset>; a failed send prints FAIL <body>
// <error class> (and the thread pauses 100 ms); every delivery prints RECV <id> <topic>
// <queueId> <queueOffset> <reconsumeTimes> <body> <msgId>. Each command answers OK <command>
// or ERR <command> <message>.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class CrashDriver {
    private static final Map<String, DefaultMQPushConsumer> PUSH = new ConcurrentHashMap<>();
    private static final AtomicBoolean SENDING = new AtomicBoolean();
    private static final List<Thread> SENDERS = new ArrayList<>();
    private static DefaultMQProducer producer;
    private static String namesrv;

    private static synchronized void out(String line) {
        System.out.println(line);
        System.out.flush();
    }

    private static void push(String[] a) throws Exception {
        String id = a[1];
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(a[2]);
        c.setNamesrvAddr(namesrv);
        c.setInstanceName(id);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPollNameServerInterval(1000);
        c.setPersistConsumerOffsetInterval(1000);
        c.subscribe(a[3], "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                out("RECV " + id + " " + m.getTopic() + " " + m.getQueueId() + " "
                    + m.getQueueOffset() + " " + m.getReconsumeTimes() + " "
                    + new String(m.getBody(), StandardCharsets.UTF_8) + " " + m.getMsgId());
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        PUSH.put(id, c);
    }

    private static void produce(String[] a) throws Exception {
        if (producer == null) {
            producer = new DefaultMQProducer("CrashDriverProducer");
            producer.setNamesrvAddr(namesrv);
            producer.setInstanceName("crash-producer");
            producer.setPollNameServerInterval(1000);
            producer.setSendMsgTimeout(3000);
            producer.start();
        }
        String topic = a[1];
        SENDING.set(true);
        for (int t = 0; t < Integer.parseInt(a[2]); t++) {
            String prefix = "t" + t + "-";
            Thread sender = new Thread(() -> {
                for (long i = 0; SENDING.get(); i++) {
                    String body = prefix + i;
                    try {
                        SendResult r = producer.send(
                            new Message(topic, body.getBytes(StandardCharsets.UTF_8)));
                        if (r.getSendStatus() == SendStatus.SEND_OK) {
                            out("ACK " + body + " " + r.getMessageQueue().getQueueId() + " "
                                + r.getQueueOffset());
                        } else {
                            out("FAIL " + body + " " + r.getSendStatus());
                        }
                        Thread.sleep(2);
                    } catch (InterruptedException e) {
                        return;
                    } catch (Exception e) {
                        out("FAIL " + body + " " + e.getClass().getSimpleName());
                        try {
                            Thread.sleep(100);
                        } catch (InterruptedException stop) {
                            return;
                        }
                    }
                }
            });
            sender.start();
            SENDERS.add(sender);
        }
    }

    private static void stopProduce() throws Exception {
        SENDING.set(false);
        for (Thread sender : SENDERS) {
            sender.join(60_000);
        }
        SENDERS.clear();
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
                    case "produce": produce(a); break;
                    case "stopproduce": stopProduce(); break;
                    case "stop": PUSH.remove(a[1]).shutdown(); break;
                    case "quit":
                        stopProduce();
                        for (DefaultMQPushConsumer c : PUSH.values()) {
                            c.shutdown();
                        }
                        if (producer != null) {
                            producer.shutdown();
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
