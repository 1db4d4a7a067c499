// bench/peers' remoting case (remoting.py): RocketMQ 4.9.x's Java client (DefaultMQProducer,
// DefaultMQPushConsumer) against one broker found through a name server. One JVM runs every
// case in turn; for each it prints "timing <case>" when its timed part starts and then
// "result <case> sent=N failed=F seconds=S p50_ms=X p99_ms=Y first_error=..." (the harness
// reads the broker's CPU at both lines). Messages are BODY random bytes, 8 queues round robin.
//
// Cases (CASES, comma-separated, in this order):
//   sync    1 thread, DefaultMQProducer.send(msg): one send in flight
//   async   send(msg, callback) with INFLIGHT sends in flight (a new one as one completes)
//   batch   send(Collection of BATCH msgs, callback) with BATCH_INFLIGHT batches in flight;
//           sent counts messages, latencies are per batch
//   e2e     a DefaultMQPushConsumer (fresh group, E2E_TOPIC) and async sends paced at RATE
//           msgs/s for E2E_SECONDS: latency = consumed - sent (the same JVM's clock), after
//           WARMUP seconds of the same traffic untimed; sent = timed messages, failed = those
//           not consumed within 60 s.
//
// Usage: java -cp <client jars>:<classes> RemotingBench NAMESRV TOPIC E2E_TOPIC CASES SECONDS
//        WARMUP BODY INFLIGHT BATCH BATCH_INFLIGHT RATE E2E_SECONDS

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public final class RemotingBench {
    private static final long DRAIN_SECONDS = 120;

    /** Latencies (ns) of completed sends and the failures of one timed period. */
    private static final class Record {
        private long[] values = new long[1 << 16];
        private int size;
        final AtomicLong failed = new AtomicLong();
        final AtomicLong count = new AtomicLong();
        final AtomicReference<String> firstError = new AtomicReference<>("");

        synchronized void ok(long nanos) {
            if (size == values.length) {
                values = Arrays.copyOf(values, size * 2);
            }
            values[size++] = nanos;
        }

        void fail(Object error) {
            failed.incrementAndGet();
            firstError.compareAndSet("", String.valueOf(error).replace('\n', ' ').replace(' ', '_'));
        }

        synchronized String quantiles() {
            long[] all = Arrays.copyOf(values, size);
            Arrays.sort(all);
            return " p50_ms=" + pct(all, 0.50) + " p99_ms=" + pct(all, 0.99);
        }

        private static double pct(long[] sorted, double q) {
            if (sorted.length == 0) {
                return Double.NaN;
            }
            int index = (int) Math.min(sorted.length - 1, Math.floor(q * sorted.length));
            return sorted[index] / 1e6;
        }
    }

    private static String namesrv;
    private static String topic;
    private static byte[] body;

    public static void main(String[] args) throws Exception {
        namesrv = args[0];
        topic = args[1];
        String e2eTopic = args[2];
        List<String> cases = Arrays.asList(args[3].split(","));
        double seconds = Double.parseDouble(args[4]);
        double warmUp = Double.parseDouble(args[5]);
        body = new byte[Integer.parseInt(args[6])];
        new Random(7).nextBytes(body);
        int inflight = Integer.parseInt(args[7]);
        int batch = Integer.parseInt(args[8]);
        int batchInflight = Integer.parseInt(args[9]);
        int rate = Integer.parseInt(args[10]);
        double e2eSeconds = Double.parseDouble(args[11]);

        DefaultMQProducer producer = new DefaultMQProducer("RemotingBenchProducer");
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("bench-" + ProcessHandle.current().pid());
        producer.setSendMsgTimeout(10_000);
        producer.setRetryTimesWhenSendFailed(0);
        producer.setRetryTimesWhenSendAsyncFailed(0);
        producer.start();
        try {
            waitForRoute(producer, topic);
            waitForRoute(producer, e2eTopic);
            // untimed: the JIT, the route, the first CommitLog segment, both brokers' caches
            loop(producer, 1, 0, warmUp / 2, new Record());
            loop(producer, inflight, 0, warmUp / 2, new Record());
            if (cases.contains("sync")) {
                timed("sync", producer, 1, 0, seconds);
            }
            if (cases.contains("async")) {
                timed("async", producer, inflight, 0, seconds);
            }
            if (cases.contains("batch")) {
                loop(producer, batchInflight, batch, Math.min(warmUp, 2), new Record());
                timed("batch", producer, batchInflight, batch, seconds);
            }
            if (cases.contains("e2e")) {
                e2e(producer, e2eTopic, rate, warmUp, e2eSeconds);
            }
        } finally {
            producer.shutdown();
        }
        System.out.println("done");
        System.out.flush();
        System.exit(0);
    }

    /** Until the name server has the topic's route (the broker registers after it starts). */
    private static void waitForRoute(DefaultMQProducer producer, String name) throws Exception {
        long deadline = System.nanoTime() + 60_000_000_000L;
        while (true) {
            try {
                if (!producer.fetchPublishMessageQueues(name).isEmpty()) {
                    return;
                }
            } catch (Exception error) {
                if (System.nanoTime() > deadline) {
                    throw error;
                }
            }
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("no route for " + name + " after 60 s");
            }
            Thread.sleep(200);
        }
    }

    private static void timed(String name, DefaultMQProducer producer, int inflight, int batch,
            double seconds) throws Exception {
        Record record = new Record();
        System.out.println("timing " + name);
        System.out.flush();
        double took = loop(producer, inflight, batch, seconds, record);
        System.out.println("result " + name + " sent=" + record.count.get() + " failed="
            + record.failed.get() + " seconds=" + took + record.quantiles() + " first_error="
            + record.firstError.get());
        System.out.flush();
    }

    private static List<Message> batchOf(int size) {
        List<Message> messages = new ArrayList<>(size);
        for (int i = 0; i < size; i++) {
            messages.add(new Message(topic, "bench", body));
        }
        return messages;
    }

    /** Closed loop: ``inflight`` sends (of single messages, or of ``batch`` messages) in
     * flight for ``seconds``; returns the seconds until the last one completed. */
    private static double loop(DefaultMQProducer producer, int inflight, int batch,
            double seconds, Record record) throws Exception {
        long start = System.nanoTime();
        long end = start + (long) (seconds * 1e9);
        int per = Math.max(batch, 1);
        if (inflight == 1 && batch == 0) {
            while (System.nanoTime() < end) {
                long t0 = System.nanoTime();
                try {
                    SendResult result = producer.send(new Message(topic, "bench", body));
                    if (result.getSendStatus() == SendStatus.SEND_OK) {
                        record.ok(System.nanoTime() - t0);
                        record.count.incrementAndGet();
                    } else {
                        record.fail(result.getSendStatus());
                    }
                } catch (Exception error) {
                    record.fail(error);
                }
            }
            return (System.nanoTime() - start) / 1e9;
        }
        Semaphore slots = new Semaphore(inflight);
        while (System.nanoTime() < end) {
            slots.acquire();
            long t0 = System.nanoTime();
            SendCallback callback = new SendCallback() {
                @Override
                public void onSuccess(SendResult result) {
                    if (result.getSendStatus() == SendStatus.SEND_OK) {
                        record.ok(System.nanoTime() - t0);
                        record.count.addAndGet(per);
                    } else {
                        record.fail(result.getSendStatus());
                    }
                    slots.release();
                }

                @Override
                public void onException(Throwable error) {
                    record.fail(error);
                    slots.release();
                }
            };
            try {
                if (batch == 0) {
                    producer.send(new Message(topic, "bench", body), callback);
                } else {
                    producer.send(batchOf(batch), callback);
                }
            } catch (Exception error) {
                record.fail(error);
                slots.release();
            }
        }
        if (!slots.tryAcquire(inflight, DRAIN_SECONDS, TimeUnit.SECONDS)) {
            record.fail("sends still in flight after " + DRAIN_SECONDS + " s");
        }
        return (System.nanoTime() - start) / 1e9;
    }

    private static void e2e(DefaultMQProducer producer, String e2eTopic, int rate, double warmUp,
            double seconds) throws Exception {
        Record record = new Record();
        AtomicLong firstSeen = new AtomicLong();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer("RemotingBenchE2E");
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("bench-e2e-" + ProcessHandle.current().pid());
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(e2eTopic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            long now = System.nanoTime();
            for (MessageExt m : msgs) {
                ByteBuffer b = ByteBuffer.wrap(m.getBody());
                long sentAt = b.getLong();
                firstSeen.compareAndSet(0, now);
                if (b.get() == 1) {
                    record.ok(now - sentAt);
                    record.count.incrementAndGet();
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        try {
            Record sendFailures = new Record();
            long deadline = System.nanoTime() + 60_000_000_000L;
            while (firstSeen.get() == 0 && System.nanoTime() < deadline) {
                paced(producer, e2eTopic, rate, 0.5, false, sendFailures);
            }
            paced(producer, e2eTopic, rate, warmUp, false, sendFailures);
            System.out.println("timing e2e");
            System.out.flush();
            long start = System.nanoTime();
            long sent = paced(producer, e2eTopic, rate, seconds, true, sendFailures);
            double took = (System.nanoTime() - start) / 1e9;
            long drain = System.nanoTime() + 60_000_000_000L;
            while (record.count.get() < sent && System.nanoTime() < drain) {
                Thread.sleep(50);
            }
            long missing = sent - record.count.get();
            for (long i = 0; i < missing; i++) {
                record.fail("not consumed within 60 s");
            }
            System.out.println("result e2e sent=" + sent + " failed=" + record.failed.get()
                + " seconds=" + took + record.quantiles() + " first_error="
                + record.firstError.get() + sendFailures.firstError.get());
            System.out.flush();
        } finally {
            consumer.shutdown();
        }
    }

    /** Async sends on a fixed schedule (``rate`` per second, a slow send does not delay the
     * next); returns how many were sent. The body starts with the send time and a timed flag. */
    private static long paced(DefaultMQProducer producer, String e2eTopic, int rate,
            double seconds, boolean timed, Record failures) {
        long start = System.nanoTime();
        long count = (long) (rate * seconds);
        long sent = 0;
        for (long i = 0; i < count; i++) {
            long due = start + (long) (i * 1e9 / rate);
            long wait = due - System.nanoTime();
            if (wait > 0) {
                LockSupport.parkNanos(wait);
            }
            byte[] payload = body.clone();
            ByteBuffer.wrap(payload).putLong(System.nanoTime()).put((byte) (timed ? 1 : 0));
            try {
                producer.send(new Message(e2eTopic, "e2e", payload), new SendCallback() {
                    @Override
                    public void onSuccess(SendResult result) {
                    }

                    @Override
                    public void onException(Throwable error) {
                        failures.fail(error);
                    }
                });
                sent++;
            } catch (Exception error) {
                failures.fail(error);
            }
        }
        return sent;
    }
}
