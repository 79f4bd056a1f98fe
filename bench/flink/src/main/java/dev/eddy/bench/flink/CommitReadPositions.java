package dev.eddy.bench.flink;

import java.util.Map;
import java.util.NavigableMap;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.functions.RichMapFunction;
import org.apache.flink.api.common.state.CheckpointListener;
import org.apache.flink.runtime.state.FunctionInitializationContext;
import org.apache.flink.runtime.state.FunctionSnapshotContext;
import org.apache.flink.streaming.api.checkpoint.CheckpointedFunction;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;

/**
 * Chained right after a Kafka source, passing its records on: commits the source's read positions
 * ({@link ReadPositions}) to the consumer group as each checkpoint completes, which is what the
 * source's own commit-on-checkpoint does, without its delay. The source commits on its fetcher
 * thread, between two polls of its consumer, and a poll of an idle partition lasts 10 s
 * (KafkaPartitionSplitReader's fixed timeout in flink-connector-kafka 5.0.0-2.2; FLINK-40367 makes
 * it configurable later): the offsets of a topic's last records would reach the group up to 10 s
 * after they were processed, and bench/nexmark.py takes the group's commit of the input's end as
 * the end of a run. The source's own commit is turned off ({@link Topics}), so that its late
 * commits of older checkpoints cannot move the group's offsets back.
 */
final class CommitReadPositions<T> extends RichMapFunction<T, T> implements CheckpointedFunction, CheckpointListener {
    private final String bootstrap;
    private final String group;
    private final String topic;
    /** checkpoint id -> the positions when its barrier passed (touched by the task thread only) */
    private final NavigableMap<Long, Map<TopicPartition, OffsetAndMetadata>> pending = new TreeMap<>();
    private transient Admin admin;
    /** One thread, so that commits reach the group in checkpoint order. */
    private transient ExecutorService committer;

    CommitReadPositions(String bootstrap, String group, String topic) {
        this.bootstrap = bootstrap;
        this.group = group;
        this.topic = topic;
    }

    @Override
    public void open(OpenContext context) {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(AdminClientConfig.CLIENT_ID_CONFIG, group + "-" + topic + "-commits");
        admin = Admin.create(props);
        committer = Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r, "offset-commits-" + topic);
            t.setDaemon(true);
            return t;
        });
    }

    @Override
    public T map(T record) {
        return record;
    }

    @Override
    public void initializeState(FunctionInitializationContext context) {
        // Nothing to restore: a run starts from the earliest offset and does not recover.
    }

    @Override
    public void snapshotState(FunctionSnapshotContext context) {
        pending.put(context.getCheckpointId(), ReadPositions.of(topic));
    }

    @Override
    public void notifyCheckpointComplete(long checkpointId) {
        Map.Entry<Long, Map<TopicPartition, OffsetAndMetadata>> done = pending.floorEntry(checkpointId);
        if (done == null) {
            return;
        }
        pending.headMap(checkpointId, true).clear();
        Map<TopicPartition, OffsetAndMetadata> offsets = done.getValue();
        if (!offsets.isEmpty()) {
            committer.execute(() -> {
                try {
                    admin.alterConsumerGroupOffsets(group, offsets).all().get();
                } catch (Exception e) {
                    // As the source's own commit: a failed commit is retried by the next checkpoint's.
                    System.err.println("flink-nexmark: committing " + offsets + " for group " + group + " failed: " + e);
                }
            });
        }
    }

    @Override
    public void close() {
        if (committer != null) {
            committer.shutdownNow();
        }
        if (admin != null) {
            admin.close();
        }
    }
}
