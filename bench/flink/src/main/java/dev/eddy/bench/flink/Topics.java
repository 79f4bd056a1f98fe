package dev.eddy.bench.flink;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Optional;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.kafka.lineage.DefaultKafkaDatasetFacet;
import org.apache.flink.connector.kafka.lineage.DefaultKafkaDatasetIdentifier;
import org.apache.flink.connector.kafka.lineage.KafkaDatasetFacet;
import org.apache.flink.connector.kafka.lineage.KafkaDatasetFacetProvider;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.connector.kafka.sink.TransactionNamingStrategy;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.KafkaSourceOptions;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.util.Collector;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;

/**
 * The Kafka sources and the sink of one application: every source reads from the earliest offset;
 * its read positions go to the consumer group {@code appId} when a checkpoint completes (how
 * bench/nexmark.py sees that the input is processed), committed by {@link #committed}; the sink
 * writes in Kafka transactions that commit with the checkpoints (exactly-once), under
 * transactional ids prefixed {@code appId}.
 */
final class Topics {
    /** Below the broker's transaction.max.timeout.ms (15 min by default); a transaction lives one
     *  checkpoint, 100 ms, so this only bounds how long a crashed run's open transaction holds
     *  back read_committed readers. */
    private static final String TRANSACTION_TIMEOUT_MS = "60000";

    private final String bootstrap;
    private final String appId;

    Topics(String bootstrap, String appId) {
        this.bootstrap = bootstrap;
        this.appId = appId;
    }

    /** The topic's records as they are: key, value text and timestamp. */
    KafkaSource<KafkaRecord> records(String topic) {
        return source(topic, new RecordDeserializer());
    }

    /** The topic's JSON values parsed as {@code type}, each stamped with its record's timestamp. */
    <T extends Timestamped> KafkaSource<T> events(String topic, Class<T> type) {
        return source(topic, new EventDeserializer<>(type));
    }

    private <T> KafkaSource<T> source(String topic, KafkaRecordDeserializationSchema<T> deserializer) {
        return KafkaSource.<T>builder()
                .setBootstrapServers(bootstrap)
                .setTopics(topic)
                .setGroupId(appId)
                // Two sources of one application need client ids of their own.
                .setClientIdPrefix(appId + "-" + topic)
                .setStartingOffsets(OffsetsInitializer.earliest())
                .setDeserializer(deserializer)
                // CommitReadPositions commits instead, without the source's delay (it says why).
                .setProperty(KafkaSourceOptions.COMMIT_OFFSETS_ON_CHECKPOINT.key(), "false")
                .build();
    }

    /** Passes the records of {@code topic}'s source on and commits its read positions with each
     *  checkpoint; chain it right after the source. */
    <T> CommitReadPositions<T> committed(String topic) {
        return new CommitReadPositions<>(bootstrap, appId, topic);
    }

    KafkaSink<KafkaRecord> sink(String topic) {
        return KafkaSink.<KafkaRecord>builder()
                .setBootstrapServers(bootstrap)
                .setRecordSerializer(new RecordSerializer(topic))
                .setDeliveryGuarantee(DeliveryGuarantee.EXACTLY_ONCE)
                .setTransactionalIdPrefix(appId)
                // A transaction per 100 ms checkpoint: the default naming (INCREMENTING) takes a new
                // transactional id for each, which the broker keeps for 7 days; POOLING reuses a few.
                .setTransactionNamingStrategy(TransactionNamingStrategy.POOLING)
                .setProperty("transaction.timeout.ms", TRANSACTION_TIMEOUT_MS)
                .build();
    }

    private static final class RecordDeserializer implements KafkaRecordDeserializationSchema<KafkaRecord> {
        @Override
        public void deserialize(ConsumerRecord<byte[], byte[]> r, Collector<KafkaRecord> out) {
            out.collect(new KafkaRecord(text(r.key()), text(r.value()), r.timestamp()));
            ReadPositions.advance(r);
        }

        @Override
        public TypeInformation<KafkaRecord> getProducedType() {
            return TypeInformation.of(KafkaRecord.class);
        }
    }

    private static final class EventDeserializer<T extends Timestamped> implements KafkaRecordDeserializationSchema<T> {
        private final Class<T> type;

        EventDeserializer(Class<T> type) {
            this.type = type;
        }

        @Override
        public void deserialize(ConsumerRecord<byte[], byte[]> r, Collector<T> out) throws IOException {
            T event = Json.read(r.value(), type);
            event.setTimestamp(r.timestamp());
            out.collect(event);
            ReadPositions.advance(r);
        }

        @Override
        public TypeInformation<T> getProducedType() {
            return TypeInformation.of(type);
        }
    }

    /** Names its topic (KafkaDatasetFacetProvider): POOLING lists the open transactions by topic. */
    private static final class RecordSerializer
            implements KafkaRecordSerializationSchema<KafkaRecord>, KafkaDatasetFacetProvider {
        private final String topic;

        RecordSerializer(String topic) {
            this.topic = topic;
        }

        @Override
        public ProducerRecord<byte[], byte[]> serialize(KafkaRecord r, KafkaSinkContext context, Long timestamp) {
            // The record's own timestamp, not the stream element's (a window's or join's output
            // element carries Flink's, which is not the newest input's).
            return new ProducerRecord<>(topic, null, r.timestamp, bytes(r.key), bytes(r.value));
        }

        @Override
        public Optional<KafkaDatasetFacet> getKafkaDatasetFacet() {
            return Optional.of(new DefaultKafkaDatasetFacet(DefaultKafkaDatasetIdentifier.ofTopics(List.of(topic))));
        }
    }

    private static String text(byte[] bytes) {
        return bytes == null ? null : new String(bytes, StandardCharsets.UTF_8);
    }

    private static byte[] bytes(String text) {
        return text == null ? null : text.getBytes(StandardCharsets.UTF_8);
    }
}
