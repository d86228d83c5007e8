// A driver of the official Pulsar Java client's transactions, run by the test suite.
// The client is built with enableTransaction(true); commands come one per line on stdin
// and every answer is one JSON line with an "event" field:
//
//   new TTL_SECONDS                    {"event":"txn","most":M,"least":L}
//   send TOPIC PAYLOAD [SEQUENCE_ID]   {"event":"sent","topic":"..","messageId":".."}
//                                      (in the current transaction; with the sequence
//                                      id given, as an application sets it)
//   plain TOPIC PAYLOAD                {"event":"sent",...} (no transaction)
//   consume-cumulative TOPIC SUBSCRIPTION COUNT   the same on a Failover subscription,
//                                      acknowledging the last one cumulatively in the
//                                      current transaction
//   consume TOPIC SUBSCRIPTION COUNT   receives COUNT messages (a Shared subscription,
//                                      from the earliest) and acknowledges each in
//                                      the current transaction:
//                                      {"event":"received","value":"..","messageId":".."}
//   pipeline IN OUT BATCH              consume-process-produce in transactions until IN
//                                      stays empty for 25 s (see pipeline()), then
//                                      {"event":"pipelined"}
//   commit | abort                     {"event":"ended","action":"commit"|"abort"}
//   quit                               {"event":"done"}, then the process exits
//
// A command that fails answers {"event":"error","command":"..","error":".."}.
// Arguments: URL [tlsTrustCerts=PATH] [tlsAllowInsecure=true] [tlsValidateHostname=true]
// [token=JWT] (the TLS and token options, for a pulsar+ssl:// or https:// URL).
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.AuthenticationFactory;
import org.apache.pulsar.client.api.ClientBuilder;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.client.api.TypedMessageBuilder;
import org.apache.pulsar.client.api.transaction.Transaction;

public final class PulsarTxnClient {
    private PulsarTxnClient() {}

    public static void main(String[] args) throws Exception {
        Map<String, Producer<byte[]>> producers = new HashMap<>();
        Map<String, Consumer<byte[]>> consumers = new HashMap<>();
        Map<String, String> options = new HashMap<>();
        for (String arg : args) {
            int eq = arg.indexOf('=');
            if (eq > 0) {
                options.put(arg.substring(0, eq), arg.substring(eq + 1));
            }
        }
        ClientBuilder builder = PulsarClient.builder();
        if (options.containsKey("tlsTrustCerts")) {
            builder.tlsTrustCertsFilePath(options.get("tlsTrustCerts"));
        }
        builder.allowTlsInsecureConnection(
                Boolean.parseBoolean(options.getOrDefault("tlsAllowInsecure", "false")));
        builder.enableTlsHostnameVerification(
                Boolean.parseBoolean(options.getOrDefault("tlsValidateHostname", "false")));
        if (options.containsKey("token")) {
            builder.authentication(AuthenticationFactory.token(options.get("token")));
        }
        try (PulsarClient client = builder
                .serviceUrl(args[0])
                .operationTimeout(30, TimeUnit.SECONDS)
                .enableTransaction(true)
                .build()) {
            print("{\"event\":\"ready\"}");
            BufferedReader in = new BufferedReader(
                    new InputStreamReader(System.in, StandardCharsets.UTF_8));
            Transaction txn = null;
            String line;
            while ((line = in.readLine()) != null) {
                String[] words = line.trim().split(" ", 4);
                if (words[0].equals("quit")) {
                    break;
                }
                try {
                    switch (words[0]) {
                        case "new" -> {
                            txn = client.newTransaction()
                                    .withTransactionTimeout(Long.parseLong(words[1]),
                                            TimeUnit.SECONDS)
                                    .build().get();
                            print("{\"event\":\"txn\",\"most\":" + txn.getTxnID().getMostSigBits()
                                    + ",\"least\":" + txn.getTxnID().getLeastSigBits() + "}");
                        }
                        case "send", "plain" -> {
                            Producer<byte[]> producer = producer(client, producers, words[1]);
                            byte[] value = words[2].getBytes(StandardCharsets.UTF_8);
                            TypedMessageBuilder<byte[]> message = words[0].equals("send")
                                    ? producer.newMessage(txn) : producer.newMessage();
                            message.value(value);
                            if (words.length > 3) {
                                message.sequenceId(Long.parseLong(words[3]));
                            }
                            MessageId id = message.send();
                            print("{\"event\":\"sent\",\"topic\":\"" + words[1]
                                    + "\",\"messageId\":\"" + id + "\"}");
                        }
                        case "consume", "consume-cumulative" -> {
                            boolean cumulative = words[0].equals("consume-cumulative");
                            String key = words[1] + " " + words[2];
                            Consumer<byte[]> consumer = consumers.get(key);
                            if (consumer == null) {
                                consumer = client.newConsumer().topic(words[1])
                                        .subscriptionName(words[2])
                                        .subscriptionType(cumulative ? SubscriptionType.Failover
                                                : SubscriptionType.Shared)
                                        .subscriptionInitialPosition(
                                                SubscriptionInitialPosition.Earliest)
                                        .subscribe();
                                consumers.put(key, consumer);
                            }
                            MessageId last = null;
                            for (int i = 0; i < Integer.parseInt(words[3]); i++) {
                                Message<byte[]> message = consumer.receive(30, TimeUnit.SECONDS);
                                if (message == null) {
                                    throw new IllegalStateException("no message within 30 s");
                                }
                                last = message.getMessageId();
                                if (!cumulative) {
                                    consumer.acknowledgeAsync(last, txn).get();
                                }
                                print("{\"event\":\"received\",\"value\":\""
                                        + new String(message.getValue(), StandardCharsets.UTF_8)
                                        + "\",\"messageId\":\"" + last + "\"}");
                            }
                            if (cumulative && last != null) {
                                consumer.acknowledgeCumulativeAsync(last, txn).get();
                            }
                        }
                        case "pipeline" -> pipeline(client, words[1], words[2],
                                Integer.parseInt(words[3]));
                        case "commit" -> {
                            txn.commit().get();
                            print("{\"event\":\"ended\",\"action\":\"commit\"}");
                        }
                        case "abort" -> {
                            txn.abort().get();
                            print("{\"event\":\"ended\",\"action\":\"abort\"}");
                        }
                        default -> throw new IllegalArgumentException("unknown command " + line);
                    }
                } catch (Exception e) {
                    Throwable cause = e.getCause() != null ? e.getCause() : e;
                    print("{\"event\":\"error\",\"command\":\"" + words[0] + "\",\"error\":\""
                            + escape(cause.getClass().getSimpleName() + ": " + cause.getMessage())
                            + "\"}");
                }
            }
        }
        print("{\"event\":\"done\"}");
        System.exit(0);
    }

