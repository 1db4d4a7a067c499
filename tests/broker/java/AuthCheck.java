// The official rocketmq-client-java signs with StaticSessionCredentialsProvider(ak, sk): send
// one message to a topic, then receive it with a SimpleConsumer of a group. Prints
//   SENT <message id>        RECEIVED <message id> <body>        REFUSED <exception class>
// and "DONE" (or "TIMEOUT" when nothing came in 30 s).
// Usage: AuthCheck <endpoint> <access key> <secret key> <topic> <group>

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Collections;
import java.util.List;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.StaticSessionCredentialsProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;

public class AuthCheck {
    public static void main(String[] args) throws Exception {
        String endpoint = args[0];
        String topic = args[3];
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ClientConfiguration config = ClientConfiguration.newBuilder()
            .setEndpoints(endpoint).enableSsl(false).setRequestTimeout(Duration.ofSeconds(5))
            .setCredentialProvider(new StaticSessionCredentialsProvider(args[1], args[2]))
            .build();
        try (Producer producer = provider.newProducerBuilder()
                .setClientConfiguration(config).setTopics(topic).build()) {
            byte[] body = "from java".getBytes(StandardCharsets.UTF_8);
            System.out.println("SENT " + producer.send(
                provider.newMessageBuilder().setTopic(topic).setBody(body).build()).getMessageId());
        } catch (Exception e) {
            System.out.println("REFUSED " + e.getClass().getSimpleName() + " " + e.getMessage());
            System.out.println("DONE");
            System.exit(0);
        }
        FilterExpression all = new FilterExpression("*", FilterExpressionType.TAG);
        try (SimpleConsumer consumer = provider.newSimpleConsumerBuilder()
                .setClientConfiguration(config).setConsumerGroup(args[4])
                .setAwaitDuration(Duration.ofSeconds(5))
                .setSubscriptionExpressions(Collections.singletonMap(topic, all)).build()) {
            long end = System.nanoTime() + 30_000_000_000L;
            while (System.nanoTime() < end) {
                List<MessageView> views = consumer.receive(8, Duration.ofSeconds(30));
                for (MessageView view : views) {
                    String text = StandardCharsets.UTF_8.decode(view.getBody()).toString();
                    System.out.println("RECEIVED " + view.getMessageId() + " " + text.replace(' ', '_'));
                    consumer.ack(view);
                }
                if (!views.isEmpty()) {
                    System.out.println("DONE");
                    System.exit(0);
                }
            }
        }
        System.out.println("TIMEOUT");
        System.exit(0);
    }
}
