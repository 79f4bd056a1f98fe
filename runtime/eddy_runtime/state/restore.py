"""Restoring stores from their changelogs, in bounded chunks (Kafka Streams' StoreChangelogReader).

`ProcessorStateManager` (manager.py) registers each logged store of a task here and calls
`StoreChangelogReader.restore_chunk` until it reports done, so a caller can interleave restores
with other work (unlike Quix Streams' stop-the-world recovery loop). Standbys (standby.py) use
the same reader in *tail* mode, where there is no end and the figure of interest is the lag.

A restore runs from the store's offset + 1 to the changelog's end as a ``read_committed``
consumer sees it (the last stable offset, so records of open or aborted transactions never
land). Offsets may jump over compacted records and transaction markers; the reader never
counts on consecutive offsets: a partition is done when its position (next offset to read)
reaches the end, which the consumer also reports as a partition EOF.

Each consumed batch becomes one RocksDB write batch, with the WAL off and one flush at the end
(the changelog covers a crash in between: the store's offsets are written in the same batches,
and data and offsets are flushed together); a cold key-value store is opened with bulk-loading
options meanwhile (vector memtable, compaction once at the end, rocksdb_store.py), so the loop
leaves sorting to RocksDB's threads. bench/restore.py measures this path as a task runner drives
it, and its README says where the CPU goes. Writing the last value per key to a sorted SST file
and ingesting it was slower (docs/DESIGN.md), so there is no such path.

Edge cases: an empty changelog restores nothing; a store offset beyond the changelog's end
(the topic was recreated) or below its start (records were deleted) means the local store
cannot be trusted, so it is wiped and restored from scratch with a warning; a changelog that
does not exist raises `ChangelogTopicMissing`. When restores run: docs/DESIGN.md, "One micro-batch"
and "The operator's part".
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from eddy_runtime.kafka.record_collector import input_offsets_in
from eddy_runtime.state.changelog import ChangelogTopicMissing
from eddy_runtime.state.restore_progress import RestoreProgress, TaskRestoreProgress
from eddy_runtime.state.store import KeyValueStore
from eddy_runtime.state.stores import StateStore

__all__ = ["StoreChangelogReader"]

log = logging.getLogger(__name__)

_KAFKA_TIMEOUT_S = 30.0
_STALL_CHECK_S = 10.0
#: near a changelog's end, how long one read waits for records before the markers are looked at
_NEAR_END_POLL_S = 0.005


class _Target:
    """Mutable restore state of one store's changelog partition."""

    def __init__(self, store: StateStore, topic: str, partition: int) -> None:
        self.store = store
        self.topic = topic
        self.partition = partition
        self.mode = "none"
        self.start = 0
        self.end = 0
        self.position = 0
        self.restored = 0
        self.started = time.monotonic()
        self.done = True
        self.assigned = False
        #: the broker's metadata showed its partition (`StoreChangelogReader._check_exists`)
        self.verified = False

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def progress(self) -> RestoreProgress:
        return RestoreProgress(
            store=self.store.spec.name,
            topic=self.topic,
            partition=self.partition,
            mode=self.mode,
            start_offset=self.start,
            end_offset=self.end,
            position=self.position,
            restored=self.restored,
            elapsed_s=time.monotonic() - self.started,
            done=self.done,
        )


