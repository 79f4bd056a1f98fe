"""What a compiled app is: its sub-topologies (`SubTopology`), their sources, stateful steps and
sinks, and the app's stores and topics (`CompiledApp`); dsl/compiler.py builds them from a pipeline.
Frozen values: they travel to the executors with the program.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from eddy_contract.tasks import TaskId, task_id
from eddy_runtime.dsl.processors import Processor
from eddy_runtime.dsl.record_steps import RecordStep
from eddy_runtime.dsl.time_windows import JoinWindows, SessionWindows, Suppressed, TimeWindows
from eddy_runtime.state import ChangelogTopicSpec, StoreSpec

__all__ = [
    "METADATA_COLUMNS",
    "CombineOp",
    "CompiledApp",
    "RepartitionSink",
    "Sink",
    "SourceSpec",
    "StatefulSpec",
    "SubTopology",
    "SuppressSpec",
    "TableSpec",
    "TopicSink",
    "repartition_topic_name",
]

#: a per-key partial result a repartition may carry instead of rows (`RepartitionSink.combine`)
CombineOp = Literal["count", "sum", "min", "max"]

#: columns the runtime adds when it reads a topic; never written into repartition values
METADATA_COLUMNS = ("topic", "partition", "offset", "timestamp")


def repartition_topic_name(app: str, name: str) -> str:
    """Kafka Streams' name for a repartition topic: ``<app>-<name>-repartition``."""
    return f"{app}-{name}-repartition"


@dataclass(frozen=True)
class SourceSpec:
    """Where a sub-topology reads: a user topic, or a repartition topic written by another one."""

    topic: str
    key_serde: str
    value_serde: str
    #: a repartition topic: values are the upstream rows (JSON objects of their columns), or,
    #: when `combined` is set, per-key partial results of that aggregation (int64/JSON)
    repartition: bool = False
    combined: CombineOp | None = None
    combined_column: str | None = None
    #: the other topics of a merge read in place (Kafka Streams' ``merge`` of co-partitioned
    #: streams: one sub-topology, several sources), with this one's serdes and partition count
    merged: tuple[str, ...] = ()

    @property
    def topics(self) -> tuple[str, ...]:
        return (self.topic, *self.merged)


@dataclass(frozen=True)
class TableSpec:
    """A table materialized from a compacted topic into a key-value store (raw bytes inside)."""

    topic: str
    key_serde: str
    value_serde: str
    store: StoreSpec


@dataclass(frozen=True)
class SuppressSpec:
    """A windowed aggregation's results held back in a suppression buffer (processing/suppress.py)."""

    suppressed: Suppressed
    #: the buffer: a key-value store with a changelog
    store: StoreSpec
    #: how far stream time must pass an update's buffer time for it to come out: the windows'
    #: grace (time windows) or inactivity gap + grace (sessions) for final results, as Kafka
    #: Streams computes it; the time limit otherwise
    wait_ms: int


@dataclass(frozen=True)
class StatefulSpec:
    """The one stateful step of a sub-topology."""

    kind: Literal["count", "reduce", "aggregate", "join", "table_join", "stream_join", "process"]
    #: the aggregation's store (None for a stream-table join, whose store is the table's; the left
    #: table's for a table-table join)
    store: StoreSpec | None
    key_serde: str
    windows: TimeWindows | None = None
    reducer: str | Callable[[Any, Any], Any] | None = None
    column: str | None = None
    initializer: Callable[[], Any] | None = None
    adder: Callable[..., Any] | None = None
    how: Literal["inner", "left", "outer"] = "inner"
    right_name: str = "table_value"
    #: a table-table join: joiner(left, right) -> value, and the left table's value serde
    joiner: Callable[[Any, Any], Any] | None = None
    left_value_serde: str = "bytes"
    #: a windowed stream-stream join's windows, and (left and outer joins) the store of its
    #: records still without a partner
    join_windows: JoinWindows | None = None
    outer_store: StoreSpec | None = None
    #: a `process()` step: the processor factory, its stores, and its own store of stream time
    #: and punctuation schedules (the last of `process_stores`)
    processor: Callable[[], Processor] | None = None
    process_stores: tuple[StoreSpec, ...] = ()
    #: a session-windowed aggregation's windows (`windows` is None then) and its aggregate's merger
    session_windows: SessionWindows | None = None
    merger: Callable[[Any, Any, Any], Any] | None = None
    #: a windowed aggregation's table seen through `suppress(...)`
    suppress: SuppressSpec | None = None


