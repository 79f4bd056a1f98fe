"""Where a key of a queryable store lives: the store's task for the key, and the executors that
hold that task (active, standbys) with the address each serves interactive queries on.

The driver routes: it builds a `QueryRouting` (`query_routing`) from the compiled app, its
assignment and the addresses the runners reported, and ships it with every batch's settings
(protocol/work.py); the query server (queries/server.py) on each runner and on the driver reads
it to forward keys held elsewhere. Pure values and logic.

A key's task is the partition Kafka's default partitioner gives its serialized key
(`kafka_partition`: murmur2, as the Java client and Eddy's repartition producers use), in the
sub-topology that owns the store: the store's task for a key is the task that counted it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from eddy_contract.tasks import Role, TaskId, task_id

if TYPE_CHECKING:
    from eddy_contract.assignor import Assignment
    from eddy_runtime.dsl.subtopology import CompiledApp

__all__ = [
    "QueryError",
    "QueryRouting",
    "StoreRoute",
    "TaskCopies",
    "encode_key",
    "kafka_partition",
    "murmur2",
    "parse_key",
    "query_routing",
    "store_routes",
]

StoreKind = Literal["key_value", "window", "session"]


class QueryError(ValueError):
    """A query that cannot be answered as asked: `status` is the HTTP status to reply with."""

    def __init__(self, status: int, message: str, **details: Any) -> None:
        super().__init__(message)
        self.status = status
        self.details = details


def murmur2(data: bytes) -> int:
    """Kafka's `Utils.murmur2` (as an unsigned 32-bit value)."""
    m = 0x5BD1E995
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = data[i] | data[i + 1] << 8 | data[i + 2] << 16 | data[i + 3] << 24
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = length & ~3
    extra = length % 4
    if extra == 3:
        h ^= data[tail + 2] << 16
    if extra >= 2:
        h ^= data[tail + 1] << 8
    if extra >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def kafka_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a non-null key."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def parse_key(text: str, serde: str) -> Any:
    """A key given as text (a URL path segment, a command-line argument) as the store's key type."""
    if serde in ("string", "bytes"):
        return text
    if serde == "int64":
        try:
            value = int(text)
        except ValueError:
            raise QueryError(400, f"key {text!r} is not an int64 (the store's keys are int64)") from None
        if not -(2**63) <= value < 2**63:
            raise QueryError(400, f"key {text} does not fit in 64 bits")
        return value
    if serde == "json":
        try:
            return json.loads(text)
        except ValueError:
            raise QueryError(400, f"key {text!r} is not JSON (the store's keys are JSON)") from None
    raise QueryError(400, f"keys of serde {serde!r} cannot be queried")


def encode_key(key: Any, serde: str) -> bytes:
    """A key's bytes as the app's producers wrote it into the topic the store's task reads."""
    if serde == "int64":
        return int(key).to_bytes(8, "big", signed=True)
    if serde in ("string", "bytes"):
        return key.encode() if isinstance(key, str) else bytes(key)
    if serde == "json":
        return json.dumps(key, separators=(",", ":")).encode()
    raise QueryError(400, f"keys of serde {serde!r} cannot be queried")


def json_value(value: Any) -> Any:
    """A store value as JSON: bytes as text when they are UTF-8, else as ``{"base64": ...}``."""
    if isinstance(value, bytes | bytearray):
        try:
            return bytes(value).decode()
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(value).decode()}
    return value


@dataclass(frozen=True)
class StoreRoute:
    """A queryable store: its sub-topology and partitions, and how its keys and values read."""

    store: str
    kind: StoreKind
    subtopology: int
    partitions: int
    #: how a key is given (and serialized to find its partition)
    key_serde: str
    #: how the store's value bytes decode ("raw": the store's own serde decodes them already)
    value_serde: str = "raw"
    #: the store keeps the topic's raw bytes (a table): keys are encoded with `key_serde` first
    raw_keys: bool = False

    def task_for(self, key: Any) -> str:
        return task_id(self.subtopology, kafka_partition(encode_key(key, self.key_serde), self.partitions))

    @property
    def tasks(self) -> tuple[str, ...]:
        return tuple(task_id(self.subtopology, p) for p in range(self.partitions))


