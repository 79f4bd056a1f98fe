"""A compiled app as the upgrade gate sees it: `describe(compiled)` is its `TopologyDescription`
(eddy_contract.topology), the sub-topologies with their stores, serdes and windows, the
repartition and output topics, and which names were generated (docs/operations.md, "Upgrading
an app"). The driver publishes it for the running version; `eddy describe` and `eddy diff` make it
for a manifest without running anything. Pure: a compiled app in, a description out.
"""

from __future__ import annotations

from eddy_contract.topology import (
    RepartitionTopicDescription,
    StoreDescription,
    StoreKind,
    SubTopologyDescription,
    TopologyDescription,
)
from eddy_runtime.dsl.names import is_generated_name
from eddy_runtime.dsl.subtopology import CompiledApp, SubTopology
from eddy_runtime.state import StoreSpec
from eddy_runtime.state.changelog import changelog_topic_name

__all__ = ["describe"]

_AGGREGATION_KINDS = {"key_value": StoreKind.KEY_VALUE, "window": StoreKind.WINDOW, "session": StoreKind.SESSION}
_REPARTITION_SUFFIX = "-repartition"


def describe(compiled: CompiledApp) -> TopologyDescription:
    app = compiled.app
    return TopologyDescription(
        application_id=app,
        subtopologies=tuple(
            SubTopologyDescription(s.id, s.input_topics, s.partitions, _stores(app, s),
                                   tuple(k.topic for k in s.sinks))
            for s in compiled.subtopologies),
        repartition_topics=tuple(
            RepartitionTopicDescription(topic, partitions, is_generated_name(_repartition_name(app, topic)))
            for topic, partitions in compiled.repartition_topics.items()),
        output_topics=compiled.output_topics,
    )


def _repartition_name(app: str, topic: str) -> str:
    """The group_by's or merge's name in ``<app>-<name>-repartition``."""
    return topic.removeprefix(f"{app}-").removesuffix(_REPARTITION_SUFFIX)


def _stores(app: str, sub: SubTopology) -> tuple[StoreDescription, ...]:
    """Each store of `sub` (`SubTopology.stores`), with what the step that owns it says of it."""
    step = sub.stateful
    out: dict[str, StoreDescription] = {}

    def add(spec: StoreSpec, kind: StoreKind, input_topic: str | None = None, window_size_ms: int | None = None,
            advance_ms: int | None = None, gap_ms: int | None = None, grace_ms: int | None = None) -> None:
        out[spec.name] = StoreDescription(
            spec.name, kind, spec.key_serde, spec.value_serde,
            changelog_topic_name(app, spec.name) if spec.logged else None,
            generated=is_generated_name(spec.name), input_topic=input_topic, window_size_ms=window_size_ms,
            advance_ms=advance_ms, gap_ms=gap_ms, grace_ms=grace_ms, retention_ms=spec.retention_ms)

    if step is not None and step.kind in ("count", "reduce", "aggregate") and step.store is not None:
        kind = _AGGREGATION_KINDS[step.store.kind]
        if step.windows is not None:
            w = step.windows
            add(step.store, kind, window_size_ms=w.size_ms, advance_ms=w.advance_ms, grace_ms=w.grace_ms)
        elif step.session_windows is not None:
            add(step.store, kind, gap_ms=step.session_windows.gap_ms, grace_ms=step.session_windows.grace_ms)
        else:
            add(step.store, kind)
    if step is not None and step.kind == "table_join" and step.store is not None:
        add(step.store, StoreKind.TABLE, input_topic=sub.source.topic)  # the left table
    if step is not None and step.kind == "stream_join" and step.join_windows is not None:
        jw = step.join_windows
        size = jw.before_ms + jw.after_ms
        if step.store is not None:
            add(step.store, StoreKind.JOIN_WINDOW, window_size_ms=size, grace_ms=jw.grace_ms)
        if sub.table is not None:
            add(sub.table.store, StoreKind.JOIN_WINDOW, sub.table.topic, window_size_ms=size, grace_ms=jw.grace_ms)
        if step.outer_store is not None:
            add(step.outer_store, StoreKind.JOIN_BUFFER)
    elif sub.table is not None:
        add(sub.table.store, StoreKind.TABLE, input_topic=sub.table.topic)
    if step is not None and step.suppress is not None:
        add(step.suppress.store, StoreKind.SUPPRESS_BUFFER)
    if step is not None and step.process_stores:
        *own, time = step.process_stores
        for spec in own:
            add(spec, StoreKind.PROCESSOR)
        add(time, StoreKind.PROCESSOR_TIME)
    # Every store the sub-topology opens is described, and nothing else.
    assert sorted(out) == sorted(s.name for s in sub.stores), (sorted(out), [s.name for s in sub.stores])
    return tuple(out.values())
