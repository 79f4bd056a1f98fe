"""RocksDB state stores (key-value and window) and the per-batch transactions that write them.

One RocksDB instance per task and store, at ``<stateDir>/<app>/<task>/rocksdb/<store>``
(task_directory.py). Keys and values are bytes inside; the serdes of the store's `StoreSpec`
(serde.py) convert at the API edge.

Every write goes through one path, `_RocksDBStore.write`: a single RocksDB ``WriteBatch`` that
carries the data *and* the store's offsets (the offset of the last changelog record it reflects
and the input positions it reflects) in the ``eddy_meta`` column family. So the data and its
offsets are always consistent on disk, an unclean stop never forces a wipe, and whatever is
missing is the changelog's delta after the store's offset.

Who calls what:

- processing (through `ProcessorStateManager.transaction()` in manager.py) reads and writes a
  `KeyValueTransaction` / `WindowTransaction`, which reads its own writes; `TaskCommitter`
  (commit.py) sends the transaction's changelog records to Kafka and then calls
  `StoreTransaction.apply` with the changelog offsets Kafka assigned;
- restore and standbys (restore.py) call `write` (or fill a raw write batch for
  `apply_write_batch`) with changelog records, WAL off, then `flush`.

The window store (window_store.py) builds on the same base class.
"""

from __future__ import annotations

import json
import logging
import os
import struct
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import rocksdict

from eddy_runtime.state.serde import serde_for

if TYPE_CHECKING:
    from eddy_runtime.state.window_store import WindowStore

__all__ = [
    "KeyValueStore",
    "KeyValueTransaction",
    "StoreOffsets",
    "StoreSize",
    "StoreSpec",
    "open_store",
]

log = logging.getLogger(__name__)

META_CF = "eddy_meta"
_K_CHANGELOG = b"changelog_offset"
_K_INPUTS = b"input_offsets"
_K_STREAM_TIME = b"stream_time"
_INT64 = struct.Struct(">q")
_BULK_LOAD_MAX_L0_FILES = 8

InputOffsets = Mapping[tuple[str, int], int]


