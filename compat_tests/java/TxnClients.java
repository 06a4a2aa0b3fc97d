import java.nio.file.Files;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Transactional Kafka clients for groupgate's compatibility tests that need Kafka Streams 4.4.0; one JSON
 * object per stdout line. The helpers (producer, consumer, emit) are TxnRoundtrip's, the clients-only
 * program compiled against every release.
 *
 *   loop BOOTSTRAP TOPIC TXN_ID TXNS PER_TXN PAUSE_MS
 *       TXNS committed transactions, each paused PAUSE_MS halfway (announced by an "in_txn" line) so the
 *       test can break the connection mid-transaction; errors handled as the producer's javadoc says.
 *   streams BOOTSTRAP IN OUT APP_ID N
 *       N records into IN, then a processing.guarantee=exactly_once_v2 app copying IN to OUT in upper
 *       case; prints its state changes and what a read_committed consumer of OUT sees.
 */
public class TxnClients extends TxnRoundtrip {
    public static void main(String[] args) throws Exception {
        switch (args[0]) {
            case "loop" -> loop(args[1], args[2], args[3], Integer.parseInt(args[4]), Integer.parseInt(args[5]), Long.parseLong(args[6]));
            case "streams" -> streams(args[1], args[2], args[3], args[4], Integer.parseInt(args[5]));
            default -> throw new IllegalArgumentException(args[0]);
        }
    }

    static void loop(String bootstrap, String topic, String txnId, int txns, int perTxn, long pauseMs) throws Exception {
        KafkaProducer<String, String> p = producer(bootstrap, txnId);
        p.initTransactions();
        int k = 0;
        int attempt = 0;
        while (k < txns) {
            attempt++;
            try {
                p.beginTransaction();
                for (int i = 0; i < perTxn; i++) {
                    p.send(new ProducerRecord<>(topic, "t" + k, "t" + k + "-" + i));
                    if (i == perTxn / 2) {
                        p.flush();
                        emit("{\"name\":\"in_txn\",\"txn\":" + k + ",\"attempt\":" + attempt + "}");
                        Thread.sleep(pauseMs);
                    }
                }
                commit(p);
                emit("{\"name\":\"committed\",\"txn\":" + k + ",\"attempt\":" + attempt + "}");
                k++;
            } catch (ProducerFencedException | OutOfOrderSequenceException | AuthorizationException e) {
                // Fatal for this producer instance: a new one (same transactional id) aborts what was open.
                emit("{\"name\":\"fatal\",\"txn\":" + k + ",\"error\":" + str(e.toString()) + "}");
                p.close(Duration.ofSeconds(5));
                p = producer(bootstrap, txnId);
                p.initTransactions();
            } catch (KafkaException e) {
                emit("{\"name\":\"aborting\",\"txn\":" + k + ",\"error\":" + str(e.toString()) + "}");
                p.abortTransaction();
            }
        }
        p.close(Duration.ofSeconds(10));
        emit("{\"name\":\"done\"}");
    }

    /** commitTransaction may time out while the coordinator is out of reach; the same call is retried. */
    static void commit(KafkaProducer<String, String> p) {
        for (int tries = 0; ; tries++) {
            try {
                p.commitTransaction();
                return;
            } catch (TimeoutException e) {
                emit("{\"name\":\"commit_timeout\",\"error\":" + str(e.toString()) + "}");
                if (tries >= 5) {
                    throw e;
                }
            }
        }
    }

    static void streams(String bootstrap, String in, String out, String appId, int n) throws Exception {
        try (KafkaProducer<String, String> p = producer(bootstrap, appId + "-input")) {
            p.initTransactions();
            p.beginTransaction();
            for (int i = 0; i < n; i++) {
                p.send(new ProducerRecord<>(in, "k" + (i % 7), "v-" + i));
            }
            p.commitTransaction();
        }
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, "100");
        props.put(StreamsConfig.STATE_DIR_CONFIG, Files.createTempDirectory("txn-streams").toString());
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(in, Consumed.with(Serdes.String(), Serdes.String()))
                .mapValues(v -> v.toUpperCase())
                .to(out, Produced.with(Serdes.String(), Serdes.String()));
        List<String> states = Collections.synchronizedList(new ArrayList<>());
        CountDownLatch running = new CountDownLatch(1);
        KafkaStreams app = new KafkaStreams(builder.build(), props);
        app.setStateListener((now, before) -> {
            states.add(now.name());
            emit("{\"name\":\"state\",\"state\":" + str(now.name()) + "}");
            if (now == KafkaStreams.State.RUNNING) {
                running.countDown();
            }
        });
        app.setUncaughtExceptionHandler(e -> {
            emit("{\"name\":\"streams_error\",\"error\":" + str(e.toString()) + "}");
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        app.start();
        List<String> values = new ArrayList<>();
        try {
            running.await(60, TimeUnit.SECONDS);
            try (KafkaConsumer<String, String> c = consumer(bootstrap, "read_committed", null)) {
                List<TopicPartition> tps = c.partitionsFor(out, Duration.ofSeconds(30)).stream()
                        .map(pi -> new TopicPartition(out, pi.partition())).collect(Collectors.toList());
                c.assign(tps);
                c.seekToBeginning(tps);
                long deadline = System.currentTimeMillis() + 60_000;
                while (values.size() < n && System.currentTimeMillis() < deadline
                        && app.state() != KafkaStreams.State.ERROR) {
                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                        values.add(r.value());
                    }
                }
                // A little longer: anything past n would be a duplicate.
                long extra = System.currentTimeMillis() + 1_000;
                while (System.currentTimeMillis() < extra) {
                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                        values.add(r.value());
                    }
                }
            }
        } finally {
            String finalState = app.state().name();
            app.close(Duration.ofSeconds(20));
            Collections.sort(values);
            emit("{\"name\":\"result\",\"values\":" + strings(values) + ",\"states\":" + strings(new ArrayList<>(states))
                    + ",\"state_before_close\":" + str(finalState) + "}");
        }
    }
}
