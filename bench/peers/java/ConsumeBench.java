// consume.py's Java-client case (rocketmq-client-java, gRPC), against one endpoint:
//
//   latency ENDPOINT TOPIC GROUP RATE SECONDS [WARMUP]: a SimpleConsumer long-polls (receive 32,
//     await 10 s, acking each message) while one Producer sends RATE msgs/s for WARMUP + SECONDS
//     (async, paced, at most 4096 in flight); each body starts with its send time (nanoTime, one
//     JVM); messages sent in the first WARMUP seconds (default 0) are not timed. Prints
//     "received=N sent=M measured=K p50_ms=X p99_ms=Y max_ms=Z".
//   drain ENDPOINT TOPIC GROUP COUNT CONSUMERS: COUNT x 100 B messages sent first (async, 256 in
//     flight, not timed), then CONSUMERS SimpleConsumers of GROUP, one thread each, receive
//     (32 per call) and ack (async) until all came. Prints "received=N seconds=S" (first receive
//     call to the last ack's completion).
//
// Usage: java -cp <client jars>:<classes> ConsumeBench MODE ENDPOINT TOPIC GROUP A B [C]

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;

public final class ConsumeBench {
    private static final ClientServiceProvider PROVIDER = ClientServiceProvider.loadService();
    private static final Duration INVISIBLE = Duration.ofSeconds(30);

    public static void main(String[] args) throws Exception {
        String mode = args[0];
        ClientConfiguration config = ClientConfiguration.newBuilder().setEndpoints(args[1])
            .enableSsl(false).setRequestTimeout(Duration.ofSeconds(15)).build();
        if (mode.equals("latency")) {
            latency(config, args[2], args[3], Integer.parseInt(args[4]), Double.parseDouble(args[5]),
                args.length > 6 ? Double.parseDouble(args[6]) : 0.0);
        } else {
            drain(config, args[2], args[3], Integer.parseInt(args[4]), Integer.parseInt(args[5]));
        }
        System.exit(0);
    }

    private static SimpleConsumer consumer(ClientConfiguration config, String topic, String group)
            throws Exception {
        return PROVIDER.newSimpleConsumerBuilder().setClientConfiguration(config)
            .setConsumerGroup(group).setAwaitDuration(Duration.ofSeconds(10))
            .setSubscriptionExpressions(Collections.singletonMap(topic, FilterExpression.SUB_ALL))
            .build();
    }

    private static List<MessageView> receive(SimpleConsumer consumer) throws InterruptedException {
        try {
            return consumer.receive(32, INVISIBLE);
        } catch (Exception error) { // RocketMQ's proxy fails a new consumer's first receives
            Thread.sleep(200);
            return List.of();
        }
    }

    private static void latency(ClientConfiguration config, String topic, String group, int rate,
            double seconds, double warmupSeconds) throws Exception {
        SimpleConsumer consumer = consumer(config, topic, group);
        ConcurrentLinkedQueue<Long> latencies = new ConcurrentLinkedQueue<>();
        AtomicLong receivedAll = new AtomicLong();
        int count = (int) (rate * (warmupSeconds + seconds));
        long start = System.nanoTime();
        // Messages sent during the warm-up (JIT, connections, first routes) are received and
        // acked but not timed: the figure is the steady state, for both systems alike.
        long measuredFrom = start + (long) (warmupSeconds * 1e9);
        Thread receiver = new Thread(() -> {
            try {
                while (receivedAll.get() < count) {
                    for (MessageView view : receive(consumer)) {
                        long now = System.nanoTime();
                        long sent = view.getBody().getLong();
                        if (sent >= measuredFrom) {
                            latencies.add(now - sent);
                        }
                        receivedAll.incrementAndGet();
                        consumer.ackAsync(view);
                    }
                }
            } catch (InterruptedException stop) {
                Thread.currentThread().interrupt();
            }
        });
        receiver.setDaemon(true);
        receiver.start();
        Producer producer = PROVIDER.newProducerBuilder().setClientConfiguration(config)
            .setTopics(topic).build();
        Semaphore slots = new Semaphore(4096);
        for (int i = 0; i < count; i++) {
            long wait = start + (long) i * 1_000_000_000L / rate - System.nanoTime();
            if (wait > 0) {
                Thread.sleep(wait / 1_000_000L, (int) (wait % 1_000_000L));
            }
            slots.acquire();
            byte[] body = ByteBuffer.allocate(100).putLong(System.nanoTime()).array();
            Message message = PROVIDER.newMessageBuilder().setTopic(topic).setBody(body).build();
            producer.sendAsync(message).whenComplete((receipt, error) -> slots.release());
        }
        receiver.join(60_000);
        producer.close();
        long[] sorted = latencies.stream().mapToLong(Long::longValue).sorted().toArray();
        System.out.printf("received=%d sent=%d measured=%d p50_ms=%.1f p99_ms=%.1f max_ms=%.1f%n",
            receivedAll.get(), count, sorted.length, pct(sorted, 0.50), pct(sorted, 0.99),
            pct(sorted, 1.0));
        consumer.close();
    }

    private static void drain(ClientConfiguration config, String topic, String group, int count,
            int consumers) throws Exception {
        Producer producer = PROVIDER.newProducerBuilder().setClientConfiguration(config)
            .setTopics(topic).build();
        Semaphore slots = new Semaphore(256);
        Message message = PROVIDER.newMessageBuilder().setTopic(topic).setBody(new byte[100]).build();
        for (int i = 0; i < count; i++) {
            slots.acquire();
            producer.sendAsync(message).whenComplete((receipt, error) -> slots.release());
        }
        slots.acquire(256);
        producer.close();
        AtomicLong received = new AtomicLong();
        AtomicLong lastAckNs = new AtomicLong();
        List<SimpleConsumer> simple = new ArrayList<>();
        for (int i = 0; i < consumers; i++) {
            simple.add(consumer(config, topic, group));
        }
        long start = System.nanoTime();
        List<Thread> threads = new ArrayList<>();
        for (SimpleConsumer each : simple) {
            Thread thread = new Thread(() -> {
                long idleSince = System.nanoTime();
                List<CompletableFuture<?>> acks = new ArrayList<>();
                try {
                    while (received.get() < count && System.nanoTime() - idleSince < 15_000_000_000L) {
                        List<MessageView> views = receive(each);
                        if (!views.isEmpty()) {
                            idleSince = System.nanoTime();
                        }
                        for (MessageView view : views) {
                            acks.add(each.ackAsync(view).whenComplete(
                                (ok, error) -> lastAckNs.accumulateAndGet(System.nanoTime(), Math::max)));
                        }
                        received.addAndGet(views.size());
                    }
                    CompletableFuture.allOf(acks.toArray(new CompletableFuture<?>[0]))
                        .get(60, TimeUnit.SECONDS);
                } catch (Exception stop) {
                    System.err.println("drain: " + stop);
                }
            });
            threads.add(thread);
            thread.start();
        }
        for (Thread thread : threads) {
            thread.join();
        }
        System.out.printf("received=%d seconds=%.2f%n", received.get(), (lastAckNs.get() - start) / 1e9);
        for (SimpleConsumer each : simple) {
            each.close();
        }
    }

    private static double pct(long[] sorted, double fraction) {
        if (sorted.length == 0) {
            return Double.NaN;
        }
        int index = (int) Math.min(sorted.length - 1, Math.round(fraction * (sorted.length - 1)));
        return sorted[index] / 1e6;
    }
}
