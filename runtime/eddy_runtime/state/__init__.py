"""Eddy's state core: RocksDB stores with Kafka changelogs, checkpoints, restore, standbys.

This docstring is the API contract for the Spark runtime (pipeline/driver modules). It stays
stable; additions are fine, changes are announced.

Modules (Kafka Streams' names, Quix Streams' layering; docs/DESIGN.md, "Vocabulary" and
"One micro-batch"):

- ``serde.py``            bytes / string / json / int64 serdes at the API edge
- ``store_spec.py``       `StoreSpec` (what a store is), `StoreOffsets` (what it holds), `StoreSize`
- ``rocksdb_store.py``    what both store kinds share: RocksDB, offsets in a metadata column family
                          written with the data, one write path, the transaction base
- ``store.py``            `KeyValueStore` + `KeyValueTransaction` (reads its own writes)
- ``segmented_store.py``  what windows and sessions share: time segments, retention, stream time
- ``window_store.py``     `WindowStore` + `WindowTransaction` (windows by start)
- ``session_store.py``    `SessionStore` + `SessionTransaction` (sessions by (key, end, start))
- ``stores.py``           `open_store` (the store a spec names) and `StateStore` (either kind)
- ``task_transaction.py`` `TaskTransaction`: one batch across a task's stores
- ``task_directory.py``   ``<stateDir>/<app>/<task>/`` layout, the task lock (`TaskDirectoryLocked`
                          names the holder), `StateDirectory.inventory()` for the operator
- ``checkpoint.py``       `OffsetCheckpoint`: the ``.checkpoint`` file (Kafka Streams' format)
- ``changelog.py``        ``<app>-<store>-changelog`` naming, `ensure_changelog_topics` (created and
                          validated by ``../topics.py``, which does the same for every topic an app writes)
- ``restore.py``          `StoreChangelogReader`: chunked restore, standby tails
- ``restore_progress.py`` `RestoreProgress` / `TaskRestoreProgress`, restored records since open
- ``standby.py``          `StandbyUpdater`: standbys tail changelogs, report lag
- ``manager.py``          `ProcessorStateManager`: one task's stores, restore, standby, checkpoints;
                          it writes what a commit made durable in Kafka and never commits itself
- ``metrics.py``          `TaskFigures` (picklable) and `StateMetrics` (Prometheus, in the driver and the executors)

The commit lives above this package: ``../kafka/transactions.py`` (`TaskCommitter`, the Kafka
side), ``../kafka/record_collector.py`` (`RecordCollector`) and ``../executor/commit.py`` (the
commit order: Kafka first, then the stores; `StateCommitter` pairs a task's state with its
committer).

Driver, once per app start (before any task opens)::

    from eddy_runtime.state import ChangelogTopicSpec, StoreSpec, ensure_changelog_topics
    specs = [StoreSpec.key_value("counts", key_serde="string", value_serde="int64"),
             StoreSpec.window("clicks", window_size_ms=60_000, retention_ms=3_600_000)]
    ensure_changelog_topics(admin, [ChangelogTopicSpec.for_store(app, s, partitions=n_input) for s in specs])
    # creates missing topics (compacted; windows compact,delete); ChangelogTopicMismatch on a wrong one

Executor, per work item (a task ``S_P`` is partition ``P`` of the input and of each changelog)::

    from eddy_runtime.executor.commit import StateCommitter
    from eddy_runtime.kafka.transactions import OutputRecord

    task = StateCommitter.open(app, "0_3", specs, state_dir, bootstrap,
                               role=Role.ACTIVE, guarantee=ProcessingGuarantee.EXACTLY_ONCE)
    mgr = task.state   # a ProcessorStateManager
    # raises TaskDirectoryLocked (holder pid/host in the message) if another process has the task

    # restore work item: bounded, interleavable
    if not mgr.restored:
        progress = mgr.restore_chunk(max_records=500_000, max_seconds=5.0)
        # progress.restored / .remaining / .rate / .eta_s / .done, per store in progress.stores

    # processing work item (only when mgr.restored)
    positions = task.committed_offsets([TopicPartition("words", 3)])   # once after open/promote/failure
    tx = mgr.transaction()
    counts = tx.key_value("counts")                 # or tx.window / tx.session("name")
    old = counts.get_many(words, default=0)         # one multi-get; reads see this batch's writes
    counts.put_many(words, [o + 1 for o in old])    # also get / put / delete / range / prefix
    result = task.commit(tx,
                         outputs=[OutputRecord("counts-out", key_bytes, value_bytes)],
                         input_offsets={TopicPartition("words", 3): next_offset})   # consumer positions
    # the order and what each failure means: executor/commit.py

    figures = mgr.figures()      # TaskFigures: ship to the driver -> StateMetrics().observe(figures)
    task.close()                 # the committer, then flush, .checkpoint, release the lock

    # standby work item
    sb = ProcessorStateManager.open(app, "0_3", specs, state_dir, bootstrap, role=Role.STANDBY)
    sb.standby_chunk(max_records=500_000, max_seconds=1.0); sb.standby_lag
    sb.promote()                 # becomes active: restores only the delta (maybe 0); opened through
                                 # a StateCommitter, it first makes its committer (which fences)

Operator / placement: ``StateDirectory(state_dir).inventory(app)`` lists `TaskInventory` (tasks,
stores, changelog offsets, sizes, lock holder) from the ``.checkpoint`` files, without locks.

Opening a task costs a few ms for RocksDB plus Kafka clients (and ``init_transactions`` for
an exactly_once active that commits on its own), so keep a manager open across batches in a
long-lived worker where you can; the lock guarantees that a second process never opens the same
task.
"""

