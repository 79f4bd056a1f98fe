"""The three-node Kafka cluster the replication tests use is real: three brokers, replicas on each,
writes with min.insync.replicas=2 go on while one node is stopped, and the node catches up."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

pytestmark = pytest.mark.integration


def test_a_stopped_node_leaves_the_cluster_writable_and_catches_up_when_it_returns(kafka_cluster) -> None:
    k = kafka_cluster
    assert k.live_brokers() == {1, 2, 3}
    topic = k.create_topic(f"rep-{uuid.uuid4().hex[:8]}", partitions=3, replication_factor=3,
                           config={"min.insync.replicas": "2"})
    partitions = k.topic_partitions(topic, partitions=3, replication_factor=3)
    assert {len(p.replicas) for p in partitions.values()} == {3}
    # the node leading partition 0 goes away: its leadership moves, acks=all writes still succeed
    victim = partitions[0].leader
    k.stop_broker(victim)
    try:
        assert k.live_brokers() == {1, 2, 3} - {victim}
        producer = Producer({"bootstrap.servers": k.bootstrap, "acks": "all", "enable.idempotence": True})
        for i in range(300):
            producer.produce(topic, str(i).encode(), partition=i % 3)
        assert producer.flush(30) == 0
        leaders = {p.leader for p in k.admin.list_topics(topic, timeout=10).topics[topic].partitions.values()}
        assert victim not in leaders
    finally:
        k.start_broker(victim)
    k.wait_in_sync([topic], timeout_s=60)

    consumer = Consumer({"bootstrap.servers": k.bootstrap, "group.id": f"c-{topic}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
    seen: list[int] = []
    deadline = time.monotonic() + 30
    try:
        while len(seen) < 300 and time.monotonic() < deadline:
            seen += [int(m.value()) for m in consumer.consume(500, timeout=0.5) if m.error() is None]
    finally:
        consumer.close()
    assert sorted(seen) == list(range(300)), f"read {len(seen)} of 300 records within 30 s"
