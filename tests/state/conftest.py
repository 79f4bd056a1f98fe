"""Fixtures and helpers for the state tests (the session's `kafka` broker comes from tests/conftest.py)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from eddy_runtime.kafka.client import KafkaClientConfig
from eddy_runtime.state import ChangelogTopicSpec, StoreSpec, changelog_topic_name, ensure_changelog_topics

COUNTS = StoreSpec.key_value("counts", key_serde="string", value_serde="int64")


@dataclass
class StateApp:
    """A fresh app on the shared broker: its name, input topic, changelog, and a state dir."""

    name: str
    bootstrap: str
    #: what the tasks under test connect with (`KafkaBroker.client_config`); `bootstrap` feeds and reads
    client: KafkaClientConfig
    input_topic: str
    partitions: int
    state_dir: Path
    admin: object

    def changelog(self, store: str = "counts") -> str:
        return changelog_topic_name(self.name, store)

    def ensure_changelogs(self, specs: Iterable[StoreSpec] = (COUNTS,), **config: str) -> None:
        ensure_changelog_topics(
            self.admin,
            [replace(ChangelogTopicSpec.for_store(self.name, s, self.partitions), extra_config=tuple(config.items()))
             for s in specs],
        )


@pytest.fixture
def state_app(kafka, tmp_path: Path, request: pytest.FixtureRequest) -> StateApp:
    """Tasks on the PLAINTEXT listener, or (``parametrize("state_app", ["sasl_ssl"], indirect=True)``)
    on the SASL_SSL one."""
    name = kafka.unique_name("st")
    input_topic = kafka.create_topic(f"{name}-input", partitions=2)
    client = kafka.client_config(getattr(request, "param", "plaintext"))
    return StateApp(name, kafka.bootstrap, client, input_topic, 2, tmp_path / "state", kafka.admin)


def produce(bootstrap: str, topic: str, records: Iterable[tuple[bytes, bytes | None]], partition: int = 0,
            transactional_id: str | None = None, per_transaction: int = 1000) -> None:
    """Write raw records (value None = tombstone), optionally in transactions (leaving markers)."""
    conf: dict[str, object] = {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True}
    if transactional_id:
        conf["transactional.id"] = transactional_id
    p = Producer(conf)
    records = list(records)
    if transactional_id:
        p.init_transactions(30)
        for i in range(0, len(records), per_transaction):
            p.begin_transaction()
            for k, v in records[i:i + per_transaction]:
                p.produce(topic, v, k, partition=partition)
            p.commit_transaction(30)
    else:
        deadline = time.monotonic() + 60
        for k, v in records:
            while True:
                try:
                    p.produce(topic, v, k, partition=partition)
                    break
                except BufferError:
                    assert time.monotonic() < deadline, f"producer queue to {topic} still full after 60 s"
                    p.poll(0.05)
        assert p.flush(30) == 0, f"records to {topic} not delivered within 30 s"


def read_all(bootstrap: str, topic: str, partition: int = 0) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every committed record of a partition, from its start."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "state-tests", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "enable.partition.eof": True})
    c.assign([TopicPartition(topic, partition, 0)])
    out = []
    low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    deadline = time.monotonic() + 60
    done = high <= low
    while not done:
        assert time.monotonic() < deadline, f"{topic}[{partition}]: end {high} not reached in 60 s ({len(out)} read)"
        for m in c.consume(10_000, 1.0):
            if m.error():
                done = m.offset() >= high
            else:
                out.append((m.offset(), m.key(), m.value()))
    c.close()
    return out


def last_value_per_key(records: Iterable[tuple[bytes, bytes | None]]) -> dict[bytes, bytes]:
    state: dict[bytes, bytes] = {}
    for k, v in records:
        if v is None:
            state.pop(k, None)
        else:
            state[k] = v
    return state
