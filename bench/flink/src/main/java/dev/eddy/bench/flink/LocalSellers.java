package dev.eddy.bench.flink;

import java.util.Set;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.streaming.api.functions.co.KeyedCoProcessFunction;
import org.apache.flink.util.Collector;

/**
 * q3, keyed by person id (auctions by seller): each auction of category 10 joined with its seller
 * when the seller is in OR, ID or CA, written {@code {"name","city","state","id"}} (key: the
 * seller) and stamped with the later of the two records. The persons are a table (the newest per
 * id); an auction whose seller has not come yet waits for them, as in Beam's Query3 and Flink's
 * own Nexmark q3 (a regular join): the join then does not depend on which input Flink reads
 * first, and the rows of sellers who come after their auction, which
 * bench/nexmark/nexmark_reference.py allows once each, are all written.
 */
final class LocalSellers extends KeyedCoProcessFunction<Long, Auction, Person, KafkaRecord> {
    static final long CATEGORY = 10;
    private static final Set<String> LOCAL_STATES = Set.of("OR", "ID", "CA");

    private transient ValueState<Person> seller;
    private transient ListState<Auction> waiting;

    @Override
    public void open(OpenContext context) {
        seller = getRuntimeContext().getState(new ValueStateDescriptor<>("seller", Person.class));
        waiting = getRuntimeContext().getListState(new ListStateDescriptor<>("waiting-auctions", Auction.class));
    }

    @Override
    public void processElement1(Auction auction, Context ctx, Collector<KafkaRecord> out) throws Exception {
        Person person = seller.value();
        if (person == null) {
            waiting.add(auction);
        } else if (LOCAL_STATES.contains(person.state)) {
            out.collect(row(auction, person));
        }
    }

    @Override
    public void processElement2(Person person, Context ctx, Collector<KafkaRecord> out) throws Exception {
        seller.update(person);
        if (LOCAL_STATES.contains(person.state)) {
            for (Auction auction : waiting.get()) {
                out.collect(row(auction, person));
            }
        }
        waiting.clear();
    }

    private static KafkaRecord row(Auction auction, Person person) {
        String value = Json.object().put("name", person.name).put("city", person.city).put("state", person.state)
                .put("id", auction.id).toString();
        return new KafkaRecord(Long.toString(person.id), value, Math.max(auction.timestamp, person.timestamp));
    }
}
