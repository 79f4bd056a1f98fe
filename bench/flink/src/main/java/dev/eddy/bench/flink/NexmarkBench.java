package dev.eddy.bench.flink;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.Locale;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.stream.Stream;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;

/**
 * One Nexmark query ({@link Queries}) as a Flink job on a local MiniCluster in this process, for
 * bench/nexmark.py beside Kafka Streams' and Eddy's programs.
 *
 * <pre>
 *   NexmarkBench --bootstrap HOST:PORT --prefix P --output-prefix O --query qN --app-id ID
 *                [--state-dir DIR] [--config key=value]...
 * </pre>
 *
 * Reads the inputs from the earliest offset as consumer group ID, writes O-qN exactly-once
 * ({@link Settings}, {@link Topics}). Prints "flink-nexmark qN: S s: INITIALIZING -> RUNNING" on
 * stderr once every task runs, runs until stdin is closed, then cancels the job and prints one
 * JSON line on stdout. Exits 1 if the job fails.
 */
public final class NexmarkBench {
    private NexmarkBench() {}

    public static void main(String[] argv) throws Exception {
        Args args = Args.parse(argv, Set.of("bootstrap", "prefix", "output-prefix", "query", "app-id", "state-dir"));
        String query = args.required("query");
        String prefix = args.required("prefix");
        String output = args.optional("output-prefix", prefix) + "-" + query;
        String appId = args.required("app-id");
        String given = args.optional("state-dir", null);
        Path stateDir = given != null ? Path.of(given) : Files.createTempDirectory("flink-nexmark-");
        Files.createDirectories(stateDir);

        Configuration conf = Settings.of(stateDir.toAbsolutePath(), args.configs());
        StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(conf);
        new Queries(env, new Topics(args.required("bootstrap"), appId), prefix).add(query, output);

        long started = System.nanoTime();
        LocalJob job = LocalJob.submit(env, conf, "nexmark-" + query + "-" + appId);
        job.awaitRunning();
        System.err.printf(Locale.ROOT, "flink-nexmark %s: %.3f s: INITIALIZING -> RUNNING%n", query,
                (System.nanoTime() - started) / 1e9);

        CompletableFuture<Object> stop = new CompletableFuture<>();
        Thread stdin = new Thread(() -> {
            try (InputStream in = System.in) {
                while (in.read() >= 0) {
                    // the caller closes stdin when the input is processed
                }
            } catch (IOException e) {
                // closed either way
            }
            stop.complete(null);
        }, "stdin-watch");
        stdin.setDaemon(true);
        stdin.start();
        job.result().whenComplete((result, failure) -> stop.complete(failure));
        Object failure = stop.get();
        job.cancel();
        if (given == null) {
            deleteTree(stateDir);
        }
        if (failure != null) {
            System.err.println("flink-nexmark " + query + ": job failed: " + failure);
            System.exit(1);
        }
        System.out.printf(Locale.ROOT, "{\"query\":\"%s\",\"seconds\":%.3f}%n", query, (System.nanoTime() - started) / 1e9);
        System.exit(0);
    }

    private static void deleteTree(Path root) throws IOException {
        try (Stream<Path> paths = Files.walk(root)) {
            for (Path p : (Iterable<Path>) paths.sorted(Comparator.reverseOrder())::iterator) {
                Files.deleteIfExists(p);
            }
        }
    }
}
