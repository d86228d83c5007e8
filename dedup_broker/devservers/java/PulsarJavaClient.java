// A small driver of the official Pulsar Java client, compiled and run by the test suite
// to prove that unmodified Java applications work against the broker.
//
//   produce URL TOPIC COUNT [name=N] [batching=none|default|key] [chunking=true]
//           [size=BYTES] [key=K] [sendTimeoutMs=MS]
//       sends COUNT messages "m-<i>" (padded to BYTES when given) with sequence ids 0..,
//       prints "sent <i> <messageId>" per message and "done" at the end
//   consume URL TOPIC SUBSCRIPTION COUNT [timeoutMs=MS] [type=Exclusive|Shared|...]
//       receives COUNT messages from the earliest position, acknowledging each, and
//       prints "received <key> <sequenceId> <payload-size> <payload-prefix>" per message
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.BatcherBuilder;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.ProducerBuilder;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.client.api.TypedMessageBuilder;

public final class PulsarJavaClient {
    private PulsarJavaClient() {}

    public static void main(String[] args) throws Exception {
        Map<String, String> options = new HashMap<>();
        for (String arg : args) {
            int eq = arg.indexOf('=');
            if (eq > 0) {
                options.put(arg.substring(0, eq), arg.substring(eq + 1));
            }
        }
        try (PulsarClient client = PulsarClient.builder()
                .serviceUrl(args[1])
                .operationTimeout(30, TimeUnit.SECONDS)
                .build()) {
            switch (args[0]) {
                case "produce" -> produce(client, args[2], Integer.parseInt(args[3]), options);
                case "consume" -> consume(client, args[2], args[3], Integer.parseInt(args[4]),
                        options);
                default -> throw new IllegalArgumentException("unknown mode " + args[0]);
            }
        }
        System.out.flush();
        System.exit(0);
    }

    private static byte[] payload(int index, int size) {
        byte[] head = ("m-" + index).getBytes(StandardCharsets.UTF_8);
        if (size <= head.length) {
            return head;
        }
        byte[] body = new byte[size];
        for (int i = 0; i < size; i++) {
            body[i] = (byte) ('a' + (index + i) % 26);
        }
        System.arraycopy(head, 0, body, 0, head.length);
        body[head.length] = ' ';
        return body;
    }

    private static void produce(PulsarClient client, String topic, int count,
            Map<String, String> options) throws Exception {
        ProducerBuilder<byte[]> builder = client.newProducer()
                .topic(topic)
                .sendTimeout(Integer.parseInt(options.getOrDefault("sendTimeoutMs", "0")),
                        TimeUnit.MILLISECONDS)
                .blockIfQueueFull(true);
        if (options.containsKey("name")) {
            builder.producerName(options.get("name"));
        }
        String batching = options.getOrDefault("batching", "none");
        switch (batching) {
            case "none" -> builder.enableBatching(false);
            case "default" -> builder.enableBatching(true)
                    .batchingMaxPublishDelay(5, TimeUnit.MILLISECONDS);
            case "key" -> builder.enableBatching(true)
                    .batcherBuilder(BatcherBuilder.KEY_BASED)
                    .batchingMaxPublishDelay(5, TimeUnit.MILLISECONDS);
            default -> throw new IllegalArgumentException("batching " + batching);
        }
        if (Boolean.parseBoolean(options.getOrDefault("chunking", "false"))) {
            builder.enableBatching(false).enableChunking(true);
        }
        int size = Integer.parseInt(options.getOrDefault("size", "0"));
        String keyPrefix = options.get("key");
        try (Producer<byte[]> producer = builder.create()) {
            long last = producer.getLastSequenceId();
            System.out.println("last-sequence-id " + last);
            @SuppressWarnings("unchecked")
            CompletableFuture<MessageId>[] sends = new CompletableFuture[count];
            for (int i = 0; i < count; i++) {
                TypedMessageBuilder<byte[]> message = producer.newMessage()
                        .sequenceId(i)
                        .value(payload(i, size));
                if (keyPrefix != null) {
                    message.key(keyPrefix + (i % 4));
                }
                sends[i] = message.sendAsync();
            }
            for (int i = 0; i < count; i++) {
                System.out.println("sent " + i + " " + sends[i].get(60, TimeUnit.SECONDS));
            }
            producer.flush();
        }
        System.out.println("done");
    }

    private static void consume(PulsarClient client, String topic, String subscription,
            int count, Map<String, String> options) throws Exception {
        int timeoutMs = Integer.parseInt(options.getOrDefault("timeoutMs", "30000"));
        SubscriptionType type =
                SubscriptionType.valueOf(options.getOrDefault("type", "Exclusive"));
        try (Consumer<byte[]> consumer = client.newConsumer()
                .topic(topic)
                .subscriptionName(subscription)
                .subscriptionType(type)
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                .subscribe()) {
            for (int i = 0; i < count; i++) {
                Message<byte[]> message = consumer.receive(timeoutMs, TimeUnit.MILLISECONDS);
                if (message == null) {
                    System.out.println("timeout after " + i);
                    break;
                }
                byte[] data = message.getValue();
                String text = new String(data, 0, Math.min(data.length, 16),
                        StandardCharsets.UTF_8);
                int space = text.indexOf(' ');
                System.out.println("received " + (message.hasKey() ? message.getKey() : "-")
                        + " " + message.getSequenceId() + " " + data.length + " "
                        + (space > 0 ? text.substring(0, space) : text));
                consumer.acknowledge(message);
            }
        }
        System.out.println("done");
    }
}
