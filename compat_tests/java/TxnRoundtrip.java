import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.stream.Collectors;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * A transactional producer and read_committed / read_uncommitted consumers using kafka-clients alone
 * (the API of 2.5 and later), so the same program is compiled against each release the compatibility
 * suite runs: 4.4.0, 3.9.1 and 2.8.2. One JSON object per stdout line.
 *
 *   roundtrip BOOTSTRAP TOPIC TXN_ID GROUP TXNS PER_TXN
 *       TXNS transactions of PER_TXN records each, every third one aborted, each also committing an
 *       offset for GROUP (sendOffsetsToTransaction); then what read_committed and read_uncommitted
 *       consumers see, and GROUP's committed offset.
 *
 * Its helpers are shared with TxnClients (Streams and the restart loop), compiled with this class on
 * its classpath.
 */
public class TxnRoundtrip {
    public static void main(String[] args) throws Exception {
        if (!args[0].equals("roundtrip")) {
            throw new IllegalArgumentException(args[0]);
        }
        roundtrip(args[1], args[2], args[3], args[4], Integer.parseInt(args[5]), Integer.parseInt(args[6]));
    }

    static void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    static String str(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", " ") + "\"";
    }

    static String strings(List<String> values) {
        return values.stream().map(TxnRoundtrip::str).collect(Collectors.joining(",", "[", "]"));
    }

    static KafkaProducer<String, String> producer(String bootstrap, String txnId) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        return new KafkaProducer<>(p);
    }

    static KafkaConsumer<String, String> consumer(String bootstrap, String isolation, String group) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        if (group != null) {
            p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        }
        return new KafkaConsumer<>(p);
    }

    /** Every record of ``topic`` up to the end a consumer of this isolation level sees (the LSO for read_committed). */
    static List<String> readAll(String bootstrap, String topic, String isolation) {
        try (KafkaConsumer<String, String> c = consumer(bootstrap, isolation, null)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo pi : c.partitionsFor(topic, Duration.ofSeconds(30))) {
                tps.add(new TopicPartition(topic, pi.partition()));
            }
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps, Duration.ofSeconds(30));
            List<String> values = new ArrayList<>();
            long deadline = System.currentTimeMillis() + 60_000;
            while (tps.stream().anyMatch(tp -> c.position(tp, Duration.ofSeconds(30)) < end.get(tp))) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("did not reach the end offsets " + end);
                }
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    values.add(r.value());
                }
            }
            return values;
        }
    }

    static void roundtrip(String bootstrap, String topic, String txnId, String group, int txns, int perTxn) {
        TopicPartition offsetsFor = new TopicPartition(topic, 0);
        try (KafkaProducer<String, String> p = producer(bootstrap, txnId);
             KafkaConsumer<String, String> member = consumer(bootstrap, "read_committed", group)) {
            // The group's metadata as a consumer that has not joined reports it (generation -1, no member id).
            ConsumerGroupMetadata groupMetadata = member.groupMetadata();
            p.initTransactions();
            for (int k = 0; k < txns; k++) {
                p.beginTransaction();
                for (int i = 0; i < perTxn; i++) {
                    p.send(new ProducerRecord<>(topic, "t" + k, "t" + k + "-" + i));
                }
                // The offset committed with transaction k is 1000 + k: only committed ones may stick.
                p.sendOffsetsToTransaction(
                        Map.of(offsetsFor, new OffsetAndMetadata(1000 + k)), groupMetadata);
                if (k % 3 == 2) {
                    p.flush(); // abortTransaction drops what is still unsent; these are to be written, then aborted
                    p.abortTransaction();
                    emit("{\"name\":\"aborted\",\"txn\":" + k + "}");
                } else {
                    p.commitTransaction();
                    emit("{\"name\":\"committed\",\"txn\":" + k + "}");
                }
            }
        }
        List<String> committed = readAll(bootstrap, topic, "read_committed");
        List<String> uncommitted = readAll(bootstrap, topic, "read_uncommitted");
        long groupOffset = -1;
        try (KafkaConsumer<String, String> c = consumer(bootstrap, "read_committed", group)) {
            Map<TopicPartition, OffsetAndMetadata> got = c.committed(Set.of(offsetsFor), Duration.ofSeconds(30));
            OffsetAndMetadata o = got.get(offsetsFor);
            if (o != null) {
                groupOffset = o.offset();
            }
        }
        Collections.sort(committed);
        emit("{\"name\":\"result\",\"read_committed\":" + strings(committed) + ",\"read_uncommitted_count\":"
                + uncommitted.size() + ",\"group_offset\":" + groupOffset + "}");
    }

}
