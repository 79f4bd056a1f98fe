"""Compile a pipeline (the graph dsl/pipeline.py records, dsl/graph.py) into sub-topologies, stores,
topics and tasks.

Pure: takes the graph, the app id and the partition counts of the source topics, returns
frozen values. The driver calls `compile_topology` once at start; the sub-topologies travel to
the executors (without their DataFrame steps, which only the driver applies).

A sub-topology is one chain, Kafka Streams' way::

    source topic (or repartition topic; or two topics a merge reads in place)
      -> record steps (flat_map_values, map_values, filter...; run in the executor's task runner)
         or DataFrame steps (transform; run in Spark, on the task's executor), not both
      -> at most one stateful step (count / reduce / aggregate, windowed, sessionized or not, or
         a join), run in the executor's task runner
      -> record steps over its results (``to_stream().map_values(...)``)
      -> sinks: output topics and repartition topics that feed the next sub-topologies; a stream
         that feeds several chains (``split()`` branches) ends in sinks with their own record
         steps, and a sink written before the stateful step sees the records going into it

Task ``S_P`` is sub-topology ``S`` on partition ``P`` of its source topic; each stateful store
has a changelog with one partition per task.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from eddy_runtime.dsl.errors import PipelineError
from eddy_runtime.dsl.graph import (
    Aggregate,
    GroupBy,
    Join,
    Merge,
    Node,
    Process,
    Record,
    Source,
    StreamJoin,
    Suppress,
    TableJoin,
    TableSource,
    ToStream,
    ToTopic,
    Transform,
)
from eddy_runtime.dsl.pipeline import Topology
from eddy_runtime.dsl.record_steps import GROUP_KEY_COLUMN, RecordStep
from eddy_runtime.dsl.stateful_specs import aggregation_spec, combinable, suppress_spec
from eddy_runtime.dsl.subtopology import (
    CompiledApp,
    RepartitionSink,
    Sink,
    SourceSpec,
    StatefulSpec,
    SubTopology,
    TableSpec,
    TopicSink,
    repartition_topic_name,
)
from eddy_runtime.state import StoreSpec

__all__ = ["compile_topology"]


def _with_group_key(expr: Any) -> Callable[[Any], Any]:
    """The DataFrame step that computes a group_by expression into `GROUP_KEY_COLUMN`."""
    return lambda df: df.withColumn(GROUP_KEY_COLUMN, expr)


def _is_repartition(node: Node) -> bool:
    return (isinstance(node, GroupBy) and node.key is not None) or isinstance(node, Merge)


def compile_topology(topology: Topology, app: str, source_partitions: Mapping[str, int]) -> CompiledApp:
    """Sub-topologies, stores and topics of `topology` for app `app`.

    `source_partitions` gives the partition count of every topic the pipeline reads with
    `stream` or `table`. Raises `PipelineError` saying what to change.
    """
    if not topology.sinks:
        raise PipelineError("the pipeline writes nothing: end it with to(topic)")
    # Every node that leads to a sink, with its children (the user's graph, reversed; a merge has
    # two parents).
    children: dict[int, list[Node]] = {}
    nodes: dict[int, Node] = {}
    for sink in topology.sinks:
        stack: list[tuple[Node, Node | None]] = [(sink, None)]
        while stack:
            n, child = stack.pop()
            seen = id(n) in nodes
            nodes[id(n)] = n
            if child is not None and child not in children.setdefault(id(n), []):
                children[id(n)].append(child)
            if not seen:
                stack += [(p, n) for p in (n.parent, n.other if isinstance(n, Merge) else None) if p is not None]
    # sources, and the left table of a table-table join (a table source read by its sub-topology)
    roots: list[Source | TableSource] = [n for n in nodes.values() if isinstance(n, Source | TableSource)]
    # Sub-topologies in the order Kafka Streams numbers them: sources in the order declared,
    # then each repartition's downstream after its upstream.
    roots.sort(key=lambda n: topology.sources.index(n) if n in topology.sources else len(topology.sources))
    read = [r.topic for r in roots]
    for n in nodes.values():
        if isinstance(n, StreamJoin) and id(n.other) in nodes:
            raise PipelineError(f"the stream of {n.other.topic!r} is joined with windows and used elsewhere: a "
                                "windowed join reads it itself; write what else it feeds from the join's result")
    for topic in dict.fromkeys(t for t in read if read.count(t) > 1):
        raise PipelineError(f"topic {topic!r} is read by two stream() calls (Kafka Streams refuses it too: their "
                            "tasks would commit the same input offsets); read it once")
    subs: list[SubTopology] = []
    repartitions: dict[str, int] = {}
    outputs: list[str] = []
    pending: list[tuple[Node, SourceSpec, int]] = []
    for root in roots:
        if root.topic not in source_partitions:
            raise PipelineError(f"topic {root.topic!r} does not exist (or its partition count is unknown)")
    in_place = _merges_in_place(roots, children, source_partitions)
    for root in roots:
        merge = in_place.get(id(root))
        if merge is None:
            pending.append((root, SourceSpec(root.topic, root.key_serde, root.value_serde),
                            source_partitions[root.topic]))
        elif merge.parent is root:  # the merge's sub-topology, where its first source's would be
            assert isinstance(merge.other, Source)
            pending.append((merge, SourceSpec(root.topic, root.key_serde, root.value_serde,
                                              merged=(merge.other.topic,)), source_partitions[root.topic]))
    walk = _Walk(app, children, subs, repartitions, outputs, pending)
    while pending:
        start, source, partitions = pending.pop(0)
        b = _Sub(len(subs), source, partitions)
        node = start
        while True:
            kids = children.get(id(node), [])
            ends = [k for k in kids if isinstance(k, ToTopic) or _is_repartition(k)]
            chain = [k for k in kids if k not in ends]
            for end in ends:
                _add_sink(walk, b, end, [])
            # Several chains from one node (split() branches, a stream written and then changed):
            # each becomes sinks with their own record steps.
            if len(chain) > 1 or (chain and b.sinks and isinstance(chain[0], Record)):
                for branch in chain:
                    for own, end, suppress in _branch_tails(branch, children):
                        if suppress is not None:
                            _add_branch_suppress(b, suppress)
                        _add_sink(walk, b, end, own, suppressed=suppress is not None)
                break
            if not chain:
                break
            node = chain[0]
            _add_step(b, node, source_partitions)
        if not b.sinks:
            raise PipelineError(f"sub-topology {b.id} (reading {source.topic}) writes nothing")
        if b.steps and b.records:
            raise PipelineError(f"{b.records[0].label} and transform in one sub-topology: a sub-topology runs "
                                "DataFrame steps (in Spark) or Eddy's record steps (in the task runner), not both; do "
                                "the record step's work in the DataFrame function, or group_by between them")
        # no stateful step after all: every sink sees the same rows
        sinks = tuple(b.sinks if b.stateful is not None else (replace(k, before_stateful=False) for k in b.sinks))
        subs.append(SubTopology(b.id, source, partitions, tuple(b.steps), b.stateful, b.table, sinks,
                                uses_dataframe=bool(b.steps), record_steps=tuple(b.records),
                                post_steps=tuple(b.post)))
    # Pending order assigned downstream ids in creation order; check they line up.
    for s in subs:
        for out in s.sinks:
            if isinstance(out, RepartitionSink):
                assert subs[out.target].source.topic == out.topic
    return CompiledApp(app, tuple(subs), dict(repartitions), tuple(dict.fromkeys(outputs)))


@dataclass
class _Sub:
    """What one sub-topology collects while the compiler walks its chain."""

    id: int
    source: SourceSpec
    partitions: int
    steps: list[Callable[[Any], Any]] = field(default_factory=list)
    records: list[RecordStep] = field(default_factory=list)
    post: list[RecordStep] = field(default_factory=list)
    #: to_stream() after the stateful step
    streamed: bool = False
    stateful: StatefulSpec | None = None
    table: TableSpec | None = None
    sinks: list[Sink] = field(default_factory=list)
    windowed_output: bool = False
    session_output: bool = False


@dataclass
class _Walk:
    """What the compiler shares across sub-topologies."""

    app: str
    children: dict[int, list[Node]]
    subs: list[SubTopology]
    repartitions: dict[str, int]
    outputs: list[str]
    pending: list[tuple[Node, SourceSpec, int]]
    #: merge node -> the sub-topology that reads its topic
    merges: dict[int, int] = field(default_factory=dict)


def _merges_in_place(roots: list[Source | TableSource], children: Mapping[int, list[Node]],
                     source_partitions: Mapping[str, int]) -> dict[int, Merge]:
    """Merges read in place, by the id of each of their two sources: a merge of two topics read
    with ``stream()`` and nothing else between, which feed nothing else, co-partitioned and of the
    merge's serdes. Their sub-topology reads both topics, as Kafka Streams merges streams in one
    sub-topology; any other merge goes through its internal topic."""
    out: dict[int, Merge] = {}
    for root in roots:
        kids = children.get(id(root), [])
        if len(kids) != 1 or not isinstance(merge := kids[0], Merge) or merge.parent is not root or not merge.in_place:
            continue
        other = merge.other
        if (isinstance(other, Source) and children.get(id(other)) == [merge]
                and source_partitions.get(other.topic) == source_partitions[root.topic]
                and merge.partitions in (None, source_partitions[root.topic])
                and root.key_serde == other.key_serde == merge.key_serde and root.value_serde == other.value_serde
                and not _runs_dataframe_steps(merge, children)):
            out[id(root)] = out[id(other)] = merge
    return out


def _runs_dataframe_steps(node: Node, children: Mapping[int, list[Node]]) -> bool:
    """Whether the sub-topology that starts at `node` has a ``transform`` step: Spark reads its
    input then, one topic per task."""
    return any(isinstance(kid, Transform) or (not isinstance(kid, ToTopic) and not _is_repartition(kid)
                                              and _runs_dataframe_steps(kid, children))
               for kid in children.get(id(node), []))


def _add_step(b: _Sub, node: Node, source_partitions: Mapping[str, int]) -> None:
    """The next step of `b`'s main chain."""
    if isinstance(node, Transform):
        if b.sinks:
            raise PipelineError("transform follows a stream already written with to() or group_by(): its sinks "
                                "would see the DataFrame step's rows; write the stream to a topic and read it back")
        if b.stateful is not None:
            raise PipelineError("transform after a stateful step is not supported in the same sub-topology")
        b.steps.append(node.fn)
    elif isinstance(node, Record):
        (b.post if b.stateful is not None else b.records).append(node.step)
    elif isinstance(node, GroupBy):  # group_by_key: no repartition, the aggregation follows
        _check_key_kept(b.records, "group_by_key()")
    elif isinstance(node, Aggregate):
        if b.stateful is not None:
            raise PipelineError("one stateful step per sub-topology: group_by between them")
        b.stateful = aggregation_spec(node)
        b.windowed_output = node.windows is not None or node.session_windows is not None
        b.session_output = node.session_windows is not None
    elif isinstance(node, Join):
        if b.stateful is not None:
            raise PipelineError("one stateful step per sub-topology: group_by between them")
        _check_key_kept(b.records, "join()")
        t = node.table
        _check_copartitioned(t.topic, "table topic", b, source_partitions)
        b.table = TableSpec(t.topic, t.key_serde, t.value_serde, StoreSpec.key_value(t.store, "bytes", "bytes"))
        b.stateful = StatefulSpec("join", None, t.key_serde, how=node.how, right_name=node.right_name,
                                  joiner=node.joiner)
    elif isinstance(node, StreamJoin):
        if b.stateful is not None:
            raise PipelineError("one stateful step per sub-topology: group_by between them")
        _check_key_kept(b.records, "join()")
        other, w = node.other, node.windows
        _check_copartitioned(other.topic, "topic", b, source_partitions)
        b.table = TableSpec(other.topic, other.key_serde, other.value_serde,
                            StoreSpec.window(node.right_store, 1, w.retention_ms))
        b.stateful = StatefulSpec("stream_join", StoreSpec.window(node.left_store, 1, w.retention_ms),
                                  b.source.key_serde, joiner=node.joiner, join_windows=w, how=node.how,
                                  outer_store=StoreSpec.key_value(node.outer_store) if node.outer_store else None)
    elif isinstance(node, TableJoin):
        left, right = node.parent, node.other
        assert isinstance(left, TableSource)
        _check_copartitioned(right.topic, "table topic", b, source_partitions)
        b.table = TableSpec(right.topic, right.key_serde, right.value_serde,
                            StoreSpec.key_value(right.store, "bytes", "bytes"))
        b.stateful = StatefulSpec("table_join", StoreSpec.key_value(left.store, "bytes", "bytes"), left.key_serde,
                                  how=node.how, joiner=node.joiner, left_value_serde=left.value_serde)
    elif isinstance(node, Suppress):
        assert b.stateful is not None and isinstance(node.parent, Aggregate)  # Table.suppress checks it
        b.stateful = replace(b.stateful, suppress=suppress_spec(node, node.parent))
    elif isinstance(node, Process):
        if b.stateful is not None:
            raise PipelineError("one stateful step per sub-topology: group_by between them")
        b.stateful = StatefulSpec("process", None, b.source.key_serde, processor=node.factory,
                                  process_stores=(*node.stores, StoreSpec.key_value(f"{node.name}-time")))
        b.streamed = True  # what a processor forwards is a stream (group_by may follow it)
    elif isinstance(node, ToStream):
        b.streamed = True
    else:  # pragma: no cover - every node type is handled above
        raise PipelineError(f"unexpected step {type(node).__name__}")


