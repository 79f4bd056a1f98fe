package dev.eddy.bench.kstreams;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.processor.StateRestoreListener;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.StoreBuilder;
import org.apache.kafka.streams.state.Stores;

/**
 * How fast Kafka Streams rebuilds a RocksDB key-value store from its changelog.
 *
 * <p>Kafka Streams names a store's changelog {@code <app-id>-<store>-changelog}. The caller
 * fills that topic; this program declares the store (bytes keys and values, logging on) on a
 * processor over an empty input topic with as many partitions, so each task owns one changelog
 * partition and restores it into an empty state directory. A {@link StateRestoreListener} times
 * the first restore start to the last restore end and sums the restored records.
 */
public final class RestoreBench {
    private static final String PROGRAM = "kstreams-restore";

    private RestoreBench() {
    }

    public static void main(String[] argv) throws Exception {
        int status;
        try {
            status = run(BenchArgs.parse(argv, Set.of("bootstrap", "changelog-topic", "app-id", "state-dir", "timeout-s")));
        } catch (IllegalArgumentException e) {
            Results.fail(PROGRAM, e.getMessage());
            status = 64;
        }
        System.exit(status);
    }

    private static int run(BenchArgs args) throws Exception {
        String bootstrap = args.required("bootstrap");
        String appId = args.required("app-id");
        String changelog = args.required("changelog-topic");
        String prefix = appId + "-";
        String suffix = "-changelog";
        if (!changelog.startsWith(prefix) || !changelog.endsWith(suffix)
                || changelog.length() <= prefix.length() + suffix.length()) {
            Results.fail(PROGRAM, "--changelog-topic must be <app-id>-<store>-changelog, got " + changelog);
            return 64;
        }
        String store = changelog.substring(prefix.length(), changelog.length() - suffix.length());
        String input = appId + "-restore-input";
        long timeoutS = args.longOption("timeout-s", 1800);

        int partitions;
        long toRestore = 0;
        int nonEmpty = 0;
        Properties adminProps = new Properties();
        adminProps.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(adminProps)) {
            partitions = Topics.partitions(admin, changelog);
            if (partitions == 0) {
                Results.fail(PROGRAM, "changelog topic " + changelog + " does not exist");
                return 1;
            }
            Topics.ensure(admin, input, partitions);
            for (long span : Topics.spans(admin, changelog, partitions).values()) {
                toRestore += span;
                if (span > 0) {
                    nonEmpty++;
                }
            }
        }
        System.err.printf("%s: store %s, changelog %s: %d partitions (%d not empty), %d offsets%n",
            PROGRAM, store, changelog, partitions, nonEmpty, toRestore);

        StoreBuilder<KeyValueStore<Bytes, byte[]>> storeBuilder = Stores
            .keyValueStoreBuilder(Stores.persistentKeyValueStore(store), Serdes.Bytes(), Serdes.ByteArray())
            .withLoggingEnabled(Map.of());
        Topology topology = new Topology();
        topology.addSource("input", Serdes.Bytes().deserializer(), Serdes.ByteArray().deserializer(), input);
        topology.addProcessor("holder", () -> new Processor<Bytes, byte[], Void, Void>() {
            @Override
            public void process(Record<Bytes, byte[]> record) {
                // The input stays empty: the store exists only to be restored.
            }
        }, "input");
        topology.addStateStore(storeBuilder, "holder");

        // A state dir without checkpoints (see StateDirs) makes every run a restore from offset 0.
        StateDirs stateDir = StateDirs.of(args.optional("state-dir", null), "eddy-kstreams-restore-");
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.path().toString());
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        GroupMembership.configure(props, appId + "-bench");
        args.applyConfigs(props);

        RestoreTimer timer = new RestoreTimer(nonEmpty);
        AtomicReference<Throwable> failure = new AtomicReference<>();
        KafkaStreams streams = new KafkaStreams(topology, props);
        streams.cleanUp();
        streams.setGlobalStateRestoreListener(timer);
        streams.setUncaughtExceptionHandler(e -> {
            failure.compareAndSet(null, e);
            timer.abort();
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        streams.start();
        boolean finished;
        try {
            finished = timer.await(timeoutS);
        } finally {
            GroupMembership.close(streams);
            stateDir.release();
        }
        if (failure.get() != null) {
            Results.fail(PROGRAM, "Kafka Streams failed: " + failure.get());
            return 1;
        }
        if (!finished) {
            Results.fail(PROGRAM, "restore did not end within " + timeoutS + " s: "
                + timer.ended() + " of " + nonEmpty + " partitions done, " + timer.records() + " records");
            return 2;
        }
        double seconds = timer.seconds();
        Map<String, Number> result = new LinkedHashMap<>();
        result.put("records", timer.records());
        result.put("seconds", seconds);
        result.put("records_per_s", seconds > 0 ? timer.records() / seconds : 0.0);
        Results.print(result);
        return 0;
    }

    /**
     * Times the restores of all changelog partitions. Empty partitions never start a restore,
     * so the timer waits for as many ends as there are partitions with records.
     */
    private static final class RestoreTimer implements StateRestoreListener {
        private final int partitionsToRestore;
        private final CountDownLatch pending;
        private final AtomicLong firstStartNanos = new AtomicLong();
        private final AtomicLong lastEndNanos = new AtomicLong();
        private final AtomicLong records = new AtomicLong();
        private volatile boolean aborted;

        RestoreTimer(int partitionsToRestore) {
            this.partitionsToRestore = partitionsToRestore;
            this.pending = new CountDownLatch(partitionsToRestore);
        }

        @Override
        public void onRestoreStart(TopicPartition partition, String storeName, long startingOffset, long endingOffset) {
            firstStartNanos.compareAndSet(0, System.nanoTime());
        }

        @Override
        public void onBatchRestored(TopicPartition partition, String storeName, long batchEndOffset, long numRestored) {
        }

        @Override
        public void onRestoreEnd(TopicPartition partition, String storeName, long totalRestored) {
            records.addAndGet(totalRestored);
            lastEndNanos.accumulateAndGet(System.nanoTime(), Math::max);
            pending.countDown();
        }

        /** True when every partition ended its restore, false on timeout or failure. */
        boolean await(long timeoutS) throws InterruptedException {
            return pending.await(timeoutS, TimeUnit.SECONDS) && !aborted;
        }

        /** Wakes {@link #await} when Kafka Streams died, so the failure is reported at once. */
        void abort() {
            aborted = true;
            while (pending.getCount() > 0) {
                pending.countDown();
            }
        }

        long ended() {
            return partitionsToRestore - pending.getCount();
        }

        long records() {
            return records.get();
        }

        double seconds() {
            return firstStartNanos.get() == 0 ? 0.0 : (lastEndNanos.get() - firstStartNanos.get()) / 1e9;
        }
    }
}
