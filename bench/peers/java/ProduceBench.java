// bench/peers' Java-client produce case: the official RocketMQ 5 Java client (gRPC) sends
// 100 B messages to one endpoint from T threads, each with its own Producer and K async sends
// in flight (a new one as soon as one completes), for a warm-up then a timed period. It prints
// "timing" when the timed period starts, then one line: "sent=N failed=F seconds=S p50_ms=X p99_ms=Y first_error=..." for the timed part.
//
// Usage: java -cp <client jar>:<classes> ProduceBench ENDPOINT TOPIC THREADS INFLIGHT SECONDS
//        WARMUP_SECONDS BODY_BYTES

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.producer.Producer;

public final class ProduceBench {
    private static final long DRAIN_SECONDS = 120;

    /** Latencies (ns) of completed sends and the failures of one timed period. */
    private static final class Record {
        final List<long[]> chunks = new ArrayList<>();
        long[] current = new long[1 << 16];
        int size;
        final AtomicLong failed = new AtomicLong();
        final AtomicReference<String> firstError = new AtomicReference<>("");

        synchronized void ok(long nanos) {
            if (size == current.length) {
                chunks.add(current);
                current = new long[current.length];
                size = 0;
            }
            current[size++] = nanos;
        }

        void fail(Throwable error) {
            failed.incrementAndGet();
            firstError.compareAndSet("", String.valueOf(error).replace('\n', ' '));
        }

        synchronized long[] sorted() {
            int total = size;
            for (long[] chunk : chunks) {
                total += chunk.length;
            }
            long[] all = new long[total];
            int at = 0;
            for (long[] chunk : chunks) {
                System.arraycopy(chunk, 0, all, at, chunk.length);
                at += chunk.length;
            }
            System.arraycopy(current, 0, all, at, size);
            Arrays.sort(all);
            return all;
        }
    }

    public static void main(String[] args) throws Exception {
        String endpoint = args[0];
        String topic = args[1];
        int threads = Integer.parseInt(args[2]);
        int inflight = Integer.parseInt(args[3]);
        double seconds = Double.parseDouble(args[4]);
        double warmUp = Double.parseDouble(args[5]);
        byte[] body = new byte[Integer.parseInt(args[6])];
        new Random(7).nextBytes(body);

        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ClientConfiguration config = ClientConfiguration.newBuilder()
            .setEndpoints(endpoint)
            .enableSsl(false)
            .setRequestTimeout(Duration.ofSeconds(10))
            .build();
        List<Producer> producers = new ArrayList<>();
        for (int i = 0; i < threads; i++) {
            producers.add(provider.newProducerBuilder()
                .setClientConfiguration(config)
                .setTopics(topic)
                .build());
        }
        Message message = provider.newMessageBuilder()
            .setTopic(topic).setTag("bench").setBody(body).build();
        run(producers, message, inflight, warmUp, new Record());
        System.out.println("timing");
        System.out.flush();
        Record record = new Record();
        long started = System.nanoTime();
        run(producers, message, inflight, seconds, record);
        double elapsed = (System.nanoTime() - started) / 1e9;
        for (Producer producer : producers) {
            producer.close();
        }
        long[] latencies = record.sorted();
        System.out.printf("sent=%d failed=%d seconds=%.3f p50_ms=%.3f p99_ms=%.3f first_error=%s%n",
            latencies.length, record.failed.get(), elapsed, percentile(latencies, 0.50),
            percentile(latencies, 0.99), record.firstError.get());
    }

    private static double percentile(long[] sorted, double fraction) {
        if (sorted.length == 0) {
            return Double.NaN;
        }
        int index = (int) Math.min(sorted.length - 1, Math.round(fraction * (sorted.length - 1)));
        return sorted[index] / 1e6;
    }

    private static void run(List<Producer> producers, Message message, int inflight,
                            double seconds, Record record) throws InterruptedException {
        List<Thread> workers = new ArrayList<>();
        long deadline = System.nanoTime() + (long) (seconds * 1e9);
        for (Producer producer : producers) {
            Thread worker = new Thread(() -> {
                Semaphore slots = new Semaphore(inflight);
                try {
                    while (System.nanoTime() < deadline) {
                        slots.acquire();
                        long start = System.nanoTime();
                        producer.sendAsync(message).whenComplete((receipt, error) -> {
                            if (error == null) {
                                record.ok(System.nanoTime() - start);
                            } else {
                                record.fail(error);
                            }
                            slots.release();
                        });
                    }
                    if (!slots.tryAcquire(inflight, DRAIN_SECONDS, TimeUnit.SECONDS)) {
                        record.fail(new IllegalStateException("sends pending after the end"));
                    }
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            });
            worker.start();
            workers.add(worker);
        }
        for (Thread worker : workers) {
            worker.join();
        }
    }
}
