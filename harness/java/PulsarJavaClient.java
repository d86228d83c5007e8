// A small driver of the official Pulsar Java client, compiled and run by the test suite
// to prove that unmodified Java applications work against the broker. Every line it
// prints is one JSON object with an "event" field, so that tests can assert exact results.
//
//   produce URL TOPIC COUNT [name=N] [batching=none|default|key] [chunking=true]
//           [size=BYTES] [keys=K] [first=F] [resend=FROM-TO] [sendTimeoutMs=MS]
//       sends COUNT messages with sequence ids F..F+COUNT-1 (F: 0 unless given), all
//       asynchronously then flushed, so that a run of ids shares batches: "m-<i>", or
//       BYTES bytes of payload(i) when size is given; with keys=K message i has the key
//       "k<i % K>";
//       resend=FROM-TO then sends messages FROM..TO (inclusive) again, same ids, same
//       producer. Prints {"event":"producer","lastSequenceId":..},
//       {"event":"sent"|"resent","sequenceId":..,"messageId":".."} and {"event":"done"}.
//   consume URL TOPIC SUBSCRIPTION COUNT [timeoutMs=MS] [type=Exclusive|Shared|...]
//       receives up to COUNT messages from the earliest position, acknowledging each;
//       prints {"event":"received","key":..,"size":..,"sha256":"..","value":"..",
//       "sequenceId":..,"producerName":"..","messageId":".."} per message ("value" only
//       for payloads of at most 256 bytes), {"event":"timeout","after":N} when none came
//       for timeoutMs, and {"event":"done"}.
//   steady URL TOPIC,TOPIC,... RATE SECONDS
//       one producer per topic (named "java-<topic index>", sendTimeout 0, batching
//       off), each sending RATE messages a second for SECONDS; prints
//       {"event":"acked","topic":I,"sent":MS,"at":MS} per acknowledgement (epoch
//       milliseconds) and {"event":"failed","topic":I,"error":".."} per failed send.
//   failover URL TOPIC SUBSCRIPTION COUNT priorities=P,P,.. [settleMs=MS]
//       Failover consumers "c0", "c1", .. of these priority levels on TOPIC (partitioned),
//       then COUNT messages round-robin over its partitions; once dispatch settled, per
//       consumer {"event":"failover","round":1,"consumer":I,"priority":P,"active":[..],
//       "received":[..]}: the partitions it was last told it is active for, and those it
//       received messages of. Round 2: the same after the consumers of the best level left.
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.BatcherBuilder;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.ConsumerEventListener;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.MessageRoutingMode;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.ProducerBuilder;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.client.api.TypedMessageBuilder;

