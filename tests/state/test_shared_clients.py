"""The process's shared one-off consumers (kafka/shared_clients.py) on a three-node cluster: a
watermark read right after a partition's leader stopped is answered by the new leader, not
failed on the metadata of before (a standby's tail and a recycled active's plan ask it)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer, TopicPartition

from eddy_runtime.kafka.shared_clients import stable_ends, written_ends

pytestmark = pytest.mark.integration


def produce(bootstrap: str, topic: str, n: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(n):
        producer.produce(topic, str(i).encode(), b"k%d" % i, partition=0)
    assert producer.flush(30) == 0


def test_watermark_reads_are_answered_across_a_leader_s_failover(kafka_cluster) -> None:
    k = kafka_cluster
    topic = k.create_topic(f"wm-{uuid.uuid4().hex[:8]}", partitions=1, replication_factor=3,
                           config={"min.insync.replicas": "2"})
    produce(k.bootstrap, topic, 10)
    tp = TopicPartition(topic, 0)
    stable, written = stable_ends(k.bootstrap, "wm-test"), written_ends(k.bootstrap, "wm-test")
    try:
        assert stable.watermarks(tp) == (0, 10) and written.watermarks(tp) == (0, 10)
        victim = k.topic_partitions(topic, partitions=1, replication_factor=3)[0].leader
        k.stop_broker(victim)
        try:
            produce(k.bootstrap, topic, 5)  # through the new leader, which the shared clients do not know of yet
            assert stable.watermarks(tp) == (0, 15)
            assert written.watermarks(tp) == (0, 15)
        finally:
            k.start_broker(victim)
        k.wait_in_sync([topic], timeout_s=60)
    finally:
        stable.close()
        written.close()
