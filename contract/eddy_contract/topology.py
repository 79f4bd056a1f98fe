"""What a compiled app is, as data both halves read: its sub-topologies, stores, changelog,
repartition and output topics (`TopologyDescription`), and what changes between two versions of
it (`compare`), for the upgrade gate of docs/operations.md, "Upgrading an app".

The runtime describes a compiled pipeline (eddy_runtime/dsl/describe.py) and the driver publishes
the description in the app's runtime-state ConfigMap under `TOPOLOGY_KEY`; the operator and
`eddy diff` compare the running description with the next version's before anything rolls. A
store is known by its name, since its name names its changelog (`<app>-<store>-changelog`) and its
folder on the volumes; a name the pipeline did not give is generated from the step's position
and is marked `generated`, so that a shift of those positions is caught instead of silently
starting a store empty. Pure: JSON in, JSON out, no Kafka and no Kubernetes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = [
    "BREAKING",
    "FORMAT",
    "TOPOLOGY_KEY",
    "Difference",
    "DifferenceKind",
    "RepartitionTopicDescription",
    "StoreDescription",
    "StoreKind",
    "SubTopologyDescription",
    "TopologyDescription",
    "TopologyFormatError",
    "compare",
]

#: the data key of the app's runtime-state ConfigMap (channel.runtime_state_configmap_name) that
#: holds the running version's description, as `TopologyDescription.to_json()` writes it
TOPOLOGY_KEY = "topology.json"

#: the version of the JSON shape `to_json` writes; `from_json` refuses others
FORMAT = 1


class TopologyFormatError(ValueError):
    """A description's JSON that cannot be read; the message names the field."""


class StoreKind(StrEnum):
    """What a store holds, which decides its layout on disk and in its changelog."""

    #: an un-windowed aggregation (count, reduce, aggregate)
    KEY_VALUE = "keyValue"
    #: a time-windowed aggregation: keyed by window start, in segments by time
    WINDOW = "window"
    #: a session-windowed aggregation: keyed by session end and start
    SESSION = "session"
    #: a table materialized from a topic (`topology.table`), raw bytes
    TABLE = "table"
    #: one side of a windowed stream-stream join: that side's recent records
    JOIN_WINDOW = "joinWindow"
    #: a left or outer stream-stream join's records still without a partner
    JOIN_BUFFER = "joinBuffer"
    #: a `suppress()` buffer
    SUPPRESS_BUFFER = "suppressBuffer"
    #: a store a `process()` step's processor reads and writes
    PROCESSOR = "processor"
    #: a `process()` step's own store of stream time and punctuation schedules
    PROCESSOR_TIME = "processorTime"


@dataclass(frozen=True)
class StoreDescription:
    """One store of a sub-topology: what its contents are and where its changelog is."""

    name: str
    kind: StoreKind
    key_serde: str
    value_serde: str
    #: `<app>-<name>-changelog`; None for a store without a changelog
    changelog_topic: str | None
    #: the name was made from the step's position (`count-3`), not given with `name=`
    generated: bool = False
    #: the topic a table store materializes (a table-table join's left table is its sub-topology's
    #: first source), or the other stream a windowed join's store holds; None for the others, whose
    #: records come from their sub-topology's first source
    input_topic: str | None = None
    #: time windows: size and advance; a windowed join: before + after
    window_size_ms: int | None = None
    advance_ms: int | None = None
    #: session windows: the inactivity gap
    gap_ms: int | None = None
    grace_ms: int | None = None
    retention_ms: int | None = None


@dataclass(frozen=True)
class SubTopologyDescription:
    id: int
    #: the topic its tasks' partitions are (a user topic or a repartition topic), then the other
    #: inputs it reads (a joined table's topic, a windowed join's other stream)
    source_topics: tuple[str, ...]
    #: its task count: the partitions of its first source topic
    partitions: int
    stores: tuple[StoreDescription, ...] = ()
    #: output and repartition topics it writes
    sink_topics: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # One order whatever the compiler's, so that equal descriptions compare and print equal.
        object.__setattr__(self, "stores", tuple(sorted(self.stores, key=lambda s: s.name)))
        object.__setattr__(self, "sink_topics", tuple(sorted(set(self.sink_topics))))

    @property
    def source_topic(self) -> str:
        return self.source_topics[0]

    @property
    def stateful(self) -> bool:
        return bool(self.stores)


@dataclass(frozen=True)
class RepartitionTopicDescription:
    name: str
    partitions: int
    #: named after a `group_by` or `merge` given no `name=`
    generated: bool = False


