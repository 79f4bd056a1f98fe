package dev.eddy.bench.flink;

/** A Nexmark bid as the generator writes it without its padding, {@code extra}. */
public class Bid implements Timestamped {
    public long auction;
    public long bidder;
    public long price;
    public long dateTime;
    /** The Kafka record's timestamp, set by the source. */
    public long timestamp;

    public Bid() {}

    @Override
    public void setTimestamp(long timestamp) {
        this.timestamp = timestamp;
    }
}
