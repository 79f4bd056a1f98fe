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

__all__ = ["KeyValueStore", "KeyValueTransaction", "prefix_successor"]


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
    A range or prefix scan merges the store with the batch's writes in the range, found in a
    sorted list of the written keys (made at the first scan, kept sorted from then on), as Kafka
    Streams' cache keeps its keys in a tree: a processor that scans a prefix per record does not
    go over every write of a large batch each time.
    """

    def __init__(self, store: KeyValueStore) -> None:
        super().__init__(store)
        #: the written keys in order, once a scan needed them (None: no scan yet)
        self._sorted: list[bytes] | None = None

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
        if self._sorted is None:
            self._sorted = sorted(self._writes)
        keys, writes = self._sorted, self._writes
        lo = 0 if start is None else bisect_left(keys, start)
        hi = len(keys) if end is None else bisect_left(keys, end)
        pending = [(k, writes[k]) for k in keys[lo:hi]]
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
            insort(self._sorted, key)
        self._writes[key] = value

    def apply(self, changelog_offset: int | None, input_offsets: OffsetsByPartition | None = None) -> None:
        super().apply(changelog_offset, input_offsets)
        self._sorted = None
