package dev.eddy.bench.flink;

/** An event that carries its Kafka record's timestamp, which the source sets after parsing. */
interface Timestamped {
    void setTimestamp(long timestamp);
}
