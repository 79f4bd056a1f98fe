package dev.eddy.bench.flink;

/** q5: an auction's number of bids so far in one hopping window, as of the newest of them. */
public class AuctionCount {
    public long window;
    public long auction;
    public long count;
    public long timestamp;

    public AuctionCount() {}

    AuctionCount(long window, long auction, long count, long timestamp) {
        this.window = window;
        this.auction = auction;
        this.count = count;
        this.timestamp = timestamp;
    }
}