@dataclass(frozen=True)
class TopicSink:
    """Write rows to a topic: `key_column` and `value_columns` (one column, or a JSON object)."""

    topic: str
    key_serde: str | None
    value_serde: str | None
    key_column: str
    value_columns: str | tuple[str, ...]
    #: the rows are a windowed table's updates: the key gets the window start appended
    windowed: bool = False
    #: the rows are a session-windowed table's updates: the key gets the session end and start appended
    session_windowed: bool = False
    #: this sink's own record steps (its branch of a `split`), over the rows it sees
    steps: tuple[RecordStep, ...] = ()
    #: written before the sub-topology's stateful step: it sees the rows going into it
    before_stateful: bool = False
    #: its branch of a windowed table goes through the suppression buffer, while other branches
    #: see the table as it is (a suppress in the main chain suppresses every sink after it instead)
    suppressed: bool = False


@dataclass(frozen=True)
class RepartitionSink:
    """Re-key rows by `key_column` into the repartition topic that feeds sub-topology `target`."""

    topic: str
    key_column: str
    key_serde: str
    target: int
    #: pre-aggregate per key before sending (the downstream aggregation is associative)
    combine: CombineOp | None = None
    combine_column: str | None = None
    #: as `TopicSink.steps`, `TopicSink.before_stateful` and `TopicSink.suppressed`
    steps: tuple[RecordStep, ...] = ()
    before_stateful: bool = False
    suppressed: bool = False


Sink = TopicSink | RepartitionSink


@dataclass(frozen=True)
class SubTopology:
    id: int
    source: SourceSpec
    partitions: int
    #: DataFrame -> DataFrame functions (driver side only; `for_executor` drops them)
    steps: tuple[Callable[[Any], Any], ...] = ()
    stateful: StatefulSpec | None = None
    table: TableSpec | None = None
    sinks: tuple[Sink, ...] = ()
    #: how many DataFrame steps the user wrote (kept when `for_executor` drops `steps`)
    uses_dataframe: bool = False
    #: Eddy's own record steps, run by the task runner before the stateful step (never with `steps`)
    record_steps: tuple[RecordStep, ...] = ()
    #: record steps after the stateful step, over its results (``count().to_stream().map_values(...)``)
    post_steps: tuple[RecordStep, ...] = ()

    @property
    def task_ids(self) -> tuple[str, ...]:
        return tuple(task_id(self.id, p) for p in range(self.partitions))

    @property
    def stores(self) -> tuple[StoreSpec, ...]:
        out = []
        if self.stateful is not None and self.stateful.store is not None:
            out.append(self.stateful.store)
        if self.table is not None:
            out.append(self.table.store)
        if self.stateful is not None and self.stateful.outer_store is not None:
            out.append(self.stateful.outer_store)
        if self.stateful is not None and self.stateful.suppress is not None:
            out.append(self.stateful.suppress.store)
        if self.stateful is not None:
            out.extend(self.stateful.process_stores)
        return tuple(out)

    @property
    def input_topics(self) -> tuple[str, ...]:
        return self.source.topics + ((self.table.topic,) if self.table else ())

    @property
    def punctuates(self) -> bool:
        """A process() step: it runs every batch (every commit interval on the continuous path)
        with or without input, for its wall-clock punctuations."""
        return self.stateful is not None and self.stateful.kind == "process"

    @property
    def stateful_task(self) -> bool:
        return bool(self.stores)

    def for_executor(self) -> SubTopology:
        """The part executors need: everything but the DataFrame steps."""
        return replace(self, steps=())


@dataclass(frozen=True)
class CompiledApp:
    app: str
    subtopologies: tuple[SubTopology, ...]
    #: repartition topic -> partitions
    repartition_topics: Mapping[str, int] = field(default_factory=dict)
    output_topics: tuple[str, ...] = ()

    @property
    def tasks(self) -> tuple[str, ...]:
        return tuple(t for s in self.subtopologies for t in s.task_ids)

    @property
    def source_topics(self) -> tuple[str, ...]:
        """User topics the app reads (streams and tables)."""
        out: list[str] = []
        for s in self.subtopologies:
            for t in s.input_topics:
                if t not in self.repartition_topics and t not in out:
                    out.append(t)
        return tuple(out)

    def subtopology_of(self, task: str) -> SubTopology:
        return self.subtopologies[TaskId.parse(task).subtopology]

    def stateful_tasks(self) -> tuple[str, ...]:
        return tuple(t for s in self.subtopologies if s.stateful_task for t in s.task_ids)

    def changelog_topics(self) -> list[ChangelogTopicSpec]:
        return [ChangelogTopicSpec.for_store(self.app, store, s.partitions) for s in self.subtopologies
                for store in s.stores]


# -- compiling ------------------------------------------------------------------------------------
