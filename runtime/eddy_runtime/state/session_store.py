"""Session stores: (key, session end, session start) -> value with retention, for session windows.

Kafka Streams' ``RocksDBSessionStore``: a raw key is ``serialised key + end + start`` (8 bytes
each, big-endian; Kafka's ``SessionKeySchema``), filed in the time segments of
segmented_store.py by session end, so one key's sessions are one range scan from the earliest
end asked for, in (end, start) order. A session is expired when its end < stream time -
retention (retention being at least inactivity gap + grace, so a session that an on-time record
could still merge with is always kept); segments holding only expired sessions are dropped
whole.

The changelog record of a session has the store's raw key (a tombstone for a session merged
away), so restore.py replays it through `SessionStore.write` like any other store; stream time
travels as the `STREAM_TIME_KEY` record. `ProcessorStateManager` opens these stores through
`stores.open_store`; the session aggregation (processing/sessions.py) reaches them through
`SessionTransaction`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import rocksdict

from eddy_runtime.state.segmented_store import SegmentedStore, StreamTimeTransaction
from eddy_runtime.state.serde import INT64

__all__ = ["SessionStore", "SessionTransaction", "session_key", "split_session_key"]

_PACK = INT64.pack
_UNPACK = INT64.unpack


def session_key(key: bytes, start: int, end: int) -> bytes:
    """The raw key of a session: serialised key + end + start (8 bytes each, big-endian)."""
    return key + _PACK(end) + _PACK(start)


def split_session_key(raw: bytes) -> tuple[bytes, int, int]:
    """(serialised key, start, end) of a raw session key."""
    return raw[:-16], _UNPACK(raw[-8:])[0], _UNPACK(raw[-16:-8])[0]


def _end_of(raw: bytes) -> int:
    return int(_UNPACK(raw[-16:-8])[0])


class SessionStore(SegmentedStore):
    """Sessions of (key, start, end) -> value in segments by session end, with retention."""

    def _expiry_bound(self, stream_time: int | None) -> int | None:
        # a session ending exactly at stream time - retention can still take an on-time record
        return None if stream_time is None else stream_time - self._retention - 1

    # -- raw reads ------------------------------------------------------------------------------

    def find_sessions_raw(self, key: bytes, earliest_end: int, latest_start: int,
                          stream_time: int | None = None) -> Iterator[tuple[int, int, bytes]]:
        """(start, end, value) of `key`'s sessions with end >= earliest_end and start <=
        latest_start (Kafka Streams' ``findSessions``), in (end, start) order, unexpired."""
        bound = self._expiry_bound(stream_time if stream_time is not None else self.stream_time)
        earliest_end = max(earliest_end, 0 if bound is None else bound + 1, 0)
        lo = key + _PACK(earliest_end)
        hi = key + b"\xff" * 17  # past every (end, start) of this key
        want_len = len(key) + 16
        for seg in self._segments_from(earliest_end):
            ro = rocksdict.ReadOptions()
            ro.set_iterate_upper_bound(hi)
            for k, v in self._segments[seg].items(from_key=lo, read_opt=ro):
                assert isinstance(k, bytes)
                # A longer key sharing this key's bytes as a prefix can sort in between.
                if len(k) != want_len:
                    continue
                start = int(_UNPACK(k[-8:])[0])
                if start > latest_start:
                    return  # one key's sessions do not overlap: later ends start later too
                yield start, _end_of(k), v

    def iter_all_raw(self) -> Iterator[tuple[bytes, int, int, bytes]]:
        """(key, start, end, value) of every unexpired session, by segment."""
        bound = self._expiry_bound(self.stream_time)
        for seg in sorted(self._segments):
            for k, v in self._segments[seg].items():
                assert isinstance(k, bytes)
                key, start, end = split_session_key(k)
                if bound is None or end > bound:
                    yield key, start, end, v

    # -- serde-aware reads ----------------------------------------------------------------------

    def find_sessions(self, key: Any, earliest_end: int, latest_start: int) -> Iterator[tuple[tuple[int, int], Any]]:
        """((start, end), value) of `key`'s sessions ending at or after `earliest_end` and
        starting at or before `latest_start`."""
        vde = self._vde
        for start, end, v in self.find_sessions_raw(self._kser(key), earliest_end, latest_start):
            yield (start, end), vde(v)

    def fetch_session(self, key: Any, start: int, end: int, default: Any = None) -> Any:
        for (s, e), v in self.find_sessions(key, end, start):
            if (s, e) == (start, end):
                return v
        return default

    def all_sessions(self) -> list[tuple[tuple[Any, int, int], Any]]:
        """((key, start, end), value) of every unexpired session, sorted."""
        kde, vde = self._kde, self._vde
        return sorted(((kde(k), s, e), vde(v)) for k, s, e, v in self.iter_all_raw())

    # -- writes -----------------------------------------------------------------------------

    def begin(self) -> SessionTransaction:
        return SessionTransaction(self)

    def _time_of(self, key: bytes) -> int:
        return _end_of(key)  # a session ends at a record's timestamp: stream time saw it


class SessionTransaction(StreamTimeTransaction[SessionStore]):
    """One batch's view of a session store; reads see this batch's writes (and removals) first."""

    def __init__(self, store: SessionStore) -> None:
        super().__init__(store)
        #: serialised key -> the raw session keys this batch wrote or removed
        self._by_key: dict[bytes, set[bytes]] = {}

    def _expired(self, end: int) -> bool:
        bound = self.store._expiry_bound(self._stream_time)
        return bound is not None and end <= bound

    def find_sessions(self, key: Any, earliest_end: int, latest_start: int) -> list[tuple[tuple[int, int], Any]]:
        """((start, end), value) of `key`'s sessions with end >= earliest_end and start <=
        latest_start, in (end, start) order: the ones a record at ``t`` merges with are
        ``find_sessions(key, t - gap, t + gap)``."""
        k = self._kser(key)
        found: dict[tuple[int, int], bytes | None] = {
            (s, e): v for s, e, v in self.store.find_sessions_raw(k, earliest_end, latest_start, self._stream_time)}
        for raw in self._by_key.get(k, ()):
            _, s, e = split_session_key(raw)
            if e >= earliest_end and s <= latest_start and not self._expired(e):
                found[(s, e)] = self._writes[raw]
        vde = self._vde
        return [((s, e), vde(v)) for (s, e), v in sorted(found.items(), key=lambda kv: (kv[0][1], kv[0][0]))
                if v is not None]

    def in_store(self, key: Any, start: int, end: int) -> bool:
        """Whether the committed store holds this session (so removing it must be told downstream)."""
        return any((s, e) == (start, end)
                   for s, e, _ in self.store.find_sessions_raw(self._kser(key), end, start, self._stream_time))

    def _write(self, key: Any, start: int, end: int, value: bytes | None) -> None:
        k = self._kser(key)
        raw = session_key(k, start, end)
        self._writes[raw] = value
        self._by_key.setdefault(k, set()).add(raw)

    def put(self, key: Any, start: int, end: int, value: Any) -> bool:
        """Write a session; False (and nothing written) when it is already expired."""
        self._check_open()
        if self._expired(end):
            return False
        self._write(key, start, end, self._vser(value))
        return True

    def remove(self, key: Any, start: int, end: int) -> None:
        """Delete a session (merged into a newer one): a tombstone in the changelog."""
        self._check_open()
        if not self._expired(end):
            self._write(key, start, end, None)

    def changelog_records(self) -> list[tuple[bytes, bytes | None]]:
        """This batch's writes, without sessions that expired while the batch advanced stream time."""
        records = [(k, v) for k, v in self._writes.items() if not self._expired(_end_of(k))]
        return self._with_stream_time(records)