@dataclass(frozen=True)
class Holder:
    """One executor holding a copy of a task, and where it serves queries ("" unknown yet)."""

    executor: str
    role: Role
    address: str


class TaskCopies(NamedTuple):
    """The executors holding a task's copies, as of one assignment."""

    active: str
    standbys: tuple[str, ...]


@dataclass(frozen=True)
class QueryRouting:
    """Every queryable store, and per task the executors holding it, as of one assignment."""

    app: str
    generation: int
    stores: Mapping[str, StoreRoute] = field(default_factory=dict)
    #: task -> the executors holding its copies
    tasks: Mapping[str, TaskCopies] = field(default_factory=dict)
    #: executor -> host:port of its query endpoint
    addresses: Mapping[str, str] = field(default_factory=dict)

    def route(self, store: str) -> StoreRoute:
        try:
            return self.stores[store]
        except KeyError:
            known = ", ".join(sorted(self.stores)) or "none"
            raise QueryError(404, f"app {self.app} has no queryable store {store!r} (its stores: {known})") from None

    def holders(self, task: str) -> list[Holder]:
        """The task's active first, then its standbys."""
        active, standbys = self.tasks.get(task, TaskCopies("", ()))
        out = [Holder(active, Role.ACTIVE, self.addresses.get(active, ""))] if active else []
        return out + [Holder(e, Role.STANDBY, self.addresses.get(e, "")) for e in standbys]

    def as_json(self) -> dict[str, Any]:
        return {
            "app": self.app,
            "generation": self.generation,
            "stores": {name: {"kind": r.kind, "subtopology": r.subtopology, "partitions": r.partitions,
                              "key_serde": r.key_serde} for name, r in self.stores.items()},
            "tasks": {t: {"active": a, "standbys": list(s)} for t, (a, s) in self.tasks.items()},
            "executors": dict(self.addresses),
        }


def store_routes(compiled: CompiledApp) -> dict[str, StoreRoute]:
    """The app's queryable stores: every aggregation's store, every stream-table join's table, and
    the stores of `process()` steps (a key is looked for in the partition its bytes hash to).

    The stores of the two-sided joins (table-table, windowed stream-stream) are the joins' own
    bookkeeping and not queryable, as Kafka Streams' internal join stores are not."""
    routes: dict[str, StoreRoute] = {}
    for sub in compiled.subtopologies:
        st = sub.stateful
        if st is not None and st.kind in ("count", "reduce", "aggregate") and st.store is not None:
            kind: StoreKind = st.store.kind if st.store.kind in ("window", "session") else "key_value"
            routes[st.store.name] = StoreRoute(st.store.name, kind, sub.id, sub.partitions, st.store.key_serde)
        if st is not None and st.kind == "process":  # the processor's own stores, routed by their keys
            for spec in st.process_stores[:-1]:
                routes[spec.name] = StoreRoute(spec.name, "key_value", sub.id, sub.partitions, spec.key_serde)
        if st is not None and st.kind == "join" and sub.table is not None:
            t = sub.table
            routes[t.store.name] = StoreRoute(t.store.name, "key_value", sub.id, sub.partitions, t.key_serde,
                                              value_serde=t.value_serde, raw_keys=True)
    return routes


def query_routing(compiled: CompiledApp, assignment: Assignment, addresses: Mapping[str, str]) -> QueryRouting:
    stores = store_routes(compiled)
    owned = {r.subtopology for r in stores.values()}
    tasks = {t: TaskCopies(a.active, tuple(a.standbys)) for t, a in assignment.tasks.items()
             if TaskId.parse(t).subtopology in owned}
    return QueryRouting(compiled.app, assignment.generation, stores, tasks, dict(addresses))
