package dev.eddy.bench.flink;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.Arrays;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;

/**
 * q5, second step, keyed by window start: the largest count of the window and the auctions that
 * have it, written {@code {"window","count","auctions"}} (key: the window start) each time it
 * changes, stamped with the count's bid, the newest of the window. An auction's count only grows,
 * so a count above the largest replaces the auctions and one equal to it joins them. The window is
 * forgotten once the watermark has passed it.
 */
final class HottestAuctions extends KeyedProcessFunction<Long, AuctionCount, KafkaRecord> {
    private transient ValueState<Hottest> hottest;

    @Override
    public void open(OpenContext context) {
        hottest = getRuntimeContext().getState(new ValueStateDescriptor<>("hottest", Hottest.class));
    }

    @Override
    public void processElement(AuctionCount update, Context ctx, Collector<KafkaRecord> out) throws Exception {
        Hottest hot = hottest.value();
        if (hot == null) {
            hot = new Hottest();
            hot.auctions = new long[0];
            ctx.timerService().registerEventTimeTimer(Windows.lastMs(update.window));
        }
        if (update.count > hot.count) {
            hot.count = update.count;
            hot.auctions = new long[] {update.auction};
        } else if (update.count == hot.count) {
            int at = Arrays.binarySearch(hot.auctions, update.auction);
            if (at >= 0) {
                return;
            }
            long[] more = new long[hot.auctions.length + 1];
            int insert = -at - 1;
            System.arraycopy(hot.auctions, 0, more, 0, insert);
            more[insert] = update.auction;
            System.arraycopy(hot.auctions, insert, more, insert + 1, hot.auctions.length - insert);
            hot.auctions = more;
        } else {
            return;
        }
        hottest.update(hot);
        ObjectNode value = Json.object().put("window", update.window).put("count", hot.count);
        ArrayNode auctions = value.putArray("auctions");
        for (long auction : hot.auctions) {
            auctions.add(auction);
        }
        out.collect(new KafkaRecord(Long.toString(update.window), value.toString(), update.timestamp));
    }

    @Override
    public void onTimer(long timestamp, OnTimerContext ctx, Collector<KafkaRecord> out) {
        hottest.clear();
    }
}
