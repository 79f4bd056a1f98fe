"""What changes between two versions of a compiled app (`compare`, over two
`eddy_contract.topology.TopologyDescription`s), for the upgrade gate of docs/operations.md,
"Upgrading an app": each difference with its kind, breaking or not, naming the store or topic and
the running and proposed values. A store is known by its name; a generated name (`generated`)
whose step position shifted is caught as a rename, with a hint of how to name it. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from eddy_contract.topology import (
    StoreDescription,
    SubTopologyDescription,
    TopologyDescription,
)

__all__ = ["BREAKING", "Difference", "DifferenceKind", "compare"]


class DifferenceKind(StrEnum):
    # Breaking: the running stores' state would be wrong, or lost, under the new version.
    STORE_REMOVED = "storeRemoved"
    STORE_RENAMED = "storeRenamed"
    STORE_NAME_REUSED = "storeNameReused"
    STORE_KIND_CHANGED = "storeKindChanged"
    KEY_SERDE_CHANGED = "keySerdeChanged"
    VALUE_SERDE_CHANGED = "valueSerdeChanged"
    WINDOW_CHANGED = "windowChanged"
    CHANGELOG_CHANGED = "changelogChanged"
    STORE_MOVED = "storeMoved"
    STORE_INPUT_CHANGED = "storeInputChanged"
    PARTITIONS_CHANGED = "partitionsChanged"
    REPARTITION_PARTITIONS_CHANGED = "repartitionPartitionsChanged"
    REPARTITION_TOPIC_RENAMED = "repartitionTopicRenamed"
    # Compatible: said, never refused.
    STORE_ADDED = "storeAdded"
    SUBTOPOLOGY_ADDED = "subTopologyAdded"
    SUBTOPOLOGY_REMOVED = "subTopologyRemoved"
    SUBTOPOLOGY_RENUMBERED = "subTopologyRenumbered"
    TASKS_CHANGED = "tasksChanged"
    REPARTITION_TOPIC_ADDED = "repartitionTopicAdded"
    REPARTITION_TOPIC_REMOVED = "repartitionTopicRemoved"
    OUTPUT_TOPIC_ADDED = "outputTopicAdded"
    OUTPUT_TOPIC_REMOVED = "outputTopicRemoved"


#: the kinds of difference that break the running state: refused unless the upgrade mode resets it
BREAKING = frozenset({
    DifferenceKind.STORE_REMOVED, DifferenceKind.STORE_RENAMED, DifferenceKind.STORE_NAME_REUSED,
    DifferenceKind.STORE_KIND_CHANGED,
    DifferenceKind.KEY_SERDE_CHANGED, DifferenceKind.VALUE_SERDE_CHANGED, DifferenceKind.WINDOW_CHANGED,
    DifferenceKind.CHANGELOG_CHANGED, DifferenceKind.STORE_MOVED, DifferenceKind.STORE_INPUT_CHANGED,
    DifferenceKind.PARTITIONS_CHANGED, DifferenceKind.REPARTITION_PARTITIONS_CHANGED,
    DifferenceKind.REPARTITION_TOPIC_RENAMED,
})  # fmt: skip


@dataclass(frozen=True)
class Difference:
    """One difference between the running topology and the proposed one."""

    kind: DifferenceKind
    #: what it is about: a store's name, a topic's name
    subject: str
    #: a sentence for a status condition, an Event and `eddy diff` ("store 'counts': value serde
    #: int64 -> json")
    message: str
    #: the proposed version's sub-topology whose state must start over for the change to be taken
    #: (resetChangedState resets it); None when no state of the new version is at stake
    subtopology: int | None = None

    @property
    def breaking(self) -> bool:
        return self.kind in BREAKING


def compare(running: TopologyDescription, proposed: TopologyDescription) -> tuple[Difference, ...]:
    """What changes from `running` to `proposed`, breaking differences first, each group in a
    stable order. An empty tuple: the two are the same as far as state is concerned (a record
    step such as `filter` or `map_values` is not part of a description)."""
    return _Comparison(running, proposed).differences()


_WINDOW_FIELDS = (
    ("window_size_ms", "window size"), ("advance_ms", "window advance"), ("gap_ms", "session gap"),
    ("grace_ms", "grace"), ("retention_ms", "retention"),
)  # fmt: skip

_POSITION_NUMBER = re.compile(r"-[0-9]+(?=-|$)")
_STEM = re.compile(r"^([a-z-]+?)-[0-9]+")
#: what to write so that a generated name stays put, by the stem of the name (docs/pipelines.md,
#: "Naming stores")
_NAMING_HINTS: Mapping[str, str] = {
    "count": '.count(name="...")',
    "reduce": '.reduce(..., name="...")',
    "aggregate": '.aggregate(..., name="...")',
    "table": 'topology.table(topic, name="...")',
    "join": '.join(other, joiner, windows=..., name="...")',
    "process": '.process(factory, name="...")',
    "group-by": '.group_by(key, name="...")',
    "merge": '.merge(other, name="...")',
}


def _naming_hint(name: str) -> str:
    m = _STEM.match(name)
    hint = _NAMING_HINTS.get(m.group(1)) if m else None
    if hint is None:
        return "give the step a name with name=..."
    if name.endswith("-suppress"):
        return f"name it: {hint} (its suppress buffer is named after it)"
    return f"name it: {hint}"


def _repartition_base(app: str, topic: str) -> str:
    """The name a group_by or merge gave its topic `<app>-<name>-repartition`."""
    prefix, suffix = f"{app}-", "-repartition"
    if topic.startswith(prefix) and topic.endswith(suffix):
        return topic[len(prefix):-len(suffix)]
    return topic


class _Comparison:
    def __init__(self, running: TopologyDescription, proposed: TopologyDescription) -> None:
        self.running = running
        self.proposed = proposed
        self.out: list[Difference] = []
        self.r_stores = {s.name: (sub, s) for sub, s in running.stores()}
        self.p_stores = {s.name: (sub, s) for sub, s in proposed.stores()}
        self.r_origin = _origins(running)
        self.p_origin = _origins(proposed)
        #: running repartition topic -> the proposed one a shift renamed it to
        self.renamed_topics: dict[str, str] = {}

    def differences(self) -> tuple[Difference, ...]:
        self._repartition_topics()
        self._stores()
        self._subtopologies()
        self._output_topics()
        breaking = [d for d in self.out if d.breaking]
        notes = [d for d in self.out if not d.breaking]
        return tuple(breaking + notes)

    def _add(self, kind: DifferenceKind, subject: str, message: str, subtopology: int | None = None) -> None:
        self.out.append(Difference(kind, subject, message, subtopology))

    # -- repartition topics

    def _repartition_shape(self, d: TopologyDescription, origin: Mapping[int, tuple[str, ...]],
                           topic: str) -> tuple[Any, ...]:
        writers = sorted({o for s in d.subtopologies if topic in s.sink_topics for o in origin[s.id]})
        readers = sorted((st.kind, _POSITION_NUMBER.sub("-N", st.name), st.key_serde, st.value_serde)
                         for s in d.subtopologies if s.source_topic == topic for st in s.stores)
        return (_POSITION_NUMBER.sub("-N", _repartition_base(d.application_id, topic)), tuple(writers),
                tuple(readers))

    def _repartition_topics(self) -> None:
        r_topics = {t.name: t for t in self.running.repartition_topics}
        p_topics = {t.name: t for t in self.proposed.repartition_topics}

        def shape_r(name: str) -> tuple[Any, ...]:
            return self._repartition_shape(self.running, self.r_origin, name)

        def shape_p(name: str) -> tuple[Any, ...]:
            return self._repartition_shape(self.proposed, self.p_origin, name)

        pairs = _shifted(
            [n for n, t in r_topics.items() if t.generated and (n not in p_topics or shape_r(n) != shape_p(n))],
            [n for n, t in p_topics.items() if t.generated and (n not in r_topics or shape_r(n) != shape_p(n))],
            shape_r, shape_p)
        for old, new in pairs:
            self.renamed_topics[old] = new
            reader = self._reader(self.proposed, new)
            self._add(DifferenceKind.REPARTITION_TOPIC_RENAMED, old,
                      f"repartition topic '{old}' would be renamed to '{new}' by the new topology (a step "
                      f"before it was inserted or removed): records written to it and not yet read would be lost; "
                      f"{_naming_hint(_repartition_base(self.running.application_id, old))}",
                      reader)
        moved_away = set(self.renamed_topics)
        moved_to = set(self.renamed_topics.values())
        for name in sorted(r_topics.keys() & p_topics.keys()):
            old_n, new_n = r_topics[name].partitions, p_topics[name].partitions
            if old_n != new_n and name not in moved_away and name not in moved_to:
                self._add(DifferenceKind.REPARTITION_PARTITIONS_CHANGED, name,
                          f"repartition topic '{name}': partitions {old_n} -> {new_n} (its records are "
                          "spread by key over the partitions, and its readers' stores with them)",
                          self._reader(self.proposed, name))
        for name in sorted(r_topics.keys() - p_topics.keys() - moved_away):
            self._add(DifferenceKind.REPARTITION_TOPIC_REMOVED, name,
                      f"repartition topic '{name}' is no longer used: records still in it are not read")
        for name in sorted(p_topics.keys() - r_topics.keys() - moved_to):
            self._add(DifferenceKind.REPARTITION_TOPIC_ADDED, name, f"repartition topic '{name}' is new")

    @staticmethod
    def _reader(d: TopologyDescription, topic: str) -> int | None:
        return next((s.id for s in d.subtopologies if s.source_topic == topic), None)

    # -- stores

    def _store_shape(self, origin: Mapping[int, tuple[str, ...]], sub: SubTopologyDescription,
                     store: StoreDescription) -> tuple[Any, ...]:
        """A store as its position does not change it: its generated name's stem, what it holds,
        and the user topics its records come from."""
        return (_POSITION_NUMBER.sub("-N", store.name), store.kind, store.key_serde, store.value_serde,
                store.input_topic, *(getattr(store, f) for f, _ in _WINDOW_FIELDS), origin[sub.id])

    def _stores(self) -> None:
        r, p = self.r_stores, self.p_stores

        def shape_r(name: str) -> tuple[Any, ...]:
            return self._store_shape(self.r_origin, *r[name])

        def shape_p(name: str) -> tuple[Any, ...]:
            return self._store_shape(self.p_origin, *p[name])

        def differs(name: str) -> bool:
            return name not in r or name not in p or shape_r(name) != shape_p(name)

        pairs = _shifted([n for n, (_, s) in r.items() if s.generated and differs(n)],
                         [n for n, (_, s) in p.items() if s.generated and differs(n)], shape_r, shape_p)
        renamed_from = {old for old, _ in pairs}
        renamed_to = {new for _, new in pairs}
        for old, new in pairs:
            self._add(DifferenceKind.STORE_RENAMED, old,
                      f"store '{old}' would be renamed to '{new}' by the new topology (a step before it was "
                      f"inserted or removed), and start empty; {_naming_hint(old)}", p[new][0].id)
        for name in sorted(r.keys() & p.keys()):
            if name in renamed_from and name in renamed_to:
                continue
            if name in renamed_from or name in renamed_to:
                (r_sub, _), (p_sub, _) = r[name], p[name]
                self._add(DifferenceKind.STORE_NAME_REUSED, name,
                          f"store '{name}' would name another step's store in the new topology (in the "
                          f"sub-topology reading '{p_sub.source_topic}', was '{r_sub.source_topic}'), which would "
                          f"start from the running store's state; {_naming_hint(name)}", p_sub.id)
            else:
                self._same_store(name)
        successors = {r_sub.id: p_sub for r_sub, p_sub in self._matching().values() if r_sub is not None}
        for name in sorted(r.keys() - p.keys() - renamed_from):
            sub, store = r[name]
            # A store renamed in a sub-topology that goes on: resetting that one rebuilds the new store.
            successor = successors.get(sub.id)
            self._add(DifferenceKind.STORE_REMOVED, name,
                      f"store '{name}' ({store.kind}, in the sub-topology reading '{sub.source_topic}') is not in "
                      "the new topology: its state would be dropped"
                      + ("; if a step was renamed, give it its old name" if not store.generated else ""),
                      successor.id if successor is not None and successor.stateful else None)
        new_subs = self._new_subtopologies()
        for name in sorted(p.keys() - r.keys() - renamed_to):
            sub, store = p[name]
            if sub.id not in new_subs:
                self._add(DifferenceKind.STORE_ADDED, name,
                          f"store '{name}' ({store.kind}) is new in the sub-topology reading '{sub.source_topic}': "
                          "it starts empty")

    def _same_store(self, name: str) -> None:
        (r_sub, old), (p_sub, new) = self.r_stores[name], self.p_stores[name]
        at = p_sub.id
        if old.kind != new.kind:
            self._add(DifferenceKind.STORE_KIND_CHANGED, name, f"store '{name}': kind {old.kind} -> {new.kind}", at)
        if old.key_serde != new.key_serde:
            self._add(DifferenceKind.KEY_SERDE_CHANGED, name,
                      f"store '{name}': key serde {old.key_serde} -> {new.key_serde}", at)
        if old.value_serde != new.value_serde:
            self._add(DifferenceKind.VALUE_SERDE_CHANGED, name,
                      f"store '{name}': value serde {old.value_serde} -> {new.value_serde}", at)
        for attr, words in _WINDOW_FIELDS:
            a, b = getattr(old, attr), getattr(new, attr)
            if a != b:
                self._add(DifferenceKind.WINDOW_CHANGED, name,
                          f"store '{name}': {words} {_ms(a)} -> {_ms(b)}", at)
        if old.changelog_topic != new.changelog_topic:
            self._add(DifferenceKind.CHANGELOG_CHANGED, name,
                      f"store '{name}': changelog {old.changelog_topic} -> {new.changelog_topic}", at)
        if old.input_topic != new.input_topic:
            self._add(DifferenceKind.STORE_INPUT_CHANGED, name,
                      f"store '{name}': holds topic '{new.input_topic}' instead of '{old.input_topic}'", at)
        r_source = self.renamed_topics.get(r_sub.source_topic, r_sub.source_topic)
        if r_source != p_sub.source_topic:
            self._add(DifferenceKind.STORE_MOVED, name,
                      f"store '{name}': moves from the sub-topology reading '{r_sub.source_topic}' to the one "
                      f"reading '{p_sub.source_topic}' (its keys and partitions would not match its state)", at)
        elif r_sub.partitions != p_sub.partitions:
            self._add(DifferenceKind.PARTITIONS_CHANGED, name,
                      f"store '{name}': the sub-topology reading '{p_sub.source_topic}' goes from "
                      f"{r_sub.partitions} to {p_sub.partitions} partitions (the store's keys are spread over "
                      "its tasks by partition)", at)

    # -- sub-topologies

    def _matching(self) -> dict[str, tuple[SubTopologyDescription | None, SubTopologyDescription | None]]:
        """Sub-topologies by the topic they read (a running repartition topic under its new name)."""
        out: dict[str, tuple[SubTopologyDescription | None, SubTopologyDescription | None]] = {}
        for sub in self.running.subtopologies:
            out[self.renamed_topics.get(sub.source_topic, sub.source_topic)] = (sub, None)
        for sub in self.proposed.subtopologies:
            out[sub.source_topic] = (out.get(sub.source_topic, (None, None))[0], sub)
        return out

    def _new_subtopologies(self) -> set[int]:
        return {p.id for r, p in self._matching().values() if r is None and p is not None}

    def _subtopologies(self) -> None:
        for topic, (r, p) in sorted(self._matching().items()):
            if r is None and p is not None:
                stores = ", ".join(f"'{s.name}'" for s in p.stores)
                self._add(DifferenceKind.SUBTOPOLOGY_ADDED, topic,
                          f"sub-topology {p.id} reading '{topic}' is new"
                          + (f": its stores {stores} start empty" if stores else ""))
            elif p is None and r is not None:
                self._add(DifferenceKind.SUBTOPOLOGY_REMOVED, topic,
                          f"sub-topology {r.id} reading '{r.source_topic}' is not in the new topology")
            elif r is not None and p is not None:
                if r.id != p.id:
                    self._add(DifferenceKind.SUBTOPOLOGY_RENUMBERED, topic,
                              f"sub-topology {r.id} reading '{topic}' becomes {p.id}: its tasks get new ids"
                              + (" and restore their stores from the changelogs" if p.stateful else ""))
                if r.partitions != p.partitions and not (r.stateful and p.stateful):
                    self._add(DifferenceKind.TASKS_CHANGED, topic,
                              f"sub-topology reading '{topic}': {r.partitions} -> {p.partitions} tasks")

    # -- output topics

    def _output_topics(self) -> None:
        old, new = set(self.running.output_topics), set(self.proposed.output_topics)
        for t in sorted(new - old):
            self._add(DifferenceKind.OUTPUT_TOPIC_ADDED, t, f"output topic '{t}' is new")
        for t in sorted(old - new):
            self._add(DifferenceKind.OUTPUT_TOPIC_REMOVED, t, f"output topic '{t}' is no longer written")


def _origins(d: TopologyDescription) -> dict[int, tuple[str, ...]]:
    """Per sub-topology, the user topics its records come from, through repartition topics: where
    it sits in the app whatever its id and its repartition topics' names."""
    internal = {t.name for t in d.repartition_topics}
    writers: dict[str, list[SubTopologyDescription]] = {}
    for s in d.subtopologies:
        for t in s.sink_topics:
            writers.setdefault(t, []).append(s)
    out: dict[int, tuple[str, ...]] = {}

    def origin(sub: SubTopologyDescription, seen: frozenset[int]) -> set[str]:
        topics: set[str] = set()
        for t in sub.source_topics:
            if t not in internal:
                topics.add(t)
            for w in writers.get(t, []):
                if w.id not in seen:
                    topics |= origin(w, seen | {w.id})
        return topics

    for s in d.subtopologies:
        out[s.id] = tuple(sorted(origin(s, frozenset({s.id}))))
    return out


def _shifted(old: Iterable[str], new: Iterable[str], shape_old: Any, shape_new: Any) -> list[tuple[str, str]]:
    """Generated names of the running version paired with the proposed version's names for the
    same step (same shape), in the order of their position numbers."""
    candidates = sorted(new, key=_position_key)
    pairs: list[tuple[str, str]] = []
    for name in sorted(old, key=_position_key):
        match = next((c for c in candidates if c != name and shape_new(c) == shape_old(name)), None)
        if match is not None:
            candidates.remove(match)
            pairs.append((name, match))
    return pairs


def _position_key(name: str) -> tuple[int, str]:
    numbers = [int(n[1:]) for n in _POSITION_NUMBER.findall(name)]
    return (numbers[0] if numbers else -1, name)


def _ms(value: int | None) -> str:
    if value is None:
        return "none"
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if value >= size and value % size == 0:
            return f"{value // size}{unit}"
    return f"{value}ms"
