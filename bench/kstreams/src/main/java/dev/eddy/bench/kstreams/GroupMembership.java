package dev.eddy.bench.kstreams;

import java.time.Duration;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.streams.KafkaStreams;

/**
 * How the benchmark programs join and leave the consumer group. Kafka Streams does not leave
 * the group on a plain close (a restarting instance should get its tasks back), so the next run
 * with the same application id would wait a whole session timeout (45 s) for the old member to
 * expire. A static member (group.instance.id) that leaves on close avoids that wait.
 */
final class GroupMembership {
    private GroupMembership() {
    }

    /**
     * Makes the instance the static group member {@code memberId}, which {@link #close} can remove
     * from the group. Instances of one application id need different ids, or they fence each other.
     */
    static void configure(Properties props, String memberId) {
        props.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, memberId);
    }

    /** Closes {@code streams} and removes its members from the group. */
    static void close(KafkaStreams streams) {
        close(streams, true);
    }

    /**
     * Closes {@code streams}; with {@code leaveGroup} false its static member stays in the group
     * until {@code session.timeout.ms}, so that the same instance restarted within that time takes
     * its tasks back without a rebalance (a rolling bounce, bench/upgrade.py).
     */
    static void close(KafkaStreams streams, boolean leaveGroup) {
        streams.close(new KafkaStreams.CloseOptions().timeout(Duration.ofSeconds(30)).leaveGroup(leaveGroup));
    }
}
