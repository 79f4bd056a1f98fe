"""The Kafka broker the tests use is real: transactions isolate, compaction is configured and runs."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource, ResourceType

pytestmark = pytest.mark.integration


def _consume_all(bootstrap: str, topic: str, isolation: str, timeout: float = 5.0) -> list[tuple[bytes, bytes]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": isolation,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple[bytes, bytes]] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.2):
                if msg.error() is None:
                    out.append((msg.key(), msg.value()))
    finally:
        consumer.close()
    return out


def test_transactional_records_are_invisible_to_read_committed_until_commit(kafka) -> None:
    topic = kafka.new_topic("txn")
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": f"smoke-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i)
    producer.flush(30)

    assert _consume_all(kafka.bootstrap, topic, "read_committed", timeout=2) == []
    assert len(_consume_all(kafka.bootstrap, topic, "read_uncommitted", timeout=2)) == 10

    producer.commit_transaction(30)
    committed = _consume_all(kafka.bootstrap, topic, "read_committed", timeout=3)
    assert [k for k, _ in committed] == [b"k%d" % i for i in range(10)]


def test_aborted_transaction_is_never_visible_to_read_committed(kafka) -> None:
    topic = kafka.new_topic("abort")
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": f"smoke-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, key=b"a", value=b"aborted")
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, key=b"b", value=b"kept")
    producer.commit_transaction(30)

    assert _consume_all(kafka.bootstrap, topic, "read_committed", timeout=3) == [(b"b", b"kept")]


def test_compacted_topic_reports_its_cleanup_policy(kafka) -> None:
    topic = kafka.new_topic("compact", partitions=3, config={"cleanup.policy": "compact"})
    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = kafka.admin.describe_configs([resource])[resource].result(30)
    assert configs["cleanup.policy"].value == "compact"
    metadata = kafka.admin.list_topics(topic, timeout=10).topics[topic]
    assert len(metadata.partitions) == 3


def test_log_cleaner_compacts_a_compacted_topic_to_the_last_value_per_key(kafka) -> None:
    topic = kafka.new_topic(
        "cleaned",
        config={"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.001",
                "delete.retention.ms": "100"},
    )
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 0})
    for round_ in range(3):
        for key in range(50):
            producer.produce(topic, key=b"k%d" % key, value=b"%d" % round_)
        producer.flush(30)
        time.sleep(0.3)  # let segment.ms pass so the next append rolls a new segment
    produced = 150

    deadline = time.monotonic() + 90
    while True:
        # A new append rolls the segment holding older values, which makes it cleanable.
        producer.produce(topic, key=b"roll", value=b"x")
        producer.flush(30)
        records = _consume_all(kafka.bootstrap, topic, "read_committed", timeout=2)
        latest = {}
        for k, v in records:
            latest[k] = v
        if len([k for k, _ in records if k != b"roll"]) < produced:
            break
        assert time.monotonic() < deadline, "the log cleaner never compacted the topic"
        time.sleep(1)
    assert all(latest[b"k%d" % key] == b"2" for key in range(50))
