package dev.eddy.bench.flink;

/** A Nexmark auction, with the fields the queries read (Json ignores the others). */
public class Auction implements Timestamped {
    public long id;
    public long reserve;
    public long dateTime;
    public long seller;
    public long category;
    public long expires;
    /** The Kafka record's timestamp, set by the source. */
    public long timestamp;

    public Auction() {}

    @Override
    public void setTimestamp(long timestamp) {
        this.timestamp = timestamp;
    }
}
