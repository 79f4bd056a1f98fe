"""Windowed stream-stream joins (Kafka Streams' ``KStream.join(KStream, ValueJoiner, JoinWindows)``):
each side's records in a window store of its own, each record joined with the other side's records
of its key within the join windows, the two inputs taken in timestamp order (joins.py's
`merge_order`)."""

from __future__ import annotations

import json
import logging
import struct
from typing import Any

import pyarrow as pa

from eddy_runtime.dsl.subtopology import StatefulSpec, TableSpec
from eddy_runtime.kafka.records import decode_value, encode_column, timestamps_ms
from eddy_runtime.processing.joins import JoinedRows, TableUpdates, joined_value, merge_order, result_rows
from eddy_runtime.state import KeyValueTransaction, TaskTransaction

__all__ = ["stream_stream_join"]

log = logging.getLogger("eddy.runner")

_LEN = struct.Struct(">I")


def _pack(values: list[bytes]) -> bytes:
    return b"".join(_LEN.pack(len(v)) + v for v in values)


def _unpack(raw: bytes) -> list[bytes]:
    out, at = [], 0
    while at < len(raw):
        (n,) = _LEN.unpack_from(raw, at)
        out.append(raw[at + 4:at + 4 + n])
        at += 4 + n
    return out


_OUTER_TS = struct.Struct(">Q")


class _Unmatched:
    """A left or outer join's records still without a partner, oldest first: Kafka Streams'
    outer join store (``TimestampedKeyAndJoinSide`` keys: timestamp, side, key). A record leaves
    it when a record of the other side joins it, or when its window closes (grace included) and
    it is emitted with a null partner."""

    def __init__(self, tx: KeyValueTransaction, sides: tuple[bool, ...], lookback: dict[bool, int], grace_ms: int
                 ) -> None:
        self.tx, self.sides, self.lookback, self.grace = tx, sides, lookback, grace_ms
        self._soonest = min(lookback[side] for side in sides)
        self.min_ts = self._first_ts()

    @staticmethod
    def _key(ts: int, is_this: bool, key: bytes) -> bytes:
        return _OUTER_TS.pack(ts + 2**63) + (b"\0" if is_this else b"\1") + key

    def _first_ts(self) -> int | None:
        first = next(iter(self.tx.range()), None)
        return None if first is None else _OUTER_TS.unpack(first[0][:8])[0] - 2**63

    def add(self, is_this: bool, ts: int, key: bytes, stored: bytes) -> None:
        if is_this not in self.sides:
            return
        k = self._key(ts, is_this, key)
        before = self.tx.get(k)
        self.tx.put(k, _pack([*(_unpack(before) if before is not None else []), stored]))
        self.min_ts = ts if self.min_ts is None else min(self.min_ts, ts)

    def joined(self, is_this: bool, ts: int, key: bytes) -> None:
        """The records of one side, key and timestamp found a partner."""
        if is_this in self.sides:
            self.tx.delete(self._key(ts, is_this, key))

    def closed(self, stream_time: int) -> list[tuple[bool, int, bytes, list[bytes]]]:
        """Take out the records whose window closed by `stream_time`, oldest first."""
        if self.min_ts is None or self.min_ts + self._soonest + self.grace >= stream_time:
            return []
        out = []
        for k, packed in self.tx.range(None, self._key(stream_time - self.grace - self._soonest, True, b"")):
            ts, is_this = _OUTER_TS.unpack(k[:8])[0] - 2**63, k[8:9] == b"\0"
            if ts + self.lookback[is_this] + self.grace < stream_time:
                out.append((is_this, ts, k[9:], _unpack(packed)))
        for is_this, ts, key, _ in out:
            self.tx.delete(self._key(ts, is_this, key))
        self.min_ts = self._first_ts()
        return out


