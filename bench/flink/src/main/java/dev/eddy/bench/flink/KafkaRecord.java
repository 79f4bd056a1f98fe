package dev.eddy.bench.flink;

/**
 * A Kafka record as the queries read raw input (q0-q2) and write output: key, JSON value as
 * text, and timestamp. An output record's timestamp is the newest input record it came from
 * (the bid itself, the later of a join's two records, a window's newest bid): the latency phase
 * of bench/nexmark.py measures from it.
 */
public class KafkaRecord {
    public String key;
    public String value;
    public long timestamp;

    public KafkaRecord() {}

    public KafkaRecord(String key, String value, long timestamp) {
        this.key = key;
        this.value = value;
        this.timestamp = timestamp;
    }
}
