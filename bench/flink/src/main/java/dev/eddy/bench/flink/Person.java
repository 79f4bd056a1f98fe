package dev.eddy.bench.flink;

/** A Nexmark person, with the fields the queries read (Json ignores the others). */
public class Person implements Timestamped {
    public long id;
    public String name;
    public String city;
    public String state;
    public long dateTime;
    /** The Kafka record's timestamp, set by the source. */
    public long timestamp;

    public Person() {}

    @Override
    public void setTimestamp(long timestamp) {
        this.timestamp = timestamp;
    }
}
