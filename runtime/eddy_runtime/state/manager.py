"""A task's state on one executor: its stores, their changelogs, checkpoints, restore and standby.

`ProcessorStateManager` is Kafka Streams' class of the same name, for one task (``S_P``): it
takes the task directory's lock, opens the task's stores, registers their changelog partitions
(partition ``P`` of ``<app>-<store>-changelog``), plans their restores and writes checkpoints. It
knows no producer and never commits: the executor commits a batch to Kafka and then has the
stores written here (`write_committed`), in the order executor/commit.py states once.

Roles: an *active* restores until `restored`, then processes batches through `transaction()`;
a *standby* tails its changelogs (`standby_chunk`) and becomes the active with `promote()`,
which restores only what the standby had not applied yet; an active let go of becomes a standby
with `demote()`, its stores kept open (docs/DESIGN.md, "Vocabulary" and "One micro-batch").
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Sequence

from confluent_kafka import Consumer

from eddy_contract.tasks import Role, TaskId
from eddy_runtime.kafka import client as kafka_client
from eddy_runtime.kafka import shared_clients
from eddy_runtime.kafka.client import KafkaClientConfig
from eddy_runtime.kafka.partitions import TopicPartition
from eddy_runtime.kafka.transactions import KafkaCommit
from eddy_runtime.state.changelog import changelog_topic_name, restore_consumer_settings
from eddy_runtime.state.checkpoint import CheckpointOffsets, PeriodicCheckpoint
from eddy_runtime.state.metrics import StoreFigures, TaskFigures
from eddy_runtime.state.restore import StoreChangelogReader
from eddy_runtime.state.restore_progress import RestoredRecords, TaskRestoreProgress
from eddy_runtime.state.standby import StandbyUpdater
from eddy_runtime.state.store_spec import StoreSpec
from eddy_runtime.state.stores import StateStore, open_store
from eddy_runtime.state.task_directory import TaskDirectory, TaskLock
from eddy_runtime.state.task_transaction import TaskTransaction

__all__ = ["ProcessorStateManager", "Role"]

log = logging.getLogger(__name__)

_READ_AT_ONCE_OFFSETS = 16

class ProcessorStateManager:
    """Opens, restores, tails, writes and closes one task's stores. Use `open`."""

    def __init__(
        self,
        app: str,
        task_id: str,
        specs: Sequence[StoreSpec],
        task_dir: TaskDirectory,
        lock: TaskLock,
        kafka: KafkaClientConfig,
        partition: int,
        *,
        role: Role,
        on_active: Callable[[], None] | None,
        checkpoint_interval_s: float,
    ) -> None:
        self.app = app
        self.task_id = task_id
        self.partition = partition
        self.task_dir = task_dir
        self.role: Role = role
        self._specs = {s.name: s for s in specs}
        self._lock = lock
        self._ctx = f"app {app} task {task_id}"
        self._on_active = on_active
        self._checkpoints = PeriodicCheckpoint(task_dir.checkpoint, checkpoint_interval_s, self._checkpoint_offsets,
                                               self._ctx)
        self._commit_latencies: list[float] = []
        self._commits = 0
        self._restored_records = RestoredRecords(self._specs)
        self._closed = False
        self.stores: dict[str, StateStore] = {}
        self._consumer: Consumer | None = None
        #: the process's reader of how far the changelogs were written (kafka/shared_clients.py)
        self._ends: shared_clients.SharedConsumer | None = None
        #: and of how far they can be read (a standby's tail asks it: kafka/shared_clients.py)
        self._stable: shared_clients.SharedConsumer | None = None
        self._reader: StoreChangelogReader | None = None
        self._standby: StandbyUpdater | None = None
        self._progress = TaskRestoreProgress(())
        try:
            for spec in specs:
                self.stores[spec.name] = open_store(spec, task_dir.store_path(spec.name))
            if any(s.logged for s in specs):
                self._consumer = kafka_client.consumer(kafka, restore_consumer_settings(app, task_id))
                self._ends = shared_clients.written_ends(kafka, app)
                self._stable = shared_clients.stable_ends(kafka, app)
                self._reader = StoreChangelogReader(
                    self._consumer, wipe=self._wipe_store, context=self._ctx,
                    written_watermarks=self._ends.watermarks,
                    stable_watermarks=self._stable.watermarks)
                for spec in specs:
                    if spec.logged:
                        self._reader.register(self.stores[spec.name], self.changelog_topic(spec.name), partition)
            if role == Role.ACTIVE:
                self._become_active()
            else:
                self._become_standby()
        except BaseException:
            self._release()
            raise

    # -- opening ----------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        app: str,
        task_id: str,
        stores: Sequence[StoreSpec],
        state_dir: str | os.PathLike[str],
        kafka: KafkaClientConfig | str,
        *,
        role: Role = Role.ACTIVE,
        partition: int | None = None,
        lock_timeout: float = 0.0,
        checkpoint_interval_s: float = 1.0,
        on_active: Callable[[], None] | None = None,
    ) -> ProcessorStateManager:
        """Lock the task directory, open the stores and plan their restore (or standby tail).

        Raises `TaskDirectoryLocked` naming the holder when another process has the task.
        `kafka`: the app's `KafkaClientConfig` (a bare bootstrap string means PLAINTEXT).
        `on_active` is called each time the task becomes active (at open, or at `promote`),
        *before* the changelogs' ends are read: the committer made there fences a zombie of the
        task and aborts its open transaction first, so those ends are final
        (executor/commit.py).
        """
        if partition is None:
            partition = TaskId.parse(task_id).partition  # ValueError naming a malformed id
        kc = KafkaClientConfig.of(kafka)
        td = TaskDirectory(state_dir, app, task_id)
        return cls(app, task_id, stores, td, td.lock(timeout=lock_timeout), kc, partition,
                   role=role, on_active=on_active, checkpoint_interval_s=checkpoint_interval_s)

    def __enter__(self) -> ProcessorStateManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def changelog_topic(self, store: str) -> str:
        return changelog_topic_name(self.app, store)

    def store(self, name: str) -> StateStore:
        return self.stores[name]

    def _wipe_store(self, name: str) -> StateStore:
        old = self.stores[name]
        old.close()
        self.task_dir.wipe_store(name)
        new = open_store(self._specs[name], self.task_dir.store_path(name))
        self.stores[name] = new
        self._restored_records.restart(name)
        return new

    def _become_active(self) -> None:
        self.role = Role.ACTIVE
        if self._on_active is not None:
            self._on_active()
        if self._reader is not None:
            self._plan(tail=False)
            if not self._progress.done and self._progress.remaining <= _READ_AT_ONCE_OFFSETS:
                # Usually just the commit marker after the store's last record: read it now, so
                # a caught-up task is restored when open() or promote() returns.
                self._progress = self._reader.restore_chunk(max_seconds=1.0)
                self._restored_records.count(self._progress)
            if self._progress.done:
                self.write_checkpoint()

    def _become_standby(self) -> None:
        self.role = Role.STANDBY
        self._standby = StandbyUpdater(self._reader) if self._reader else None
        if self._standby:
            self._progress = self._standby.start()
            self._restored_records.restart()

    # -- restore ----------------------------------------------------------------------------------

    @property
    def restored(self) -> bool:
        """True when an active's stores hold everything their changelogs have."""
        return self.role == Role.ACTIVE and (self._reader is None or self._reader.done)

    @property
    def progress(self) -> TaskRestoreProgress:
        return self._progress

    def restore_chunk(self, max_records: int = 1_000_000, max_seconds: float = 5.0) -> TaskRestoreProgress:
        """Restore a bounded chunk (an active that is not `restored` yet); returns the progress."""
        self._check_open()
        if self.role != Role.ACTIVE:
            raise RuntimeError(f"{self._ctx}: restore_chunk is for actives; a standby uses standby_chunk")
        if self._reader is None or self._reader.done:
            return self._progress
        self._progress = self._reader.restore_chunk(max_records=max_records, max_seconds=max_seconds)
        self._restored_records.count(self._progress)
        if self._reader.done:
            self.write_checkpoint()
        return self._progress

    def restore(self, timeout_s: float | None = None, chunk_records: int = 1_000_000) -> TaskRestoreProgress:
        """Restore until done (or `timeout_s`), chunk by chunk."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self.restored:
            if deadline is not None and time.monotonic() >= deadline:
                break
            self.restore_chunk(max_records=chunk_records)
        return self._progress

    def _plan(self, *, tail: bool) -> None:
        assert self._reader is not None
        self._progress = self._reader.prepare(tail=tail)
        # A new plan counts its restored records from 0 again.
        self._restored_records.restart()

    # -- standby --------------------------------------------------------------------------------

    def standby_chunk(self, max_records: int = 1_000_000, max_seconds: float = 1.0) -> TaskRestoreProgress:
        """A standby applies what its changelogs gained (bounded); `remaining` is its lag."""
        self._check_open()
        if self.role != Role.STANDBY:
            raise RuntimeError(f"{self._ctx}: standby_chunk is for standbys")
        if self._standby is None:
            return self._progress
        self._progress = self._standby.poll(max_records=max_records, max_seconds=max_seconds)
        self._restored_records.count(self._progress)
        self._checkpoints.maybe_write()
        return self._progress

    @property
    def standby_lag(self) -> int | None:
        if self.role != Role.STANDBY:
            return None
        return self._standby.lag if self._standby else 0

    def promote(self) -> TaskRestoreProgress:
        """Standby -> active (`on_active` first: it fences zombies), then restore only what the
        standby lacks (maybe nothing)."""
        self._check_open()
        if self.role == Role.ACTIVE:
            return self._progress
        if self._standby is not None:
            self._standby.stop()
            self._restored_records.count(self._progress)
            self._standby = None
        log.info("%s: promoting standby to active", self._ctx)
        self._become_active()
        return self._progress

    def demote(self) -> TaskRestoreProgress:
        """Active -> standby, the stores kept open (Kafka Streams recycles a task so): checkpoint,
        then tail the changelogs from what the stores hold. For an active whose last batch
        committed cleanly (or had nothing to commit)."""
        self._check_open()
        if self.role == Role.STANDBY:
            return self._progress
        log.info("%s: recycling active into a standby", self._ctx)
        self.write_checkpoint()
        self._become_standby()
        return self._progress

    # -- processing -----------------------------------------------------------------------------

    def transaction(self) -> TaskTransaction:
        """A transaction over all the task's stores for one batch."""
        self._check_open()
        if not self.restored:
            raise RuntimeError(f"{self._ctx}: stores are not restored yet (role {self.role}); "
                               f"call restore_chunk until restored")
        return TaskTransaction(self.app, self.task_id, self.partition, self.stores)

    def write_committed(self, tx: TaskTransaction | None, kc: KafkaCommit) -> float:
        """Write a batch Kafka committed (`kc`) to the stores, with the changelog offsets Kafka
        gave; then the figures and a (throttled) checkpoint. Returns the commit's latency."""
        if tx is not None:
            tx.apply(kc.changelog_offsets, kc.input_offsets)
        latency = time.monotonic() - kc.started
        self._commit_latencies.append(latency)
        self._commits += 1
        self._checkpoints.maybe_write()
        return latency

    def recheck_changelogs(self) -> None:
        """After a commit whose outcome in Kafka is unknown: check the stores against the
        changelogs; `restored` turns False until the delta is restored."""
        if self._reader is None:
            return
        try:
            self._plan(tail=False)
        except Exception:  # noqa: BLE001 - the caller is already handling a commit failure
            log.exception("%s: could not re-check changelogs after a failed commit", self._ctx)

    # -- checkpoint offsets and figures --------------------------------------------------------------

    def _checkpoint_offsets(self) -> CheckpointOffsets:
        """What the checkpoint says now: the logged stores' changelog offsets, and the input
        positions the stores reflect."""
        stores = {name: store.offsets for name, store in self.stores.items() if not store.closed}
        changelogs = {TopicPartition(self.changelog_topic(name), self.partition): o.changelog_offset
                      for name, o in stores.items() if self._specs[name].logged and o.changelog_offset is not None}
        return changelogs, [dict(o.input_offsets) for o in stores.values()]

    def write_checkpoint(self) -> None:
        """Mirror the stores' offsets into the task's `.checkpoint` file (atomic), now."""
        self._checkpoints.write_now()

    def figures(self) -> TaskFigures:
        """Picklable figures for the driver's metrics (drains the commit latencies)."""
        by_store = {p.store: p for p in self._progress.stores}
        out = []
        for name, store in self.stores.items():
            p = by_store.get(name)
            size = store.size() if not store.closed else None
            # An active's restore while it lasts; a standby's (or warmup's) tail always.
            restoring = p is not None and (self.role == Role.STANDBY or not p.done)
            out.append(
                StoreFigures(
                    store=name,
                    changelog_topic=self.changelog_topic(name) if store.spec.logged else None,
                    changelog_partition=self.partition,
                    changelog_offset=None if store.closed else store.offsets.changelog_offset,
                    restored_records=self._restored_records.total(name),
                    restore_rate=p.rate if p is not None and restoring else 0.0,
                    restore_remaining=p.remaining if p is not None and restoring else 0,
                    restore_eta_s=p.eta_s if p is not None and restoring else None,
                    standby_lag=(p.remaining if p is not None else 0) if self.role == Role.STANDBY else None,
                    size_bytes=size.bytes if size else 0,
                    keys=size.keys if size else 0,
                )
            )
        lat, self._commit_latencies = tuple(self._commit_latencies), []
        return TaskFigures(
            app=self.app,
            task_id=self.task_id,
            role=self.role,
            restoring=self.role == Role.ACTIVE and not self.restored,
            stores=tuple(out),
            commit_latencies_s=lat,
            commits=self._commits,
        )

    # -- closing --------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self._ctx}: state manager is closed")

    def close(self) -> None:
        """Flush and close stores, write the checkpoint, close Kafka clients, release the lock."""
        if self._closed:
            return
        try:
            if self._standby is not None:
                self._standby.stop()
            if all(not s.closed for s in self.stores.values()):
                for s in self.stores.values():
                    s.flush()
                self.write_checkpoint()
        finally:
            self._release()

    def _release(self) -> None:
        self._closed = True
        self._checkpoints.wait()  # before another copy may take the task directory
        for s in self.stores.values():
            try:
                s.close()
            except Exception:  # noqa: BLE001 - closing the rest matters more
                log.exception("%s: closing store %s failed", self._ctx, s.spec.name)
        if self._reader is not None:
            with contextlib.suppress(Exception):
                self._reader.close()
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        if self._ends is not None:
            self._ends.close()
            self._ends = None
        if self._stable is not None:
            self._stable.close()
            self._stable = None
        self._lock.release()
