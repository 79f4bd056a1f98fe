package dev.eddy.bench.flink;

/**
 * q4: an auction's highest valid bid price has risen from {@code old} (null: it had no valid bid)
 * to {@code price}, as of the newest input record behind the change.
 */
public class WinningBid {
    public long auction;
    public long category;
    public long price;
    public Long old;
    public long timestamp;

    public WinningBid() {}

    WinningBid(long auction, long category, long price, Long old, long timestamp) {
        this.auction = auction;
        this.category = category;
        this.price = price;
        this.old = old;
        this.timestamp = timestamp;
    }
}
