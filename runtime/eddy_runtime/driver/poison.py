"""Poison records: input records that make the user's DataFrame steps fail, found after a failed
batch by bisection over each task's range, so that the bad-record policy handles them next batch
(docs/DESIGN.md, "One micro-batch", step 4).

`first_failing` is the search (pure); `PoisonIsolation` runs the probes on Spark and remembers
what it found for `batch_plan.plan_batch`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from eddy_contract.spec import BadRecordPolicy
from eddy_contract.tasks import Role
from eddy_runtime.driver.executor_steps import RESULT_DDL, probe_sink, read_step
from eddy_runtime.driver.outcomes import DriverError, short_error
from eddy_runtime.dsl.subtopology import CompiledApp, SubTopology
from eddy_runtime.kafka.partitions import InputRange, TopicPartition
from eddy_runtime.kafka.records import spark_source_schema
from eddy_runtime.protocol.placement import ExecutorRef, PinnedSlots
from eddy_runtime.protocol.work import BatchSettings, SlotWork, WorkItem

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["PoisonIsolation", "first_failing"]

log = logging.getLogger("eddy.driver")


def first_failing(start: int, end: int, fails: Callable[[int, int], str | None]) -> tuple[int, str] | None:
    """The first offset in ``[start, end)`` that `fails` alone, with its error, given that
    ``fails(start, end)`` is not None; None if no single offset fails on its own.

    `fails(lo, hi)`: the error of a run over ``[lo, hi)``, None if it succeeds.
    """
    lo, hi = start, end  # the first failing offset is in [lo, hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fails(lo, mid) is not None:
            hi = mid
        else:
            lo = mid
    error = fails(lo, lo + 1)
    return None if error is None else (lo, error)


class PoisonIsolation:
    """The poison records found so far, and the Spark probes that find them."""

    def __init__(self, spark: SparkSession, policy: BadRecordPolicy) -> None:
        self.spark = spark
        #: the app's bad-record policy: under ``fail`` a poison record stops the app
        self.policy = policy
        #: per topic partition, offset -> error
        self.found: dict[TopicPartition, dict[int, str]] = {}

    def probe(self, settings: BatchSettings, sub: SubTopology, task: str, executor: ExecutorRef,
              rng: InputRange, poison: tuple[tuple[int, str], ...]) -> str | None:
        """Run `sub`'s DataFrame steps over `rng` alone (nothing committed); the error, if any."""
        work = [SlotWork(executor.id, (WorkItem(task, Role.ACTIVE, (rng,), poison=poison),), dataframe_task=task)]
        df = PinnedSlots(self.spark.sparkContext, [executor]).dataframe(self.spark).mapInArrow(
            read_step(settings, sub, work, 0, probe=True),
            spark_source_schema(sub.source.key_serde, sub.source.value_serde))
        for step in sub.steps:
            df = step(df)
        try:
            df.mapInArrow(probe_sink, RESULT_DDL).collect()
        except Exception as e:  # noqa: BLE001 - the error is what the probe looks for
            return short_error(e)
        return None

    def isolate(self, settings: BatchSettings, compiled: CompiledApp,
                items: Mapping[str, tuple[WorkItem, ExecutorRef]]) -> None:
        """After a failed batch: probe each DataFrame task's range (`items`: task -> its item and
        executor) and remember the first record of each that fails the steps on its own."""
        for task, (item, executor) in items.items():
            if item.restore_only or item.ranges[0].empty:
                continue
            sub = compiled.subtopology_of(task)
            rng = item.ranges[0]

            def fails(lo: int, hi: int, sub: SubTopology = sub, task: str = task, executor: ExecutorRef = executor,
                      rng: InputRange = rng, poison: tuple[tuple[int, str], ...] = item.poison) -> str | None:
                return self.probe(settings, sub, task, executor, replace(rng, start=lo, end=hi), poison)

            if fails(rng.start, rng.end) is None:
                continue
            found = first_failing(rng.start, rng.end, fails)
            if found is None:
                log.warning("task %s: steps fail on %s[%d] [%d, %d) but on no single record", task, rng.topic,
                            rng.partition, rng.start, rng.end)
                continue
            offset, error = found
            message = f"a DataFrame step failed on this record: {error[:500]}"
            self.found.setdefault(rng.topic_partition, {})[offset] = message
            log.warning("task %s: %s[%d] offset %d makes the pipeline's steps fail: %s", task, rng.topic,
                        rng.partition, offset, error[:300])
            if self.policy == BadRecordPolicy.FAIL:
                raise DriverError(f"task {task}: bad record at {rng.topic}[{rng.partition}] offset {offset}: "
                                  f"{message} (badRecordPolicy: fail)")
