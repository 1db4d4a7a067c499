// The official rocketmq-client-java 5.x transactional Producer against a broker's gRPC port:
// one half message per BODY; "commit" is committed and "rollback" rolled back at once, every
// other half is left open (the producer "crashed" before EndTransaction), so the broker's
// check-back asks the TransactionChecker: bodies starting "check-commit" are committed, those
// starting "check-rollback" rolled back. A SimpleConsumer (created first) receives and acks
// until it saw EXPECTED messages and the checker answered for every open half, then listens
// two more rounds, so a duplicate or a rolled-back message would show.
// Prints "SENT <body>" per half, "CHECKED <body>" per check, "RECV <body> <message id>" per
// received message, then "DONE" (or "TIMEOUT").
// Used by tests/transactions/test_tx_java5_client.py.
//
// Args: ENDPOINT TOPIC GROUP EXPECTED BODY...
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.Transaction;
import org.apache.rocketmq.client.apis.producer.TransactionResolution;

public class TxProducer5 {
    private static String body(MessageView view) {
        return StandardCharsets.UTF_8.decode(view.getBody()).toString();
    }

    private static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        String endpoint = args[0], topic = args[1], group = args[2];
        int expected = Integer.parseInt(args[3]);
        List<String> open = new ArrayList<>();
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ClientConfiguration config = ClientConfiguration.newBuilder()
            .setEndpoints(endpoint).enableSsl(false).setRequestTimeout(Duration.ofSeconds(10))
            .build();
        SimpleConsumer consumer = provider.newSimpleConsumerBuilder()
            .setClientConfiguration(config)
            .setConsumerGroup(group)
            .setSubscriptionExpressions(Collections.singletonMap(
                topic, new FilterExpression("*", FilterExpressionType.TAG)))
            .setAwaitDuration(Duration.ofSeconds(2))
            .build();
        Set<String> checked = ConcurrentHashMap.newKeySet();
        Producer producer = provider.newProducerBuilder()
            .setClientConfiguration(config)
            .setTopics(topic)
            .setTransactionChecker(view -> {
                String text = body(view);
                say("CHECKED " + text);
                checked.add(text);
                if (text.startsWith("check-commit")) return TransactionResolution.COMMIT;
                if (text.startsWith("check-rollback")) return TransactionResolution.ROLLBACK;
                return TransactionResolution.UNKNOWN;
            })
            .build();
        for (int i = 4; i < args.length; i++) {
            Transaction transaction = producer.beginTransaction();
            Message message = provider.newMessageBuilder().setTopic(topic)
                .setBody(args[i].getBytes(StandardCharsets.UTF_8)).build();
            producer.send(message, transaction);
            say("SENT " + args[i]);
            if (args[i].equals("commit")) transaction.commit();
            else if (args[i].equals("rollback")) transaction.rollback();
            else open.add(args[i]);
        }
        int received = 0, quiet = 0;
        long end = System.nanoTime() + Duration.ofSeconds(90).toNanos();
        while (System.nanoTime() < end && quiet < 2) {
            List<MessageView> views = consumer.receive(16, Duration.ofSeconds(30));
            for (MessageView view : views) {
                say("RECV " + body(view) + " " + view.getMessageId());
                consumer.ack(view);
                received++;
            }
            if (received >= expected && checked.containsAll(open)) quiet++;
        }
        say(quiet >= 2 ? "DONE" : "TIMEOUT");
        producer.close();
        consumer.close();
        System.exit(0);
    }
}
