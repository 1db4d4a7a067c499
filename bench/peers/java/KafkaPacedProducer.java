import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/** Kafka's side of visible.py: RATE records/s of BODY bytes for SECONDS, on a fixed schedule.
 * acks=all (the record is on the broker's log before it counts as sent); the record
 * timestamp is the producer's CreateTime in ms. Prints "sent=N failed=M". */
public final class KafkaPacedProducer {
  public static void main(String[] args) throws Exception {
    String servers = args[0], topic = args[1];
    int rate = Integer.parseInt(args[2]);
    double seconds = Double.parseDouble(args[3]);
    byte[] body = new byte[Integer.parseInt(args[4])];
    Properties props = new Properties();
    props.put("bootstrap.servers", servers);
    props.put("acks", "all");
    props.put("linger.ms", "0");
    props.put("key.serializer", ByteArraySerializer.class.getName());
    props.put("value.serializer", ByteArraySerializer.class.getName());
    AtomicLong failed = new AtomicLong();
    long count = (long) (rate * seconds);
    try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
      long start = System.nanoTime();
      for (long i = 0; i < count; i++) {
        long due = start + i * 1_000_000_000L / rate;
        long wait = due - System.nanoTime();
        if (wait > 0) {
          Thread.sleep(wait / 1_000_000L, (int) (wait % 1_000_000L));
        }
        producer.send(new ProducerRecord<>(topic, body), (meta, err) -> {
          if (err != null) failed.incrementAndGet();
        });
      }
      producer.flush();
    }
    System.out.println("sent=" + count + " failed=" + failed.get());
  }
}
