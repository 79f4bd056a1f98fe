package dev.eddy.bench.flink;

/** q4: a bid whose auction has not come yet, as much of it as {@link WinningBids} needs then. */
public class WaitingBid {
    public long price;
    public long dateTime;
    /** The Kafka record's timestamp. */
    public long timestamp;

    public WaitingBid() {}

    WaitingBid(long price, long dateTime, long timestamp) {
        this.price = price;
        this.dateTime = dateTime;
        this.timestamp = timestamp;
    }
}
