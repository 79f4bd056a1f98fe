"""Window stores: (key, window start) -> value with retention, for windowed aggregations.

Windows live in time segments, one RocksDB column family per segment, with key-first keys
(``serialised key + window start``, 8 bytes big-endian) so that one key's windows are one
range scan per segment. A segment whose newest window is expired (window start <= stream time
- retention, stream time being the newest record timestamp the task has seen, or the newest
window start written) is dropped as a whole with
``drop_column_family``: expiring windows costs one metadata operation, not a delete per key
(Kafka Streams' segmented window store, inside one RocksDB instance; docs/DESIGN.md, "Vocabulary").

The changelog record of a window has the same raw key as the store, so restore.py replays it
through `WindowStore.write` like any other store. Stream time travels the same way: a batch that
advanced it writes one `STREAM_TIME_KEY` record (shorter than any windowed key, so it cannot be
one), compacted to the newest, so a restart or a restore on another executor resumes with the
stream time the task had, and drops the same late records it would have. Writes and offsets share one write batch
(rocksdb_store.py's `RocksDBStore`); `ProcessorStateManager` opens these stores through
`stores.open_store` and processing reaches them through `WindowTransaction`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator
from typing import Any

import rocksdict

from eddy_runtime.state.rocksdb_store import RocksDBStore, StoreTransaction
from eddy_runtime.state.serde import INT64
from eddy_runtime.state.store_spec import StoreSpec

__all__ = ["STREAM_TIME_KEY", "WindowStore", "WindowTransaction", "split_windowed_key", "windowed_key"]

#: the changelog (and write batch) record of a window store's stream time: 3 bytes, never a
#: windowed key (those are at least the 8 bytes of the window start)
STREAM_TIME_KEY = b"\xffst"

log = logging.getLogger(__name__)

_SEGMENT_CF_PREFIX = "seg-"


def windowed_key(key: bytes, window_start: int) -> bytes:
    """The raw key of a window: serialised key + window start (8 bytes, big-endian)."""
    return key + INT64.pack(window_start)


def split_windowed_key(raw: bytes) -> tuple[bytes, int]:
    return raw[:-8], INT64.unpack(raw[-8:])[0]


class WindowStore(RocksDBStore):
    """Windows of (key, window start) -> value in time segments, with retention.

    A window is expired when its start <= stream time - retention (stream time: the newest
    window start written); expired windows are neither returned nor written, and segments
    holding only expired windows are dropped.
    """

    def __init__(self, spec: StoreSpec, path: str | os.PathLike[str]) -> None:
        super().__init__(spec, path)
        self._interval = spec.segment_interval
        self._retention = int(spec.retention_ms or 0)
        self._segments: dict[int, rocksdict.Rdict] = {}
        self._segment_handles: dict[int, Any] = {}
        for name in self._opened_column_families:
            if name.startswith(_SEGMENT_CF_PREFIX):
                seg = int(name[len(_SEGMENT_CF_PREFIX):])
                self._segments[seg] = self.db.get_column_family(name)
                self._segment_handles[seg] = self.db.get_column_family_handle(name)
        self._drop_expired_segments()

    # -- segments ---------------------------------------------------------------------------

    def _segment_id(self, window_start: int) -> int:
        return window_start // self._interval

    def _segment_cf(self, seg: int) -> Any:
        if seg not in self._segment_handles:
            name = f"{_SEGMENT_CF_PREFIX}{seg}"
            self._segments[seg] = self.db.create_column_family(name, self._make_options())
            self._segment_handles[seg] = self.db.get_column_family_handle(name)
        return self._segment_handles[seg]

    def _expiry_bound(self, stream_time: int | None) -> int | None:
        """Windows starting at or before this are expired (None: nothing is)."""
        if stream_time is None:
            return None
        return stream_time - self._retention

    def _drop_expired_segments(self) -> None:
        bound = self._expiry_bound(self._offsets.stream_time)
        if bound is None:
            return
        for seg in sorted(self._segments):
            newest_start = (seg + 1) * self._interval - 1
            if newest_start <= bound:
                del self._segments[seg]
                del self._segment_handles[seg]
                self.db.drop_column_family(f"{_SEGMENT_CF_PREFIX}{seg}")
                log.debug("store %s: dropped expired segment %d", self.spec.name, seg)

    def _data_families(self) -> list[rocksdict.Rdict]:
        return [self._segments[s] for s in sorted(self._segments)]

    def _drop_handles(self) -> None:
        self._segments.clear()
        self._segment_handles.clear()

    @property
    def stream_time(self) -> int | None:
        return self._offsets.stream_time

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    # -- raw reads ------------------------------------------------------------------------------

    def get_raw(self, key: bytes, window_start: int, stream_time: int | None = None) -> bytes | None:
        bound = self._expiry_bound(stream_time if stream_time is not None else self.stream_time)
        if bound is not None and window_start <= bound:
            return None
        cf = self._segments.get(self._segment_id(window_start))
        return None if cf is None else cf.get(windowed_key(key, window_start))

    def iter_key_raw(
        self, key: bytes, time_from: int, time_to: int, stream_time: int | None = None
    ) -> Iterator[tuple[int, bytes]]:
        """(window start, value) of `key` with time_from <= start <= time_to, oldest first."""
        bound = self._expiry_bound(stream_time if stream_time is not None else self.stream_time)
        if bound is not None:
            time_from = max(time_from, bound + 1)
        if time_from > time_to:
            return
        lo = windowed_key(key, time_from)
        hi = windowed_key(key, time_to)
        want_len = len(key) + 8
        for seg in sorted(self._segments):
            if (seg + 1) * self._interval <= time_from or seg * self._interval > time_to:
                continue
            ro = rocksdict.ReadOptions()
            ro.set_iterate_upper_bound(hi + b"\x00")
            for k, v in self._segments[seg].items(from_key=lo, read_opt=ro):
                assert isinstance(k, bytes)
                # A longer key sharing this key's bytes as a prefix can sort in between.
                if len(k) == want_len:
                    yield INT64.unpack(k[-8:])[0], v

    def iter_all_raw(
        self, time_from: int, time_to: int, stream_time: int | None = None
    ) -> Iterator[tuple[bytes, int, bytes]]:
        """(key, window start, value) of every window with time_from <= start <= time_to."""
        bound = self._expiry_bound(stream_time if stream_time is not None else self.stream_time)
        if bound is not None:
            time_from = max(time_from, bound + 1)
        for seg in sorted(self._segments):
            if (seg + 1) * self._interval <= time_from or seg * self._interval > time_to:
                continue
            for k, v in self._segments[seg].items():
                assert isinstance(k, bytes)
                ws = INT64.unpack(k[-8:])[0]
                if time_from <= ws <= time_to:
                    yield k[:-8], ws, v

    # -- serde-aware reads ----------------------------------------------------------------------

    def fetch(self, key: Any, window_start: int, default: Any = None) -> Any:
        raw = self.get_raw(self._kser(key), window_start)
        return default if raw is None else self._vde(raw)

    def fetch_range(self, key: Any, time_from: int, time_to: int) -> Iterator[tuple[int, Any]]:
        vde = self._vde
        for ws, v in self.iter_key_raw(self._kser(key), time_from, time_to):
            yield ws, vde(v)

    def fetch_all(self, time_from: int, time_to: int) -> Iterator[tuple[tuple[Any, int], Any]]:
        kde, vde = self._kde, self._vde
        for k, ws, v in self.iter_all_raw(time_from, time_to):
            yield (kde(k), ws), vde(v)

    # -- writes -----------------------------------------------------------------------------

    def begin(self) -> WindowTransaction:
        return WindowTransaction(self)

    def _add_to_batch(
        self, wb: rocksdict.WriteBatch, records: Iterable[tuple[bytes, bytes | None]]
    ) -> tuple[int, int | None]:
        """Windowed changelog records into their segments; a record of an expired window (a
        replay of old changelog records) is skipped, so it cannot come back."""
        stream_time = self.stream_time
        unpack = INT64.unpack
        n = 0
        for k, v in records:
            if k == STREAM_TIME_KEY:  # kept in the store's offsets, not as a window
                if v is not None and (stream_time is None or unpack(v)[0] > stream_time):
                    stream_time = unpack(v)[0]
                continue
            ws = unpack(k[-8:])[0]
            if stream_time is None or ws > stream_time:
                stream_time = ws
            if ws <= stream_time - self._retention:
                continue
            cf = self._segment_cf(self._segment_id(ws))
            if v is None:
                wb.delete(k, cf)
            else:
                wb.put(k, v, cf)
            n += 1
        return n, stream_time

    def _after_write(self) -> None:
        self._drop_expired_segments()


class WindowTransaction(StoreTransaction[WindowStore]):
    """One batch's view of a window store; reads see this batch's writes first."""

    def __init__(self, store: WindowStore) -> None:
        super().__init__(store)
        self._stream_time = store.stream_time

    @property
    def stream_time(self) -> int | None:
        return self._stream_time

    def observe(self, timestamp: int) -> None:
        """Raise stream time to `timestamp`, the newest record time the task has seen: it is
        kept with the windows (store and changelog), so the task resumes with it."""
        if self._stream_time is None or timestamp > self._stream_time:
            self._stream_time = timestamp

    def _advanced(self) -> bool:
        st, base = self._stream_time, self.store.stream_time
        return st is not None and (base is None or st > base)

    @property
    def dirty(self) -> bool:
        return bool(self._writes) or self._advanced()

    def _expired(self, window_start: int) -> bool:
        st = self._stream_time
        return st is not None and window_start <= st - self.store._retention

    def fetch(self, key: Any, window_start: int, default: Any = None) -> Any:
        wk = windowed_key(self._kser(key), window_start)
        if self._expired(window_start):
            return default
        raw = (
            self._writes[wk] if wk in self._writes else self.store.get_raw(wk[:-8], window_start, self._stream_time)
        )
        return default if raw is None else self._vde(raw)

    def fetch_range(self, key: Any, time_from: int, time_to: int) -> Iterator[tuple[int, Any]]:
        k = self._kser(key)
        merged: dict[int, bytes | None] = dict(self.store.iter_key_raw(k, time_from, time_to, self._stream_time))
        for wk, v in self._writes.items():
            if len(wk) == len(k) + 8 and wk[:-8] == k:
                ws = INT64.unpack(wk[-8:])[0]
                if time_from <= ws <= time_to and not self._expired(ws):
                    merged[ws] = v
        vde = self._vde
        for ws in sorted(merged):
            v = merged[ws]
            if v is not None:
                yield ws, vde(v)

    def put(self, key: Any, window_start: int, value: Any) -> bool:
        """Write a window; False (and nothing written) when the window is already expired."""
        self._check_open()
        if self._stream_time is None or window_start > self._stream_time:
            self._stream_time = window_start
        if self._expired(window_start):
            return False
        self._writes[windowed_key(self._kser(key), window_start)] = self._vser(value)
        return True

    def delete(self, key: Any, window_start: int) -> None:
        self._check_open()
        if not self._expired(window_start):
            self._writes[windowed_key(self._kser(key), window_start)] = None

    def changelog_records(self) -> list[tuple[bytes, bytes | None]]:
        """This batch's writes, without windows that expired while the batch advanced stream time."""
        bound = None if self._stream_time is None else self._stream_time - self.store._retention
        records = list(self._writes.items()) if bound is None else [
            (k, v) for k, v in self._writes.items() if INT64.unpack(k[-8:])[0] > bound]
        if self._advanced():
            assert self._stream_time is not None
            records.append((STREAM_TIME_KEY, INT64.pack(self._stream_time)))
        return records
