package dev.eddy.bench.flink;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;

/**
 * q7, keyed by tumbling 10 s window start: the window's highest bid in the order (price,
 * dateTime, bidder, auction), written {@code {"window","price","dateTime","bidder","auction"}}
 * (key: the window start) each time a bid becomes the highest; that bid is the newest of the
 * window then, and stamps the record. The window is forgotten once the watermark has passed it;
 * a bid of a window already closed is dropped (none is late: each partition is in event-time
 * order).
 */
final class HighestBid extends KeyedProcessFunction<Long, Bid, KafkaRecord> {
    private transient ValueState<Bid> highest;

    @Override
    public void open(OpenContext context) {
        highest = getRuntimeContext().getState(new ValueStateDescriptor<>("highest", Bid.class));
    }

    @Override
    public void processElement(Bid bid, Context ctx, Collector<KafkaRecord> out) throws Exception {
        long window = ctx.getCurrentKey();
        if (Windows.lastMs(window) <= ctx.timerService().currentWatermark()) {
            return;
        }
        Bid best = highest.value();
        if (best == null) {
            ctx.timerService().registerEventTimeTimer(Windows.lastMs(window));
        } else if (!higher(bid, best)) {
            return;
        }
        highest.update(bid);
        String value = Json.object().put("window", window).put("price", bid.price).put("dateTime", bid.dateTime)
                .put("bidder", bid.bidder).put("auction", bid.auction).toString();
        out.collect(new KafkaRecord(Long.toString(window), value, bid.timestamp));
    }

    @Override
    public void onTimer(long timestamp, OnTimerContext ctx, Collector<KafkaRecord> out) {
        highest.clear();
    }

    /** Whether {@code a} ranks above {@code b}: a total order, so the highest bid does not depend
     *  on the order bids come in. */
    static boolean higher(Bid a, Bid b) {
        if (a.price != b.price) {
            return a.price > b.price;
        }
        if (a.dateTime != b.dateTime) {
            return a.dateTime > b.dateTime;
        }
        if (a.bidder != b.bidder) {
            return a.bidder > b.bidder;
        }
        return a.auction > b.auction;
    }
}
