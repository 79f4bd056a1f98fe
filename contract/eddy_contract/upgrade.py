"""What a change of a running `StreamApp` may do: the upgrade modes (`UpgradeMode`, the manifest's
`spec.upgrade.mode`), the gate's verdict on a new topology (`decide`, over `topology_compare.compare`'s
differences) and which changed spec fields apply in place and which need new pods
(`classify_spec_change`); docs/operations.md, "Upgrading an app".

The operator runs the gate before anything rolls, and `eddy diff` runs the same one without
applying anything. Pure: data in, data out.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from eddy_contract.topology import StoreKind, TopologyDescription
from eddy_contract.topology_compare import Difference, DifferenceKind

__all__ = [
    "IN_PLACE_FIELDS",
    "OUTDATED_ANNOTATION",
    "ChangeEffect",
    "FieldChange",
    "ResetOffsets",
    "SpecChange",
    "UpgradeDecision",
    "UpgradeMode",
    "classify_spec_change",
    "decide",
]


#: an executor pod at an older pod template than its StatefulSet's (the driver that adopted it says
#: so: eddy_runtime.driver.executor_set); the operator replaces it once its actives are on warm
#: copies elsewhere (eddy_operator.rollout)
OUTDATED_ANNOTATION = "eddy.dev/outdated"


class UpgradeMode(StrEnum):
    """What a change of the topology may do to the running state (Flink's restore modes, in
    Kafka Streams' terms)."""

    #: every store is kept; a change that would break one is refused while the old version runs
    KEEP_STATE = "keepState"
    #: a change that would break stores is taken by starting the state of the sub-topologies it
    #: touches over, rebuilt from their input (`ResetOffsets`); the other stores are kept
    RESET_CHANGED_STATE = "resetChangedState"
    #: the new version starts with every store empty and reads on from the committed positions
    STATELESS = "stateless"


class ResetOffsets(StrEnum):
    """Where a reset sub-topology's input starts (resetChangedState)."""

    #: from the beginning of its input topics: its stores are rebuilt from all of it
    EARLIEST = "earliest"
    #: from the end: its stores start empty and hold what comes from now on
    LATEST = "latest"


@dataclass(frozen=True)
class UpgradeDecision:
    """The gate's verdict on a new topology under an upgrade mode."""

    mode: UpgradeMode
    allowed: bool
    #: the new version's sub-topologies whose stores start empty
    reset_subtopologies: tuple[int, ...] = ()
    #: stores whose state is dropped (their changelogs deleted before the new version starts): the
    #: reset sub-topologies' stores, and the running stores the new version no longer has
    reset_stores: tuple[str, ...] = ()
    #: input topics whose committed positions move before the new version starts, and where to
    input_positions: Mapping[str, ResetOffsets] = field(default_factory=lambda: MappingProxyType({}))
    #: the breaking differences: why the upgrade is refused, or what the mode resets for them
    reasons: tuple[str, ...] = ()
    #: what changes without breaking anything, and what the mode does besides
    notes: tuple[str, ...] = ()

    @property
    def message(self) -> str:
        """One line for a status condition or an Event."""
        if not self.reasons:
            return "the new topology keeps every store" if self.allowed else "refused"
        more = f" (and {len(self.reasons) - 1} more)" if len(self.reasons) > 1 else ""
        if not self.allowed:
            return f"refused under upgrade mode {self.mode}: {self.reasons[0]}{more}"
        return f"allowed under upgrade mode {self.mode}, resetting state: {self.reasons[0]}{more}"


def decide(differences: Sequence[Difference], mode: UpgradeMode, proposed: TopologyDescription,
           reset_offsets: ResetOffsets = ResetOffsets.EARLIEST) -> UpgradeDecision:
    """The verdict on `proposed` given its `differences` from the running topology
    (`topology_compare.compare`) and the app's `spec.upgrade`.

    keepState refuses any breaking difference. resetChangedState takes them: the sub-topologies
    they touch start empty; from `earliest`, what feeds them is read again from the beginning,
    and with it every sub-topology connected to them through repartition topics (a stateful one
    would otherwise count the replayed records twice), so those are reset too; from `latest`, only
    they are reset and read on from the end of their input (a table's topic is read from the
    beginning all the same: a table is all of its topic). stateless resets every store and moves
    no position."""
    breaking = [d for d in differences if d.breaking]
    notes = [d.message for d in differences if not d.breaking]
    reasons = tuple(d.message for d in breaking)
    dropped = {d.subject for d in breaking if d.kind in (DifferenceKind.STORE_REMOVED, DifferenceKind.STORE_RENAMED)}
    subs = {s.id: s for s in proposed.subtopologies}
    if mode is UpgradeMode.KEEP_STATE:
        return UpgradeDecision(mode, allowed=not breaking, reasons=reasons, notes=tuple(notes))
    if mode is UpgradeMode.STATELESS:
        everything = tuple(s.id for s in proposed.subtopologies if s.stateful)
        stores = dropped | {st.name for _, st in proposed.stores()}
        if everything:
            notes.append("upgrade mode stateless: every store starts empty, and each input is read on from its "
                         "committed position")
        return UpgradeDecision(mode, True, everything, tuple(sorted(stores)), reasons=reasons, notes=tuple(notes))
    seeds = {d.subtopology for d in breaking if d.subtopology is not None and subs[d.subtopology].stateful}
    internal = {t.name for t in proposed.repartition_topics}
    positions: dict[str, ResetOffsets] = {}
    if reset_offsets is ResetOffsets.EARLIEST:
        replayed = _connected(seeds, proposed, internal)
        reset = sorted(i for i in replayed if subs[i].stateful)
        for i in sorted(replayed):
            positions.update((t, ResetOffsets.EARLIEST) for t in subs[i].source_topics if t not in internal)
        outputs = sorted({t for i in replayed for t in subs[i].sink_topics if t not in internal})
        if outputs:
            notes.append(f"sub-topologies {_ids(replayed)} read their input again from the beginning: "
                         f"{', '.join(repr(t) for t in outputs)} get their records again")
    else:
        reset = sorted(seeds)
        for i in reset:
            tables = {st.input_topic for st in subs[i].stores if st.kind is StoreKind.TABLE}
            positions.update((t, ResetOffsets.EARLIEST if t in tables else ResetOffsets.LATEST)
                             for t in subs[i].source_topics)
    if reset:
        notes.append(f"upgrade mode resetChangedState: the stores of sub-topologies {_ids(reset)} start empty, "
                     f"rebuilt from their input from the {reset_offsets}; the other stores are kept")
    stores = dropped | {st.name for i in reset for st in subs[i].stores}
    return UpgradeDecision(mode, True, tuple(reset), tuple(sorted(stores)),
                           MappingProxyType(dict(sorted(positions.items()))), reasons, tuple(notes))


def _connected(seeds: Iterable[int], d: TopologyDescription, internal: set[str]) -> set[int]:
    """The sub-topologies joined to `seeds` through repartition topics, either way."""
    neighbours: dict[int, set[int]] = {s.id: set() for s in d.subtopologies}
    for writer in d.subtopologies:
        for reader in d.subtopologies:
            if set(writer.sink_topics) & set(reader.source_topics) & internal:
                neighbours[writer.id].add(reader.id)
                neighbours[reader.id].add(writer.id)
    found: set[int] = set()
    todo = list(seeds)
    while todo:
        i = todo.pop()
        if i not in found:
            found.add(i)
            todo.extend(neighbours[i])
    return found


def _ids(ids: Iterable[int]) -> str:
    return ", ".join(str(i) for i in sorted(ids))


# ---------------------------------------------------------------------------------------------
# Spec changes


class ChangeEffect(StrEnum):
    #: the running pods take it (the operator's assignment, the driver's settings): no restart
    IN_PLACE = "inPlace"
    #: a new driver and new executors: a rolling upgrade through the gate
    NEW_PODS = "newPods"


#: spec fields (and the fields under them) that apply without new pods: the executor count (pods
#: come or go, the others keep running), the KIP-441 placement settings the operator's assignor
#: reads, the commit interval and the bad-record policy the driver reads, the operator's own
#: settings (volumes kept on delete, the node-loss timeout, this gate's, the autoscaler's). Everything
#: else needs new pods.
IN_PLACE_FIELDS: tuple[str, ...] = (
    "spec.executors.replicas",
    "spec.state.standbyReplicas",
    "spec.state.acceptableRecoveryLag",
    "spec.state.maxWarmupReplicas",
    "spec.state.retainVolumesOnDelete",
    "spec.state.nodeLossTimeout",
    "spec.triggerInterval",
    "spec.badRecordPolicy",
    "spec.deadLetterTopic",
    "spec.upgrade",
    "spec.autoscaling",
)

#: objects whose keys are free (maps), compared key by key; lists are compared whole
_MAPS = frozenset({"spec.pipeline.args", "spec.kafka.config", "spec.sparkConf", "spec.executors.nodeSelector"})


@dataclass(frozen=True)
class FieldChange:
    #: the manifest path, e.g. `spec.state.standbyReplicas`, `spec.sparkConf.spark.sql.shuffle.partitions`
    field: str
    #: the values before and after, as in the defaulted manifest (None: absent)
    old: Any
    new: Any
    effect: ChangeEffect


@dataclass(frozen=True)
class SpecChange:
    """The changed fields of a StreamApp's spec, each with how it is applied."""

    changes: tuple[FieldChange, ...] = ()

    @property
    def in_place(self) -> tuple[FieldChange, ...]:
        return tuple(c for c in self.changes if c.effect is ChangeEffect.IN_PLACE)

    @property
    def new_pods(self) -> tuple[FieldChange, ...]:
        return tuple(c for c in self.changes if c.effect is ChangeEffect.NEW_PODS)

    @property
    def needs_new_pods(self) -> bool:
        return bool(self.new_pods)


def classify_spec_change(old_spec_manifest: Mapping[str, Any], new_spec_manifest: Mapping[str, Any]) -> SpecChange:
    """Which fields of `spec` differ between two StreamApp manifests (each defaulted by the CRD
    first, so an omitted field equals its default) and whether each applies in place."""
    old = _leaves(_defaulted(old_spec_manifest), "spec")
    new = _leaves(_defaulted(new_spec_manifest), "spec")
    changes = [FieldChange(f, old.get(f), new.get(f), _effect(f))
               for f in sorted(old.keys() | new.keys()) if old.get(f) != new.get(f)]
    return SpecChange(tuple(changes))


def _defaulted(manifest: Mapping[str, Any]) -> Mapping[str, Any]:
    """The spec as the CRD defaults it, with `spec.upgrade`'s defaults even where it is absent
    (the CRD gives it none of its own; eddy_contract.spec.UpgradeSpec)."""
    from eddy_contract import crd  # here, as in eddy_contract.spec: the runner never needs the schema

    body = crd.with_defaults(manifest)
    spec = body.get("spec") or {}
    if "upgrade" not in spec:
        spec = crd.with_defaults({**body, "spec": {**spec, "upgrade": {}}})["spec"]
    result: Mapping[str, Any] = spec
    return result


def _effect(path: str) -> ChangeEffect:
    if any(path == f or path.startswith(f + ".") for f in IN_PLACE_FIELDS):
        return ChangeEffect.IN_PLACE
    return ChangeEffect.NEW_PODS


def _leaves(value: Any, path: str) -> dict[str, Any]:
    return dict(_walk(value, path))


def _walk(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    if isinstance(value, Mapping) and path in _MAPS:
        for key, sub in value.items():
            yield f"{path}.{key}", sub
    elif isinstance(value, Mapping) and value:
        for key, sub in value.items():
            yield from _walk(sub, f"{path}.{key}")
    else:
        yield path, value
