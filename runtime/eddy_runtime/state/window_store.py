"""Window stores: (key, window start) -> value with retention, for windowed aggregations.

Windows live in the time segments of segmented_store.py (filed by window start), with
key-first keys (``serialised key + window start``, 8 bytes big-endian) so that one key's
windows are one range scan per segment; a window is expired when its start <= stream time -
retention, and segments holding only expired windows are dropped whole.

The changelog record of a window has the same raw key as the store, so restore.py replays it
through `WindowStore.write` like any other store; stream time travels as the `STREAM_TIME_KEY`
record (segmented_store.py). Writes and offsets share one write batch (rocksdb_store.py's
`RocksDBStore`); `ProcessorStateManager` opens these stores through `stores.open_store` and
processing reaches them through `WindowTransaction`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import rocksdict

from eddy_runtime.state.segmented_store import STREAM_TIME_KEY, SegmentedStore, StreamTimeTransaction
from eddy_runtime.state.serde import INT64

__all__ = ["STREAM_TIME_KEY", "WindowStore", "WindowTransaction", "split_windowed_key", "windowed_key"]


def windowed_key(key: bytes, window_start: int) -> bytes:
    """The raw key of a window: serialised key + window start (8 bytes, big-endian)."""
    return key + INT64.pack(window_start)


def split_windowed_key(raw: bytes) -> tuple[bytes, int]:
    return raw[:-8], INT64.unpack(raw[-8:])[0]


class WindowStore(SegmentedStore):
    """Windows of (key, window start) -> value in time segments (by window start), with retention.

    A window is expired when its start <= stream time - retention (stream time: the newest
    record timestamp the task has seen, or the newest window start written); expired windows are
    neither returned nor written, and segments holding only expired windows are dropped.
    """

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

    def _time_of(self, key: bytes) -> int:
        return int(INT64.unpack(key[-8:])[0])  # the window's start



class WindowTransaction(StreamTimeTransaction[WindowStore]):
    """One batch's view of a window store; reads see this batch's writes first."""

    def __init__(self, store: WindowStore) -> None:
        super().__init__(store)
        #: serialised key -> the window starts this batch wrote or deleted (a key's range reads
        #: look at its own writes, not every write of the batch: a stream-stream join reads a
        #: range per record, and a batch under a backlog holds thousands of writes)
        self._by_key: dict[bytes, set[int]] = {}

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
        writes = self._writes
        for ws in self._by_key.get(k, ()):
            wk = windowed_key(k, ws)
            if time_from <= ws <= time_to and wk in writes and not self._expired(ws):  # (none once applied)
                merged[ws] = writes[wk]
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
        self._write(self._kser(key), window_start, self._vser(value))
        return True

    def delete(self, key: Any, window_start: int) -> None:
        self._check_open()
        if not self._expired(window_start):
            self._write(self._kser(key), window_start, None)

    def _write(self, k: bytes, window_start: int, value: bytes | None) -> None:
        self._writes[windowed_key(k, window_start)] = value
        self._by_key.setdefault(k, set()).add(window_start)

    def changelog_records(self) -> list[tuple[bytes, bytes | None]]:
        """This batch's writes, without windows that expired while the batch advanced stream time."""
        bound = None if self._stream_time is None else self._stream_time - self.store._retention
        records = list(self._writes.items()) if bound is None else [
            (k, v) for k, v in self._writes.items() if INT64.unpack(k[-8:])[0] > bound]
        return self._with_stream_time(records)
