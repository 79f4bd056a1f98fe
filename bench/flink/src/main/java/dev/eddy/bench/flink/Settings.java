package dev.eddy.bench.flink;

import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.CoreOptions;
import org.apache.flink.configuration.PipelineOptions;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.configuration.TaskManagerOptions;
import org.apache.flink.core.execution.CheckpointingMode;
import org.apache.flink.state.rocksdb.RocksDBOptions;

/**
 * The Flink configuration of a benchmark job, for the MiniCluster and the job alike (bench/README.md
 * says why each setting): one slot and parallelism 1 (one core, as Kafka Streams gets one stream
 * thread), exactly-once checkpoints every 100 ms (the peers commit every 100 ms), RocksDB with
 * incremental checkpoints (as nexmark/nexmark's Flink setup), everything under the state dir.
 */
final class Settings {
    static final Duration CHECKPOINT_INTERVAL = Duration.ofMillis(100);

    private Settings() {}

    /** {@code overrides} ({@code --config key=value}) are applied last, so they win. */
    static Configuration of(Path stateDir, Map<String, String> overrides) {
        Configuration conf = new Configuration();
        conf.set(CoreOptions.DEFAULT_PARALLELISM, 1);
        conf.set(TaskManagerOptions.NUM_TASK_SLOTS, 1);
        conf.set(CoreOptions.TMP_DIRS, stateDir.resolve("tmp").toString());

        conf.set(CheckpointingOptions.CHECKPOINTING_INTERVAL, CHECKPOINT_INTERVAL);
        conf.set(CheckpointingOptions.CHECKPOINTING_CONSISTENCY_MODE, CheckpointingMode.EXACTLY_ONCE);
        conf.set(CheckpointingOptions.CHECKPOINT_STORAGE, "filesystem");
        conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, stateDir.resolve("checkpoints").toUri().toString());
        conf.set(StateBackendOptions.STATE_BACKEND, "rocksdb");
        conf.set(CheckpointingOptions.INCREMENTAL_CHECKPOINTS, true);
        conf.set(RocksDBOptions.LOCAL_DIRECTORIES, stateDir.resolve("rocksdb").toString());

        // The functions keep no reference to a record they were handed (state is serialized into
        // RocksDB), which is when Flink's docs say object reuse is safe; it spares a copy per
        // record between chained operators.
        conf.set(PipelineOptions.OBJECT_REUSE, true);
        // A failure ends the run (the harness reports it) instead of restarting the job forever.
        conf.set(RestartStrategyOptions.RESTART_STRATEGY, "none");
        overrides.forEach(conf::setString);
        return conf;
    }
}