def _check_copartitioned(topic: str, what: str, b: _Sub, source_partitions: Mapping[str, int]) -> None:
    """A join's other input: it exists and has as many partitions as `b`'s source."""
    if topic not in source_partitions:
        raise PipelineError(f"{what} {topic!r} does not exist")
    if source_partitions[topic] != b.partitions:
        raise PipelineError(f"{what} {topic!r} has {source_partitions[topic]} partitions but {b.source.topic!r} "
                            f"joined with it has {b.partitions}: they must be co-partitioned")


def _add_sink(walk: _Walk, b: _Sub, end: Node, own: list[RecordStep], suppressed: bool = False) -> None:
    """A sink of `b` at `end`; `own`: the record steps of its branch (several chains from a node);
    `suppressed`: its branch goes through the suppression buffer (the other branches do not)."""
    before = b.stateful is None
    if isinstance(end, ToTopic):
        b.sinks.append(TopicSink(end.topic, end.key_serde, end.value_serde, end.key, end.value,
                                 windowed=b.windowed_output, session_windowed=b.session_output, steps=tuple(own),
                                 before_stateful=before, suppressed=suppressed))
        walk.outputs.append(end.topic)
        return
    if isinstance(end, Merge):
        _add_merge_sink(walk, b, end, own, before, suppressed)
        return
    assert isinstance(end, GroupBy)
    if b.stateful is not None and b.stateful.kind != "join" and not b.streamed:
        raise PipelineError("group_by after an aggregation needs to_stream() first")
    if isinstance(end.key, str):
        key_column = end.key
    elif isinstance(end.key, RecordStep):
        if own:
            own = [*own, end.key]
        else:
            (b.post if b.stateful is not None else b.records).append(end.key)
        key_column = GROUP_KEY_COLUMN
    else:
        if b.stateful is not None:
            raise PipelineError("after a stateful step, group_by takes a column name")
        if b.records or own:
            raise PipelineError("group_by(pyspark Column) needs Spark after record steps: use "
                                "group_by(lambda key, value: ...) or a column name")
        b.steps.append(_with_group_key(end.key))
        key_column = GROUP_KEY_COLUMN
    topic = repartition_topic_name(walk.app, end.name)
    if topic in walk.repartitions:
        raise PipelineError(f"repartition topic {topic} is used twice")
    n_parts = end.partitions or b.partitions
    walk.repartitions[topic] = n_parts
    downstream = len(walk.subs) + 1 + len(walk.pending)
    combine, combine_column = combinable(walk.children.get(id(end), []))
    b.sinks.append(RepartitionSink(topic, key_column, end.key_serde, downstream, combine, combine_column,
                                   steps=tuple(own), before_stateful=before, suppressed=suppressed))
    walk.pending.append((end, SourceSpec(topic, end.key_serde, "json", repartition=True,
                                         combined=combine, combined_column=combine_column), n_parts))


