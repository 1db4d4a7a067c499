// A RocketMQ 4.9.8 DefaultMQProducer against the broker's remoting port, found through a name
// server: sends COUNT messages in MODE (sync, async, oneway, batch) and prints one line per
// message: "SENT <msgId> <offsetMsgId> <queueId> <queueOffset> <status>" (sync, async, batch),
// "ONEWAY <msgId>", "FAILED <error>" (async), then "DONE". A failure to send prints
// "ERROR <class> <message>" and "DONE". Used by tests/remoting/test_producer4_java.py.
//
// Args: NAMESRV TOPIC MODE COUNT [ACCESS_KEY|- SECRET_KEY|-] [tls]
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.remoting.RPCHook;

public class Producer4Check {
    public static void main(String[] args) throws Exception {
        String namesrv = args[0], topic = args[1], mode = args[2];
        int count = Integer.parseInt(args[3]);
        String accessKey = args.length > 4 && !args[4].equals("-") ? args[4] : null;
        String secretKey = args.length > 5 ? args[5] : null;
        boolean tls = args.length > 6 && args[6].equals("tls");
        RPCHook hook = accessKey == null ? null
            : new AclClientRPCHook(new SessionCredentials(accessKey, secretKey));
        DefaultMQProducer producer = new DefaultMQProducer("pg4-" + mode, hook);
        producer.setNamesrvAddr(namesrv);
        producer.setVipChannelEnabled(false);
        producer.setUseTLS(tls);
        producer.setSendMsgTimeout(10000);
        producer.setInstanceName(mode + "-" + System.nanoTime());
        producer.start();
        try {
            run(producer, topic, mode, count);
        } catch (Exception e) {
            Throwable cause = e.getCause() != null ? e.getCause() : e;
            System.out.println("ERROR " + cause.getClass().getSimpleName() + " " + oneLine(cause.getMessage()));
        } finally {
            producer.shutdown();
        }
        System.out.println("DONE");
        System.out.flush();
        System.exit(0);
    }

    static Message message(String topic, String mode, int i) {
        byte[] body = (mode + "-body-" + i).getBytes(StandardCharsets.UTF_8);
        return new Message(topic, "Tag" + mode, mode + "-key-" + i, body);
    }

    static void run(DefaultMQProducer producer, String topic, String mode, int count) throws Exception {
        if (mode.equals("sync")) {
            for (int i = 0; i < count; i++) {
                print(producer.send(message(topic, mode, i)));
            }
        } else if (mode.equals("async")) {
            CountDownLatch done = new CountDownLatch(count);
            for (int i = 0; i < count; i++) {
                producer.send(message(topic, mode, i), new SendCallback() {
                    public void onSuccess(SendResult result) { print(result); done.countDown(); }
                    public void onException(Throwable e) {
                        synchronized (Producer4Check.class) {
                            System.out.println("FAILED " + oneLine(String.valueOf(e)));
                        }
                        done.countDown();
                    }
                });
            }
            if (!done.await(120, TimeUnit.SECONDS)) {
                System.out.println("ERROR timeout " + done.getCount() + " callbacks missing");
            }
        } else if (mode.equals("oneway")) {
            for (int i = 0; i < count; i++) {
                Message m = message(topic, mode, i);
                producer.sendOneway(m);
                System.out.println("ONEWAY " + m.getProperty("UNIQ_KEY"));
            }
        } else if (mode.equals("batch")) {
            List<Message> batch = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                batch.add(message(topic, mode, i));
            }
            print(producer.send(batch));
        } else {
            throw new IllegalArgumentException("mode " + mode);
        }
    }

    static synchronized void print(SendResult r) {
        System.out.println("SENT " + r.getMsgId() + " " + r.getOffsetMsgId() + " "
            + r.getMessageQueue().getQueueId() + " " + r.getQueueOffset() + " " + r.getSendStatus());
    }

    static String oneLine(String text) {
        return text == null ? "" : text.replace('\n', ' ');
    }
}