@dataclass(frozen=True)
class TopologyDescription:
    """A compiled app as the upgrade gate sees it. `to_json` is stable: the same app gives the
    same text, whatever order it was compiled in."""

    application_id: str
    subtopologies: tuple[SubTopologyDescription, ...]
    repartition_topics: tuple[RepartitionTopicDescription, ...] = ()
    output_topics: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "subtopologies", tuple(sorted(self.subtopologies, key=lambda s: s.id)))
        object.__setattr__(self, "repartition_topics", tuple(sorted(self.repartition_topics, key=lambda t: t.name)))
        object.__setattr__(self, "output_topics", tuple(sorted(set(self.output_topics))))

    def stores(self) -> Iterator[tuple[SubTopologyDescription, StoreDescription]]:
        for sub in self.subtopologies:
            for store in sub.stores:
                yield sub, store

    def store(self, name: str) -> StoreDescription | None:
        return next((s for _, s in self.stores() if s.name == name), None)

    def to_json(self) -> str:
        return json.dumps(_description_json(self), sort_keys=True, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> TopologyDescription:
        """Read what `to_json` wrote; raises `TopologyFormatError` naming the field."""
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise TopologyFormatError(f"(description): not JSON: {e}") from e
        return _description_from_json(_Reader(doc, "(description)"))


# ---------------------------------------------------------------------------------------------
# Differences


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


# ---------------------------------------------------------------------------------------------
# JSON


def _store_json(s: StoreDescription) -> dict[str, Any]:
    out: dict[str, Any] = {"name": s.name, "kind": str(s.kind), "keySerde": s.key_serde, "valueSerde": s.value_serde,
                           "changelogTopic": s.changelog_topic, "generated": s.generated}
    for key, value in (("inputTopic", s.input_topic), ("windowSizeMs", s.window_size_ms),
                       ("advanceMs", s.advance_ms), ("gapMs", s.gap_ms), ("graceMs", s.grace_ms),
                       ("retentionMs", s.retention_ms)):
        if value is not None:
            out[key] = value
    return out


def _description_json(d: TopologyDescription) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "applicationId": d.application_id,
        "subtopologies": [
            {"id": s.id, "sourceTopics": list(s.source_topics), "partitions": s.partitions, "stateful": s.stateful,
             "stores": [_store_json(st) for st in s.stores], "sinkTopics": list(s.sink_topics)}
            for s in d.subtopologies
        ],
        "repartitionTopics": [{"name": t.name, "partitions": t.partitions, "generated": t.generated}
                              for t in d.repartition_topics],
        "outputTopics": list(d.output_topics),
    }


@dataclass(frozen=True)
class _Reader:
    """A JSON value and its path, for errors that name the field."""

    value: Any
    path: str

    def at(self, key: str | int) -> _Reader:
        path = f"{self.path}[{key}]" if isinstance(key, int) else f"{self.path}.{key}"
        if isinstance(key, int):
            return _Reader(self._typed(list, "a list")[key], path)
        obj = self._typed(dict, "an object")
        if key not in obj:
            raise TopologyFormatError(f"{path}: required")
        return _Reader(obj[key], path)

    def optional(self, key: str) -> _Reader | None:
        return self.at(key) if key in self._typed(dict, "an object") else None

    def items(self) -> list[_Reader]:
        return [self.at(i) for i in range(len(self._typed(list, "a list")))]

    def string(self) -> str:
        text: str = self._typed(str, "a string")
        return text

    def integer(self) -> int:
        if isinstance(self.value, bool):
            raise TopologyFormatError(f"{self.path}: must be an integer, got {self.value!r}")
        number: int = self._typed(int, "an integer")
        return number

    def boolean(self) -> bool:
        flag: bool = self._typed(bool, "true or false")
        return flag

    def _typed(self, kind: type, words: str) -> Any:
        if not isinstance(self.value, kind):
            raise TopologyFormatError(f"{self.path}: must be {words}, got {self.value!r}")
        return self.value


def _optional_int(r: _Reader, key: str) -> int | None:
    sub = r.optional(key)
    return None if sub is None or sub.value is None else sub.integer()


def _store_from_json(r: _Reader) -> StoreDescription:
    kind = r.at("kind").string()
    if kind not in set(StoreKind):
        raise TopologyFormatError(f"{r.path}.kind: {kind!r} is not one of {', '.join(StoreKind)}")
    changelog = r.at("changelogTopic")
    input_topic = r.optional("inputTopic")
    return StoreDescription(
        name=r.at("name").string(),
        kind=StoreKind(kind),
        key_serde=r.at("keySerde").string(),
        value_serde=r.at("valueSerde").string(),
        changelog_topic=None if changelog.value is None else changelog.string(),
        generated=r.at("generated").boolean(),
        input_topic=None if input_topic is None else input_topic.string(),
        window_size_ms=_optional_int(r, "windowSizeMs"),
        advance_ms=_optional_int(r, "advanceMs"),
        gap_ms=_optional_int(r, "gapMs"),
        grace_ms=_optional_int(r, "graceMs"),
        retention_ms=_optional_int(r, "retentionMs"),
    )


def _description_from_json(r: _Reader) -> TopologyDescription:
    version = r.at("format").integer()
    if version != FORMAT:
        raise TopologyFormatError(f"{r.path}.format: this Eddy reads format {FORMAT}, got {version}")
    subs = []
    for s in r.at("subtopologies").items():
        sources = tuple(t.string() for t in s.at("sourceTopics").items())
        if not sources:
            raise TopologyFormatError(f"{s.path}.sourceTopics: at least one topic")
        subs.append(SubTopologyDescription(
            id=s.at("id").integer(),
            source_topics=sources,
            partitions=s.at("partitions").integer(),
            stores=tuple(_store_from_json(st) for st in s.at("stores").items()),
            sink_topics=tuple(t.string() for t in s.at("sinkTopics").items()),
        ))
    return TopologyDescription(
        application_id=r.at("applicationId").string(),
        subtopologies=tuple(subs),
        repartition_topics=tuple(
            RepartitionTopicDescription(t.at("name").string(), t.at("partitions").integer(),
                                        t.at("generated").boolean())
            for t in r.at("repartitionTopics").items()),
        output_topics=tuple(t.string() for t in r.at("outputTopics").items()),
    )
