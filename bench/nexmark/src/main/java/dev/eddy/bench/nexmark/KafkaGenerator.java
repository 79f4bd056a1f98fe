package dev.eddy.bench.nexmark;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedWriter;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.beam.sdk.nexmark.NexmarkConfiguration;
import org.apache.beam.sdk.nexmark.model.Auction;
import org.apache.beam.sdk.nexmark.model.Bid;
import org.apache.beam.sdk.nexmark.model.Event;
import org.apache.beam.sdk.nexmark.model.Person;
import org.apache.beam.sdk.nexmark.sources.generator.Generator;
import org.apache.beam.sdk.nexmark.sources.generator.GeneratorConfig;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Beam's Nexmark generator (one generator, Beam's default proportions of 1 person : 3 auctions :
 * 46 bids, its default hot-key ratios and padding) writing each event as JSON to the topic of its
 * kind, PREFIX-person, PREFIX-auction and PREFIX-bid, keyed by the event's own id (a bid by its
 * auction), with the event's time as the record timestamp. See run.sh for the arguments.
 */
public final class KafkaGenerator {
    private static final ObjectMapper JSON = new ObjectMapper();

    private KafkaGenerator() {}

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = parse(argv);
        String bootstrap = required(args, "bootstrap");
        String prefix = required(args, "prefix");
        long events = Long.parseLong(required(args, "events"));
        int rate = Integer.parseInt(args.getOrDefault("rate", "10000"));
        boolean paced = Boolean.parseBoolean(args.getOrDefault("paced", "false"));
        String givenBaseTime = args.get("base-time");
        int partitions = Integer.parseInt(args.getOrDefault("partitions", "1"));
        String jsonl = args.get("jsonl");

        NexmarkConfiguration config = NexmarkConfiguration.DEFAULT.copy();
        config.numEvents = events;
        config.numEventGenerators = 1;
        config.firstEventRate = rate;
        config.nextEventRate = rate;
        String personTopic = prefix + "-person";
        String auctionTopic = prefix + "-auction";
        String bidTopic = prefix + "-bid";
        createTopics(bootstrap, List.of(personTopic, auctionTopic, bidTopic), partitions);

        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.LINGER_MS_CONFIG, paced ? "1" : "20");
        props.put(ProducerConfig.BATCH_SIZE_CONFIG, "262144");
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        AtomicReference<Exception> failure = new AtomicReference<>();
        long persons = 0, auctions = 0, bids = 0, first = -1, last = -1;
        long started = System.nanoTime();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props);
             BufferedWriter lines = jsonl == null ? null
                     : Files.newBufferedWriter(Path.of(jsonl), StandardCharsets.UTF_8)) {
            // Event times start now, once topics and producer are ready, so that a paced event's
            // time is its send time (latency measured from it includes no set-up).
            long wallBase = System.currentTimeMillis();
            long baseTime = givenBaseTime == null ? wallBase : Long.parseLong(givenBaseTime);
            Generator generator = new Generator(new GeneratorConfig(config, baseTime, 0, events, 0));
            while (generator.hasNext()) {
                Generator.NextEvent next = generator.nextEvent();
                if (paced) {
                    long wait = wallBase + (next.eventTimestamp - baseTime) - System.currentTimeMillis();
                    if (wait > 0) {
                        Thread.sleep(wait);
                    }
                }
                Event e = next.event;
                String topic, key, kind;
                Map<String, Object> value;
                if (e.newPerson != null) {
                    topic = personTopic; kind = "person"; key = Long.toString(e.newPerson.id);
                    value = person(e.newPerson); persons++;
                } else if (e.newAuction != null) {
                    topic = auctionTopic; kind = "auction"; key = Long.toString(e.newAuction.id);
                    value = auction(e.newAuction); auctions++;
                } else {
                    topic = bidTopic; kind = "bid"; key = Long.toString(e.bid.auction);
                    value = bid(e.bid); bids++;
                }
                String text = JSON.writeValueAsString(value);
                long ts = next.eventTimestamp;
                first = first < 0 ? ts : first;
                last = ts;
                producer.send(new ProducerRecord<>(topic, null, ts, key, text), (md, ex) -> {
                    if (ex != null) {
                        failure.compareAndSet(null, ex);
                    }
                });
                if (lines != null) {
                    lines.write("{\"kind\":\"" + kind + "\",\"key\":\"" + key + "\",\"timestamp\":" + ts
                            + ",\"value\":" + text + "}\n");
                }
                if (failure.get() != null) {
                    break;
                }
            }
            producer.flush();
        }
        if (failure.get() != null) {
            System.err.println("nexmark: producing failed: " + failure.get());
            System.exit(1);
        }
        double seconds = (System.nanoTime() - started) / 1e9;
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("events", persons + auctions + bids);
        out.put("persons", persons);
        out.put("auctions", auctions);
        out.put("bids", bids);
        out.put("seconds", seconds);
        out.put("first_timestamp", first);
        out.put("last_timestamp", last);
        System.out.println(JSON.writeValueAsString(out));
    }

    static Map<String, Object> person(Person p) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("id", p.id);
        m.put("name", p.name);
        m.put("emailAddress", p.emailAddress);
        m.put("creditCard", p.creditCard);
        m.put("city", p.city);
        m.put("state", p.state);
        m.put("dateTime", p.dateTime.getMillis());
        m.put("extra", p.extra);
        return m;
    }

    static Map<String, Object> auction(Auction a) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("id", a.id);
        m.put("itemName", a.itemName);
        m.put("description", a.description);
        m.put("initialBid", a.initialBid);
        m.put("reserve", a.reserve);
        m.put("dateTime", a.dateTime.getMillis());
        m.put("expires", a.expires.getMillis());
        m.put("seller", a.seller);
        m.put("category", a.category);
        m.put("extra", a.extra);
        return m;
    }

    static Map<String, Object> bid(Bid b) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("auction", b.auction);
        m.put("bidder", b.bidder);
        m.put("price", b.price);
        m.put("dateTime", b.dateTime.getMillis());
        m.put("extra", b.extra);
        return m;
    }

    private static void createTopics(String bootstrap, List<String> names, int partitions)
            throws InterruptedException, ExecutionException {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(props)) {
            Set<String> existing = admin.listTopics().names().get();
            List<NewTopic> missing = new ArrayList<>();
            for (String name : names) {
                if (!existing.contains(name)) {
                    missing.add(new NewTopic(name, partitions, (short) 1));
                }
            }
            try {
                admin.createTopics(missing).all().get();
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof TopicExistsException)) {
                    throw e;
                }
            }
        }
    }

    private static Map<String, String> parse(String[] argv) {
        Map<String, String> out = new LinkedHashMap<>();
        for (int i = 0; i < argv.length; i += 2) {
            if (!argv[i].startsWith("--") || i + 1 >= argv.length) {
                throw new IllegalArgumentException("expected --name value pairs, got " + argv[i]);
            }
            out.put(argv[i].substring(2), argv[i + 1]);
        }
        return out;
    }

    private static String required(Map<String, String> args, String name) throws IOException {
        String v = args.get(name);
        if (v == null) {
            throw new IllegalArgumentException("--" + name + " is required");
        }
        return v;
    }
}