def _add_merge_sink(walk: _Walk, b: _Sub, end: Merge, own: list[RecordStep], before: bool,
                    suppressed: bool) -> None:
    """One side of a merge: its records to the merge topic, read by one sub-topology for both."""
    topic = repartition_topic_name(walk.app, end.name)
    if id(end) in walk.merges:
        downstream = walk.merges[id(end)]
    else:
        if topic in walk.repartitions:
            raise PipelineError(f"repartition topic {topic} is used twice")
        walk.repartitions[topic] = end.partitions or b.partitions
        downstream = walk.merges[id(end)] = len(walk.subs) + 1 + len(walk.pending)
        walk.pending.append((end, SourceSpec(topic, end.key_serde, "json", repartition=True),
                             walk.repartitions[topic]))
    b.sinks.append(RepartitionSink(topic, "key", end.key_serde, downstream, steps=tuple(own), before_stateful=before,
                                   suppressed=suppressed))


def _branch_tails(node: Node, children: Mapping[int, list[Node]]
                  ) -> list[tuple[list[RecordStep], Node, Suppress | None]]:
    """The sinks a branch ends in, each with the record steps on the way (a branch may split again)
    and the suppression its results go through, if any."""
    out: list[tuple[list[RecordStep], Node, Suppress | None]] = []

    def walk(n: Node, steps: list[RecordStep], suppress: Suppress | None) -> None:
        if isinstance(n, Record):
            steps = [*steps, n.step]
        elif isinstance(n, Suppress):
            suppress = n
        elif not isinstance(n, ToStream):
            what = {"GroupBy": "group_by_key()", "Aggregate": "count/reduce/aggregate", "Join": "join()",
                    "Transform": "transform()"}.get(type(n).__name__, type(n).__name__)
            raise PipelineError(f"a stream feeds several chains (split() branches, or one stream used twice) and one "
                                f"of them has a {what} step: a branch runs record steps and ends in to() or "
                                "group_by(...); group_by(...) first, then the stateful step in its own sub-topology")
        for k in children.get(id(n), []):
            if isinstance(k, ToTopic) or _is_repartition(k):
                out.append((steps, k, suppress))
            else:
                walk(k, steps, suppress)

    walk(node, [], None)
    return out


def _add_branch_suppress(b: _Sub, node: Suppress) -> None:
    """A branch of a windowed table goes through `suppress`, the others see the table as it is
    (``counts.to("all"); counts.suppress(...).to("final")``): one buffer per sub-topology."""
    assert b.stateful is not None and isinstance(node.parent, Aggregate)  # Table.suppress checks it
    if b.stateful.suppress is None:
        b.stateful = replace(b.stateful, suppress=suppress_spec(node, node.parent))
    elif b.stateful.suppress.store.name != node.store:
        raise PipelineError("a windowed table is suppressed twice: one suppress() per sub-topology")


def _check_key_kept(records: list[RecordStep], what: str) -> None:
    """Kafka Streams repartitions after a key change; Eddy asks for it to be written."""
    changed = [s.label for s in records if s.changes_key]
    if changed:
        fix = ("re-key with group_by(lambda key, value: key) instead" if what == "group_by_key()" else
               "write the stream to a topic with to() and read it with topology.stream()")
        raise PipelineError(f"{what} after {changed[-1]}: the key changed, so the records are not partitioned by it; "
                            + fix)
