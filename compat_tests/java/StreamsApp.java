// A minimal Kafka Streams application for the compatibility suite: upper-cases every record of an input
// topic into an output topic. Arguments: bootstrap application-id input output state-dir [group-protocol]
// [leave]. Prints "STATE <new>" on every state change and "PROCESSED <n>" as records go through; stops on
// SIGTERM, leaving the group on close when the last argument is "leave" (KIP-1153's CloseOptions: a
// classic member otherwise stays until its session times out).
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;

public class StreamsApp {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
        props.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, args.length > 5 ? args[5] : "streams");
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        props.put("consumer.auto.offset.reset", "earliest");

        AtomicLong processed = new AtomicLong();
        StreamsBuilder builder = new StreamsBuilder();
        builder.<String, String>stream(args[2])
            .mapValues(v -> v.toUpperCase())
            .peek((k, v) -> System.out.println("PROCESSED " + processed.incrementAndGet()))
            .to(args[3]);

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch done = new CountDownLatch(1);
        streams.setStateListener((now, before) -> System.out.println("STATE " + now));
        boolean leave = args.length > 6 && args[6].equals("leave");
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            if (leave) {
                streams.close(CloseOptions.groupMembershipOperation(CloseOptions.GroupMembershipOperation.LEAVE_GROUP));
            } else {
                streams.close();
            }
            done.countDown();
        }));
        streams.start();
        done.await();
    }
}
