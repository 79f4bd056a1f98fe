"""Key-value state stores and the per-batch transactions that write them.

Processing (through `ProcessorStateManager.transaction()`, manager.py) reads and writes a
`KeyValueTransaction`, which reads its own writes and holds them until the committer has the
batch's changelog records in Kafka; then `apply` writes data and offsets in one RocksDB write
batch (rocksdb_store.py). Restores fill raw write batches (`new_write_batch`,
`apply_write_batch`) on their hot path (restore.py). Design: docs/DESIGN.md, "One micro-batch".
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import rocksdict

from eddy_runtime.kafka.partitions import OffsetsByPartition
from eddy_runtime.state.rocksdb_store import RocksDBStore, StoreTransaction

__all__ = ["KeyValueStore", "KeyValueTransaction", "SortedKeys", "prefix_successor"]


def prefix_successor(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with `prefix` (None: no upper bound)."""
    b = bytearray(prefix)
    while b:
        if b[-1] != 0xFF:
            b[-1] += 1
            return bytes(b)
        b.pop()
    return None


class KeyValueStore(RocksDBStore):
    """A key-value store: get, range and prefix scans over committed data; writes via `begin()`."""

    # -- raw (bytes) access, used by transactions, restore and hot paths ---------------------

    def get_raw(self, key: bytes) -> bytes | None:
        return self.db.get(key)

    def get_many_raw(self, keys: list[bytes]) -> list[bytes | None]:
        if not keys:
            return []
        return self.db.get(keys)  # type: ignore[arg-type,return-value]  # a list gets a list

    def iter_raw(self, start: bytes | None = None, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Committed (key, value) pairs with start <= key < end, in key order."""
        ro = rocksdict.ReadOptions()
        if end is not None:
            ro.set_iterate_upper_bound(end)
        if start is None:
            yield from self.db.items(read_opt=ro)
        else:
            yield from self.db.items(from_key=start, read_opt=ro)

    # -- serde-aware reads of committed data ---------------------------------------------------

    def get(self, key: Any, default: Any = None) -> Any:
        raw = self.db.get(self._kser(key))
        return default if raw is None else self._vde(raw)

    def get_many(self, keys: Sequence[Any], default: Any = None) -> list[Any]:
        vde = self._vde
        return [default if r is None else vde(r) for r in self.get_many_raw([self._kser(k) for k in keys])]

    def range(self, start: Any = None, end: Any = None) -> Iterator[tuple[Any, Any]]:
        """(key, value) with start <= key < end in the order of the serialised keys."""
        s = None if start is None else self._kser(start)
        e = None if end is None else self._kser(end)
        kde, vde = self._kde, self._vde
        for k, v in self.iter_raw(s, e):
            yield kde(k), vde(v)

    def prefix(self, prefix: Any) -> Iterator[tuple[Any, Any]]:
        """(key, value) whose serialised key starts with the serialised `prefix`."""
        p = self._kser(prefix)
        kde, vde = self._kde, self._vde
        for k, v in self.iter_raw(p, prefix_successor(p)):
            yield kde(k), vde(v)

    def items(self) -> Iterator[tuple[Any, Any]]:
        return self.range()

    # -- writes ---------------------------------------------------------------------------------

    def begin(self) -> KeyValueTransaction:
        """A transaction for one batch: reads its own writes; nothing is written until `apply`."""
        return KeyValueTransaction(self)

    def new_write_batch(self) -> rocksdict.WriteBatch:
        """An empty raw write batch for `apply_write_batch` (restore's hot path fills it directly)."""
        return rocksdict.WriteBatch(raw_mode=True)

    def apply_write_batch(
        self,
        wb: rocksdict.WriteBatch,
        *,
        changelog_offset: int | None = None,
        input_offsets: OffsetsByPartition | None = None,
        disable_wal: bool = False,
    ) -> None:
        """Add the offsets to a filled write batch and write it (one atomic RocksDB write)."""
        self._commit_batch(wb, changelog_offset, input_offsets, None, disable_wal)

    def _add_to_batch(
        self, wb: rocksdict.WriteBatch, records: Iterable[tuple[bytes, bytes | None]]
    ) -> tuple[int, int | None]:
        put, delete = wb.put, wb.delete
        n = 0
        for k, v in records:
            if v is None:
                delete(k)
            else:
                put(k, v)
            n += 1
        return n, None


class KeyValueTransaction(StoreTransaction[KeyValueStore]):
    """One batch's view of a key-value store: reads see this batch's writes first.

    Writes are kept in memory (last write per key) until `apply`, which the committer calls
    after the batch's changelog records are in Kafka; `changelog_records` are exactly those
    writes, so the changelog carries one record per key and batch (Kafka Streams' caching).
    A range or prefix scan merges the store with the batch's writes in the range, found in the
    written keys kept in order (`SortedKeys`, made at the first scan), as Kafka Streams' cache
    keeps its keys in a tree: a processor that scans a prefix per record does not go over every
    write of a large batch each time, and a new key costs a short insertion, not one into a list
    of every key (which was 11% of q4's runner in bench/nexmark.py: its processor scans a prefix
    per auction and writes a key per early bid).
    """

    def __init__(self, store: KeyValueStore) -> None:
        super().__init__(store)
        #: the written keys in order, once a scan needed them (None: no scan yet)
        self._sorted: SortedKeys | None = None

    # -- reads --------------------------------------------------------------------------------

    def get(self, key: Any, default: Any = None) -> Any:
        k = self._kser(key)
        raw = self._writes[k] if k in self._writes else self.store.get_raw(k)
        return default if raw is None else self._vde(raw)

    def get_many(self, keys: Sequence[Any], default: Any = None) -> list[Any]:
        """Values of many keys with one RocksDB multi-get for those this batch has not written."""
        kser, vde, writes = self._kser, self._vde, self._writes
        raw_keys = [kser(k) for k in keys]
        missing = [k for k in raw_keys if k not in writes]
        found = dict(zip(missing, self.store.get_many_raw(missing), strict=True)) if missing else {}
        out = []
        for k in raw_keys:
            raw = writes[k] if k in writes else found[k]
            out.append(default if raw is None else vde(raw))
        return out

    def range(self, start: Any = None, end: Any = None) -> Iterator[tuple[Any, Any]]:
        s = None if start is None else self._kser(start)
        e = None if end is None else self._kser(end)
        yield from self._merged(s, e)

    def prefix(self, prefix: Any) -> Iterator[tuple[Any, Any]]:
        p = self._kser(prefix)
        yield from self._merged(p, prefix_successor(p))

    def _merged(self, start: bytes | None, end: bytes | None) -> Iterator[tuple[Any, Any]]:
        writes = self._writes
        pending = [(k, writes[k]) for k in self._written_between(start, end)]
        kde, vde = self._kde, self._vde
        i = 0
        for k, v in self.store.iter_raw(start, end):
            while i < len(pending) and pending[i][0] < k:
                pk, pv = pending[i]
                i += 1
                if pv is not None:
                    yield kde(pk), vde(pv)
            if i < len(pending) and pending[i][0] == k:
                pv = pending[i][1]
                i += 1
                if pv is not None:
                    yield kde(k), vde(pv)
                continue
            yield kde(k), vde(v)
        for pk, pv in pending[i:]:
            if pv is not None:
                yield kde(pk), vde(pv)

    def _written_between(self, start: bytes | None, end: bytes | None) -> list[bytes]:
        """The keys this batch wrote with start <= key < end, in order."""
        if self._sorted is None:
            self._sorted = SortedKeys(self._writes)
        return self._sorted.between(start, end)

    # -- writes -------------------------------------------------------------------------------

    def put(self, key: Any, value: Any) -> None:
        self._check_open()
        self._write(self._kser(key), self._vser(value))

    def put_many(self, keys: Sequence[Any], values: Sequence[Any]) -> None:
        self._check_open()
        kser, vser = self._kser, self._vser
        if self._sorted is not None:
            for k, v in zip(keys, values, strict=True):
                self._write(kser(k), vser(v))
            return
        self._writes.update(zip([kser(k) for k in keys], [vser(v) for v in values], strict=True))

    def delete(self, key: Any) -> None:
        self._check_open()
        self._write(self._kser(key), None)

    def _write(self, key: bytes, value: bytes | None) -> None:
        if self._sorted is not None and key not in self._writes:
            self._sorted.add(key)
        self._writes[key] = value

    def apply(self, changelog_offset: int | None, input_offsets: OffsetsByPartition | None = None) -> None:
        super().apply(changelog_offset, input_offsets)
        self._sorted = None


class SortedKeys:
    """Distinct keys in order, as sorted chunks of at most 2 x `half` keys (the layout of
    sortedcontainers' SortedList): adding a key is a bisection and an insertion into one chunk,
    a range is a bisection and the chunks it covers."""

    def __init__(self, keys: Iterable[bytes], half: int = 256) -> None:
        ordered = sorted(keys)
        self._half = half
        self._chunks = [ordered[i:i + half] for i in range(0, len(ordered), half)]
        self._maxes = [chunk[-1] for chunk in self._chunks]

    def add(self, key: bytes) -> None:
        """Add a key not already held."""
        if not self._chunks:
            self._chunks, self._maxes = [[key]], [key]
            return
        i = min(bisect_left(self._maxes, key), len(self._maxes) - 1)
        chunk = self._chunks[i]
        insort(chunk, key)
        self._maxes[i] = chunk[-1]
        if len(chunk) > 2 * self._half:
            self._chunks[i:i + 1] = [chunk[:self._half], chunk[self._half:]]
            self._maxes[i:i + 1] = [chunk[self._half - 1], chunk[-1]]

    def between(self, start: bytes | None, end: bytes | None) -> list[bytes]:
        """The keys with start <= key < end, in order."""
        chunks = self._chunks
        out: list[bytes] = []
        j = 0 if start is None else bisect_left(self._maxes, start)
        lo = 0 if start is None or j == len(chunks) else bisect_left(chunks[j], start)
        while j < len(chunks):
            chunk = chunks[j]
            hi = len(chunk) if end is None else bisect_left(chunk, end, lo)
            out.extend(chunk[lo:hi])
            if hi < len(chunk):
                break
            j, lo = j + 1, 0
        return out
