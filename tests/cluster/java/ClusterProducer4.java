// A RocketMQ 4.9.8 DefaultMQProducer sending from THREADS threads through a name server until
// its stdin closes: one line per send, "ACK <msgId> <brokerName>" or "FAIL <error>", then
// "DONE". Started with "READY" once the producer runs. Used by tests/cluster.
//
// Args: NAMESRV TOPIC THREADS
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;

public class ClusterProducer4 {
    public static void main(String[] args) throws Exception {
        String namesrv = args[0], topic = args[1];
        int threads = Integer.parseInt(args[2]);
        DefaultMQProducer producer = new DefaultMQProducer("cluster-pg4");
        producer.setNamesrvAddr(namesrv);
        producer.setVipChannelEnabled(false);
        producer.setSendMsgTimeout(3000);
        producer.setRetryTimesWhenSendFailed(2);
        producer.setPollNameServerInterval(2000);  // see a restarted broker soon
        producer.setInstanceName("cluster-" + System.nanoTime());
        producer.start();
        System.out.println("READY");
        System.out.flush();
        AtomicBoolean stop = new AtomicBoolean(false);
        AtomicLong counter = new AtomicLong();
        List<Thread> workers = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            Thread worker = new Thread(() -> {
                while (!stop.get()) {
                    long i = counter.incrementAndGet();
                    byte[] body = ("m" + i).getBytes(StandardCharsets.UTF_8);
                    try {
                        SendResult result = producer.send(new Message(topic, body));
                        print("ACK " + result.getMsgId() + " " + result.getMessageQueue().getBrokerName());
                    } catch (Exception e) {
                        print("FAIL " + e.getClass().getSimpleName());
                    }
                }
            });
            worker.start();
            workers.add(worker);
        }
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        while (in.readLine() != null) {
        }
        stop.set(true);
        for (Thread worker : workers) {
            worker.join();
        }
        producer.shutdown();
        print("DONE");
        System.exit(0);
    }

    static synchronized void print(String line) {
        System.out.println(line);
        System.out.flush();
    }
}
