// The official rocketmq-client-java sends <count> messages with <inflight> async sends in
// flight and prints one line per outcome, as it comes:
//   ACK <message id>        FAIL <exception class>
// then "DONE". The test kills the broker while it runs: every ACK must be in the store.
// The client keeps its default configuration (TLS on, any certificate trusted).
// Usage: SendUntilKilled <endpoint> <topic> <count> <inflight>

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.producer.Producer;

public class SendUntilKilled {
    public static void main(String[] args) throws Exception {
        String topic = args[1];
        int count = Integer.parseInt(args[2]);
        Semaphore inflight = new Semaphore(Integer.parseInt(args[3]));
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ClientConfiguration config = ClientConfiguration.newBuilder()
            .setEndpoints(args[0]).setRequestTimeout(Duration.ofSeconds(3))
            .build();
        CountDownLatch outcomes = new CountDownLatch(count);
        Producer producer = provider.newProducerBuilder()
            .setClientConfiguration(config).setTopics(topic).build();
        for (int i = 0; i < count; i++) {
            inflight.acquire();
            byte[] body = ("m-" + i).getBytes(StandardCharsets.UTF_8);
            producer.sendAsync(provider.newMessageBuilder().setTopic(topic).setBody(body).build())
                .whenComplete((receipt, error) -> {
                    String line = error == null ? "ACK " + receipt.getMessageId()
                        : "FAIL " + error.getClass().getSimpleName();
                    synchronized (System.out) {
                        System.out.println(line);
                        System.out.flush();
                    }
                    inflight.release();
                    outcomes.countDown();
                });
        }
        outcomes.await(120, TimeUnit.SECONDS);
        System.out.println("DONE");
        System.out.flush();
        System.exit(0);
    }
}
