"""What the time-keyed store kinds share: time segments with retention, and a stream time kept
with the data. `WindowStore` (window_store.py) and `SessionStore` (session_store.py) subclass it.

Records live in time segments, one RocksDB column family per segment; a segment whose newest
time is expired (by stream time, the newest record timestamp the task has seen, minus
retention) is dropped as a whole with ``drop_column_family``: expiring costs one metadata
operation, not a delete per key (Kafka Streams' segmented stores, inside one RocksDB instance).
Which time a record is filed under is the kind's business (a window's start, a session's end).

Stream time travels as one `STREAM_TIME_KEY` changelog record per batch that advanced it
(shorter than any timed key, so it cannot be one), compacted to the newest, and lives in the
store's offsets (rocksdb_store.py), so a restart or a restore on another executor resumes with
the stream time the task had and drops the same late records it would have.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from typing import Any, TypeVar

import rocksdict

from eddy_runtime.state.rocksdb_store import RocksDBStore, StoreTransaction
from eddy_runtime.state.serde import INT64
from eddy_runtime.state.store_spec import StoreSpec

__all__ = ["STREAM_TIME_KEY", "SegmentedStore", "StreamTimeTransaction"]

#: the changelog (and write batch) record of a store's stream time: 3 bytes, never a timed key
#: (those end in at least the 8 bytes of a time)
STREAM_TIME_KEY = b"\xffst"

log = logging.getLogger(__name__)

_SEGMENT_CF_PREFIX = "seg-"


class SegmentedStore(RocksDBStore):
    """Records filed by a time into segments of `spec.segment_interval`, kept for `spec.retention_ms`.

    A record filed at time ``t`` is expired when ``t <= expiry bound`` (`_expiry_bound`); whole
    segments at or before the bound are dropped after each write and on open.
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

    def _segment_id(self, time: int) -> int:
        return time // self._interval

    def _segment_cf(self, seg: int) -> Any:
        if seg not in self._segment_handles:
            name = f"{_SEGMENT_CF_PREFIX}{seg}"
            self._segments[seg] = self.db.create_column_family(name, self._make_options())
            self._segment_handles[seg] = self.db.get_column_family_handle(name)
        return self._segment_handles[seg]

    def _expiry_bound(self, stream_time: int | None) -> int | None:
        """Records filed at or before this time are expired (None: nothing is)."""
        if stream_time is None:
            return None
        return stream_time - self._retention

    def _drop_expired_segments(self) -> None:
        bound = self._expiry_bound(self._offsets.stream_time)
        if bound is None:
            return
        for seg in sorted(self._segments):
            newest = (seg + 1) * self._interval - 1
            if newest <= bound:
                del self._segments[seg]
                del self._segment_handles[seg]
                self.db.drop_column_family(f"{_SEGMENT_CF_PREFIX}{seg}")
                log.debug("store %s: dropped expired segment %d", self.spec.name, seg)

    def _segments_from(self, time_from: int, time_to: int | None = None) -> list[int]:
        """Segment ids that may hold records filed in [time_from, time_to], oldest first."""
        return [s for s in sorted(self._segments)
                if (s + 1) * self._interval > time_from and (time_to is None or s * self._interval <= time_to)]

    def _data_families(self) -> list[rocksdict.Rdict]:
        return [self._segments[s] for s in sorted(self._segments)]

    def _drop_handles(self) -> None:
        self._segments.clear()
        self._segment_handles.clear()

    def _after_write(self) -> None:
        self._drop_expired_segments()

    def _time_of(self, key: bytes) -> int:
        """The time a stored key is filed under (its segment, its expiry)."""
        raise NotImplementedError

    def _add_to_batch(
        self, wb: rocksdict.WriteBatch, records: Iterable[tuple[bytes, bytes | None]]
    ) -> tuple[int, int | None]:
        """Changelog records into their segments; a record already expired (a replay of old
        changelog records) is skipped, so it cannot come back. Stream time follows the records."""
        stream_time = self.stream_time
        n = 0
        for k, v in records:
            if k == STREAM_TIME_KEY:  # kept in the store's offsets, not as a record
                stream_time = self._stream_time_record(v, stream_time)
                continue
            time = self._time_of(k)
            if stream_time is None or time > stream_time:
                stream_time = time
            bound = self._expiry_bound(stream_time)
            if bound is not None and time <= bound:
                continue
            cf = self._segment_cf(self._segment_id(time))
            if v is None:
                wb.delete(k, cf)
            else:
                wb.put(k, v, cf)
            n += 1
        return n, stream_time

    @property
    def stream_time(self) -> int | None:
        return self._offsets.stream_time

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @staticmethod
    def _stream_time_record(value: bytes | None, stream_time: int | None) -> int | None:
        """Stream time after a replayed `STREAM_TIME_KEY` record."""
        if value is not None and (stream_time is None or INT64.unpack(value)[0] > stream_time):
            return int(INT64.unpack(value)[0])
        return stream_time


S = TypeVar("S", bound=SegmentedStore)


class StreamTimeTransaction(StoreTransaction[S]):
    """One batch's writes to a segmented store, and the stream time the batch reached."""

    def __init__(self, store: S) -> None:
        super().__init__(store)
        self._stream_time = store.stream_time

    @property
    def stream_time(self) -> int | None:
        return self._stream_time

    def observe(self, timestamp: int) -> None:
        """Raise stream time to `timestamp`, the newest record time the task has seen: it is
        kept with the data (store and changelog), so the task resumes with it."""
        if self._stream_time is None or timestamp > self._stream_time:
            self._stream_time = timestamp

    def _advanced(self) -> bool:
        st, base = self._stream_time, self.store.stream_time
        return st is not None and (base is None or st > base)

    @property
    def dirty(self) -> bool:
        return bool(self._writes) or self._advanced()

    def _with_stream_time(self, records: list[tuple[bytes, bytes | None]]) -> list[tuple[bytes, bytes | None]]:
        """`records`, and the stream time record when this batch advanced it."""
        if self._advanced():
            assert self._stream_time is not None
            records.append((STREAM_TIME_KEY, INT64.pack(self._stream_time)))
        return records
