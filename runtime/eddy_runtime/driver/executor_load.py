"""Each executor's load since this driver started (`ExecutorLoads`): the input records its actives
processed, the seconds they were busy processing them (`ItemResult.busy_s`,
executor/busy_clock.py) and the part of those seconds their rounds cost whatever they carried
(`ItemResult.busy_per_round_s`), for the runtime state the operator's autoscaler reads
(docs/DESIGN.md, "The operator's part").

The counters only grow while this driver runs; a new driver starts new ones, with a new `since`,
and an executor that left and came back starts from zero: a reader takes a counter that went down,
or a new `since`, for the start of a new window. A result counts for the executor it names, which
is the one its runner serves now (the runner and the HTTP sync re-address what it did before a
new executor JVM reached it: executor/task_runner.py's `TaskRunner._addressed`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from datetime import UTC, datetime

from eddy_contract.channel import ExecutorLoad
from eddy_contract.tasks import Role
from eddy_runtime.protocol.work import ItemResult, ItemStatus

__all__ = ["ExecutorLoads"]


class ExecutorLoads:
    """Per executor, what its actives processed (records) and how long it took them (busy seconds)."""

    def __init__(self, since: datetime | None = None) -> None:
        #: when the counters started (ISO 8601 UTC)
        self.since = (since or datetime.now(UTC)).isoformat()
        self._loads: dict[str, ExecutorLoad] = {}

    def record(self, results: Iterable[ItemResult], live: Set[str]) -> None:
        """Add a batch's (or sync's) active results to their executors' counters: the records of
        those that committed, the busy time of every attempt (an aborted round took time too;
        restores and standbys take none). Executors no longer alive are forgotten."""
        for r in results:
            if r.role != Role.ACTIVE or not r.executor:
                continue
            records = r.records_in if r.status == ItemStatus.PROCESSED else 0
            if not records and not r.busy_s:
                continue
            load = self._loads.get(r.executor, ExecutorLoad())
            self._loads[r.executor] = ExecutorLoad(load.records + records, load.busy_s + r.busy_s,
                                                   load.per_round_s + r.busy_per_round_s)
        for e in [e for e in self._loads if e not in live]:
            del self._loads[e]

    def of(self, executors: Iterable[str]) -> Mapping[str, ExecutorLoad]:
        """The counters of `executors` (zero for one that processed nothing yet)."""
        return {e: self._loads.get(e, ExecutorLoad()) for e in executors}
