// A RocketMQ 4.9.8 DefaultMQProducer sending from THREADS threads through a name server until
// its stdin closes: one line per send, "ACK <msgId> <brokerName>" or "FAIL <error>", then
// "DONE". Started with "READY" once the producer runs. Used by tests/cluster.
// With PAUSE_MS (bench/peers/cluster_bench.py's failover case) each thread waits that long
// between sends and an ACK line also names the thread and the wall-clock time (epoch ms):
// "ACK <msgId> <brokerName> <thread> <epochMs>".
//
// Args: NAMESRV TOPIC THREADS [PAUSE_MS]
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
        long pauseMs = args.length > 3 ? Long.parseLong(args[3]) : -1;
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
            final String timed = pauseMs >= 0 ? " " + t + " " : null;
            Thread worker = new Thread(() -> {
                while (!stop.get()) {
                    long i = counter.incrementAndGet();
                    byte[] body = ("m" + i).getBytes(StandardCharsets.UTF_8);
                    try {
                        SendResult result = producer.send(new Message(topic, body));
                        String line = "ACK " + result.getMsgId() + " " + result.getMessageQueue().getBrokerName();
                        print(timed == null ? line : line + timed + System.currentTimeMillis());
                    } catch (Exception e) {
                        print("FAIL " + e.getClass().getSimpleName());
                    }
                    if (timed != null) {
                        try {
                            Thread.sleep(pauseMs);
                        } catch (InterruptedException e) {
                            return;
                        }
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