from eddy_runtime.state.changelog import (
    ChangelogTopicMismatch,
    ChangelogTopicMissing,
    ChangelogTopicSpec,
    changelog_topic_name,
    ensure_changelog_topics,
)
from eddy_runtime.state.checkpoint import OffsetCheckpoint
from eddy_runtime.state.manager import ProcessorStateManager
from eddy_runtime.state.metrics import StateMetrics, StoreFigures, TaskFigures
from eddy_runtime.state.restore_progress import RestoreProgress, TaskRestoreProgress
from eddy_runtime.state.serde import serde_for
from eddy_runtime.state.session_store import SessionStore, SessionTransaction
from eddy_runtime.state.store import KeyValueStore, KeyValueTransaction
from eddy_runtime.state.store_spec import StoreOffsets, StoreSpec
from eddy_runtime.state.stores import StateStore, open_store
from eddy_runtime.state.task_directory import (
    LockHolder,
    StateDirectory,
    StoreInventory,
    TaskDirectory,
    TaskDirectoryLocked,
    TaskInventory,
)
from eddy_runtime.state.task_transaction import TaskTransaction
from eddy_runtime.state.window_store import WindowStore, WindowTransaction

__all__ = [
    "ChangelogTopicMismatch",
    "ChangelogTopicMissing",
    "ChangelogTopicSpec",
    "KeyValueStore",
    "KeyValueTransaction",
    "LockHolder",
    "OffsetCheckpoint",
    "ProcessorStateManager",
    "RestoreProgress",
    "SessionStore",
    "SessionTransaction",
    "StateDirectory",
    "StateMetrics",
    "StateStore",
    "StoreFigures",
    "StoreInventory",
    "StoreOffsets",
    "StoreSpec",
    "TaskDirectory",
    "TaskDirectoryLocked",
    "TaskFigures",
    "TaskInventory",
    "TaskRestoreProgress",
    "TaskTransaction",
    "WindowStore",
    "WindowTransaction",
    "changelog_topic_name",
    "ensure_changelog_topics",
    "open_store",
    "serde_for",
]
