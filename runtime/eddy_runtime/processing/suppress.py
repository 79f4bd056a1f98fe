"""Suppression of a windowed aggregation's updates: Kafka Streams' ``KTableSuppressProcessor``
over its ``InMemoryTimeOrderedKeyValueBuffer``, with the buffer in a RocksDB store of its own.

processing/operators.py's `process_batch` hands `suppress_results` the rows a windowed aggregation (time
or session windows) produced in a batch; they go into the buffer, and what stream time lets out
comes back as the rows the table's downstream (sinks, post steps) sees:

- ``until_window_closes``: an update's buffer time is its window's end; it comes out once
  ``window end <= stream time - wait`` (wait: the windows' grace, or gap + grace for sessions),
  and tombstones (merged-away sessions) are dropped then, never emitted: a final result is
  never retracted.
- ``until_time_limit``: an update's buffer time is its timestamp; it comes out once
  ``buffer time <= stream time - time limit``, tombstones included.

A key already buffered keeps its place (Kafka Streams' non-resetting buffer): its newest value
replaces the buffered one, stamped with the newer of the two timestamps (a window's result is
stamped with its newest record, as Kafka Streams stamps windowed aggregates). Stream time is
the aggregation store's (kept with its windows, in the store and its changelog).

Layout of the buffer store (bytes keys, one changelog): ``\\x00`` + buffer time (8 bytes,
offset so that order is time order) + record key -> timestamp + value, so eviction is one range
scan from the start; ``\\x01`` + record key -> buffer time (where a buffered key sits); ``\\x02``
-> the buffer's record count and bytes, so capacity needs no scan. The record key is the
aggregation key (its store serde) followed by the window's start and end. The buffer's writes
commit in the same Kafka transaction as the batch's outputs, so a restart or a failover neither
loses a buffered update nor emits one twice.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pyarrow as pa

from eddy_runtime.dsl.errors import PipelineRuntimeError
from eddy_runtime.dsl.subtopology import StatefulSpec, SuppressSpec
from eddy_runtime.kafka.records import arrow_type, timestamps_ms
from eddy_runtime.processing.sessions import windowed_rows
from eddy_runtime.state import KeyValueTransaction, TaskTransaction
from eddy_runtime.state.serde import serde_for, value_serde_for

__all__ = ["SuppressionBuffer", "SuppressionBufferFull", "suppress_results"]

_ENTRY, _INDEX, _META = b"\x00", b"\x01", b"\x02"
#: a buffer time, offset by 2**63 so that unsigned byte order is time order (negative times too)
_TIME = struct.Struct(">Q")
_OFFSET = 2**63
_I64 = struct.Struct(">q")
_META_VALUE = struct.Struct(">qq")


class SuppressionBufferFull(PipelineRuntimeError):
    """A suppression buffer over its ``max_records`` / ``max_bytes`` with ``shut_down``: the task
    fails (Kafka Streams' ``shutDownWhenFull``) and commits nothing of the batch."""


def _time_key(time: int) -> bytes:
    return _TIME.pack(min(max(time + _OFFSET, 0), 2**64 - 1))


class SuppressionBuffer:
    """A suppression buffer on one batch's transaction of its key-value store (bytes keys and
    values): `put` updates, `evict` what stream time lets out, `over_capacity` and `pop_oldest`
    for the buffer's limits."""

    def __init__(self, tx: KeyValueTransaction) -> None:
        self.tx = tx
        meta = tx.get(_META)
        self.records, self.bytes = (0, 0) if meta is None else _META_VALUE.unpack(meta)
        self._meta = (self.records, self.bytes)

    def put(self, record_key: bytes, time: int, timestamp: int, value: bytes | None) -> None:
        """Buffer `record_key`'s newest `value` (None: a tombstone) at buffer time `time`, or in
        the place it already has."""
        where = self.tx.get(_INDEX + record_key)
        if where is not None:
            entry = _ENTRY + where + record_key
            old = self.tx.get(entry)
            if old is not None:
                timestamp = max(timestamp, _I64.unpack(old[:8])[0])
                self.records -= 1
                self.bytes -= len(entry) + len(old)
        else:
            where = _time_key(time)
            entry = _ENTRY + where + record_key
            self.tx.put(_INDEX + record_key, where)
        stored = _I64.pack(timestamp) + (b"\x00" if value is None else b"\x01" + value)
        self.tx.put(entry, stored)
        self.records += 1
        self.bytes += len(entry) + len(stored)

    def _entries(self, until: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        yield from self.tx.range(_ENTRY, until if until is not None else _INDEX)

    def _take(self, entry: bytes, stored: bytes) -> tuple[bytes, int, bytes | None]:
        record_key = entry[9:]
        self.tx.delete(entry)
        self.tx.delete(_INDEX + record_key)
        self.records -= 1
        self.bytes -= len(entry) + len(stored)
        value = None if stored[8:9] == b"\x00" else stored[9:]
        return record_key, _I64.unpack(stored[:8])[0], value

    def evict(self, expiry: int) -> list[tuple[bytes, int, bytes | None]]:
        """Take out every update whose buffer time is at or before `expiry`, oldest first:
        (record key, timestamp, value or None)."""
        due = list(self._entries(_ENTRY + _time_key(expiry + 1))) if expiry + 1 > -_OFFSET else []
        return [self._take(e, v) for e, v in due]

    def over_capacity(self, limits: SuppressSpec) -> bool:
        return self._over(limits, self.records, self.bytes)

    @staticmethod
    def _over(limits: SuppressSpec, records: int, size: int) -> bool:
        s = limits.suppressed
        return ((s.max_records is not None and records > s.max_records)
                or (s.max_bytes is not None and size > s.max_bytes))

    def pop_oldest(self, limits: SuppressSpec) -> list[tuple[bytes, int, bytes | None]]:
        """Take out the oldest updates until the buffer is within its limits (``emit_early``);
        reads only as far as it takes out."""
        due: list[tuple[bytes, bytes]] = []
        records, size = self.records, self.bytes
        for entry, stored in self._entries():
            if not self._over(limits, records, size):
                break
            due.append((entry, stored))
            records, size = records - 1, size - len(entry) - len(stored)
        return [self._take(e, v) for e, v in due]

    def flush_counts(self) -> None:
        """Write the record count and bytes when this batch changed them."""
        if (self.records, self.bytes) != self._meta:
            self.tx.put(_META, _META_VALUE.pack(self.records, self.bytes))
            self._meta = (self.records, self.bytes)


def _stream_time(spec: StatefulSpec, tx: TaskTransaction) -> int | None:
    assert spec.store is not None
    store = tx.window(spec.store.name) if spec.windows is not None else tx.session(spec.store.name)
    st = store.stream_time
    return None if st is None else int(st)


def suppress_results(spec: StatefulSpec, result: pa.Table, tx: TaskTransaction, stream_time: int | None = None
                     ) -> pa.Table:
    """Put a batch's windowed results (`result`: ``key``, ``value``, ``window_start``,
    ``window_end``, ``timestamp``) into `spec`'s suppression buffer and return what comes out,
    oldest first, with the same columns. `stream_time`: the aggregation store's by default."""
    sup = spec.suppress
    assert sup is not None and spec.store is not None
    kserde, vserde = serde_for(spec.key_serde), value_serde_for(spec.store.value_serde)
    buffer = SuppressionBuffer(tx.key_value(sup.store.name))
    final = sup.suppressed.until == "window_closes"
    if result.num_rows:
        stamps = timestamps_ms(result)
        keys = result.column("key").to_pylist()
        values = result.column("value").to_pylist()
        starts = result.column("window_start").to_pylist()
        ends = result.column("window_end").to_pylist()
        pack = _I64.pack
        for i, (key, value, start, end) in enumerate(zip(keys, values, starts, ends, strict=True)):
            ts = int(stamps[i]) if stamps is not None else int(end)
            record_key = kserde.serialize(key) + pack(start) + pack(end)
            buffer.put(record_key, int(end) if final else ts, ts, None if value is None else vserde.serialize(value))
    if stream_time is None:
        stream_time = _stream_time(spec, tx)
    out = buffer.evict(stream_time - sup.wait_ms) if stream_time is not None else []
    if buffer.over_capacity(sup):
        if sup.suppressed.when_full == "shut_down":
            s = sup.suppressed
            raise SuppressionBufferFull(
                f"suppress buffer {sup.store.name!r} exceeded its max capacity: {buffer.records}/"
                f"{'unbounded' if s.max_records is None else s.max_records} records and {buffer.bytes}/"
                f"{'unbounded' if s.max_bytes is None else s.max_bytes} bytes (shut_down when full, as Kafka "
                "Streams' shutDownWhenFull); give suppress(...) a larger max_records / max_bytes")
        out += buffer.pop_oldest(sup)
    buffer.flush_counts()
    if final:
        out = [o for o in out if o[2] is not None]  # a final result is never a tombstone
    key_type = result.schema.field("key").type if result.num_rows else arrow_type(spec.key_serde)
    return windowed_rows(key_type, [kserde.deserialize(k[:-16]) for k, _, _ in out],
                         [None if v is None else vserde.deserialize(v) for _, _, v in out],
                         [_I64.unpack(k[-16:-8])[0] for k, _, _ in out], [_I64.unpack(k[-8:])[0] for k, _, _ in out],
                         [ts for _, ts, _ in out])
