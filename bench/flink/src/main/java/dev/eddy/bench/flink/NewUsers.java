package dev.eddy.bench.flink;

import org.apache.flink.streaming.api.functions.co.ProcessJoinFunction;
import org.apache.flink.util.Collector;

/**
 * q8, the joiner of an interval join of persons and their auctions (by seller) within 10 s: the
 * pairs whose timestamps fall in the same tumbling 10 s window, written
 * {@code {"id","name","reserve"}} (key: the person) and stamped with the later of the two.
 */
final class NewUsers extends ProcessJoinFunction<Person, Auction, KafkaRecord> {
    @Override
    public void processElement(Person person, Auction auction, Context ctx, Collector<KafkaRecord> out) {
        if (Windows.tumblingStart(person.dateTime) != Windows.tumblingStart(auction.dateTime)) {
            return;
        }
        String value = Json.object().put("id", person.id).put("name", person.name).put("reserve", auction.reserve)
                .toString();
        out.collect(new KafkaRecord(Long.toString(person.id), value, Math.max(person.timestamp, auction.timestamp)));
    }
}
