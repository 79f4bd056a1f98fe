package dev.eddy.bench.kstreams;

import java.util.concurrent.atomic.LongAdder;

import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.streams.processor.StateRestoreListener;
import org.apache.kafka.streams.processor.StandbyUpdateListener;
import org.apache.kafka.streams.processor.TaskId;

/**
 * Records this instance applied from changelogs, as Kafka Streams reports them to its listeners:
 * {@code restored} by active tasks before they ran (a restore, {@code onBatchRestored}) and
 * {@code standbyApplied} by standby tasks keeping up ({@code onBatchLoaded}). bench/upgrade.py
 * reads both from the status file to say what a rolling bounce cost in restores.
 */
final class RestoreCounts implements StateRestoreListener, StandbyUpdateListener {
    private final LongAdder restored = new LongAdder();
    private final LongAdder standbyApplied = new LongAdder();

    long restored() {
        return restored.sum();
    }

    long standbyApplied() {
        return standbyApplied.sum();
    }

    @Override
    public void onRestoreStart(TopicPartition partition, String storeName, long startingOffset, long endingOffset) {
        System.err.printf("kstreams-wordcount: restoring %s %s from offset %d to %d%n", storeName, partition,
            startingOffset, endingOffset);
    }

    @Override
    public void onBatchRestored(TopicPartition partition, String storeName, long batchEndOffset, long numRestored) {
        restored.add(numRestored);
    }

    @Override
    public void onRestoreEnd(TopicPartition partition, String storeName, long totalRestored) {
        System.err.printf("kstreams-wordcount: restored %s %s: %d records%n", storeName, partition, totalRestored);
    }

    @Override
    public void onUpdateStart(TopicPartition partition, String storeName, long startingOffset) {
        // only the records applied matter here
    }

    @Override
    public void onBatchLoaded(TopicPartition partition, String storeName, TaskId taskId, long batchEndOffset,
                              long batchSize, long currentEndOffset) {
        standbyApplied.add(batchSize);
    }

    @Override
    public void onUpdateSuspended(TopicPartition partition, String storeName, long storeOffset, long currentEndOffset,
                                  SuspendReason reason) {
        // a standby promoted to active or moved away: nothing to count
    }
}
