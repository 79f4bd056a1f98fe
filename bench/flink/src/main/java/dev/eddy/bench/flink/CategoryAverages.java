package dev.eddy.bench.flink;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;

/**
 * q4, second step, keyed by category: the sum of the category's auctions' winning prices (each
 * {@link WinningBid} adds {@code price - old}) and their number (an auction's first update adds
 * one), written {@code {"category","sum","count","avg"}} (key: the category; avg = sum / count,
 * floored) on every update, stamped with it. Differences add up alike in any order, so the result
 * does not depend on the order updates of different auctions come in.
 */
final class CategoryAverages extends KeyedProcessFunction<Long, WinningBid, KafkaRecord> {
    private transient ValueState<CategoryTotal> totals;

    @Override
    public void open(OpenContext context) {
        totals = getRuntimeContext().getState(new ValueStateDescriptor<>("category-total", CategoryTotal.class));
    }

    @Override
    public void processElement(WinningBid update, Context ctx, Collector<KafkaRecord> out) throws Exception {
        CategoryTotal total = totals.value();
        if (total == null) {
            total = new CategoryTotal();
        }
        if (update.old == null) {
            total.sum += update.price;
            total.count += 1;
        } else {
            total.sum += update.price - update.old;
        }
        totals.update(total);
        String value = Json.object().put("category", update.category).put("sum", total.sum).put("count", total.count)
                .put("avg", Math.floorDiv(total.sum, total.count)).toString();
        out.collect(new KafkaRecord(Long.toString(update.category), value, update.timestamp));
    }
}
