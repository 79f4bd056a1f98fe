"""The continuous path's input: one read_committed consumer for the input partitions of a runner's
running actives (`InputPoller`), what it fetched buffered per partition until its task takes it
(Kafka Streams' per-task record queues).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import TopicPartition as KafkaPartition

from eddy_runtime.kafka import client as kafka_client
from eddy_runtime.kafka.partitions import TopicPartition
from eddy_runtime.kafka.records import RawRecords

__all__ = ["MAX_BUFFERED_RECORDS", "InputPoller"]

log = logging.getLogger("eddy.continuous")

#: process a task before its commit interval is up once this many records wait; a partition with
#: this many buffered is not fetched until its task takes them (what a round holds stays bounded)
MAX_BUFFERED_RECORDS = 100_000
#: how long the poller waits for the metadata of a topic it starts fetching
METADATA_TIMEOUT_S = 2.0


class InputPoller:
    """One read_committed consumer for the input partitions of the runner's running actives;
    what it fetched waits in a buffer per partition until its task takes it."""

    def __init__(self, kafka: Any) -> None:
        conf: dict[str, Any] = {
            "group.id": "eddy-continuous",  # never commits: positions live in the tasks' transactions
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            # An idle consumer's broker answers one fetch per wait: at 10 ms four idle runners
            # cost a broker 0.18-0.72 of a core, at 50 ms 0.07; a delivery takes no longer (a
            # broker answers a held fetch as soon as data arrive), and a partition assigned
            # here (a task moved) waits out the fetch in flight: at most this, 17 ms measured,
            # where 500 ms (librdkafka's default) waits 500 (bench/fetch_wait.py)
            "fetch.wait.max.ms": 50,
            "fetch.max.bytes": 64 << 20,
            "max.partition.fetch.bytes": 16 << 20,
            # Under a backlog librdkafka's queue fills past queued.min.messages and it waits this
            # long before the next fetch: at its default, 1 s, 920,000 records of two partitions
            # took 4.4 s to read, one wait after each pair of 16 MB fetches; at 10 ms, 0.5-0.6 s,
            # with the same CPU (0.63-0.70 s). Its queue limits still bound what it holds.
            "fetch.queue.backoff.ms": 10,
        }
        self._consumer = kafka_client.consumer(kafka, conf)
        #: per assigned partition: the offset its buffer starts at (the task's position)
        self._start: dict[TopicPartition, int] = {}
        self._buffers: dict[TopicPartition, RawRecords] = {}
        #: partitions not fetched while their buffer is full (`MAX_BUFFERED_RECORDS`)
        self._full: set[TopicPartition] = set()

    def ensure(self, positions: Mapping[TopicPartition, int]) -> None:
        """Fetch these partitions from these positions (a partition fetched from elsewhere starts over)."""
        moved = [tp for tp, pos in positions.items() if self._start.get(tp) != pos]
        if not moved:
            return
        self._learn_leaders({t for t, _ in moved} - {t for t, _ in self._start})
        assigned = [tp for tp in moved if tp in self._start]
        if assigned:
            self._consumer.incremental_unassign([KafkaPartition(t, p) for t, p in assigned])
        self._consumer.incremental_assign([KafkaPartition(tp[0], tp[1], positions[tp]) for tp in moved])
        for tp in moved:
            self._start[tp] = positions[tp]
            self._buffers[tp] = RawRecords(tp[0], tp[1], next_offset=positions[tp])
            self._full.discard(tp)  # assigned anew: fetched (not paused)

    def _learn_leaders(self, topics: set[str]) -> None:
        """Ask for the metadata of topics this consumer fetches none of yet: left to itself, a
        consumer learns their leaders only at its next metadata refresh, about half a second
        after the assign, which a task moved here would spend waiting (a few ms this way)."""
        for topic in sorted(topics):
            try:
                self._consumer.list_topics(topic, timeout=METADATA_TIMEOUT_S)
            except Exception as e:  # noqa: BLE001 - the assign still works, only later
                log.warning("metadata of %s: %s", topic, e)

    def release(self, keep: set[TopicPartition]) -> None:
        """Stop fetching every partition not in `keep`."""
        gone = [tp for tp in self._start if tp not in keep]
        if gone:
            self._consumer.incremental_unassign([KafkaPartition(t, p) for t, p in gone])
            for tp in gone:
                del self._start[tp]
                del self._buffers[tp]
                self._full.discard(tp)

    def poll(self, timeout_s: float) -> int:
        """Fetch what is there (waiting up to `timeout_s` for a first record); records fetched."""
        if not self._start:
            time.sleep(timeout_s)
            return 0
        n = 0
        for m in self._consumer.consume(num_messages=10_000, timeout=timeout_s):
            err = m.error()
            if err is not None:
                raise RuntimeError(f"reading {m.topic()}[{m.partition()}]: {err}")
            # a plain tuple (equal to and hashing like a TopicPartition): this runs once per record
            buf = self._buffers.get((m.topic() or "", m.partition() or 0))  # type: ignore[call-overload]
            off = m.offset()
            if buf is None or off is None or off < buf.next_offset:
                continue  # a partition released (or moved) since the fetch
            buf.keys.append(m.key())
            buf.values.append(m.value())
            buf.offsets.append(off)
            buf.timestamps.append(m.timestamp()[1])
            buf.next_offset = off + 1
            n += 1
        if n:  # past the transaction markers after the records too: a position commits them
            for tp in self._consumer.position([KafkaPartition(t, p) for t, p in self._start]):
                buf = self._buffers[TopicPartition(tp.topic, tp.partition)]
                if len(buf) and tp.offset > buf.next_offset:
                    buf.next_offset = tp.offset
            full = [tp for tp, buf in self._buffers.items()
                    if len(buf) >= MAX_BUFFERED_RECORDS and tp not in self._full]
            if full:  # a backlog is fetched as its task takes it, not all into memory at once
                self._consumer.pause([KafkaPartition(t, p) for t, p in full])
                self._full.update(full)
        return n

    def ready(self, tps: Sequence[TopicPartition]) -> bool:
        """Whether every partition of `tps` has records buffered or is read to the end the broker
        last reported (Kafka Streams' ``max.task.idle.ms=0``: a task with two inputs waits for what
        is already on the broker, so it takes their records in timestamp order)."""
        for tp in tps:
            buf = self._buffers.get(tp)
            if buf is None:
                return False
            if len(buf):
                continue
            _, high = self._consumer.get_watermark_offsets(KafkaPartition(tp[0], tp[1]), cached=True)
            if high < 0 or buf.next_offset < high:
                return False
        return True

    def fetched(self, offsets: Mapping[TopicPartition, int]) -> bool:
        """Whether every partition of `offsets` this poller fetches was fetched past its offset."""
        return all(buf.next_offset > off for tp, off in offsets.items() if (buf := self._buffers.get(tp)) is not None)

    def reads(self, offsets: Mapping[TopicPartition, int]) -> list[TopicPartition]:
        """The partitions of `offsets` this poller fetches."""
        return [tp for tp in offsets if tp in self._buffers]

    def buffered(self, tps: Sequence[TopicPartition]) -> int:
        return sum(len(self._buffers[tp]) for tp in tps if tp in self._buffers)

    def take(self, tps: Sequence[TopicPartition]) -> list[RawRecords]:
        """The buffered records of `tps` (each from its position); the buffers start after them."""
        out = []
        for tp in tps:
            buf = self._buffers[tp]
            out.append(buf)
            self._buffers[tp] = RawRecords(tp[0], tp[1], next_offset=buf.next_offset)
            self._start[tp] = buf.next_offset
        emptied = [tp for tp in tps if tp in self._full]
        if emptied:
            self._consumer.resume([KafkaPartition(t, p) for t, p in emptied])
            self._full.difference_update(emptied)
        return out

    def close(self) -> None:
        self._consumer.close()
