package dev.eddy.bench.flink;

/** q4: the sum of one category's auctions' winning prices and the number of those auctions. */
public class CategoryTotal {
    public long sum;
    public long count;

    public CategoryTotal() {}
}
