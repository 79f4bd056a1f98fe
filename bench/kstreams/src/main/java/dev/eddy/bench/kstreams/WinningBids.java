package dev.eddy.bench.kstreams;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.StoreBuilder;
import org.apache.kafka.streams.state.Stores;

/**
 * q4's first step, keyed by auction id over the merged auctions and bids (co-partitioned by auction
 * id; an auction is the record with {@code expires}): per auction, its highest valid bid's price so
 * far. A bid is valid if {@code auction.dateTime <= bid.dateTime <= auction.expires}. A bid of an
 * auction not seen yet waits in {@link #EARLY_BIDS} until its auction comes.
 *
 * <p>Each rise of an auction's highest valid price is forwarded keyed by the auction's category as
 * {@code {"auction": id, "category": c, "price": new, "old": previous or null}}, with the timestamp
 * of the input record behind it (the bid; the auction when its arrival settles waiting bids: one
 * update then, for the highest of them).
 */
final class WinningBids implements Processor<String, String, String, String> {
    /** Auction id -> {@code {"category", "dateTime", "expires", "price": highest valid or null}}. */
    static final String AUCTIONS = "q4-auctions";
    /** Auction id -> {@code [[price, dateTime], ...]}: the bids that came before their auction. */
    static final String EARLY_BIDS = "q4-early-bids";

    private ProcessorContext<String, String> context;
    private KeyValueStore<String, String> auctions;
    private KeyValueStore<String, String> earlyBids;

    /** One of the two stores: RocksDB with a changelog, behind the record cache as the DSL's stores. */
    static StoreBuilder<KeyValueStore<String, String>> store(String name) {
        return Stores.keyValueStoreBuilder(Stores.persistentKeyValueStore(name), Serdes.String(), Serdes.String())
                .withCachingEnabled();
    }

    @Override
    public void init(ProcessorContext<String, String> context) {
        this.context = context;
        auctions = context.getStateStore(AUCTIONS);
        earlyBids = context.getStateStore(EARLY_BIDS);
    }

    @Override
    public void process(Record<String, String> record) {
        JsonNode v = NexmarkBench.parse(record.value());
        if (v.has("expires")) {
            auction(record, v);
        } else {
            bid(record, v);
        }
    }

    private void auction(Record<String, String> record, JsonNode v) {
        long id = v.get("id").asLong();
        String key = Long.toString(id);
        long category = v.get("category").asLong();
        long start = v.get("dateTime").asLong();
        long expires = v.get("expires").asLong();
        ObjectNode auction = NexmarkBench.object().put("category", category).put("dateTime", start)
                .put("expires", expires).putNull("price");
        String waiting = earlyBids.get(key);
        if (waiting != null) {
            earlyBids.delete(key);
            long highest = -1;
            for (JsonNode bid : NexmarkBench.parse(waiting)) {
                long price = bid.get(0).asLong();
                long time = bid.get(1).asLong();
                if (start <= time && time <= expires && price > highest) {
                    highest = price;
                }
            }
            if (highest >= 0) {
                auction.put("price", highest);
                forward(record, id, category, highest, null);
            }
        }
        auctions.put(key, auction.toString());
    }

    private void bid(Record<String, String> record, JsonNode v) {
        long id = v.get("auction").asLong();
        String key = Long.toString(id);
        long price = v.get("price").asLong();
        long time = v.get("dateTime").asLong();
        String stored = auctions.get(key);
        if (stored == null) {
            String waiting = earlyBids.get(key);
            ArrayNode bids = waiting == null ? NexmarkBench.array() : (ArrayNode) NexmarkBench.parse(waiting);
            bids.addArray().add(price).add(time);
            earlyBids.put(key, bids.toString());
            return;
        }
        ObjectNode auction = (ObjectNode) NexmarkBench.parse(stored);
        if (time < auction.get("dateTime").asLong() || time > auction.get("expires").asLong()) {
            return;
        }
        JsonNode old = auction.get("price");
        if (!old.isNull() && price <= old.asLong()) {
            return;
        }
        auction.put("price", price);
        auctions.put(key, auction.toString());
        forward(record, id, auction.get("category").asLong(), price, old.isNull() ? null : old.asLong());
    }

    private void forward(Record<String, String> record, long id, long category, long price, Long old) {
        String update = NexmarkBench.object().put("auction", id).put("category", category).put("price", price)
                .put("old", old).toString();
        context.forward(record.withKey(Long.toString(category)).withValue(update));
    }
}