    /**
     * Consume-process-produce until the input stays empty for 25 s: up to BATCH messages
     * of IN, each sent to OUT as "out-<value>" and acknowledged, in one transaction,
     * committed; on any failure (a broker killed meanwhile) the transaction is aborted,
     * if it still can be, and the step tried again. Prints one "step" event per commit
     * and per failure.
     */
    static void pipeline(PulsarClient client, String in, String out, int batch)
            throws Exception {
        Consumer<byte[]> consumer = client.newConsumer().topic(in).subscriptionName("pipeline")
                .subscriptionType(SubscriptionType.Failover)
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
        Producer<byte[]> producer = client.newProducer().topic(out)
                .sendTimeout(0, TimeUnit.SECONDS).enableBatching(false).create();
        long idleSince = System.currentTimeMillis();
        // Idle for longer than a transaction's timeout: a transaction this client could
        // neither commit nor abort (its coordinator was down) is aborted by the
        // coordinator meanwhile, and its messages come again.
        while (System.currentTimeMillis() - idleSince < 25_000) {
            Transaction txn = null;
            int taken = 0;
            try {
                txn = client.newTransaction().withTransactionTimeout(10, TimeUnit.SECONDS)
                        .build().get(30, TimeUnit.SECONDS);
                for (; taken < batch; taken++) {
                    Message<byte[]> message = consumer.receive(1, TimeUnit.SECONDS);
                    if (message == null) {
                        break;
                    }
                    String value = new String(message.getValue(), StandardCharsets.UTF_8);
                    producer.newMessage(txn).value(("out-" + value).getBytes(
                            StandardCharsets.UTF_8)).sendAsync();
                    consumer.acknowledgeAsync(message.getMessageId(), txn).get(30,
                            TimeUnit.SECONDS);
                }
                txn.commit().get(60, TimeUnit.SECONDS);
                if (taken > 0) {
                    idleSince = System.currentTimeMillis();
                    print("{\"event\":\"step\",\"committed\":" + taken + "}");
                }
            } catch (Exception e) {
                print("{\"event\":\"step\",\"failed\":\"" + escape(String.valueOf(e)) + "\"}");
                if (txn != null) {
                    try {
                        txn.abort().get(30, TimeUnit.SECONDS);
                    } catch (Exception ignored) {
                        // committed after all, or its coordinator ends it
                    }
                }
                consumer.redeliverUnacknowledgedMessages();
                Thread.sleep(500);
                idleSince = System.currentTimeMillis();
            }
        }
        print("{\"event\":\"pipelined\"}");
    }

    static Producer<byte[]> producer(PulsarClient client, Map<String, Producer<byte[]>> producers,
            String topic) throws Exception {
        Producer<byte[]> producer = producers.get(topic);
        if (producer == null) {
            producer = client.newProducer().topic(topic).sendTimeout(0, TimeUnit.SECONDS)
                    .enableBatching(false).create();
            producers.put(topic, producer);
        }
        return producer;
    }

    static String escape(String text) {
        return String.valueOf(text).replace("\\", "\\\\").replace("\"", "\\\"")
                .replace("\n", " ");
    }

    static void print(String line) {
        System.out.println(line);
        System.out.flush();
    }
}
