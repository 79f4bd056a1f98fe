package dev.eddy.bench.kstreams;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;

/** The few topic look-ups and creations the benchmark programs do before Kafka Streams starts. */
final class Topics {
    private static final long TIMEOUT_S = 30;

    private Topics() {
    }

    /** Partition count of {@code topic}, or 0 when it does not exist. */
    static int partitions(Admin admin, String topic) throws InterruptedException, TimeoutException {
        try {
            return admin.describeTopics(List.of(topic)).allTopicNames().get(TIMEOUT_S, TimeUnit.SECONDS)
                .get(topic).partitions().size();
        } catch (ExecutionException e) {
            if (e.getCause() instanceof UnknownTopicOrPartitionException) {
                return 0;
            }
            throw new IllegalStateException("cannot describe topic " + topic, e.getCause());
        }
    }

    /**
     * Makes sure {@code topic} exists with {@code partitions} partitions (replication 1, the
     * benchmark broker has one node); an existing topic with another count is an error because
     * Kafka Streams would refuse the co-partitioning anyway, only later and less clearly.
     */
    static void ensure(Admin admin, String topic, int partitions) throws InterruptedException, TimeoutException {
        int existing = partitions(admin, topic);
        if (existing == 0) {
            try {
                admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1)))
                    .all().get(TIMEOUT_S, TimeUnit.SECONDS);
                return;
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof TopicExistsException)) {
                    throw new IllegalStateException("cannot create topic " + topic, e.getCause());
                }
                existing = partitions(admin, topic);
            }
        }
        if (existing != partitions) {
            throw new IllegalStateException(
                "topic " + topic + " has " + existing + " partitions, expected " + partitions);
        }
    }

    /** For each partition of {@code topic}: latest offset minus earliest offset. */
    static Map<TopicPartition, Long> spans(Admin admin, String topic, int partitions)
            throws InterruptedException, TimeoutException, ExecutionException {
        Map<TopicPartition, OffsetSpec> earliest = new HashMap<>();
        Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
        for (int p = 0; p < partitions; p++) {
            earliest.put(new TopicPartition(topic, p), OffsetSpec.earliest());
            latest.put(new TopicPartition(topic, p), OffsetSpec.latest());
        }
        Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> first =
            admin.listOffsets(earliest).all().get(TIMEOUT_S, TimeUnit.SECONDS);
        Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> last =
            admin.listOffsets(latest).all().get(TIMEOUT_S, TimeUnit.SECONDS);
        Map<TopicPartition, Long> spans = new HashMap<>();
        for (TopicPartition tp : earliest.keySet()) {
            spans.put(tp, last.get(tp).offset() - first.get(tp).offset());
        }
        return spans;
    }
}
