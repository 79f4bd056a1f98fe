package dev.eddy.bench.flink;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.time.Duration;
import java.util.List;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;

/**
 * Nexmark's queries q0, q1, q2, q3, q4, q5, q7 and q8 over the topics of bench/nexmark/run.sh
 * (PREFIX-person, -auction, -bid: JSON values keyed by person id, auction id and the bid's
 * auction, each stamped with its event's time), writing OUTPUT_PREFIX-QUERY with the values of
 * bench/kstreams' NexmarkBench and examples/nexmark/app.py, so that
 * bench/nexmark/nexmark_reference.py checks all three alike.
 *
 * <p>Each query reads only the topics it needs. Event time is the record timestamp; watermarks
 * follow each partition's newest timestamp (the generator's never decrease) and only release the
 * state of closed windows: no result waits for a watermark. The input is a topic that ends
 * without saying so, and a watermark would never pass its last windows, nor its last auctions in
 * an event-time temporal join.
 */
final class Queries {
    static final List<String> NAMES = List.of("q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8");
    private static final long AUCTION_SKIP = 123;

    private final StreamExecutionEnvironment env;
    private final Topics topics;
    private final String prefix;

    Queries(StreamExecutionEnvironment env, Topics topics, String prefix) {
        this.env = env;
        this.topics = topics;
        this.prefix = prefix;
    }

    /** Adds {@code query}, writing {@code output}, to the environment's job. */
    void add(String query, String output) {
        DataStream<KafkaRecord> result = switch (query) {
            case "q0" -> records("bid");
            case "q1" -> records("bid").map(Queries::toEuros).name("q1-euros");
            case "q2" -> records("bid")
                    .filter(bid -> Long.parseLong(bid.key) % AUCTION_SKIP == 0).name("q2-auction-skip")
                    .map(Queries::auctionAndPrice).name("q2-select");
            case "q3" -> events("auction", Auction.class)
                    .filter(auction -> auction.category == LocalSellers.CATEGORY).name("q3-category")
                    .keyBy(auction -> auction.seller)
                    .connect(events("person", Person.class).keyBy(person -> person.id))
                    .process(new LocalSellers()).name("q3-local-sellers");
            case "q4" -> events("auction", Auction.class)
                    .keyBy(auction -> auction.id)
                    .connect(events("bid", Bid.class).keyBy(bid -> bid.auction))
                    .process(new WinningBids()).name("q4-winning-bids")
                    .keyBy(update -> update.category)
                    .process(new CategoryAverages()).name("q4-categories");
            case "q5" -> events("bid", Bid.class)
                    .keyBy(bid -> bid.auction)
                    .process(new BidCounts()).name("q5-bids-per-window")
                    .keyBy(count -> count.window)
                    .process(new HottestAuctions()).name("q5-hottest");
            case "q7" -> events("bid", Bid.class)
                    .keyBy(bid -> Windows.tumblingStart(bid.dateTime))
                    .process(new HighestBid()).name("q7-highest");
            case "q8" -> events("person", Person.class)
                    .keyBy(person -> person.id)
                    .intervalJoin(events("auction", Auction.class).keyBy(auction -> auction.seller))
                    .between(Duration.ofMillis(-Windows.SIZE_MS), Duration.ofMillis(Windows.SIZE_MS))
                    .process(new NewUsers()).name("q8-new-users");
            default -> throw new IllegalArgumentException("unknown query " + query + " (" + String.join(", ", NAMES) + ")");
        };
        result.sinkTo(topics.sink(output)).name(output);
    }

    private DataStream<KafkaRecord> records(String kind) {
        String topic = prefix + "-" + kind;
        return committed(env.fromSource(topics.records(topic), WatermarkStrategy.noWatermarks(), topic), topic);
    }

    private <T extends Timestamped> DataStream<T> events(String kind, Class<T> type) {
        String topic = prefix + "-" + kind;
        return committed(env.fromSource(topics.events(topic, type), WatermarkStrategy.forMonotonousTimestamps(), topic),
                topic);
    }

    private <T> DataStream<T> committed(DataStream<T> source, String topic) {
        return source.map(topics.<T>committed(topic)).returns(source.getType()).name(topic + "-commit");
    }

    /** q1: the bid, unchanged but its price in euros ({@code price * 89 / 100}, Beam's integer arithmetic). */
    static KafkaRecord toEuros(KafkaRecord bid) {
        ObjectNode value = (ObjectNode) Json.tree(bid.value);
        value.put("price", value.get("price").asLong() * 89 / 100);
        return new KafkaRecord(bid.key, value.toString(), bid.timestamp);
    }

    static KafkaRecord auctionAndPrice(KafkaRecord bid) {
        JsonNode value = Json.tree(bid.value);
        String selected = Json.object().put("auction", value.get("auction").asLong())
                .put("price", value.get("price").asLong()).toString();
        return new KafkaRecord(bid.key, selected, bid.timestamp);
    }
}
