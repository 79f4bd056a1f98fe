package dev.eddy.bench.flink;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.flink.client.deployment.executors.LocalExecutor;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.DeploymentOptions;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.runtime.execution.ExecutionState;
import org.apache.flink.runtime.executiongraph.AccessExecutionVertex;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.graph.StreamGraph;

/**
 * One job on a MiniCluster in this process, as {@code StreamExecutionEnvironment#executeAsync} of a
 * local environment runs it, keeping hold of the MiniCluster so as to see its tasks' states.
 */
final class LocalJob {
    private final MiniCluster cluster;
    private final JobClient client;
    private final CompletableFuture<?> result;

    private LocalJob(MiniCluster cluster, JobClient client) {
        this.cluster = cluster;
        this.client = client;
        this.result = client.getJobExecutionResult();
    }

    static LocalJob submit(StreamExecutionEnvironment env, Configuration settings, String name) throws Exception {
        Configuration conf = new Configuration(settings);
        // What a local environment sets: the client waits for the job's result.
        conf.set(DeploymentOptions.ATTACHED, true);
        AtomicReference<MiniCluster> made = new AtomicReference<>();
        LocalExecutor executor = LocalExecutor.createWithFactory(conf, config -> {
            MiniCluster cluster = new MiniCluster(config);
            made.set(cluster);
            return cluster;
        });
        StreamGraph graph = env.getStreamGraph();
        graph.setJobName(name);
        JobClient client = executor.execute(graph, conf, LocalJob.class.getClassLoader()).get();
        return new LocalJob(made.get(), client);
    }

    /** Waits until every task is RUNNING (its state restored and its operators open), the way
     *  Kafka Streams' RUNNING means processing can start. */
    void awaitRunning() throws Exception {
        while (true) {
            if (result().isDone()) {
                result().get();
                throw new IllegalStateException("the job ended before it ran");
            }
            boolean running = true;
            for (AccessExecutionVertex task : cluster.getExecutionGraph(client.getJobID()).get().getAllExecutionVertices()) {
                running &= task.getExecutionState() == ExecutionState.RUNNING;
            }
            if (running) {
                return;
            }
            Thread.sleep(10);
        }
    }

    /** Completes when the job ends: exceptionally if it failed or was cancelled. */
    CompletableFuture<?> result() {
        return result;
    }

    /** Cancels the job (its open Kafka transaction is aborted) and waits for it to end. */
    void cancel() throws Exception {
        if (result().isDone()) {
            return;
        }
        client.cancel().get(60, TimeUnit.SECONDS);
        try {
            result().get(60, TimeUnit.SECONDS);
        } catch (ExecutionException expected) {
            // a cancelled job's result is its cancellation
        }
    }
}
