// A RocketMQ 4.9.8 TransactionMQProducer against the broker's remoting port, found through a
// name server: sends one half message per BODY; the local transaction commits "commit", rolls
// back "rollback" and answers UNKNOW for anything else, which the broker's check
// (CHECK_TRANSACTION_STATE) then resolves: the checker commits it. Prints
// "SENT <body> <sendStatus> <localState>" per message, "CHECKED <body>" per check,
// "CHECK_OK" once a check arrived (or "CHECK_TIMEOUT"), then "DONE".
// Used by tests/transactions/test_tx_remoting_java4.py.
//
// Args: NAMESRV TOPIC GROUP BODY...
import java.nio.charset.StandardCharsets;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class TxProducer4 {
    public static void main(String[] args) throws Exception {
        String namesrv = args[0], topic = args[1], group = args[2];
        CountDownLatch checked = new CountDownLatch(1);
        TransactionMQProducer producer = new TransactionMQProducer(group);
        producer.setNamesrvAddr(namesrv);
        producer.setVipChannelEnabled(false);
        producer.setSendMsgTimeout(10000);
        producer.setInstanceName("tx-" + System.nanoTime());
        producer.setTransactionListener(new TransactionListener() {
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                String body = new String(msg.getBody(), StandardCharsets.UTF_8);
                if (body.equals("commit")) return LocalTransactionState.COMMIT_MESSAGE;
                if (body.equals("rollback")) return LocalTransactionState.ROLLBACK_MESSAGE;
                return LocalTransactionState.UNKNOW;
            }

            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                System.out.println("CHECKED " + new String(msg.getBody(), StandardCharsets.UTF_8));
                System.out.flush();
                checked.countDown();
                return LocalTransactionState.COMMIT_MESSAGE;
            }
        });
        producer.start();
        try {
            for (int i = 3; i < args.length; i++) {
                Message message = new Message(topic, args[i].getBytes(StandardCharsets.UTF_8));
                TransactionSendResult result = producer.sendMessageInTransaction(message, null);
                System.out.println("SENT " + args[i] + " " + result.getSendStatus() + " "
                    + result.getLocalTransactionState());
            }
            System.out.println(checked.await(60, TimeUnit.SECONDS) ? "CHECK_OK" : "CHECK_TIMEOUT");
            Thread.sleep(1000); // the oneway END_TRANSACTION of the check's answer
        } catch (Exception e) {
            System.out.println("ERROR " + e.getClass().getSimpleName() + " " + e.getMessage());
        } finally {
            producer.shutdown();
        }
        System.out.println("DONE");
        System.out.flush();
        System.exit(0);
    }
}
