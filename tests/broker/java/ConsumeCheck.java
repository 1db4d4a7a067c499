// The official rocketmq-client-java consumes from a broker: a PushConsumer whose listener fails
// the first attempt of the message with body "fail once", then a SimpleConsumer of another
// group that receives and acknowledges. Prints one line per event:
//   PUSH <message id> <delivery attempt> <body> <ms since start>
//   SIMPLE <message id> <delivery attempt> <body> <ms since start>
// and "DONE" once the push listener saw `expected` messages acknowledged (the failed one at
// attempt 2) and the simple consumer received `expected` messages, or "TIMEOUT".
// Usage: ConsumeCheck <endpoint> <topic> <expected>

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Collections;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;

public class ConsumeCheck {
    private static final long START = System.nanoTime();

    private static long elapsedMs() {
        return (System.nanoTime() - START) / 1_000_000;
    }

    public static void main(String[] args) throws Exception {
        String endpoint = args[0];
        String topic = args[1];
        int expected = Integer.parseInt(args[2]);
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ClientConfiguration config = ClientConfiguration.newBuilder()
            .setEndpoints(endpoint).enableSsl(false).setRequestTimeout(Duration.ofSeconds(5))
            .build();
        FilterExpression all = new FilterExpression("*", FilterExpressionType.TAG);
        Set<String> done = ConcurrentHashMap.newKeySet();
        PushConsumer push = provider.newPushConsumerBuilder()
            .setClientConfiguration(config)
            .setConsumerGroup("java-push")
            .setSubscriptionExpressions(Collections.singletonMap(topic, all))
            .setMessageListener(view -> {
                String body = StandardCharsets.UTF_8.decode(view.getBody()).toString();
                System.out.println("PUSH " + view.getMessageId() + " " + view.getDeliveryAttempt()
                    + " " + body.replace(' ', '_') + " " + elapsedMs());
                System.out.flush();
                if (body.equals("fail once") && view.getDeliveryAttempt() == 1) {
                    return ConsumeResult.FAILURE;
                }
                done.add(view.getMessageId().toString());
                return ConsumeResult.SUCCESS;
            })
            .build();
        SimpleConsumer simple = provider.newSimpleConsumerBuilder()
            .setClientConfiguration(config)
            .setConsumerGroup("java-simple")
            .setSubscriptionExpressions(Collections.singletonMap(topic, all))
            .setAwaitDuration(Duration.ofSeconds(2))
            .build();
        int received = 0;
        long end = System.nanoTime() + Duration.ofSeconds(60).toNanos();
        while (System.nanoTime() < end && (received < expected || done.size() < expected)) {
            if (received < expected) {
                List<MessageView> views = simple.receive(16, Duration.ofSeconds(10));
                for (MessageView view : views) {
                    String body = StandardCharsets.UTF_8.decode(view.getBody()).toString();
                    System.out.println("SIMPLE " + view.getMessageId() + " "
                        + view.getDeliveryAttempt() + " " + body.replace(' ', '_') + " " + elapsedMs());
                    simple.ack(view);
                    received++;
                }
            } else {
                Thread.sleep(100);
            }
        }
        System.out.println(received >= expected && done.size() >= expected ? "DONE" : "TIMEOUT");
        System.out.flush();
        push.close();
        simple.close();
        System.exit(0);
    }
}
