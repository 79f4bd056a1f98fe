"""Standby replicas: keep a task's stores hot by tailing their changelogs (Kafka Streams' StandbyTask).

A standby holds the same task directory layout as the active on another executor's volume and
applies every changelog record the active commits, so when the active's executor is lost the
standby takes over with no restore (caught up) or with only the delta (behind). Quix Streams
has no standbys; Kafka Streams' are the model.

`ProcessorStateManager` (manager.py) in the ``standby`` role owns a `StandbyUpdater`; the Spark
runtime calls `ProcessorStateManager.standby_chunk` for a standby work item and
`ProcessorStateManager.promote` when the assignment makes it the active. The lag it reports
(changelog end minus the standby's position, in offsets) is what the operator compares with
``acceptableRecoveryLag`` when it moves tasks (docs/DESIGN.md, "The operator's part").
"""

from __future__ import annotations

import logging

from eddy_runtime.state.restore import StoreChangelogReader
from eddy_runtime.state.restore_progress import TaskRestoreProgress

__all__ = ["StandbyUpdater"]

log = logging.getLogger(__name__)

#: a caught-up standby's memtables written with the WAL off are flushed in the background past this
FLUSH_EARLY_BYTES = 4 << 20


class StandbyUpdater:
    """Tails a standby task's changelog partitions into its stores; reports the lag."""

    def __init__(self, reader: StoreChangelogReader) -> None:
        self._reader = reader
        self._running = False
        self._last = TaskRestoreProgress(())

    def start(self) -> TaskRestoreProgress:
        self._last = self._reader.prepare(tail=True)
        self._running = True
        return self._last

    def poll(self, max_records: int = 1_000_000, max_seconds: float = 1.0) -> TaskRestoreProgress:
        """Apply what the changelogs have gained since the last poll (bounded), then report."""
        if not self._running:
            raise RuntimeError("standby updater is not running")
        self._last = self._reader.restore_chunk(max_records=max_records, max_seconds=max_seconds)
        if not self._last.remaining:
            # Caught up: what the catch-up wrote with the WAL off (a copy made from scratch: tens
            # of MB of memtables) is written out now, in RocksDB's threads, not by the promotion's
            # flush, which a failover waits for (docs/DESIGN.md, "Figures behind settings in
            # the code").
            self._reader.flush_early(FLUSH_EARLY_BYTES)
        return self._last

    @property
    def lag(self) -> int:
        """Offsets between the standby's stores and their changelogs' ends, at the last poll."""
        return self._last.remaining

    @property
    def progress(self) -> TaskRestoreProgress:
        return self._last

    def stop(self) -> None:
        """Stop tailing and make what was applied durable (standbys write with the WAL off)."""
        if self._running:
            self._reader.flush_stores()
            self._reader.close()
            self._running = False
