package dev.eddy.bench.flink;

/**
 * Nexmark's windows (Beam's defaults, as bench/nexmark/nexmark_reference.py has them): tumbling
 * windows of 10 s, and hopping windows of 10 s every 5 s, both aligned to the epoch.
 */
final class Windows {
    static final long SIZE_MS = 10_000;
    static final long PERIOD_MS = 5_000;

    private Windows() {}

    static long tumblingStart(long timestamp) {
        return timestamp - timestamp % SIZE_MS;
    }

    /** The starts of the hopping windows {@code [start, start + 10 s)} that hold {@code timestamp}. */
    static long[] hoppingStarts(long timestamp) {
        long last = timestamp - timestamp % PERIOD_MS;
        long first = last - SIZE_MS + PERIOD_MS;
        return first < 0 ? new long[] {last} : new long[] {first, last};
    }

    /** The last millisecond of the window that starts at {@code start}: once the watermark has
     *  passed it, no record of the window can still come. */
    static long lastMs(long start) {
        return start + SIZE_MS - 1;
    }
}
