package dev.eddy.bench.flink;

/** q5: the largest count of one window so far and the auctions that have it (sorted). */
public class Hottest {
    public long count;
    public long[] auctions;

    public Hottest() {}
}