class StoreChangelogReader:
    """Reads a task's changelog partitions into its stores, chunk by chunk.

    `wipe(store_name)` must close, delete and reopen the named store and return the new one
    (the manager owns the stores); the reader calls it when a local store cannot be trusted.
    """

    def __init__(
        self,
        consumer: Consumer,
        *,
        wipe: Callable[[str], StateStore],
        written_watermarks: Callable[[TopicPartition], tuple[int, int]] | None = None,
        stable_watermarks: Callable[[TopicPartition], tuple[int, int]] | None = None,
        batch_size: int = 5_000,
        context: str = "",
    ) -> None:
        self._consumer = consumer
        self._wipe = wipe
        #: a partition's watermarks, transactions not yet stable included (kafka/shared_clients.py)
        self._written_watermarks = written_watermarks
        #: a partition's low watermark and last stable offset, from a client that is not this
        #: reader's (kafka/shared_clients.py's `stable_ends`): None asks the reader's own
        self._stable_watermarks = stable_watermarks
        self._batch_size = batch_size
        self._ctx = context
        self._targets: dict[str, _Target] = {}  # by topic
        self.tail = False
        self._last_progress = time.monotonic()

    # -- registration and planning -----------------------------------------------------------

    def register(self, store: StateStore, topic: str, partition: int) -> None:
        self._targets[topic] = _Target(store, topic, partition)

    def prepare(self, *, tail: bool = False) -> TaskRestoreProgress:
        """Decide where each store starts (and, unless tailing, ends) and assign the partitions."""
        self.tail = tail
        self._last_progress = time.monotonic()
        self._unassign_all()
        for t in self._targets.values():
            self._plan(t)
        to_assign = [TopicPartition(t.topic, t.partition, t.position) for t in self._targets.values()
                     if not t.done or tail]
        if to_assign:
            self._consumer.incremental_assign(to_assign)
            for t in self._targets.values():
                if not t.done or tail:
                    t.assigned = True
        return self.progress()

    def _watermarks(self, t: _Target, written: bool = False) -> tuple[int, int]:
        """Low watermark and last stable offset (`written`: the end, stable or not). The metadata is
        asked for once, then only if they cannot be read: 20-90 ms per plan (bench/handover.py)."""
        if not t.verified:
            self._check_exists(t)
        try:
            if written and self._written_watermarks is not None:
                return self._written_watermarks(t.tp)
            if not written and self._stable_watermarks is not None:
                return self._stable_watermarks(t.tp)
            low, high = self._consumer.get_watermark_offsets(t.tp, timeout=_KAFKA_TIMEOUT_S)
        except KafkaException:
            self._check_exists(t)  # deleted under us: say so
            raise
        return low, high

    def _check_exists(self, t: _Target) -> None:
        """ChangelogTopicMissing unless the broker knows `t`'s partition."""
        md = self._consumer.list_topics(topic=t.topic, timeout=_KAFKA_TIMEOUT_S)
        tmd = md.topics.get(t.topic)
        if tmd is None or tmd.error is not None or t.partition not in tmd.partitions:
            t.verified = False
            raise ChangelogTopicMissing(
                f"{self._ctx}: changelog {t.topic} partition {t.partition} of store {t.store.spec.name} "
                f"does not exist; run the app's topic setup (ensure_changelog_topics) first"
            )
        t.verified = True

    def _plan(self, t: _Target) -> None:
        low, high = self._watermarks(t, written=not self.tail)  # an active: what its last owner wrote
        local = t.store.offsets.changelog_offset
        if local is not None and (local + 1 > high or local + 1 < low):
            where = "beyond the changelog's end" if local + 1 > high else "below the changelog's start"
            log.warning(
                "%s: store %s has changelog offset %d %s (%s-%d holds [%d, %d)); wiping it and "
                "restoring from scratch",
                self._ctx, t.store.spec.name, local, where, t.topic, t.partition, low, high,
            )
            t.store = self._wipe(t.store.spec.name)
            local = None
        elif local is None and not t.store.is_empty():
            # Data without a changelog offset: where it came from is unknown, so the whole
            # changelog is replayed over it (the last value per key wins).
            log.info("%s: store %s has data but no offset; replaying its changelog from the start",
                     self._ctx, t.store.spec.name)
        start = low if local is None else local + 1
        if local is not None and t.mode == "tail" and start < t.position <= high:
            # A standby being promoted read past its store's last record (the commit marker after
            # it, aborted records): what lies between is no data, so there is nothing to read
            # (reading it would wait a fetch of fetch.wait.max.ms for the end, 0.1 s).
            start = t.position
        t.start = t.position = start
        t.end = high
        t.restored = 0
        t.started = time.monotonic()
        if self.tail:
            t.mode = "tail"
            t.done = start >= high
        elif start >= high:
            t.mode, t.done = "none", True
        else:
            t.mode, t.done = "batch", False
            if local is None and isinstance(t.store, KeyValueStore) and t.store.is_empty():
                t.store.begin_bulk_load()
        log.info("%s: store %s %s from %s-%d offset %d to %d (%s)", self._ctx, t.store.spec.name,
                 "tails" if self.tail else "restores", t.topic, t.partition, start, high, t.mode)

    # -- reading ----------------------------------------------------------------------------

    def progress(self) -> TaskRestoreProgress:
        return TaskRestoreProgress(tuple(t.progress() for t in self._targets.values()))

    @property
    def done(self) -> bool:
        return all(t.done for t in self._targets.values())

    def restore_chunk(self, max_records: int = 1_000_000, max_seconds: float = 5.0) -> TaskRestoreProgress:
        """Read and apply up to `max_records` records or for up to `max_seconds`, then return.

        Restore mode returns early once every store reached its end. Tail mode (standbys)
        returns once the standby is caught up with the changelogs' ends it knows of.
        """
        # The loop allocates millions of short-lived objects and no cycles; the cyclic GC's
        # passes over them cost a quarter of its Python time (measured), so it pauses for the
        # chunk (process-wide, bounded by max_seconds).
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._restore_chunk(max_records, max_seconds)
        finally:
            if gc_was_enabled:
                gc.enable()

    def _restore_chunk(self, max_records: int, max_seconds: float) -> TaskRestoreProgress:
        budget = max_records
        consume = self._consumer.consume
        if self.tail:
            self.refresh_end_offsets()
            # fetched only while behind: not assigned between tails (`_stop_fetching`)
            if behind := [t for t in self._targets.values() if not t.assigned and not t.done]:
                self._consumer.incremental_assign([TopicPartition(t.topic, t.partition, t.position) for t in behind])
                for t in behind:
                    t.assigned = True
        # from here: a slow end-offset query (a loaded broker) must not eat the reading time
        deadline = time.monotonic() + max_seconds
        while budget > 0:
            if self.done:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                break
            # consume() waits until it has num_messages or the timeout passes, so near the end
            # ask for no more than may be left, and briefly: a delta that is only the marker after
            # the last record hands out nothing (end-of-partition comes a fetch.wait.max.ms later),
            # and `_skip_markers` sees it passed once fetched (not 50-100 ms later: bench/handover.py).
            near = self._offsets_left()
            if near >= self._batch_size:
                msgs = consume(min(budget, self._batch_size), timeout=min(left, 0.5))
            else:
                msgs = consume(max(1, min(budget, near)), timeout=min(left, _NEAR_END_POLL_S))
            if msgs:
                budget -= self._dispatch(msgs)
            moved = near < self._batch_size and self._skip_markers()
            if msgs or moved:
                self._last_progress = time.monotonic()
            elif self.tail:
                continue  # behind the last stable offset: readable, its fetch under way (just assigned)
            elif time.monotonic() - self._last_progress > _STALL_CHECK_S:
                # No records for a while although the end is not reached: the changelog may
                # have been deleted under us (raises ChangelogTopicMissing), else keep waiting.
                self._last_progress = time.monotonic()
                for t in self._targets.values():
                    if not t.done:
                        self._check_exists(t)
        self._finish_done_targets()
        if self.tail:
            self._unassign_all()  # between tails, fetch nothing
        return self.progress()

    def _skip_markers(self) -> bool:
        """Move each target still reading up to its consumer position, if that is further: the
        consumer passes a commit marker (or aborted records) without handing out a message, and
        reports the end of the partition only once a fetch at the end came back empty,
        fetch.wait.max.ms later; a delta that is only the marker after the last record (a
        promoted standby's, usually) is so read in one fetch. True if a target moved."""
        reading = [t for t in self._targets.values() if t.assigned and not t.done]
        if not reading:
            return False
        moved = False
        for tp in self._consumer.position([t.tp for t in reading]):
            t = self._targets[tp.topic]
            if tp.error is None and tp.offset > t.position:
                t.position = tp.offset
                self._check_done(t)
                moved = True
        return moved

    def _offsets_left(self) -> int:
        return sum(max(0, t.end - t.position) for t in self._targets.values() if not t.done)

    def _dispatch(self, msgs: list[Message]) -> int:
        """Apply one consumed batch; returns the number of data records in it.

        This is the restore hot path: a few C calls per record and no per-record Python
        objects beyond what the Kafka client creates.
        """
        errors = [m for m in msgs if m.error() is not None]
        if errors:
            msgs = [m for m in msgs if m.error() is None]
            for e in errors:
                self._on_event(e)
        if not msgs:
            return 0
        if len(self._targets) == 1:
            (t,) = self._targets.values()
            self._apply(t, msgs)
            return len(msgs)
        by_topic: dict[str, list[Message]] = {}
        for m in msgs:
            by_topic.setdefault(m.topic(), []).append(m)  # type: ignore[arg-type]
        for topic, ms in by_topic.items():
            self._apply(self._targets[topic], ms)
        return len(msgs)

    def _apply(self, t: _Target, msgs: list[Message]) -> None:
        """Apply data records (no error events) of one changelog partition, in offset order."""
        last = msgs[-1]
        last_offset: int = last.offset()  # type: ignore[assignment]  # data records have offsets
        inputs = input_offsets_in(last)
        store = t.store
        if isinstance(store, KeyValueStore):
            wb = store.new_write_batch()
            put = wb.put
            for m in msgs:
                try:
                    put(m.key(), m.value())  # type: ignore[arg-type]
                except (ValueError, KeyError):
                    # A tombstone (value None); a record without a key cannot be stored.
                    if m.key() is None:
                        log.warning("%s: skipping a keyless record at %s-%d offset %d", self._ctx,
                                    t.topic, t.partition, m.offset())
                        continue
                    wb.delete(m.key())  # type: ignore[arg-type]
            store.apply_write_batch(wb, changelog_offset=last_offset, input_offsets=inputs, disable_wal=True)
        else:
            records = [(m.key(), m.value()) for m in msgs if m.key() is not None]
            store.write(records, changelog_offset=last_offset,  # type: ignore[arg-type]
                        input_offsets=inputs, disable_wal=True)
        t.restored += len(msgs)
        t.position = max(t.position, last_offset + 1)
        self._check_done(t)

    def _on_event(self, m: Message) -> None:
        err = m.error()
        assert err is not None
        code = err.code()
        t = self._targets.get(m.topic() or "")
        if code == KafkaError._PARTITION_EOF:
            if t is not None:
                eof = m.offset() or 0
                t.position = max(t.position, eof)
                if self.tail:
                    t.end = max(t.end, eof)
                self._check_done(t)
            return
        if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION):
            raise ChangelogTopicMissing(f"{self._ctx}: changelog {m.topic()} disappeared while restoring: {err}")
        if code in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET) and t is not None:
            log.warning("%s: store %s: offset %d is out of range in %s-%d (%s); wiping and restoring from "
                        "scratch", self._ctx, t.store.spec.name, t.position, t.topic, t.partition, err)
            self._consumer.incremental_unassign([t.tp])
            t.store = self._wipe(t.store.spec.name)
            self._plan(t)
            self._consumer.incremental_assign([TopicPartition(t.topic, t.partition, t.position)])
            return
        if err.retriable() or not err.fatal():
            log.warning("%s: changelog consumer: %s", self._ctx, err)
            return
        raise RuntimeError(f"{self._ctx}: changelog consumer failed: {err}")

    def _check_done(self, t: _Target) -> None:
        if self.tail:
            t.done = t.position >= t.end
        elif not t.done and t.position >= t.end:
            t.done = True

    def _finish_done_targets(self) -> None:
        if self.tail:
            return
        finished = [t for t in self._targets.values() if t.done and t.assigned]
        for t in finished:
            if t.store.bulk_loading:
                t.store.end_bulk_load()
            else:
                t.store.flush()
            t.assigned = False
            log.info("%s: store %s restored %d records from %s-%d [%d, %d) in %.2fs (%s)", self._ctx,
                     t.store.spec.name, t.restored, t.topic, t.partition, t.start, t.end,
                     time.monotonic() - t.started, t.mode)
        if finished:
            self._consumer.incremental_unassign([t.tp for t in finished])

    # -- tail mode (standbys) -----------------------------------------------------------------

    def refresh_end_offsets(self) -> None:
        """Tail mode: ask the broker for the changelogs' current ends (last stable offsets, so
        an open transaction of the active does not count as lag it could not read anyway)."""
        for t in self._targets.values():
            _, high = self._watermarks(t)
            t.end = max(t.end, high)
            t.done = t.position >= t.end

    def flush_early(self, limit_bytes: int) -> None:
        """Start writing out (no wait) the memtables of each store over `limit_bytes` that were
        written with the WAL off (`RocksDBStore.flush_early`)."""
        for t in self._targets.values():
            t.store.flush_early(limit_bytes)

    def flush_stores(self) -> None:
        for t in self._targets.values():
            t.store.flush()

    def _unassign_all(self) -> None:
        assigned = [t.tp for t in self._targets.values() if t.assigned]
        if assigned:
            self._consumer.incremental_unassign(assigned)
        for t in self._targets.values():
            t.assigned = False

    def close(self) -> None:
        self._unassign_all()
