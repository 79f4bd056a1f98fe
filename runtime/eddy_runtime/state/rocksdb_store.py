"""What both store kinds share: a RocksDB instance whose offsets are written with its data.

One RocksDB instance per task and store, at ``<stateDir>/<app>/<task>/rocksdb/<store>``
(task_directory.py). Keys and values are bytes inside; the serdes of the store's `StoreSpec`
(serde.py) convert at the API edge.

Every write goes through one path, `RocksDBStore._commit_batch`: a single RocksDB ``WriteBatch``
that carries the data *and* the store's offsets (the offset of the last changelog record it
reflects and the input positions it reflects) in the ``eddy_meta`` column family. So the data and
its offsets are always consistent on disk, an unclean stop never forces a wipe, and whatever is
missing is the changelog's delta after the store's offset (docs/DESIGN.md, "One micro-batch").

`KeyValueStore` (store.py) subclasses `RocksDBStore`, and the time-keyed kinds through
`SegmentedStore` (segmented_store.py); their transactions subclass `StoreTransaction`, whose
`apply` `ProcessorStateManager.write_committed` (manager.py) reaches through
`TaskTransaction.apply` (task_transaction.py) once Kafka has the batch (executor/commit.py).
Restores and standbys (restore.py) write changelog records with the WAL off, then `flush`.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Generic, Self, TypeVar

import rocksdict

from eddy_runtime.kafka.partitions import OffsetsByPartition, TopicPartition, topic_partition_offsets
from eddy_runtime.state.serde import INT64, serde_for, value_serde_for
from eddy_runtime.state.store_spec import InputOffsets, StoreOffsets, StoreSize, StoreSpec

__all__ = ["META_CF", "RocksDBStore", "StoreTransaction"]

log = logging.getLogger(__name__)

META_CF = "eddy_meta"
_K_CHANGELOG = b"changelog_offset"
_K_INPUTS = b"input_offsets"
_K_STREAM_TIME = b"stream_time"
_BULK_LOAD_MAX_L0_FILES = 8
#: the memtables of every store a process opens, together (one `rocksdict.WriteBufferManager`
#: shared by all): past it RocksDB flushes, and past it with the flushes behind it stalls the
#: writers. A task runner holds many stores and restores several at once (a bulk load may keep 16
#: memtables of 16 MB, a store 2 of 64 MB), and its pod's memory limit is Spark's executor memory
#: and overhead, the JVM's included (docs/DESIGN.md, "Figures behind settings in the code").
#: Kafka Streams' users bound it the same way (a `RocksDBConfigSetter` with one
#: WriteBufferManager for all stores).
MEMTABLE_BUDGET_BYTES = 192 << 20


@functools.cache
def _memtable_budget() -> rocksdict.WriteBufferManager:
    """The process' WriteBufferManager, made when its first store opens (a process that opens
    none, a driver or a Spark worker, makes none)."""
    return rocksdict.WriteBufferManager(MEMTABLE_BUDGET_BYTES, True)


def _encode_inputs(offsets: InputOffsets) -> bytes:
    return json.dumps(sorted([t, p, o] for (t, p), o in offsets.items())).encode()


def _decode_inputs(raw: bytes | None) -> dict[TopicPartition, int]:
    if not raw:
        return {}
    return {TopicPartition(t, int(p)): int(o) for t, p, o in json.loads(raw)}


class RocksDBStore:
    """What both store kinds share: opening, offsets in the metadata column family, flush, close."""

    def __init__(self, spec: StoreSpec, path: str | os.PathLike[str]) -> None:
        self.spec = spec
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._kser = serde_for(spec.key_serde).serialize
        self._kde = serde_for(spec.key_serde).deserialize
        self._vser = value_serde_for(spec.value_serde).serialize
        self._vde = serde_for(spec.value_serde).deserialize
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
        opts.set_write_buffer_manager(_memtable_budget())
        if bulk_load:
            # Loading a cold store from its changelog (restore.py): inserts append to a vector
            # memtable instead of a random skiplist insert each, and flushes sort each memtable
            # and drop overwritten values in C++ threads; one compaction at the end merges the
            # flushed files. Reads from a vector memtable are slow, and nothing reads meanwhile.
            # Small memtables sort faster, and several of them flush in parallel (the
            # measurement behind the sizes: docs/DESIGN.md, "Figures behind settings in the code").
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
            changelog_offset=INT64.unpack(raw_cl)[0] if raw_cl is not None else None,
            input_offsets=_decode_inputs(self._meta.get(_K_INPUTS)),
            stream_time=INT64.unpack(raw_st)[0] if raw_st is not None else None,
        )

    @property
    def offsets(self) -> StoreOffsets:
        """The offsets of what is written (read once on open, then kept in step by `write`)."""
        return self._offsets

    def _put_offsets(
        self,
        wb: rocksdict.WriteBatch,
        changelog_offset: int | None,
        input_offsets: OffsetsByPartition | None,
        stream_time: int | None,
    ) -> StoreOffsets:
        cur = self._offsets
        cl = cur.changelog_offset
        if changelog_offset is not None:
            cl = changelog_offset
            wb.put(_K_CHANGELOG, INT64.pack(changelog_offset), self._meta_handle)
        inputs = cur.input_offsets
        if input_offsets:
            inputs = topic_partition_offsets(cur.input_offsets, input_offsets)
            wb.put(_K_INPUTS, _encode_inputs(inputs), self._meta_handle)
        st = cur.stream_time
        if stream_time is not None and (st is None or stream_time > st):
            st = stream_time
            wb.put(_K_STREAM_TIME, INT64.pack(st), self._meta_handle)
        return StoreOffsets(cl, inputs, st)

    def _commit_batch(
        self,
        wb: rocksdict.WriteBatch,
        changelog_offset: int | None,
        input_offsets: OffsetsByPartition | None,
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

    def write(
        self,
        records: Iterable[tuple[bytes, bytes | None]],
        *,
        changelog_offset: int | None = None,
        input_offsets: OffsetsByPartition | None = None,
        disable_wal: bool = False,
    ) -> int:
        """Apply raw (key, value-or-None-for-delete) changelog records and the offsets in one
        write batch; returns how many records were written."""
        wb = rocksdict.WriteBatch(raw_mode=True)
        n, stream_time = self._add_to_batch(wb, records)
        self._commit_batch(wb, changelog_offset, input_offsets, stream_time, disable_wal)
        self._after_write()
        return n

    def _add_to_batch(
        self, wb: rocksdict.WriteBatch, records: Iterable[tuple[bytes, bytes | None]]
    ) -> tuple[int, int | None]:
        """Put `records` into `wb`: (records added, the stream time they reach or None)."""
        raise NotImplementedError

    def _after_write(self) -> None:
        """What a store kind does once a write landed (a window store drops expired segments)."""

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

    def flush_early(self, limit_bytes: int) -> None:
        """Start flushing, without waiting (RocksDB's threads write the files), each data column
        family whose active memtable holds more than `limit_bytes`, if it was written with the
        WAL off: a later `flush` (a standby's promotion, before the active's first logged write)
        then has little left to write. The metadata family is left to `flush`, so the data on disk
        stays at least as new as the offsets."""
        if not self._unflushed_without_wal:
            return
        for cf in self._data_families():
            if (cf.property_int_value("rocksdb.cur-size-active-mem-table") or 0) > limit_bytes:
                cf.flush(False)

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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec.name!r}, {str(self.path)!r})"


S = TypeVar("S", bound=RocksDBStore)


class StoreTransaction(Generic[S]):
    """What both transaction kinds share: pending writes (last per key, None = delete), applied once."""

    def __init__(self, store: S) -> None:
        self.store = store
        self._writes: dict[bytes, bytes | None] = {}
        self._kser, self._kde = store._kser, store._kde
        self._vser, self._vde = store._vser, store._vde
        self._applied = False

    def _check_open(self) -> None:
        if self._applied:
            raise RuntimeError(f"transaction on store {self.spec.name} was already applied")

    @property
    def spec(self) -> StoreSpec:
        return self.store.spec

    @property
    def dirty(self) -> bool:
        return bool(self._writes)

    def changelog_records(self) -> list[tuple[bytes, bytes | None]]:
        """The (key, value-or-None) records this batch sends to the changelog, in write order."""
        return list(self._writes.items())

    def apply(self, changelog_offset: int | None, input_offsets: OffsetsByPartition | None = None) -> None:
        """Write this batch and the offsets in one RocksDB write batch (the committer calls this,
        after the batch's changelog records are in Kafka)."""
        self._check_open()
        self.store.write(self.changelog_records(), changelog_offset=changelog_offset, input_offsets=input_offsets)
        self._applied = True
        self._writes = {}
