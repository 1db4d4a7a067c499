// rmq-spark's side of visible.py with the official Java client (rocketmq-client-java, gRPC):
// RATE messages/s of BODY bytes in all for SECONDS over PRODUCERS Producers, on a fixed
// schedule (async sends, nothing waits for a receipt before the next send is due). Prints
// "sent=N failed=M p50_ms=X p99_ms=Y first_error=..." (send latency: call -> receipt).
//
// Usage: java -cp <client jars>:<classes> RmqPacedProducer ENDPOINT TOPIC RATE SECONDS BODY_BYTES PRODUCERS

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.producer.Producer;

public final class RmqPacedProducer {
    public static void main(String[] args) throws Exception {
        String endpoint = args[0];
        String topic = args[1];
        int rate = Integer.parseInt(args[2]);
        double seconds = Double.parseDouble(args[3]);
        byte[] body = new byte[Integer.parseInt(args[4])];
        int count = (int) (rate * seconds);
        int producerCount = Integer.parseInt(args[5]);

        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ClientConfiguration config = ClientConfiguration.newBuilder()
            .setEndpoints(endpoint).enableSsl(false).setRequestTimeout(Duration.ofSeconds(10))
            .build();
        List<Producer> producers = new ArrayList<>();
        for (int i = 0; i < producerCount; i++) {
            producers.add(provider.newProducerBuilder().setClientConfiguration(config)
                .setTopics(topic).build());
        }
        Message message = provider.newMessageBuilder().setTopic(topic).setTag("bench")
            .setBody(body).build();
        long[] latencies = new long[count];
        AtomicLong failed = new AtomicLong();
        AtomicReference<String> firstError = new AtomicReference<>("");
        CountDownLatch done = new CountDownLatch(count);
        long start = System.nanoTime();
        for (int i = 0; i < count; i++) {
            long due = start + (long) i * 1_000_000_000L / rate;
            long wait = due - System.nanoTime();
            if (wait > 0) {
                Thread.sleep(wait / 1_000_000L, (int) (wait % 1_000_000L));
            }
            final int index = i;
            long sentAt = System.nanoTime();
            producers.get(i % producerCount).sendAsync(message).whenComplete((receipt, error) -> {
                if (error == null) {
                    latencies[index] = System.nanoTime() - sentAt;
                } else {
                    latencies[index] = -1;
                    failed.incrementAndGet();
                    firstError.compareAndSet("", String.valueOf(error).replace('\n', ' '));
                }
                done.countDown();
            });
        }
        if (!done.await(120, TimeUnit.SECONDS)) {
            firstError.compareAndSet("", "sends pending 120 s after the last was due");
        }
        for (Producer producer : producers) {
            producer.close();
        }
        long[] ok = Arrays.stream(latencies).filter(v -> v > 0).sorted().toArray();
        System.out.printf("sent=%d failed=%d p50_ms=%.3f p99_ms=%.3f first_error=%s%n",
            count, failed.get(), percentile(ok, 0.50), percentile(ok, 0.99), firstError.get());
    }

    private static double percentile(long[] sorted, double fraction) {
        if (sorted.length == 0) {
            return Double.NaN;
        }
        int index = (int) Math.min(sorted.length - 1, Math.round(fraction * (sorted.length - 1)));
        return sorted[index] / 1e6;
    }
}
