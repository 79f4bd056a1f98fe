"""The specs of a sub-topology's stateful step that dsl/compiler.py builds from the user's graph:
an aggregation's store and spec (`aggregation_spec`), a suppression's buffer (`suppress_spec`),
and whether a repartition may carry per-key partial results (`combinable`).
"""

from __future__ import annotations

from typing import cast

from eddy_runtime.dsl.graph import Aggregate, GroupBy, Node, Suppress
from eddy_runtime.dsl.subtopology import CombineOp, StatefulSpec, SuppressSpec
from eddy_runtime.state import StoreSpec

__all__ = ["aggregation_spec", "combinable", "suppress_spec"]


def aggregation_spec(node: Aggregate) -> StatefulSpec:
    group = node.parent
    while group is not None and not isinstance(group, GroupBy):
        group = group.parent
    assert isinstance(group, GroupBy)
    key_serde = group.key_serde
    if node.windows is not None:
        w = node.windows
        store = StoreSpec.window(node.store, w.size_ms, w.retention_ms, key_serde=key_serde,
                                 value_serde=node.value_serde)
    elif node.session_windows is not None:
        store = StoreSpec.session(node.store, node.session_windows.retention_ms, key_serde=key_serde,
                                  value_serde=node.value_serde)
    else:
        store = StoreSpec.key_value(node.store, key_serde=key_serde, value_serde=node.value_serde)
    return StatefulSpec(node.kind, store, key_serde, node.windows, node.reducer, node.column,
                        node.initializer, node.adder, session_windows=node.session_windows, merger=node.merger)


def suppress_spec(node: Suppress, agg: Aggregate) -> SuppressSpec:
    """The buffer of `suppress` on `agg`'s table; a final result waits for the windows' grace
    (time windows) or inactivity gap + grace (sessions: a later record within the gap may still
    merge the session), as Kafka Streams' ``GraphGraceSearchUtil`` finds it."""
    s = node.suppressed
    if s.until == "time_limit":
        wait = s.time_to_wait_ms
    elif agg.session_windows is not None:
        wait = agg.session_windows.gap_ms + agg.session_windows.grace_ms
    else:
        assert agg.windows is not None
        wait = agg.windows.grace_ms
    return SuppressSpec(s, StoreSpec.key_value(node.store), wait)


def combinable(after_group: list[Node]) -> tuple[CombineOp | None, str | None]:
    """Whether the repartition may carry per-key partial results instead of rows.

    Only for an un-windowed count or a named reduce: they are associative, so the downstream
    adds partial counts (sums, mins, maxes) exactly as it would add the rows. Windowed
    aggregations need each row's timestamp (late records), general aggregates each row.
    """
    if len(after_group) != 1 or not isinstance(after_group[0], Aggregate):
        return None, None
    agg = after_group[0]
    if agg.windows is not None or agg.session_windows is not None:
        return None, None
    if agg.kind == "count":
        return "count", None
    if agg.kind == "reduce" and isinstance(agg.reducer, str):
        return cast(CombineOp, agg.reducer), agg.column  # GroupedStream.reduce checked it is sum, min or max
    return None, None
