package dev.eddy.bench.kstreams;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.time.Duration;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.atomic.LongAdder;
import java.util.stream.LongStream;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.LagInfo;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TaskMetadata;
import org.apache.kafka.streams.ThreadMetadata;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Repartitioned;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;

/**
 * The stateful word count, run by Kafka Streams with exactly-once (v2) and a 100 ms commit
 * interval: each input value is one word (the key is ignored), words are re-keyed through a
 * repartition topic, counted in a RocksDB store and every updated count goes to the output.
 *
 * <p>The topology is {@code groupBy(word).count()} written out as its parts
 * ({@code selectKey → repartition → groupByKey → count}) so that a counter can sit between the
 * repartition and the count: a record is "processed" once it reached the store. The program
 * stops after {@code --expected-records} records were counted and the counts they changed were
 * emitted (the record cache emits them at the next commit).
 *
 * <p>Latency: Kafka Streams carries an input record's timestamp through the repartition and
 * the count to the records the count emits, so a probe after the count computes
 * {@code now - timestamp} for every emitted update. With a producer that stamps records with
 * their send time (the default) that is the time from send to the count's output, including
 * the repartition hop, its transaction commit and the record cache; it excludes the commit of
 * the output itself. It measures latency only while the input is produced live: for records
 * that were in the topic before the program started it measures how long they waited.
 *
 * <p>One of several instances (bench/failover.py): {@code --expected-records 0} runs until stdin
 * is closed (then closes cleanly), {@code --instance NAME} makes the static group member
 * {@code APPID-bench-NAME} so that instances of one application id do not fence each other,
 * and {@code --status-file PATH} is rewritten every 100 ms with this instance's state, its active
 * and standby tasks and the records it counted, so that a caller can pick the instance holding
 * the most active tasks. Standby replicas and group timeouts come as {@code --config}.
 *
 * <p>A rolling bounce (bench/upgrade.py): {@code --keep-state true} keeps the state dir's stores
 * and checkpoints from the instance's previous run (no {@code cleanUp}), {@code --leave-group
 * false} closes without leaving the group (the static member keeps its tasks until
 * {@code session.timeout.ms}), and {@code --version 2} is the "new jar": the same topology with
 * one more, compatible step before the re-key (empty words dropped, surrounding blanks stripped:
 * the benchmark's words have neither, so the counts are the same). Store, repartition topic and
 * output keep their names, so version 2 takes over version 1's state and offsets. The status file
 * then also says the version, the records restored into active tasks and applied to standbys
 * (the restore and standby listeners), the instance's store lag and how many rebalances it saw.
 */
public final class WordCountBench {
    private static final String PROGRAM = "kstreams-wordcount";

    /** Time from the first input record read to the last update the count emitted. */
    private static final AtomicLong firstInputNanos = new AtomicLong();
    private static final LongAdder inputRecords = new LongAdder();
    private static final AtomicLong countedRecords = new AtomicLong();
    /** When the expected-th record reached the count, set by the stream thread that counted it. */
    private static volatile long allCountedNanos;
    private static volatile long lastOutputNanos;
    /** One sample array per probe instance (one per task), merged at the end. */
    private static final List<LatencyProbe> probes = new CopyOnWriteArrayList<>();

    private WordCountBench() {
    }

    public static void main(String[] argv) throws Exception {
        int status;
        try {
            status = run(BenchArgs.parse(argv, Set.of(
                "bootstrap", "input", "output", "app-id", "expected-records", "threads", "state-dir", "timeout-s",
                "instance", "status-file", "version", "keep-state", "leave-group")));
        } catch (IllegalArgumentException e) {
            Results.fail(PROGRAM, e.getMessage());
            status = 64;
        }
        System.exit(status);
    }

    private static int run(BenchArgs args) throws Exception {
        String bootstrap = args.required("bootstrap");
        String input = args.required("input");
        String output = args.required("output");
        String appId = args.required("app-id");
        long expected = args.longOption("expected-records", -1);
        if (expected < 0) {
            Results.fail(PROGRAM, "--expected-records must be a positive number (0: until stdin closes)");
            return 64;
        }
        boolean untilStdinCloses = expected == 0;
        String statusFile = args.optional("status-file", null);
        long threads = args.longOption("threads", 1);
        long timeoutS = args.longOption("timeout-s", 1800);
        long version = args.longOption("version", 1);
        if (version != 1 && version != 2) {
            Results.fail(PROGRAM, "--version must be 1 or 2");
            return 64;
        }
        boolean keepState = Boolean.parseBoolean(args.optional("keep-state", "false"));
        boolean leaveGroup = Boolean.parseBoolean(args.optional("leave-group", "true"));

        Properties adminProps = new Properties();
        adminProps.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(adminProps)) {
            int partitions = Topics.partitions(admin, input);
            if (partitions == 0) {
                Results.fail(PROGRAM, "input topic " + input + " does not exist");
                return 1;
            }
            // Created here rather than left to broker auto-creation, whose partition count
            // is the broker's default instead of the input's.
            if (Topics.partitions(admin, output) == 0) {
                Topics.ensure(admin, output, partitions);
            }
        }

