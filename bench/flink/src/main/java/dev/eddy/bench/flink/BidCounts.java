package dev.eddy.bench.flink;

import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;

/**
 * q5, first step, keyed by auction: the auction's bids counted per hopping window (10 s every
 * 5 s); every new count goes on to {@link HottestAuctions}. A window's count is dropped once the
 * watermark has passed the window (no bid is late: each partition is in event-time order; one
 * that were would be dropped, as Kafka Streams' windows with no grace drop it).
 */
final class BidCounts extends KeyedProcessFunction<Long, Bid, AuctionCount> {
    /** window start -> bids of this auction in it */
    private transient MapState<Long, Long> counts;

    @Override
    public void open(OpenContext context) {
        counts = getRuntimeContext().getMapState(new MapStateDescriptor<>("bids-per-window", Long.class, Long.class));
    }

    @Override
    public void processElement(Bid bid, Context ctx, Collector<AuctionCount> out) throws Exception {
        long watermark = ctx.timerService().currentWatermark();
        for (long window : Windows.hoppingStarts(bid.timestamp)) {
            if (Windows.lastMs(window) <= watermark) {
                continue;
            }
            Long before = counts.get(window);
            if (before == null) {
                ctx.timerService().registerEventTimeTimer(Windows.lastMs(window));
            }
            long count = before == null ? 1 : before + 1;
            counts.put(window, count);
            out.collect(new AuctionCount(window, bid.auction, count, bid.timestamp));
        }
    }

    @Override
    public void onTimer(long timestamp, OnTimerContext ctx, Collector<AuctionCount> out) throws Exception {
        counts.remove(timestamp - Windows.SIZE_MS + 1);
    }
}
