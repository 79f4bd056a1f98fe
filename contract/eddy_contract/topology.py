"""What a compiled app is, as data both halves read: its sub-topologies, stores, changelog,
repartition and output topics (`TopologyDescription`); what changes between two versions of it is
`eddy_contract.topology_compare`'s, for the upgrade gate of docs/operations.md, "Upgrading an app".

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
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = [
    "FORMAT",
    "TOPOLOGY_KEY",
    "RepartitionTopicDescription",
    "StoreDescription",
    "StoreKind",
    "SubTopologyDescription",
    "TopologyDescription",
    "TopologyFormatError",
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