        StreamsBuilder builder = new StreamsBuilder();
        KStream<byte[], String> words = builder.stream(input, Consumed.with(Serdes.ByteArray(), Serdes.String()))
            .peek((key, word) -> {
                firstInputNanos.compareAndSet(0, System.nanoTime());
                inputRecords.increment();
            });
        if (version == 2) {
            // The new version's changed step: stateless, before the re-key, so compatible.
            words = words.filter((key, word) -> word != null && !word.isBlank()).mapValues(word -> word.strip());
        }
        words
            .selectKey((key, word) -> word)
            .repartition(Repartitioned.with(Serdes.String(), Serdes.String()).withName("words"))
            .peek((word, same) -> {
                if (countedRecords.incrementAndGet() == expected) {
                    allCountedNanos = System.nanoTime();
                }
            })
            .groupByKey()
            .count(Materialized.as("counts"))
            .toStream()
            .processValues(LatencyProbe::new)
            .to(output, Produced.with(Serdes.String(), Serdes.Long()));

        StateDirs stateDir = StateDirs.of(args.optional("state-dir", null), "eddy-kstreams-wordcount-");
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.path().toString());
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, (int) threads);
        // The input is usually filled before the program starts.
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        GroupMembership.configure(props, appId + "-bench" + (args.optional("instance", null) == null
            ? "" : "-" + args.optional("instance", null)));
        args.applyConfigs(props);
        long commitMs = Long.parseLong(props.get(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG).toString());

        AtomicReference<Throwable> failure = new AtomicReference<>();
        KafkaStreams streams = new KafkaStreams(builder.build(props), props);
        if (!keepState) {
            streams.cleanUp();
        }
        RestoreCounts restores = new RestoreCounts();
        streams.setGlobalStateRestoreListener(restores);
        streams.setStandbyUpdateListener(restores);
        streams.setUncaughtExceptionHandler(e -> {
            failure.compareAndSet(null, e);
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        long createdNanos = System.nanoTime();
        // A live producer may start once "-> RUNNING" is on stderr; a later rebalance shows up
        // here too, which explains a stall in the latencies.
        LongAdder rebalances = new LongAdder();
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.REBALANCING) {
                rebalances.increment();
            }
            System.err.printf("%s: %.3f s: %s -> %s%n", PROGRAM, (System.nanoTime() - createdNanos) / 1e9, before, now);
        });

        // The update of the expected-th count is emitted right after it (no record cache) or at
        // the next commit (record cache); the run is over once an emission followed it and
        // emissions have then been quiet for two commit intervals (the cache's last flush).
        long quietNanos = Duration.ofMillis(Math.max(200, 2 * commitMs)).toNanos();
        long deadline = System.nanoTime() + Duration.ofSeconds(timeoutS).toNanos();
        boolean finished = false;
        Thread stdinWatch = new Thread(() -> drain(System.in), "stdin-watch");
        stdinWatch.setDaemon(true);
        streams.start();
        if (untilStdinCloses) {
            stdinWatch.start();
        }
        long nextStatus = 0;
        long nextLag = 0;
        long lag = -1;
        try {
            while (failure.get() == null && System.nanoTime() < deadline) {
                long now = System.nanoTime();
                if (statusFile != null && now >= nextStatus) {
                    if (now >= nextLag) {
                        lag = storeLag(streams);  // asks the broker for end offsets: not every 100 ms
                        nextLag = now + 500_000_000L;
                    }
                    writeStatus(Path.of(statusFile), streams, version, restores, lag, rebalances.sum());
                    nextStatus = now + 100_000_000L;
                }
                if (untilStdinCloses) {
                    if (!stdinWatch.isAlive()) {
                        finished = true;
                        break;
                    }
                    Thread.sleep(5);
                    continue;
                }
                long countedAt = allCountedNanos;
                long lastOut = lastOutputNanos;
                if (countedAt != 0 && lastOut > countedAt && now - lastOut > quietNanos) {
                    finished = true;
                    break;
                }
                Thread.sleep(5);
            }
        } finally {
            GroupMembership.close(streams, leaveGroup);
            stateDir.release();
        }
        if (failure.get() != null) {
            Results.fail(PROGRAM, "Kafka Streams failed: " + failure.get());
            return 1;
        }
        if (!finished && untilStdinCloses) {
            Results.fail(PROGRAM, "stdin was still open after " + timeoutS + " s");
            return 2;
        }
        if (!finished) {
            Results.fail(PROGRAM, "did not count " + expected + " records within " + timeoutS + " s: read "
                + inputRecords.sum() + ", counted " + countedRecords.get());
            return 2;
        }

        long[] latencies = probes.stream().flatMapToLong(LatencyProbe::samples).toArray();
        Arrays.sort(latencies);
        double seconds = lastOutputNanos == 0 ? 0 : (lastOutputNanos - firstInputNanos.get()) / 1e9;
        long counted = countedRecords.get();
        Map<String, Number> result = new LinkedHashMap<>();
        result.put("records", counted);
        result.put("seconds", seconds);
        result.put("records_per_s", seconds > 0 ? counted / seconds : 0.0);
        result.put("p50_ms", percentile(latencies, 0.50));
        result.put("p99_ms", percentile(latencies, 0.99));
        result.put("output_records", latencies.length);
        Results.print(result);
        return 0;
    }

    /** Reads {@code in} to its end (the caller closing our stdin is the signal to stop). */
    private static void drain(InputStream in) {
        byte[] buffer = new byte[256];
        try {
            while (in.read(buffer) >= 0) {
                // nothing: only the end matters
            }
        } catch (IOException e) {
            // a broken stdin is a closed one
        }
    }

    /** Records this instance's stores are behind their changelogs' ends (all local stores); -1 if unknown. */
    private static long storeLag(KafkaStreams streams) {
        try {
            return streams.allLocalStorePartitionLags().values().stream()
                .flatMap(byPartition -> byPartition.values().stream())
                .mapToLong(LagInfo::offsetLag)
                .sum();
        } catch (RuntimeException e) {
            return -1;  // not RUNNING or REBALANCING yet, or the broker did not answer
        }
    }

    /**
     * Replaces {@code path} with one JSON line: state, active and standby tasks, records read and
     * counted, the version, records restored and applied to standbys, store lag, rebalances seen.
     */
    private static void writeStatus(Path path, KafkaStreams streams, long version, RestoreCounts restores, long lag,
                                    long rebalances) throws IOException {
        StringBuilder active = new StringBuilder();
        StringBuilder standby = new StringBuilder();
        for (ThreadMetadata thread : streams.metadataForLocalThreads()) {
            for (TaskMetadata task : thread.activeTasks()) {
                active.append(active.length() == 0 ? "" : ",").append('"').append(task.taskId()).append('"');
            }
            for (TaskMetadata task : thread.standbyTasks()) {
                standby.append(standby.length() == 0 ? "" : ",").append('"').append(task.taskId()).append('"');
            }
        }
        String json = "{\"state\":\"" + streams.state() + "\",\"active\":[" + active + "],\"standby\":[" + standby
            + "],\"read\":" + inputRecords.sum() + ",\"counted\":" + countedRecords.get()
            + ",\"version\":" + version + ",\"restored\":" + restores.restored() + ",\"standby_applied\":"
            + restores.standbyApplied() + ",\"lag\":" + lag + ",\"rebalances\":" + rebalances + "}\n";
        Path tmp = path.resolveSibling(path.getFileName() + ".tmp");
        Files.writeString(tmp, json, StandardCharsets.UTF_8);
        Files.move(tmp, path, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
    }

    /** Nearest-rank percentile of sorted samples; -1 when there are none. */
    static long percentile(long[] sorted, double q) {
        if (sorted.length == 0) {
            return -1;
        }
        int rank = (int) Math.ceil(q * sorted.length);
        return sorted[Math.max(0, rank - 1)];
    }

    /** Records {@code now - record timestamp} of every count update and passes it on unchanged. */
    private static final class LatencyProbe implements FixedKeyProcessor<String, Long, Long> {
        private FixedKeyProcessorContext<String, Long> context;
        private long[] samples = new long[1 << 14];
        private int size;

        LatencyProbe() {
            probes.add(this);
        }

        @Override
        public void init(FixedKeyProcessorContext<String, Long> context) {
            this.context = context;
        }

        @Override
        public void process(FixedKeyRecord<String, Long> record) {
            long now = System.currentTimeMillis();
            if (size == samples.length) {
                samples = Arrays.copyOf(samples, samples.length * 2);
            }
            samples[size] = now - record.timestamp();
            size++;
            lastOutputNanos = System.nanoTime();
            context.forward(record);
        }

        /** Read after Kafka Streams closed (its threads joined), so no thread writes any more. */
        LongStream samples() {
            return Arrays.stream(samples, 0, size);
        }
    }
}
