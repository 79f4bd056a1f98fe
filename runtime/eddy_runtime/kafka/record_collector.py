"""Sends a task's batch to Kafka and notes what Kafka acknowledged (Kafka Streams' RecordCollector).

`TaskCommitter` (kafka/transactions.py) owns one `RecordCollector`, for its producer: it sends a batch's
output records and each store's changelog records, and collects from the delivery reports the
last offset Kafka gave each partition (a store's changelog offset) and every failed record. The
last changelog record of each store and batch carries the input positions the batch reflects
(`INPUT_OFFSETS_HEADER`), which restores read back (state/restore.py). The commit protocol
around it: docs/DESIGN.md, "One micro-batch".
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from confluent_kafka import KafkaError, Message, Producer

from eddy_runtime.kafka import client as kafka_client
from eddy_runtime.kafka.client import KafkaClientConfig
from eddy_runtime.kafka.partitions import TopicPartition

__all__ = [
    "INPUT_OFFSETS_HEADER",
    "ChangelogBatches",
    "OutputRecord",
    "RecordCollector",
    "SentRecords",
    "input_offsets_header",
    "input_offsets_in",
]

#: Header of the last changelog record of each store and batch: the input positions the batch
#: reflects (JSON list of [topic, partition, next offset]); restores keep store offsets exact with it.
INPUT_OFFSETS_HEADER = "eddy.input"

#: raw (key, value-or-None-for-delete) records of one store's changelog partition
ChangelogRecords = Sequence[tuple[bytes, bytes | None]]


class OutputRecord(NamedTuple):
    """A record a batch produces to an output (or repartition) topic."""

    topic: str
    key: bytes | None
    value: bytes | None
    #: None: Kafka's default partitioner (murmur2 of the key, as the Java client does)
    partition: int | None = None
    headers: list[tuple[str, bytes]] | None = None
    timestamp: int | None = None


class ChangelogBatches(Protocol):
    """What a batch writes to changelogs; `state.TaskTransaction` is one."""

    def changelog_batches(self) -> Iterable[tuple[str, str, int, ChangelogRecords]]:
        """(store, changelog topic, partition, records) for each logged store with writes."""
        ...


def input_offsets_header(inputs: Mapping[TopicPartition, int]) -> list[tuple[str, str]]:
    """The headers of a batch's last changelog record of a store: the input positions it reflects."""
    return [(INPUT_OFFSETS_HEADER, json.dumps(sorted([t, p, o] for (t, p), o in inputs.items())))]


def input_offsets_in(msg: Message) -> dict[TopicPartition, int] | None:
    """The input positions a changelog record carries (`input_offsets_header`), if it carries any."""
    for name, value in msg.headers() or ():  # type: ignore[str-unpack]
        if name == INPUT_OFFSETS_HEADER and value:
            return {TopicPartition(t, int(p)): int(o) for t, p, o in json.loads(value)}
    return None


class SentRecords(NamedTuple):
    """What `RecordCollector.send` sent of one batch (delivery not awaited yet)."""

    outputs: int
    changelog_records: int
    #: each store written to -> its changelog partition
    changelog_of_store: dict[str, TopicPartition]


class RecordCollector:
    """Produces one task's records and remembers, per partition, the last offset Kafka acknowledged."""

    def __init__(self, kafka: KafkaClientConfig | str, settings: Mapping[str, Any]) -> None:
        #: delivery failures since `begin`, as "topic[partition]: reason"
        self.errors: list[str] = []
        self._last_offsets: dict[TopicPartition, int] = {}
        # Every record reports back: the changelog offsets come from these reports, and a failed
        # record must name its topic in the error the user sees.
        self.producer: Producer | None = kafka_client.producer(kafka, {**settings, "on_delivery": self._on_delivery})

    def begin(self) -> None:
        """Forget the previous batch's reports."""
        self.errors.clear()
        self._last_offsets.clear()

    def last_offset(self, topic: str, partition: int) -> int | None:
        """The highest offset Kafka acknowledged in this partition since `begin`."""
        return self._last_offsets.get(TopicPartition(topic, partition))

    def last_offsets(self) -> dict[TopicPartition, int]:
        """The highest offset Kafka acknowledged per partition since `begin`."""
        return dict(self._last_offsets)

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            try:
                where = f"{msg.topic()}[{msg.partition()}]"
            except SystemError:
                # After a fatal error (fenced) the client calls back with that error still set;
                # it surfaces again from commit_transaction.
                where = "?"
            self.errors.append(f"{where}: {err.str()}")
            return
        # a plain tuple (equal to and hashing like a TopicPartition): this runs once per record
        tp: Any = (msg.topic(), msg.partition())
        off = msg.offset()
        if off > self._last_offsets.get(tp, -1):
            self._last_offsets[tp] = off

    def send(
        self,
        outputs: Iterable[OutputRecord],
        tx: ChangelogBatches | None,
        inputs: Mapping[TopicPartition, int],
    ) -> SentRecords:
        """Produce the outputs and the changelog records; delivery is not awaited."""
        assert self.producer is not None, "record collector is closed"
        produce = self.producer.produce
        n_out = 0
        # One call per record with no keyword dict built for it where it can be: a busy runner
        # sends hundreds of thousands of records a second from here.
        for topic, key, value, partition, headers, timestamp in outputs:
            n_out += 1
            if partition is None and headers is None:
                try:
                    if timestamp is None:
                        produce(topic, value, key)
                    else:
                        produce(topic, value, key, timestamp=timestamp)
                    continue
                except BufferError:
                    pass  # the producer's queue is full: the loop below waits for room
            kwargs: dict[str, Any] = {}
            if partition is not None:
                kwargs["partition"] = partition
            if headers:
                kwargs["headers"] = headers
            if timestamp is not None:
                kwargs["timestamp"] = timestamp
            self._produce(topic, key, value, **kwargs)
        n_cl = 0
        changelog_of_store: dict[str, TopicPartition] = {}
        if tx is not None:
            header = input_offsets_header(inputs)
            for store, topic, partition, records in tx.changelog_batches():
                if not records:
                    continue
                last = len(records) - 1
                for i, (k, v) in enumerate(records):
                    if i == last:
                        # The last record of a store's batch carries the input offsets the batch
                        # reflects, for restores.
                        self._produce(topic, k, v, partition=partition, headers=header)
                        break
                    try:
                        produce(topic, v, k, partition=partition)
                    except BufferError:
                        self._produce(topic, k, v, partition=partition)
                n_cl += len(records)
                changelog_of_store[store] = TopicPartition(topic, partition)
        return SentRecords(n_out, n_cl, changelog_of_store)

    def _produce(self, topic: str, key: bytes | None, value: bytes | None, **kwargs: Any) -> None:
        # A full local queue is back-pressure, not a failure: serve delivery reports until the
        # producer has room (a loop on the client's own buffer, not a retry of a Kafka error).
        assert self.producer is not None, "record collector is closed"
        while True:
            try:
                self.producer.produce(topic, value, key, **kwargs)
                return
            except BufferError:
                self.producer.poll(0.05)
