// The official rocketmq-client-java with its DEFAULT configuration (enableSsl is true by
// default and trusts any certificate) produces to and consumes from a broker. Prints
//   SENT <message id>
//   RECEIVED <message id> <body>
// and "DONE" once a SimpleConsumer received and acknowledged every sent message, or "TIMEOUT".
// Usage: TlsCheck <endpoint> <topic> <count>

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;

public class TlsCheck {
    public static void main(String[] args) throws Exception {
        String endpoint = args[0];
        String topic = args[1];
        int count = Integer.parseInt(args[2]);
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        // No enableSsl(...) call: the client's default, TLS.
        ClientConfiguration config = ClientConfiguration.newBuilder()
            .setEndpoints(endpoint).setRequestTimeout(Duration.ofSeconds(5)).build();
        Producer producer = provider.newProducerBuilder()
            .setClientConfiguration(config).setTopics(topic).build();
        Set<String> sent = new HashSet<>();
        for (int i = 0; i < count; i++) {
            String id = producer.send(provider.newMessageBuilder().setTopic(topic)
                .setBody(("tls-" + i).getBytes(StandardCharsets.UTF_8)).build())
                .getMessageId().toString();
            sent.add(id);
            System.out.println("SENT " + id);
        }
        producer.close();
        SimpleConsumer simple = provider.newSimpleConsumerBuilder()
            .setClientConfiguration(config)
            .setConsumerGroup("java-tls")
            .setSubscriptionExpressions(Collections.singletonMap(topic,
                new FilterExpression("*", FilterExpressionType.TAG)))
            .setAwaitDuration(Duration.ofSeconds(2))
            .build();
        Set<String> received = new HashSet<>();
        long end = System.nanoTime() + Duration.ofSeconds(60).toNanos();
        while (System.nanoTime() < end && !received.containsAll(sent)) {
            List<MessageView> views = simple.receive(16, Duration.ofSeconds(10));
            for (MessageView view : views) {
                String body = StandardCharsets.UTF_8.decode(view.getBody()).toString();
                System.out.println("RECEIVED " + view.getMessageId() + " " + body);
                simple.ack(view);
                received.add(view.getMessageId().toString());
            }
        }
        System.out.println(received.containsAll(sent) ? "DONE" : "TIMEOUT");
        System.out.flush();
        simple.close();
        System.exit(0);
    }
}