public final class PulsarJavaClient {
    private static final int VALUE_LIMIT = 256;

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
                case "steady" -> steady(client, args[2].split(","), Double.parseDouble(args[3]),
                        Double.parseDouble(args[4]));
                case "priority" -> priority(client, args[2], args[3], Integer.parseInt(args[4]),
                        options);
                case "failover" -> failover(client, args[2], args[3], Integer.parseInt(args[4]),
                        options);
                default -> throw new IllegalArgumentException("unknown mode " + args[0]);
            }
        }
        System.out.println("{\"event\":\"done\"}");
        System.out.flush();
        System.exit(0);
    }

    /** "m-<index>", or exactly size bytes: "m-<index> " then letters from index on. */
    static byte[] payload(int index, int size) {
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
        int keys = Integer.parseInt(options.getOrDefault("keys", "0"));
        try (Producer<byte[]> producer = builder.create()) {
            System.out.println("{\"event\":\"producer\",\"lastSequenceId\":"
                    + producer.getLastSequenceId() + "}");
            int first = Integer.parseInt(options.getOrDefault("first", "0"));
            List<Integer> order = new ArrayList<>();
            for (int i = first; i < first + count; i++) {
                order.add(i);
            }
            sendAll(producer, order, size, keys, "sent");
            String resend = options.get("resend");
            if (resend != null) {
                int dash = resend.indexOf('-');
                int from = Integer.parseInt(resend.substring(0, dash));
                int to = Integer.parseInt(resend.substring(dash + 1));
                List<Integer> again = new ArrayList<>();
                for (int i = from; i <= to; i++) {
                    again.add(i);
                }
                sendAll(producer, again, size, keys, "resent");
            }
        }
    }

    private static void sendAll(Producer<byte[]> producer, List<Integer> indexes, int size,
            int keys, String event) throws Exception {
        List<CompletableFuture<MessageId>> sends = new ArrayList<>();
        for (int i : indexes) {
            TypedMessageBuilder<byte[]> message = producer.newMessage()
                    .sequenceId(i)
                    .value(payload(i, size));
            if (keys > 0) {
                message.key("k" + (i % keys));
            }
            sends.add(message.sendAsync());
        }
        producer.flush();
        for (int n = 0; n < sends.size(); n++) {
            MessageId id = sends.get(n).get(60, TimeUnit.SECONDS);
            System.out.println("{\"event\":\"" + event + "\",\"sequenceId\":" + indexes.get(n)
                    + ",\"messageId\":" + quote(String.valueOf(id)) + "}");
        }
    }

    private static void steady(PulsarClient client, String[] topics, double rate,
            double seconds) throws Exception {
        List<Producer<byte[]>> producers = new ArrayList<>();
        for (int t = 0; t < topics.length; t++) {
            producers.add(client.newProducer().topic(topics[t]).producerName("java-" + t)
                    .sendTimeout(0, TimeUnit.MILLISECONDS).enableBatching(false)
                    .blockIfQueueFull(true).create());
        }
        System.out.println("{\"event\":\"ready\"}");
        System.out.flush();
        long start = System.nanoTime();
        long total = (long) (rate * seconds);
        for (long i = 0; i < total; i++) {
            long due = start + (long) (i * 1e9 / rate);
            long wait = due - System.nanoTime();
            if (wait > 0) {
                Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
            }
            for (int t = 0; t < producers.size(); t++) {
                int topic = t;
                long sent = System.currentTimeMillis();
                producers.get(t).newMessage().sequenceId(i).value(payload((int) i, 0))
                        .sendAsync().whenComplete((id, error) -> {
                            String line = error == null
                                    ? "{\"event\":\"acked\",\"topic\":" + topic + ",\"sent\":"
                                            + sent + ",\"at\":" + System.currentTimeMillis() + "}"
                                    : "{\"event\":\"failed\",\"topic\":" + topic
                                            + ",\"error\":" + quote(String.valueOf(error)) + "}";
                            synchronized (System.out) {
                                System.out.println(line);
                            }
                        });
            }
        }
        for (Producer<byte[]> producer : producers) {
            producer.flush();
            producer.close();
        }
    }

    private static void consume(PulsarClient client, String topic, String subscription,
            int count, Map<String, String> options) throws Exception {
        int timeoutMs = Integer.parseInt(options.getOrDefault("timeoutMs", "30000"));
        SubscriptionType type =
                SubscriptionType.valueOf(options.getOrDefault("type", "Exclusive"));
        MessageDigest sha256 = MessageDigest.getInstance("SHA-256");
        try (Consumer<byte[]> consumer = client.newConsumer()
                .topic(topic)
                .subscriptionName(subscription)
                .subscriptionType(type)
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                .subscribe()) {
            for (int i = 0; i < count; i++) {
                Message<byte[]> message = consumer.receive(timeoutMs, TimeUnit.MILLISECONDS);
                if (message == null) {
                    System.out.println("{\"event\":\"timeout\",\"after\":" + i
                            + ",\"endOfTopic\":" + consumer.hasReachedEndOfTopic() + "}");
                    break;
                }
                byte[] data = message.getValue();
                StringBuilder line = new StringBuilder("{\"event\":\"received\",\"key\":")
                        .append(message.hasKey() ? quote(message.getKey()) : "null")
                        .append(",\"size\":").append(data.length)
                        .append(",\"sha256\":\"")
                        .append(HexFormat.of().formatHex(sha256.digest(data))).append('"');
                if (data.length <= VALUE_LIMIT) {
                    line.append(",\"value\":")
                            .append(quote(new String(data, StandardCharsets.UTF_8)));
                }
                line.append(",\"sequenceId\":").append(message.getSequenceId())
                        .append(",\"producerName\":").append(quote(message.getProducerName()))
                        .append(",\"messageId\":")
                        .append(quote(String.valueOf(message.getMessageId()))).append('}');
                System.out.println(line);
                consumer.acknowledge(message);
            }
        }
    }

    /**
     * Shared consumers of the given priority levels (subscribed in that order, each with
     * receiverQueueSize "queue"), then count messages produced; once dispatch settled,
     * each consumer's share is printed: {"event":"share","priority":P,"received":N}.
     */
    private static void priority(PulsarClient client, String topic, String subscription,
            int count, Map<String, String> options) throws Exception {
        int queue = Integer.parseInt(options.getOrDefault("queue", "10"));
        List<Consumer<byte[]>> consumers = new ArrayList<>();
        List<Integer> levels = new ArrayList<>();
        for (String level : options.getOrDefault("priorities", "1,0").split(",")) {
            levels.add(Integer.parseInt(level));
            consumers.add(client.newConsumer()
                    .topic(topic)
                    .subscriptionName(subscription)
                    .subscriptionType(SubscriptionType.Shared)
                    .priorityLevel(Integer.parseInt(level))
                    .receiverQueueSize(queue)
                    .subscribe());
        }
        try (Producer<byte[]> producer = client.newProducer().topic(topic)
                .enableBatching(false).create()) {
            for (int i = 0; i < count; i++) {
                producer.send(payload(i, 0));
            }
        }
        Thread.sleep(Long.parseLong(options.getOrDefault("settleMs", "2000")));
        for (int n = 0; n < consumers.size(); n++) {
            int received = 0;
            while (consumers.get(n).receive(500, TimeUnit.MILLISECONDS) != null) {
                received++;
                if (received >= queue) {
                    break; // what the broker had dispatched before anything was read
                }
            }
            System.out.println("{\"event\":\"share\",\"priority\":" + levels.get(n)
                    + ",\"received\":" + received + "}");
        }
        for (Consumer<byte[]> consumer : consumers) {
            consumer.close();
        }
    }

    /** Failover consumers of priority levels on a partitioned topic (see the header). */
    private static void failover(PulsarClient client, String topic, String subscription,
            int count, Map<String, String> options) throws Exception {
        long settleMs = Long.parseLong(options.getOrDefault("settleMs", "3000"));
        List<Integer> levels = new ArrayList<>();
        List<Consumer<byte[]>> consumers = new ArrayList<>();
        List<Map<Integer, Boolean>> told = new ArrayList<>();
        for (String level : options.getOrDefault("priorities", "0").split(",")) {
            Map<Integer, Boolean> active = new ConcurrentHashMap<>();
            levels.add(Integer.parseInt(level));
            told.add(active);
            consumers.add(client.newConsumer()
                    .topic(topic)
                    .subscriptionName(subscription)
                    .subscriptionType(SubscriptionType.Failover)
                    .priorityLevel(Integer.parseInt(level))
                    .consumerName("c" + consumers.size())
                    .consumerEventListener(new ConsumerEventListener() {
                        @Override
                        public void becameActive(Consumer<?> consumer, int partition) {
                            active.put(partition, true);
                        }

                        @Override
                        public void becameInactive(Consumer<?> consumer, int partition) {
                            active.put(partition, false);
                        }
                    })
                    .subscribe());
        }
        int best = Collections.min(levels);
        try (Producer<byte[]> producer = client.newProducer().topic(topic)
                .enableBatching(false)
                .messageRoutingMode(MessageRoutingMode.RoundRobinPartition).create()) {
            for (int round = 1; round <= 2; round++) {
                for (int i = 0; i < count; i++) {
                    producer.send(payload(i, 0));
                }
                Thread.sleep(settleMs);
                for (int n = 0; n < consumers.size(); n++) {
                    if (consumers.get(n) == null) {
                        continue;
                    }
                    TreeSet<Integer> received = new TreeSet<>();
                    Message<byte[]> message;
                    while ((message = consumers.get(n).receive(500, TimeUnit.MILLISECONDS))
                            != null) {
                        String name = message.getTopicName();
                        received.add(Integer.parseInt(
                                name.substring(name.lastIndexOf("-partition-") + 11)));
                        consumers.get(n).acknowledge(message);
                    }
                    TreeSet<Integer> active = new TreeSet<>();
                    told.get(n).forEach((partition, on) -> {
                        if (on) {
                            active.add(partition);
                        }
                    });
                    System.out.println("{\"event\":\"failover\",\"round\":" + round
                            + ",\"consumer\":" + n + ",\"priority\":" + levels.get(n)
                            + ",\"active\":" + active + ",\"received\":" + received + "}");
                }
                for (int n = 0; round == 1 && n < consumers.size(); n++) {
                    if (levels.get(n) == best) {
                        consumers.get(n).close();
                        consumers.set(n, null);
                    }
                }
            }
        }
        for (Consumer<byte[]> consumer : consumers) {
            if (consumer != null) {
                consumer.close();
            }
        }
    }

    /** A JSON string literal. */
    static String quote(String text) {
        StringBuilder out = new StringBuilder("\"");
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                default -> {
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        return out.append('"').toString();
    }
}
