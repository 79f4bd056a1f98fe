package dev.eddy.bench.flink;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.streaming.api.functions.co.KeyedCoProcessFunction;
import org.apache.flink.util.Collector;

/**
 * q4, first step, keyed by auction id: the auction's highest valid bid price (a bid is valid if
 * {@code auction.dateTime <= bid.dateTime <= auction.expires}), a {@link WinningBid} going on to
 * {@link CategoryAverages} each time it rises (stamped with that bid). Bids that come before their
 * auction (the generator makes bids for auctions up to 10 ahead, and Flink may read one topic
 * ahead of the other) wait for it as (price, dateTime); when it comes, the highest valid of them
 * is one update, stamped with the newest record behind it, the auction's. The state is kept for
 * good, as the regular join of Nexmark's SQL q4 keeps it.
 */
final class WinningBids extends KeyedCoProcessFunction<Long, Auction, Bid, WinningBid> {
    private transient ValueState<AuctionPrice> auctions;
    private transient ListState<WaitingBid> waiting;

    @Override
    public void open(OpenContext context) {
        auctions = getRuntimeContext().getState(new ValueStateDescriptor<>("auction-price", AuctionPrice.class));
        waiting = getRuntimeContext().getListState(new ListStateDescriptor<>("waiting-bids", WaitingBid.class));
    }

    @Override
    public void processElement1(Auction auction, Context ctx, Collector<WinningBid> out) throws Exception {
        AuctionPrice state = new AuctionPrice();
        state.category = auction.category;
        state.dateTime = auction.dateTime;
        state.expires = auction.expires;
        long timestamp = auction.timestamp;
        for (WaitingBid bid : waiting.get()) {
            if (state.valid(bid.dateTime) && (state.price == null || bid.price > state.price)) {
                state.price = bid.price;
                timestamp = Math.max(timestamp, bid.timestamp);
            }
        }
        waiting.clear();
        auctions.update(state);
        if (state.price != null) {
            out.collect(new WinningBid(auction.id, state.category, state.price, null, timestamp));
        }
    }

    @Override
    public void processElement2(Bid bid, Context ctx, Collector<WinningBid> out) throws Exception {
        AuctionPrice state = auctions.value();
        if (state == null) {
            waiting.add(new WaitingBid(bid.price, bid.dateTime, bid.timestamp));
            return;
        }
        if (!state.valid(bid.dateTime) || (state.price != null && bid.price <= state.price)) {
            return;
        }
        Long old = state.price;
        state.price = bid.price;
        auctions.update(state);
        out.collect(new WinningBid(bid.auction, state.category, bid.price, old, bid.timestamp));
    }
}
