package dev.eddy.bench.kstreams;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.time.Duration;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.JoinWindows;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.StreamJoined;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * Nexmark's queries q0, q1, q2, q3, q4, q5, q7 and q8 in Kafka Streams, over the topics of
 * bench/nexmark/run.sh (PREFIX-person, -auction, -bid: JSON values, keyed by person id, auction
 * id and the bid's auction), writing OUTPUT_PREFIX-QUERY with the same JSON values as
 * examples/nexmark/app.py, so that bench/nexmark/nexmark_reference.py checks both alike.
 *
 * <pre>
 *   NexmarkBench --bootstrap HOST:PORT --prefix P --output-prefix O --query qN --app-id ID
 *                [--state-dir DIR] [--threads 1] [--grace-ms 0] [--join-grace-ms 300000]
 *                [--config key=value]...
 * </pre>
 *
 * Exactly-once (v2), commit.interval.ms 100, reading from the earliest offset, topology
 * optimization on (a source table's topic is its changelog; repartitions merged). Runs until
 * stdin is closed, then closes, leaving the group; prints state changes on stderr (
 * "-> RUNNING" when processing can start) and one JSON line on stdout when closed.
 */
public final class NexmarkBench {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final long WINDOW_MS = 10_000;
    private static final Set<String> LOCAL_STATES = Set.of("OR", "ID", "CA");

    private NexmarkBench() {}

    public static void main(String[] argv) throws Exception {
        BenchArgs args = BenchArgs.parse(argv, Set.of("bootstrap", "prefix", "output-prefix", "query", "app-id",
                "state-dir", "threads", "grace-ms", "join-grace-ms"));
        String query = args.required("query");
        String prefix = args.required("prefix");
        String out = args.optional("output-prefix", prefix) + "-" + query;
        StreamsBuilder builder = new StreamsBuilder();
        build(builder, query, prefix, out, args.longOption("grace-ms", 0), args.longOption("join-grace-ms", 300_000));

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args.required("app-id"));
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args.required("bootstrap"));
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, (int) args.longOption("threads", 1));
        props.put(StreamsConfig.TOPOLOGY_OPTIMIZATION_CONFIG, StreamsConfig.OPTIMIZE);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        StateDirs stateDir = StateDirs.of(args.optional("state-dir", null), "kstreams-nexmark-");
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.path().toString());
        GroupMembership.configure(props, args.required("app-id") + "-bench");
        args.applyConfigs(props);

        Topology topology = builder.build(props);
        long started = System.nanoTime();
        KafkaStreams streams = new KafkaStreams(topology, props);
        streams.setStateListener((now, before) -> System.err.printf("kstreams-nexmark %s: %.3f s: %s -> %s%n",
                query, (System.nanoTime() - started) / 1e9, before, now));
        CountDownLatch failed = new CountDownLatch(1);
        streams.setUncaughtExceptionHandler(e -> {
            Results.fail("kstreams-nexmark", "stream thread failed: " + e);
            failed.countDown();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse
                    .SHUTDOWN_CLIENT;
        });
        streams.cleanUp();
        streams.start();
        Thread stdin = new Thread(() -> {
            try (InputStream in = System.in) {
                while (in.read() >= 0) {
                    // the caller closes stdin when the input is processed
                }
            } catch (IOException e) {
                // closed either way
            }
            failed.countDown();
        });
        stdin.setDaemon(true);
        stdin.start();
        failed.await();
        GroupMembership.close(streams);
        stateDir.release();
        System.out.println("{\"query\":\"" + query + "\",\"seconds\":"
                + String.format(java.util.Locale.ROOT, "%.3f", (System.nanoTime() - started) / 1e9) + "}");
    }

    static void build(StreamsBuilder b, String query, String prefix, String out, long graceMs, long joinGraceMs) {
        Consumed<String, String> strings = Consumed.with(Serdes.String(), Serdes.String());
        Produced<String, String> produced = Produced.with(Serdes.String(), Serdes.String());
        switch (query) {
            case "q0" -> b.stream(prefix + "-bid", strings).to(out, produced);
            case "q1" -> b.stream(prefix + "-bid", strings).mapValues(NexmarkBench::toEuros).to(out, produced);
            case "q2" -> b.stream(prefix + "-bid", strings)
                    .filter((auction, bid) -> Long.parseLong(auction) % 123 == 0)
                    .mapValues(bid -> {
                        JsonNode v = parse(bid);
                        return object().put("auction", v.get("auction").asLong())
                                .put("price", v.get("price").asLong()).toString();
                    })
                    .to(out, produced);
            case "q3" -> {
                KTable<String, String> locals = b.table(prefix + "-person", strings,
                                Materialized.as("q3-persons"))
                        .filter((id, person) -> LOCAL_STATES.contains(parse(person).get("state").asText()));
                b.stream(prefix + "-auction", strings)
                        .filter((id, auction) -> parse(auction).get("category").asLong() == 10)
                        .selectKey((id, auction) -> parse(auction).get("seller").asText(),
                                Named.as("q3-auctions-by-seller"))
                        .join(locals, (auction, person) -> {
                            JsonNode a = parse(auction);
                            JsonNode p = parse(person);
                            return object().put("name", p.get("name").asText()).put("city", p.get("city").asText())
                                    .put("state", p.get("state").asText()).put("id", a.get("id").asLong()).toString();
                        })
                        .to(out, produced);
            }
            case "q4" -> {
                // Auctions and bids are co-partitioned by auction id: one sub-topology keeps each
                // auction's highest valid bid, re-keyed by category for the second, which sums them.
                b.addStateStore(WinningBids.store(WinningBids.AUCTIONS));
                b.addStateStore(WinningBids.store(WinningBids.EARLY_BIDS));
                b.stream(prefix + "-auction", strings)
                        .merge(b.stream(prefix + "-bid", strings), Named.as("q4-auctions-and-bids"))
                        .process(WinningBids::new, Named.as("q4-winning-bids"), WinningBids.AUCTIONS,
                                WinningBids.EARLY_BIDS)
                        .groupByKey(Grouped.with(Serdes.String(), Serdes.String()).withName("q4-categories"))
                        .aggregate(() -> "{}", NexmarkBench::categoryAverage,
                                Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as("q4-categories")
                                        .withKeySerde(Serdes.String()).withValueSerde(Serdes.String()))
                        .toStream()
                        .to(out, produced);
            }
            case "q5" -> b.stream(prefix + "-bid", strings)
                    .groupByKey()
                    .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofSeconds(10), Duration.ofMillis(graceMs))
                            .advanceBy(Duration.ofSeconds(5)))
                    .count(Materialized.as("q5-bids-per-window"))
                    .toStream()
                    .map((w, n) -> KeyValue.pair(Long.toString(w.window().start()),
                            object().put("auction", Long.parseLong(w.key())).put("count", n).toString()))
                    .groupByKey(Grouped.as("q5-windows"))
                    .aggregate(() -> "{}", NexmarkBench::hottest, Materialized.as("q5-hottest"))
                    .toStream()
                    .to(out, produced);
            case "q7" -> b.stream(prefix + "-bid", strings)
                    .map((auction, bid) -> {
                        JsonNode v = parse(bid);
                        long time = v.get("dateTime").asLong();
                        ArrayNode ranked = JSON.createArrayNode().add(v.get("price").asLong()).add(time)
                                .add(v.get("bidder").asLong()).add(v.get("auction").asLong());
                        return KeyValue.pair(Long.toString(time - time % WINDOW_MS), ranked.toString());
                    })
                    .groupByKey(Grouped.as("q7-windows"))
                    .reduce(NexmarkBench::higher, Materialized.as("q7-highest"))
                    .toStream()
                    .mapValues(ranked -> {
                        JsonNode r = parse(ranked);
                        long time = r.get(1).asLong();
                        return object().put("window", time - time % WINDOW_MS).put("price", r.get(0).asLong())
                                .put("dateTime", time).put("bidder", r.get(2).asLong())
                                .put("auction", r.get(3).asLong()).toString();
                    })
                    .to(out, produced);
            case "q8" -> {
                KStream<String, String> persons = b.stream(prefix + "-person", strings);
                b.stream(prefix + "-auction", strings)
                        .selectKey((id, auction) -> parse(auction).get("seller").asText(),
                                Named.as("q8-auctions-by-seller"))
                        .join(persons, NexmarkBench::newUser,
                                JoinWindows.ofTimeDifferenceAndGrace(Duration.ofSeconds(10),
                                        Duration.ofMillis(joinGraceMs)),
                                StreamJoined.<String, String, String>as("q8-new-users")
                                        .withKeySerde(Serdes.String()).withValueSerde(Serdes.String())
                                        .withOtherValueSerde(Serdes.String()))
                        .filter((seller, row) -> row != null)
                        .to(out, produced);
            }
            default -> throw new IllegalArgumentException("unknown query " + query
                    + " (q0, q1, q2, q3, q4, q5, q7, q8)");
        }
    }

    static String toEuros(String bid) {
        ObjectNode v = (ObjectNode) parse(bid);
        v.put("price", v.get("price").asLong() * 89 / 100);
        return v.toString();
    }

    /**
     * A category's {sum, count, avg} of its auctions' highest valid bids, after one of them rose from
     * {@code old} (null: the auction's first valid bid) to {@code price}.
     */
    static String categoryAverage(String category, String update, String total) {
        JsonNode u = parse(update);
        JsonNode t = parse(total);
        JsonNode old = u.get("old");
        long sum = t.path("sum").asLong() + u.get("price").asLong() - old.asLong();
        long count = t.path("count").asLong() + (old.isNull() ? 1 : 0);
        return object().put("category", Long.parseLong(category)).put("sum", sum).put("count", count)
                .put("avg", count == 0 ? 0 : Math.floorDiv(sum, count)).toString();
    }

    /** The largest count of the window and the auctions that have it (counts only grow). */
    static String hottest(String window, String update, String hot) {
        JsonNode u = parse(update);
        JsonNode h = parse(hot);
        long count = h.has("count") ? h.get("count").asLong() : 0;
        Set<Long> auctions = new TreeSet<>();
        if (h.has("auctions")) {
            h.get("auctions").forEach(a -> auctions.add(a.asLong()));
        }
        long n = u.get("count").asLong();
        if (n > count) {
            count = n;
            auctions.clear();
            auctions.add(u.get("auction").asLong());
        } else if (n == count) {
            auctions.add(u.get("auction").asLong());
        }
        ObjectNode result = object().put("window", Long.parseLong(window)).put("count", count);
        ArrayNode list = result.putArray("auctions");
        auctions.forEach(list::add);
        return result.toString();
    }

    /** The higher of two bids as [price, dateTime, bidder, auction], compared in that order. */
    static String higher(String a, String b) {
        JsonNode x = parse(a);
        JsonNode y = parse(b);
        for (int i = 0; i < 4; i++) {
            int c = Long.compare(x.get(i).asLong(), y.get(i).asLong());
            if (c != 0) {
                return c > 0 ? a : b;
            }
        }
        return a;
    }

    static String newUser(String auction, String person) {
        JsonNode a = parse(auction);
        JsonNode p = parse(person);
        if (a.get("dateTime").asLong() / WINDOW_MS != p.get("dateTime").asLong() / WINDOW_MS) {
            return null;
        }
        return object().put("id", p.get("id").asLong()).put("name", p.get("name").asText())
                .put("reserve", a.get("reserve").asLong()).toString();
    }

    static ObjectNode object() {
        return JSON.createObjectNode();
    }

    static ArrayNode array() {
        return JSON.createArrayNode();
    }

    static JsonNode parse(String text) {
        try {
            return JSON.readTree(text);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