def stream_stream_join(spec: StatefulSpec, other: TableSpec, rows: pa.Table, keys: pa.ChunkedArray, tx: TaskTransaction,
                       updates: TableUpdates | None) -> JoinedRows:
    """Kafka Streams' windowed join of two streams (``KStreamKStreamJoin``): `rows` are this
    stream's records, `updates` the other stream's, taken in timestamp order as `_as_of` takes
    them. Each record is kept in its side's window store (the records of one key and timestamp
    together) and joined with every record of the other side in its window:
    ``joiner(this value, other value)``, timestamped with the newer of the two. A record later
    than its window's end plus grace (by stream time, the newest timestamp of both sides) is
    dropped, as are null keys; a joiner that raises drops that result (logged, counted). This
    side's values are kept as JSON (the rows' values after record steps), the other's as bytes.

    Left and outer joins (``spec.how``): a record of an outer side that joined nothing waits in
    the outer store (`_Unmatched`); once stream time passes its window's end plus grace it is
    emitted as ``joiner(value, None)`` (``joiner(None, value)`` for the other side), at its own
    timestamp, before the record that moved stream time is joined, as Kafka Streams does."""
    assert spec.store is not None and spec.joiner is not None and spec.join_windows is not None
    w = spec.join_windows
    mine_store, theirs_store = tx.window(spec.store.name), tx.window(other.store.name)
    unmatched = None
    if spec.how != "inner":
        assert spec.outer_store is not None
        unmatched = _Unmatched(tx.key_value(spec.outer_store.name), (True,) if spec.how == "left" else (True, False),
                               {True: w.after_ms, False: w.before_ms}, w.grace_ms)
    this_keys = encode_column(keys, spec.key_serde)
    this_values = rows.column("value").to_pylist()
    stamps = timestamps_ms(rows)
    this_ts = [0] * rows.num_rows if stamps is None else [int(t) for t in stamps]
    upd = updates or TableUpdates([], [], [])
    times = [st for st in (mine_store.stream_time, theirs_store.stream_time) if st is not None]
    stream_time = max(times) if times else None
    out_keys: list[bytes] = []
    out_values: list[Any] = []
    out_ts: list[int] = []
    dropped = 0

    def emit(key: bytes, pair: tuple[Any, Any], ts: int) -> None:
        nonlocal dropped
        ok, result = joined_value(spec, pair, key, "stream join")
        if ok:
            out_keys.append(key)
            out_values.append(result)
            out_ts.append(ts)
        else:
            dropped += 1

    def other_value(raw: bytes) -> Any:
        return decode_value(raw, other.value_serde)

    for is_this, n in merge_order(this_ts, upd.timestamps):
        if is_this:
            key, ts, stored = this_keys[n], this_ts[n], None
            try:
                stored = json.dumps(this_values[n]).encode()
            except (TypeError, ValueError) as e:
                log.warning("stream join: value of key %r is not JSON (%s): dropped", key, e)
            value: Any = this_values[n]
        else:
            key, ts, stored = upd.keys[n], upd.timestamps[n], upd.values[n]
            value = None if stored is None else other_value(stored)
        closes = ts + (w.after_ms if is_this else w.before_ms) + w.grace_ms
        stream_time = ts if stream_time is None else max(stream_time, ts)
        if key is None or stored is None or value is None or closes < stream_time:
            dropped += 1  # a null key or value, or late for its window
            continue
        if unmatched is not None:
            for side, when, k, values in unmatched.closed(stream_time):
                for raw in values:
                    emit(k, (json.loads(raw), None) if side else (None, other_value(raw)), when)
        own, far = (mine_store, theirs_store) if is_this else (theirs_store, mine_store)
        low, high = (ts - w.before_ms, ts + w.after_ms) if is_this else (ts - w.after_ms, ts + w.before_ms)
        low = max(0, low)  # record timestamps are >= 0 (and a negative bound would sort after them)
        partners = 0
        for partner_ts, packed in far.fetch_range(key, low, high):
            partners += 1
            if unmatched is not None:
                unmatched.joined(not is_this, partner_ts, key)
            for raw in _unpack(packed):
                emit(key, (value, other_value(raw)) if is_this else (json.loads(raw), value), max(ts, partner_ts))
        if unmatched is not None and not partners:
            unmatched.add(is_this, ts, key, stored)
        before = own.fetch(key, ts)
        own.put(key, ts, _pack([*(_unpack(before) if before is not None else []), stored]))
    return JoinedRows(result_rows(out_keys, out_values, out_ts, spec.key_serde), dropped)
