"""Kafka Streams' Processor API for Eddy pipelines: `Stream.process(MyProcessor, stores=[...])`
runs the user's `Processor` record by record in its task, with the task's key-value stores
(each with its changelog) and punctuation on stream time or wall-clock time.

    class Dedup(Processor):
        def init(self, context):
            self.context = context
            self.seen = context.store("seen")
            context.schedule(60_000, STREAM_TIME, self.expire)

        def process(self, record):
            if self.seen.get(record.key) is None:
                self.seen.put(record.key, record.timestamp)
                self.context.forward(record.key, record.value)

        def expire(self, timestamp):
            for key, seen_at in list(self.seen.all()):
                if seen_at < timestamp - 3_600_000:
                    self.seen.delete(key)

Everything a processor writes (store writes, forwarded records) commits in the task's
transaction with the input positions, as the rest of a batch does. A processor instance lives as
long as its task stays on the executor; keep what must survive a restart in its stores.

The task drives a processor through processing/processors.py (`run_processor`, with its side of
the context); this module is what a user writes against.

Punctuation follows Kafka Streams (``PunctuationSchedule``): a stream-time schedule starts at 0,
fires once when a record moves stream time (the newest record timestamp of the task) to or past
its next time, with that stream time, and then aligns to the next multiple of its interval; a
wall-clock schedule fires every interval of wall time from when it was made, checked after each
batch (on the continuous path, at least once per commit interval even with no input). Stream time
and the stream-time schedules' next times are kept in the step's own store (``<name>-time``), so
a restart neither fires a stream-time punctuation twice nor misses one.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from eddy_runtime.state import KeyValueTransaction, TaskTransaction

__all__ = [
    "STREAM_TIME",
    "WALL_CLOCK_TIME",
    "Cancellable",
    "ForwardedRecord",
    "Processor",
    "ProcessorContext",
    "ProcessorStore",
    "Record",
]

STREAM_TIME: Literal["stream_time"] = "stream_time"
WALL_CLOCK_TIME: Literal["wall_clock_time"] = "wall_clock_time"
PunctuationType = Literal["stream_time", "wall_clock_time"]

#: the ``<name>-time`` store's values: stream time and next times, ms, as big-endian int64
TIME_VALUE = struct.Struct(">q")
#: in the ``<name>-time`` store: the task's stream time, and schedule i's next time at `schedule_key(i)`
STREAM_TIME_KEY = b"stream-time"


class Record(NamedTuple):
    """One input record as a processor sees it (a named tuple: one is made per record, three
    times as fast as a frozen dataclass)."""

    key: Any
    value: Any
    timestamp: int
    topic: str = ""
    partition: int = -1
    offset: int = -1


class ForwardedRecord(NamedTuple):
    """A record a processor forwarded (`ProcessorContext.forward`)."""

    key: Any
    value: Any
    #: ms
    timestamp: int


class Processor:
    """Subclass and override `process` (and `init`, `close` as needed)."""

    def init(self, context: ProcessorContext) -> None:  # noqa: B027 - optional hook
        """Called once per task, before its first record: keep `context`, get stores, schedule."""

    def process(self, record: Record) -> None:
        raise NotImplementedError

    def close(self) -> None:  # noqa: B027 - optional hook
        """Called when the task closes on this executor."""


class ProcessorStore:
    """A processor's key-value store: reads see this batch's writes; writes commit with the batch."""

    def __init__(self, context: ProcessorContext, name: str) -> None:
        self._context = context
        self.name = name
        #: the store's transaction in the current batch, found on first use (a processor reads
        #: its stores once or more per record); the context unsets it when the batch ends
        self._kv: KeyValueTransaction | None = None

    def _tx(self) -> KeyValueTransaction:
        kv = self._kv
        if kv is None:
            kv = self._kv = self._context._transaction().key_value(self.name)
        return kv

    def get(self, key: Any, default: Any = None) -> Any:
        return self._tx().get(key, default)

    def put(self, key: Any, value: Any) -> None:
        self._tx().put(key, value)

    def delete(self, key: Any) -> None:
        self._tx().delete(key)

    def range(self, start: Any = None, end: Any = None) -> Iterator[tuple[Any, Any]]:
        """(key, value) with start <= key < end, in serialized-key order."""
        return self._tx().range(start, end)

    def prefix(self, prefix: Any) -> Iterator[tuple[Any, Any]]:
        return self._tx().prefix(prefix)

    def all(self) -> Iterator[tuple[Any, Any]]:
        return self.range()


@dataclass
class Cancellable:
    """A schedule; `cancel()` stops it."""

    type: PunctuationType
    interval_ms: int
    callback: Callable[[int], None]
    next_time: int
    index: int
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True

    def advance(self, now: int) -> None:
        """Kafka Streams' ``PunctuationSchedule.next``: skip missed punctuations, never fire twice at once."""
        nxt = self.next_time + self.interval_ms
        if now >= nxt:
            nxt = self.next_time + ((now - self.next_time) // self.interval_ms + 1) * self.interval_ms
        self.next_time = nxt


@dataclass
class ProcessorContext:
    """What a processor reaches of its task: stores, forwarding, punctuation, stream time."""

    stores: tuple[str, ...]
    time_store: str
    #: forwarded downstream in the current batch
    forwarded: list[ForwardedRecord] = field(default_factory=list)
    stream_time: int | None = None
    clock: Callable[[], float] = time.time
    _tx: TaskTransaction | None = None
    _schedules: list[Cancellable] = field(default_factory=list)
    _current_ts: int | None = None
    _stores_made: dict[str, ProcessorStore] = field(default_factory=dict)

    # -- for processors -------------------------------------------------------------------------

    def store(self, name: str) -> ProcessorStore:
        if name not in self.stores:
            raise KeyError(f"process() was given no store {name!r}; its stores: {', '.join(self.stores) or 'none'}")
        made = self._stores_made.get(name)
        if made is None:
            made = self._stores_made[name] = ProcessorStore(self, name)
        return made

    def forward(self, key: Any, value: Any, timestamp: int | None = None) -> None:
        """Send a record downstream: by default with the timestamp of the record being processed
        (or of the punctuation that runs)."""
        ts = timestamp if timestamp is not None else self._current_ts
        self.forwarded.append(ForwardedRecord(key, value, 0 if ts is None else int(ts)))

    def schedule(self, interval_ms: int, type: PunctuationType, callback: Callable[[int], None]) -> Cancellable:  # noqa: A002
        if interval_ms < 1:
            raise ValueError(f"punctuation interval must be >= 1 ms, got {interval_ms}")
        if type not in (STREAM_TIME, WALL_CLOCK_TIME):
            raise ValueError(f"punctuation type must be {STREAM_TIME!r} or {WALL_CLOCK_TIME!r}, got {type!r}")
        index = len(self._schedules)
        if type == STREAM_TIME:
            stored = self._transaction().key_value(self.time_store).get(schedule_key(index))
            start = TIME_VALUE.unpack(stored)[0] if stored is not None else 0
        else:
            start = self._now_ms() + interval_ms
        schedule = Cancellable(type, interval_ms, callback, start, index)
        self._schedules.append(schedule)
        return schedule

    # -- what the methods above use; the task's side is processing/processors.py -------------------

    def _bind(self, tx: TaskTransaction | None) -> None:
        """The batch's transaction from now on (None: between batches)."""
        self._tx = tx
        for store in self._stores_made.values():
            store._kv = None

    def _transaction(self) -> TaskTransaction:
        if self._tx is None:
            raise RuntimeError("a processor's stores are reachable from init, process and punctuators only")
        return self._tx

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)


def schedule_key(index: int) -> bytes:
    """Where the time store keeps stream-time schedule `index`'s next time."""
    return f"next:{index}".encode()
