// rmq-spark's side of visible.py with the official Java client (rocketmq-client-java, gRPC):
// RATE messages/s of BODY bytes in all for SECONDS over PRODUCERS Producers, on a fixed
// schedule (async sends, nothing waits for a receipt before the next send is due), with at most
// MAX_IN_FLIGHT sends unanswered: past that the schedule waits, as an application's would
// (the client queues every async send in memory otherwise). Prints "sent=N failed=M
// p50_ms=X p99_ms=Y behind_ms=Z seconds=S first_error=..." (send latency: call -> receipt;
// behind: how far the last send was behind its due time; seconds: first send to last receipt).
//
// Usage: java -cp <client jars>:<classes> RmqPacedProducer ENDPOINT TOPIC RATE SECONDS BODY_BYTES PRODUCERS

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.producer.Producer;

public final class RmqPacedProducer {
    private static final int MAX_IN_FLIGHT = 4096;

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
        Semaphore slots = new Semaphore(MAX_IN_FLIGHT);
        long behind = 0;
        long start = System.nanoTime();
        for (int i = 0; i < count; i++) {
            long due = start + (long) i * 1_000_000_000L / rate;
            long wait = due - System.nanoTime();
            if (wait > 0) {
                Thread.sleep(wait / 1_000_000L, (int) (wait % 1_000_000L));
            }
            slots.acquire();
            final int index = i;
            long sentAt = System.nanoTime();
            behind = Math.max(0, sentAt - due);
            producers.get(i % producerCount).sendAsync(message).whenComplete((receipt, error) -> {
                if (error == null) {
                    latencies[index] = System.nanoTime() - sentAt;
                } else {
                    latencies[index] = -1;
                    failed.incrementAndGet();
                    firstError.compareAndSet("", String.valueOf(error).replace('\n', ' '));
                }
                slots.release();
                done.countDown();
            });
        }
        if (!done.await(120, TimeUnit.SECONDS)) {
            firstError.compareAndSet("", "sends pending 120 s after the last was due");
        }
        double elapsedSeconds = (System.nanoTime() - start) / 1e9;
        for (Producer producer : producers) {
            producer.close();
        }
        long[] ok = Arrays.stream(latencies).filter(v -> v > 0).sorted().toArray();
        System.out.printf(
            "sent=%d failed=%d p50_ms=%.3f p99_ms=%.3f behind_ms=%d seconds=%.1f first_error=%s%n",
            count, failed.get(), percentile(ok, 0.50), percentile(ok, 0.99), behind / 1_000_000,
            elapsedSeconds, firstError.get());
    }

    private static double percentile(long[] sorted, double fraction) {
        if (sorted.length == 0) {
            return Double.NaN;
        }
        int index = (int) Math.min(sorted.length - 1, Math.round(fraction * (sorted.length - 1)));
        return sorted[index] / 1e6;
    }
}
