package dev.eddy.bench.flink;

import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;

/**
 * How far this process's Kafka sources have read: per partition, the offset after the last record
 * deserialized. The deserializers advance it in the source's task thread, so a chained
 * {@link CommitReadPositions} that copies it when a checkpoint's barrier passes sees exactly the
 * positions that checkpoint holds. One job runs per process (parallelism 1), so one map serves all.
 */
final class ReadPositions {
    private static final Map<TopicPartition, Long> NEXT = new ConcurrentHashMap<>();

    private ReadPositions() {}

    static void advance(ConsumerRecord<?, ?> record) {
        NEXT.put(new TopicPartition(record.topic(), record.partition()), record.offset() + 1);
    }

    /** The positions in {@code topic}, as offsets to commit. */
    static Map<TopicPartition, OffsetAndMetadata> of(String topic) {
        Map<TopicPartition, OffsetAndMetadata> out = new HashMap<>();
        NEXT.forEach((tp, next) -> {
            if (tp.topic().equals(topic)) {
                out.put(tp, new OffsetAndMetadata(next));
            }
        });
        return out;
    }
}
