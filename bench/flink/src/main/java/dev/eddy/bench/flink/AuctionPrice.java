package dev.eddy.bench.flink;

/** q4: an auction as {@link WinningBids} keeps it, with its highest valid bid price so far. */
public class AuctionPrice {
    public long category;
    public long dateTime;
    public long expires;
    /** The highest valid bid's price, null while the auction has none. */
    public Long price;

    public AuctionPrice() {}

    /** Whether a bid made at {@code dateTime} counts for this auction (both ends inclusive). */
    boolean valid(long bidDateTime) {
        return dateTime <= bidDateTime && bidDateTime <= expires;
    }
}