@dataclass(frozen=True)
class StoreSpec:
    """What a store is: its name, kind, serdes and (for windows) size and retention.

    A plain picklable value: the driver builds it and ships it to executors.
    """

    name: str
    kind: Literal["key_value", "window"] = "key_value"
    key_serde: str = "bytes"
    value_serde: str = "bytes"
    window_size_ms: int | None = None
    retention_ms: int | None = None
    #: width of a window store's time segments; Kafka Streams' default max(retention / 2, 60 s)
    segment_interval_ms: int | None = None
    #: False for a store without a changelog (not restorable; for caches and tests)
    logged: bool = True

    @classmethod
    def key_value(cls, name: str, key_serde: str = "bytes", value_serde: str = "bytes") -> StoreSpec:
        return cls(name=name, kind="key_value", key_serde=key_serde, value_serde=value_serde)

    @classmethod
    def window(
        cls,
        name: str,
        window_size_ms: int,
        retention_ms: int,
        key_serde: str = "bytes",
        value_serde: str = "bytes",
        segment_interval_ms: int | None = None,
    ) -> StoreSpec:
        return cls(
            name=name,
            kind="window",
            key_serde=key_serde,
            value_serde=value_serde,
            window_size_ms=window_size_ms,
            retention_ms=retention_ms,
            segment_interval_ms=segment_interval_ms,
        )

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name or self.name.startswith("."):
            raise ValueError(f"store name {self.name!r} must be a plain, non-hidden folder name")
        serde_for(self.key_serde)
        serde_for(self.value_serde)
        if self.kind == "window":
            if not self.window_size_ms or self.window_size_ms <= 0:
                raise ValueError(f"window store {self.name!r} needs window_size_ms > 0")
            if self.retention_ms is None or self.retention_ms < self.window_size_ms:
                raise ValueError(f"window store {self.name!r} needs retention_ms >= window_size_ms")
        elif self.kind != "key_value":
            raise ValueError(f"store {self.name!r}: unknown kind {self.kind!r}")

    @property
    def segment_interval(self) -> int:
        if self.segment_interval_ms:
            return self.segment_interval_ms
        return max((self.retention_ms or 0) // 2, 60_000)

    def window_start(self, timestamp_ms: int) -> int:
        """Start of the tumbling window of `window_size_ms` that holds `timestamp_ms`."""
        assert self.window_size_ms
        return timestamp_ms - timestamp_ms % self.window_size_ms


@dataclass(frozen=True)
class StoreOffsets:
    """Where a store is: the last changelog offset it holds and the input positions it reflects.

    `changelog_offset` is Kafka Streams' checkpoint offset (the last changelog record applied;
    None when none was). `input_offsets` are consumer positions (next offset to process).
    """

    changelog_offset: int | None
    input_offsets: Mapping[tuple[str, int], int] = field(default_factory=dict)
    #: a window store's stream time (newest window start seen); None for key-value stores
    stream_time: int | None = None


@dataclass(frozen=True)
class StoreSize:
    """RocksDB's own estimates (cheap: no scan)."""

    keys: int
    bytes: int


def _encode_inputs(offsets: InputOffsets) -> bytes:
    return json.dumps(sorted([t, p, o] for (t, p), o in offsets.items())).encode()


def _decode_inputs(raw: bytes | None) -> dict[tuple[str, int], int]:
    if not raw:
        return {}
    return {(t, int(p)): int(o) for t, p, o in json.loads(raw)}


def prefix_successor(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with `prefix` (None: no upper bound)."""
    b = bytearray(prefix)
    while b:
        if b[-1] != 0xFF:
            b[-1] += 1
            return bytes(b)
        b.pop()
    return None


class _RocksDBStore:
    """What both store kinds share: opening, offsets in the metadata column family, flush, close."""

    def __init__(self, spec: StoreSpec, path: str | os.PathLike[str]) -> None:
        self.spec = spec
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._kser = serde_for(spec.key_serde).serialize
        self._kde = serde_for(spec.key_serde).deserialize
        self._vser = serde_for(spec.value_serde).serialize
        self._vde = serde_for(spec.value_serde).deserialize
        self._options = self._make_options()
        self._opened_column_families = self._existing_column_families()
        self._bulk_loading = False
        self._db: rocksdict.Rdict | None = None
        self._open_db()
        self._wal_on = rocksdict.WriteOptions()
        self._wal_off = rocksdict.WriteOptions()
        # A property at runtime; rocksdict's stub wrongly declares a method.
        self._wal_off.disable_wal = True  # type: ignore[method-assign,assignment]
        #: set once anything was written with the WAL off; cleared by `flush`
        self._unflushed_without_wal = False
        self._offsets = self._read_offsets()

    def _open_db(self, *, bulk_load: bool = False) -> None:
        cfs = {name: self._make_options() for name in self._existing_column_families() if name != "default"}
        cfs.setdefault(META_CF, self._make_options())
        main = self._make_options(bulk_load=bulk_load)
        # Every family is named, so RocksDB's OPTIONS file of a previous open (e.g. a bulk load)
        # never decides how a family is opened.
        cfs["default"] = main
        self._db = rocksdict.Rdict(str(self.path), main, column_families=cfs)
        self._meta = self._db.get_column_family(META_CF)
        self._meta_handle: Any = self._db.get_column_family_handle(META_CF)
        self._bulk_loading = bulk_load

    @staticmethod
    def _make_options(*, bulk_load: bool = False) -> rocksdict.Options:
        opts = rocksdict.Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.create_missing_column_families(True)
        # Data and metadata column families must reach disk together when the WAL is off
        # (restore), or a crash could keep offsets newer than the data they describe.
        opts.set_atomic_flush(True)
        opts.set_keep_log_file_num(2)
        opts.set_max_background_jobs(2)
        opts.set_write_buffer_size(64 << 20)
        if bulk_load:
            # Loading a cold store from its changelog (restore.py): inserts append to a vector
            # memtable instead of a random skiplist insert each, and flushes sort each memtable
            # and drop overwritten values in C++ threads; one compaction at the end merges the
            # flushed files. Reads from a vector memtable are slow, and nothing reads meanwhile.
            # Small memtables sort faster, and several of them flush in parallel (measured on
            # 10M records: 16 MB x 16 used the least CPU among 16-256 MB).
            opts.set_memtable_factory(rocksdict.MemtableFactory.vector())
            opts.set_allow_concurrent_memtable_write(False)
            opts.set_write_buffer_size(16 << 20)
            opts.set_max_write_buffer_number(16)
            opts.set_max_background_jobs(8)
            opts.set_max_subcompactions(2)
            opts.set_disable_auto_compactions(True)
        return opts

    def _existing_column_families(self) -> list[str]:
        if not (self.path / "CURRENT").exists():
            return []
        return list(rocksdict.Rdict.list_cf(str(self.path), rocksdict.Options(raw_mode=True)))

    # -- offsets ------------------------------------------------------------------------------

    def _read_offsets(self) -> StoreOffsets:
        raw_cl = self._meta.get(_K_CHANGELOG)
        raw_st = self._meta.get(_K_STREAM_TIME)
        return StoreOffsets(
            changelog_offset=_INT64.unpack(raw_cl)[0] if raw_cl is not None else None,
            input_offsets=_decode_inputs(self._meta.get(_K_INPUTS)),
            stream_time=_INT64.unpack(raw_st)[0] if raw_st is not None else None,
        )

    @property
    def offsets(self) -> StoreOffsets:
        """The offsets of what is written (read once on open, then kept in step by `write`)."""
        return self._offsets

    def _put_offsets(
        self,
        wb: rocksdict.WriteBatch,
        changelog_offset: int | None,
        input_offsets: InputOffsets | None,
        stream_time: int | None,
    ) -> StoreOffsets:
        cur = self._offsets
        cl = cur.changelog_offset
        if changelog_offset is not None:
            cl = changelog_offset
            wb.put(_K_CHANGELOG, _INT64.pack(changelog_offset), self._meta_handle)
        inputs = cur.input_offsets
        if input_offsets:
            inputs = {**cur.input_offsets, **input_offsets}
            wb.put(_K_INPUTS, _encode_inputs(inputs), self._meta_handle)
        st = cur.stream_time
        if stream_time is not None and (st is None or stream_time > st):
            st = stream_time
            wb.put(_K_STREAM_TIME, _INT64.pack(st), self._meta_handle)
        return StoreOffsets(cl, inputs, st)

    def _commit_batch(
        self,
        wb: rocksdict.WriteBatch,
        changelog_offset: int | None,
        input_offsets: InputOffsets | None,
        stream_time: int | None,
        disable_wal: bool,
    ) -> None:
        if self._unflushed_without_wal and not disable_wal:
            # A WAL-logged write must never be recovered on top of WAL-less writes that a crash
            # lost: make those durable first.
            self.flush()
        new_offsets = self._put_offsets(wb, changelog_offset, input_offsets, stream_time)
        self.db.write(wb, self._wal_off if disable_wal else self._wal_on)
        if disable_wal:
            self._unflushed_without_wal = True
        self._offsets = new_offsets

    # -- housekeeping -------------------------------------------------------------------------

    @property
    def db(self) -> rocksdict.Rdict:
        if self._db is None:
            raise RuntimeError(f"store {self.spec.name} at {self.path} is closed")
        return self._db

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def closed(self) -> bool:
        return self._db is None

    def _data_families(self) -> list[rocksdict.Rdict]:
        return [self.db]

    def begin_bulk_load(self) -> None:
        """Reopen with bulk-loading options (see `_make_options`); only for an empty store."""
        if self._bulk_loading:
            return
        if not self.is_empty():
            raise RuntimeError(f"store {self.spec.name}: bulk loading needs an empty store")
        self._reopen(bulk_load=True)

    def end_bulk_load(self) -> None:
        """Flush, merge the loaded files if there are many, and reopen with the normal options."""
        if not self._bulk_loading:
            return
        self.flush()
        # Few files are left to the normal background compactions; many would slow reads and
        # stall the first writes (level-0 triggers), so they are merged now, as restore work.
        if (self.db.property_int_value("rocksdb.num-files-at-level0") or 0) > _BULK_LOAD_MAX_L0_FILES:
            self.db.compact_range(None, None)
        self._reopen(bulk_load=False)

    @property
    def bulk_loading(self) -> bool:
        return self._bulk_loading

    def _reopen(self, *, bulk_load: bool) -> None:
        self._close_db()
        self._open_db(bulk_load=bulk_load)

    def _close_db(self) -> None:
        """Flush what the WAL does not cover, then drop every handle so that RocksDB really
        closes (column family and iterator handles keep it open) and releases its LOCK file."""
        if self._unflushed_without_wal:
            self.flush()
        self._drop_handles()
        db, self._db = self._db, None
        self._meta = None  # type: ignore[assignment]
        self._meta_handle = None
        assert db is not None
        db.close()
        del db
        self._bulk_loading = False

    def flush(self) -> None:
        """Write memtables to SST files: data first, metadata last.

        Needed after writes with the WAL off and before the first write with it on; if a crash
        interrupts, the data on disk is at least as new as the offsets, and replaying the
        changelog from an older offset is harmless (last value per key wins).
        """
        for cf in self._data_families():
            cf.flush(True)
        self._meta.flush(True)
        self._unflushed_without_wal = False

    def is_empty(self) -> bool:
        for cf in self._data_families():
            it = cf.iter()
            it.seek_to_first()
            valid = it.valid()
            del it
            if valid:
                return False
        return True

    def size(self) -> StoreSize:
        keys = 0
        size = 0
        for cf in self._data_families():
            keys += cf.property_int_value("rocksdb.estimate-num-keys") or 0
            size += cf.property_int_value("rocksdb.estimate-live-data-size") or 0
            size += cf.property_int_value("rocksdb.cur-size-all-mem-tables") or 0
        return StoreSize(keys=keys, bytes=size)

    def close(self) -> None:
        """Flush and close (idempotent)."""
        if self._db is not None:
            self._close_db()

    def _drop_handles(self) -> None:
        pass

    def __enter__(self) -> _RocksDBStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec.name!r}, {str(self.path)!r})"


class KeyValueStore(_RocksDBStore):
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
        input_offsets: InputOffsets | None = None,
        disable_wal: bool = False,
    ) -> None:
        """Add the offsets to a filled write batch and write it (one atomic RocksDB write)."""
        self._commit_batch(wb, changelog_offset, input_offsets, None, disable_wal)

    def write(
        self,
        records: Iterable[tuple[bytes, bytes | None]],
        *,
        changelog_offset: int | None = None,
        input_offsets: InputOffsets | None = None,
        disable_wal: bool = False,
    ) -> int:
        """Apply raw (key, value-or-None-for-delete) records and the offsets in one write batch."""
        wb = rocksdict.WriteBatch(raw_mode=True)
        put, delete = wb.put, wb.delete
        n = 0
        for k, v in records:
            if v is None:
                delete(k)
            else:
                put(k, v)
            n += 1
        self._commit_batch(wb, changelog_offset, input_offsets, None, disable_wal)
        return n


class _StoreTransaction:
    """What both transaction kinds share: pending writes (last per key, None = delete), applied once."""

    def __init__(self, store: _RocksDBStore) -> None:
        self._writes: dict[bytes, bytes | None] = {}
        self._kser, self._kde = store._kser, store._kde
        self._vser, self._vde = store._vser, store._vde
        self._applied = False

    def _check_open(self) -> None:
        if self._applied:
            raise RuntimeError(f"transaction on store {self.spec.name} was already applied")

    @property
    def spec(self) -> StoreSpec:
        return self.store.spec  # type: ignore[attr-defined, no-any-return]

    @property
    def dirty(self) -> bool:
        return bool(self._writes)

    def changelog_records(self) -> list[tuple[bytes, bytes | None]]:
        """The (key, value-or-None) records this batch sends to the changelog, in write order."""
        return list(self._writes.items())

    def apply(self, changelog_offset: int | None, input_offsets: InputOffsets | None = None) -> None:
        """Write this batch and the offsets in one RocksDB write batch (the committer calls this,
        after the batch's changelog records are in Kafka)."""
        self._check_open()
        self.store.write(  # type: ignore[attr-defined]
            self.changelog_records(), changelog_offset=changelog_offset, input_offsets=input_offsets
        )
        self._applied = True
        self._writes = {}


class KeyValueTransaction(_StoreTransaction):
    """One batch's view of a key-value store: reads see this batch's writes first.

    Writes are kept in memory (last write per key) until `apply`, which the committer calls
    after the batch's changelog records are in Kafka; `changelog_records` are exactly those
    writes, so the changelog carries one record per key and batch (Kafka Streams' caching).
    """

    def __init__(self, store: KeyValueStore) -> None:
        super().__init__(store)
        self.store = store

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
        pending = sorted(
            (k, v)
            for k, v in self._writes.items()
            if (start is None or k >= start) and (end is None or k < end)
        )
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
        self._writes[self._kser(key)] = self._vser(value)

    def put_many(self, keys: Sequence[Any], values: Sequence[Any]) -> None:
        self._check_open()
        kser, vser = self._kser, self._vser
        self._writes.update(zip([kser(k) for k in keys], [vser(v) for v in values], strict=True))

    def delete(self, key: Any) -> None:
        self._check_open()
        self._writes[self._kser(key)] = None



def open_store(spec: StoreSpec, path: str | os.PathLike[str]) -> KeyValueStore | WindowStore:
    """Open (creating if needed) the store that `spec` describes at `path`."""
    if spec.kind == "window":
        from eddy_runtime.state.window_store import WindowStore

        return WindowStore(spec, path)
    return KeyValueStore(spec, path)


if TYPE_CHECKING:
    StateStore: TypeAlias = KeyValueStore | WindowStore
