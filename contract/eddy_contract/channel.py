"""The channel between the operator and the Spark driver: two versioned ConfigMaps (docs/DESIGN.md,
"The operator's part").

- `<app>-assignment` (written by the operator, watched by the driver): key `assignment.json`
  holds one `AssignmentMessage`: the assignment generation, every task's active, standbys and
  warmups, and the executors the operator saw alive when it computed it.
- `<app>-runtime-state` (written by the driver, read by the operator): key `state.json` holds one
  `RuntimeState`: the tasks with their changelog end offsets per store, each executor's store
  inventory (the offsets its volume holds, per task and store), and every copy still catching up
  (actives restoring, standbys and warmups behind their changelogs' ends) with its progress, and
  each live executor's load: the input records its actives processed and the seconds they spent
  processing them, counted since `loadSince` (the driver's start).

Both documents carry `version`. A reader accepts the versions it knows and rejects others with a
`ChannelError`; within one version, fields may be added (readers ignore keys they do not know)
but never renamed or re-typed. Everything is validated on read, and errors name the path of the
bad field (`state.json: executors.2.stores.0_0.counts: ...`).

The order of things: the operator creates `<app>-runtime-state` empty (so that it is owned and
garbage-collected with the app); the driver, once it knows its tasks, patches in a RuntimeState
with every task (a stateless task with no stores) and what each live executor's volume holds;
the operator then publishes generation 1 and a new generation whenever executors come or go or
the copies catch up; the driver applies the newest generation before its next micro-batch and
reports it back in `assignmentGeneration`.

Pure encode/decode functions only: the operator's handlers and the runtime's driver do the
Kubernetes reads and writes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from eddy_contract.assignor import Assignment, Executor, TaskAssignment
from eddy_contract.spec import BadRecordPolicy, StreamAppSpec
from eddy_contract.tasks import task_sort_key

VERSION = 1
SUPPORTED_VERSIONS = frozenset({1})

ASSIGNMENT_KEY = "assignment.json"
#: beside the assignment: the spec's settings a running driver takes in place (`LiveSettings`)
SETTINGS_KEY = "settings.json"
RUNTIME_STATE_KEY = "state.json"
#: beside the runtime state: a starting driver's upgrade verdict (eddy_runtime.driver.upgrade_gate)
UPGRADE_KEY = "upgrade.json"
LABEL_CHANNEL = "eddy.dev/channel"
ROLES = ("active", "standby", "warmup")


def assignment_configmap_name(app: str) -> str:
    return f"{app}-assignment"


def runtime_state_configmap_name(app: str) -> str:
    return f"{app}-runtime-state"


class ChannelError(ValueError):
    """A channel document that cannot be used; the message names the key and the field."""


@dataclass(frozen=True)
class AssignmentMessage:
    """What the operator publishes: one assignment generation, and why it was made."""

    app: str
    assignment: Assignment
    executors: tuple[Executor, ...]
    issued_at: str
    reason: str = ""
    #: executor id -> its pod's address, as the operator saw it: a driver that registered the
    #: same ids on other pods (a restarted driver hands ids out anew) knows the message is not
    #: for its executors yet
    hosts: Mapping[str, str] = field(default_factory=dict)
    #: executor id -> the container life it was seen in, "<pod uid>/<restarts>": an operator
    #: that takes over tells a pod made again or restarted from the same one under a new id
    lives: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RestoreProgress:
    """A copy that is catching up from its changelog: `restored` of `total` records so far."""

    task: str
    executor: str
    role: str
    restored: int
    total: int

    @property
    def remaining(self) -> int:
        return max(self.total - self.restored, 0)


@dataclass(frozen=True)
class ExecutorInventory:
    """What one executor's volume holds: per task, per store, the changelog offset it covers."""

    executor: str
    pod: str | None = None
    host: str | None = None
    stores: Mapping[str, Mapping[str, int]] = field(default_factory=lambda: MappingProxyType({}))

    def task_offsets(self) -> dict[str, int]:
        """Per task, the sum over its stores (the assignor's measure of a copy)."""
        return {task: sum(stores.values()) for task, stores in self.stores.items()}


@dataclass(frozen=True)
class ExecutorLoad:
    """What one executor's active tasks did since the driver started counting (`RuntimeState.load_since`):
    `records` of input processed, and `busy_s` seconds spent processing them (not waiting for
    input). Both only grow while the same driver runs; from two runtime states a reader derives
    the executor's rate (records per second of wall time), its busy fraction (busy_s per second)
    and its capacity. `per_round_s` is the part of `busy_s` its rounds would have cost whatever
    they carried (the runner's estimate; 0 where it has none): what is left is the time its
    records took, one by one."""

    records: int = 0
    busy_s: float = 0.0
    per_round_s: float = 0.0


@dataclass(frozen=True)
class RuntimeState:
    """What the driver publishes after each micro-batch (or restore step)."""

    app: str
    updated_at: str
    assignment_generation: int | None
    # task -> store -> changelog end offset; a stateless task maps to {}
    changelog_end_offsets: Mapping[str, Mapping[str, int]]
    executors: Mapping[str, ExecutorInventory] = field(default_factory=lambda: MappingProxyType({}))
    restores: tuple[RestoreProgress, ...] = ()
    # task -> records of input not yet processed (consumer lag), when the driver knows it
    input_lag: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    batch_id: int | None = None
    #: executor -> its actives' load since `load_since` (live executors only)
    load: Mapping[str, ExecutorLoad] = field(default_factory=lambda: MappingProxyType({}))
    #: when the load counters started (ISO 8601 UTC, as `updated_at`): a new driver starts new ones
    load_since: str | None = None

    def end_offsets(self) -> dict[str, int]:
        """Per task, the sum over its stores of the changelog end offsets (assignor input)."""
        return {task: sum(stores.values()) for task, stores in self.changelog_end_offsets.items()}

    def held_offsets(self) -> dict[str, dict[str, int]]:
        """Per executor, per task, the offsets its volume holds (assignor input)."""
        return {e: inv.task_offsets() for e, inv in self.executors.items()}


# ---------------------------------------------------------------------------------------
# Encoding


def _dumps(doc: Mapping[str, Any]) -> str:
    # Sorted and compact: the same content always gives the same bytes, so rewriting an unchanged
    # ConfigMap is a no-op patch.
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def encode_assignment(message: AssignmentMessage) -> dict[str, str]:
    """The `data` of the assignment ConfigMap."""
    tasks = {
        t: {"active": a.active, "standbys": list(a.standbys), "warmups": list(a.warmups)}
        for t, a in sorted(message.assignment.tasks.items(), key=lambda kv: task_sort_key(kv[0]))
    }
    doc = {
        "version": VERSION,
        "app": message.app,
        "generation": message.assignment.generation,
        "issuedAt": message.issued_at,
        "reason": message.reason,
        "executors": {e.id: {"pod": e.pod, "zone": e.zone,
                             **({"host": message.hosts[e.id]} if e.id in message.hosts else {}),
                             **({"life": message.lives[e.id]} if e.id in message.lives else {})}
                      for e in sorted(message.executors, key=lambda e: e.id)},
        "tasks": tasks,
    }
    return {ASSIGNMENT_KEY: _dumps(doc)}


def encode_runtime_state(state: RuntimeState) -> dict[str, str]:
    """The `data` of the runtime-state ConfigMap."""
    doc: dict[str, Any] = {
        "version": VERSION,
        "app": state.app,
        "updatedAt": state.updated_at,
        "assignmentGeneration": state.assignment_generation,
        "batchId": state.batch_id,
        "tasks": {
            t: {
                "changelogEndOffsets": dict(stores),
                **({"inputLag": state.input_lag[t]} if t in state.input_lag else {}),
            }
            for t, stores in state.changelog_end_offsets.items()
        },
        "executors": {
            e: {"pod": inv.pod, "host": inv.host, "stores": {t: dict(s) for t, s in inv.stores.items()}}
            for e, inv in state.executors.items()
        },
        "restores": [
            {"task": r.task, "executor": r.executor, "role": r.role, "restored": r.restored, "total": r.total}
            for r in state.restores
        ],
        "load": {e: {"records": load.records, "busyS": load.busy_s, "perRoundS": load.per_round_s}
                 for e, load in state.load.items()},
        "loadSince": state.load_since,
    }
    return {RUNTIME_STATE_KEY: _dumps(doc)}


# ---------------------------------------------------------------------------------------
# Decoding (validated)


class _Reader:
    """Walks a decoded JSON document, naming the path of whatever is wrong."""

    def __init__(self, key: str) -> None:
        self.key = key

    def fail(self, path: str, reason: str) -> ChannelError:
        return ChannelError(f"{self.key}: {path}: {reason}" if path else f"{self.key}: {reason}")

    def obj(self, value: Any, path: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(path, f"must be an object, got {type(value).__name__}")
        return value

    def list_(self, value: Any, path: str) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(path, f"must be a list, got {type(value).__name__}")
        return value

    def str_(self, value: Any, path: str, optional: bool = False) -> str | None:
        if value is None and optional:
            return None
        if not isinstance(value, str) or (not optional and value == ""):
            raise self.fail(path, f"must be a non-empty string, got {value!r}")
        return value

    def int_(self, value: Any, path: str, optional: bool = False) -> int | None:
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.fail(path, f"must be a non-negative integer, got {value!r}")
        return value

    def seconds(self, value: Any, path: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise self.fail(path, f"must be a non-negative number, got {value!r}")
        return float(value)

    def offsets(self, value: Any, path: str) -> Mapping[str, int]:
        stores = self.obj(value, path)
        return MappingProxyType({s: self.int_(o, f"{path}.{s}") for s, o in stores.items()})  # type: ignore[misc]

    def document(self, data: Mapping[str, str] | None) -> Mapping[str, Any]:
        if not data or self.key not in data:
            raise self.fail("", "missing from the ConfigMap's data")
        try:
            doc = json.loads(data[self.key])
        except json.JSONDecodeError as err:
            raise self.fail("", f"not valid JSON ({err})") from None
        doc = self.obj(doc, "")
        version = doc.get("version")
        if version not in SUPPORTED_VERSIONS:
            raise self.fail(
                "version", f"unsupported version {version!r} (this reader knows {sorted(SUPPORTED_VERSIONS)})"
            )
        return doc


def decode_assignment(data: Mapping[str, str] | None) -> AssignmentMessage:
    """Read the assignment ConfigMap's `data`; raises `ChannelError` when it is unusable."""
    r = _Reader(ASSIGNMENT_KEY)
    doc = r.document(data)
    app = r.str_(doc.get("app"), "app")
    generation = r.int_(doc.get("generation"), "generation")
    if generation is None or generation < 1:
        raise r.fail("generation", "must be at least 1")
    executors: list[Executor] = []
    hosts: dict[str, str] = {}
    lives: dict[str, str] = {}
    for e, info in r.obj(doc.get("executors", {}), "executors").items():
        info = r.obj(info, f"executors.{e}")
        host = r.str_(info.get("host"), f"executors.{e}.host", optional=True)
        if host:
            hosts[e] = host
        life = r.str_(info.get("life"), f"executors.{e}.life", optional=True)
        if life:
            lives[e] = life
        executors.append(
            Executor(
                id=e,
                pod=r.str_(info.get("pod"), f"executors.{e}.pod", optional=True) or "",
                zone=r.str_(info.get("zone"), f"executors.{e}.zone", optional=True),
            )
        )
    live = {e.id for e in executors}
    tasks: dict[str, TaskAssignment] = {}
    for t, placement in r.obj(doc.get("tasks"), "tasks").items():
        p = r.obj(placement, f"tasks.{t}")
        active = r.str_(p.get("active"), f"tasks.{t}.active")
        standbys = tuple(
            r.str_(e, f"tasks.{t}.standbys[{i}]")
            for i, e in enumerate(r.list_(p.get("standbys", []), f"tasks.{t}.standbys"))
        )
        warmups = tuple(
            r.str_(e, f"tasks.{t}.warmups[{i}]")
            for i, e in enumerate(r.list_(p.get("warmups", []), f"tasks.{t}.warmups"))
        )
        copies = (active, *standbys, *warmups)
        if len(set(copies)) != len(copies):
            raise r.fail(f"tasks.{t}", f"names an executor twice: {list(copies)}")
        unknown = [e for e in copies if e not in live]
        if executors and unknown:
            raise r.fail(f"tasks.{t}", f"names executors missing from `executors`: {unknown}")
        tasks[t] = TaskAssignment(active or "", standbys, warmups)  # type: ignore[arg-type]
    return AssignmentMessage(
        app=app or "",
        assignment=Assignment(generation=generation, tasks=MappingProxyType(tasks)),
        executors=tuple(executors),
        issued_at=r.str_(doc.get("issuedAt"), "issuedAt") or "",
        reason=r.str_(doc.get("reason", ""), "reason", optional=True) or "",
        hosts=hosts,
        lives=lives,
    )


@dataclass(frozen=True)
class LiveSettings:
    """The spec's settings that apply to a running app in place (eddy_contract.upgrade's
    IN_PLACE_FIELDS that the driver reads; the assignor's are the operator's own): the operator
    publishes them beside the assignment, the driver takes them at its next batch."""

    trigger_interval_s: float
    bad_record_policy: BadRecordPolicy
    dead_letter_topic: str | None
    acceptable_recovery_lag: int

    @classmethod
    def of(cls, spec: StreamAppSpec) -> LiveSettings:
        return cls(spec.trigger_interval_s, spec.bad_record_policy, spec.dead_letter_topic,
                   spec.state.acceptable_recovery_lag)

    def applied_to(self, spec: StreamAppSpec) -> StreamAppSpec:
        """`spec` with these settings."""
        return replace(spec, trigger_interval_s=self.trigger_interval_s, bad_record_policy=self.bad_record_policy,
                       dead_letter_topic=self.dead_letter_topic,
                       state=replace(spec.state, acceptable_recovery_lag=self.acceptable_recovery_lag))


def encode_live_settings(settings: LiveSettings) -> dict[str, str]:
    """`SETTINGS_KEY`'s entry of the assignment ConfigMap's `data`."""
    doc = {"version": VERSION, "triggerIntervalS": settings.trigger_interval_s,
           "badRecordPolicy": str(settings.bad_record_policy), "deadLetterTopic": settings.dead_letter_topic,
           "acceptableRecoveryLag": settings.acceptable_recovery_lag}
    return {SETTINGS_KEY: _dumps(doc)}


def decode_live_settings(data: Mapping[str, str] | None) -> LiveSettings | None:
    """The live settings in the assignment ConfigMap's `data` (None if it has none); raises
    `ChannelError` when they are unusable."""
    if not data or SETTINGS_KEY not in data:
        return None
    r = _Reader(SETTINGS_KEY)
    doc = r.document(data)
    interval = doc.get("triggerIntervalS")
    if not isinstance(interval, int | float) or interval <= 0:
        raise r.fail("triggerIntervalS", "must be a positive number")
    policy = r.str_(doc.get("badRecordPolicy"), "badRecordPolicy") or ""
    try:
        bad_record_policy = BadRecordPolicy(policy)
    except ValueError:
        raise r.fail("badRecordPolicy", f"unknown policy {policy!r}") from None
    lag = r.int_(doc.get("acceptableRecoveryLag"), "acceptableRecoveryLag")
    if lag is None or lag < 0:
        raise r.fail("acceptableRecoveryLag", "must be a non-negative integer")
    return LiveSettings(float(interval), bad_record_policy,
                        r.str_(doc.get("deadLetterTopic"), "deadLetterTopic", optional=True), lag)


def decode_runtime_state(data: Mapping[str, str] | None) -> RuntimeState:
    """Read the runtime-state ConfigMap's `data`; raises `ChannelError` when it is unusable."""
    r = _Reader(RUNTIME_STATE_KEY)
    doc = r.document(data)
    app = r.str_(doc.get("app"), "app")
    end: dict[str, Mapping[str, int]] = {}
    lag: dict[str, int] = {}
    for t, info in r.obj(doc.get("tasks"), "tasks").items():
        info = r.obj(info, f"tasks.{t}")
        end[t] = r.offsets(info.get("changelogEndOffsets", {}), f"tasks.{t}.changelogEndOffsets")
        input_lag = r.int_(info.get("inputLag"), f"tasks.{t}.inputLag", optional=True)
        if input_lag is not None:
            lag[t] = input_lag
    executors: dict[str, ExecutorInventory] = {}
    for e, info in r.obj(doc.get("executors", {}), "executors").items():
        info = r.obj(info, f"executors.{e}")
        stores = {
            t: r.offsets(s, f"executors.{e}.stores.{t}")
            for t, s in r.obj(info.get("stores", {}), f"executors.{e}.stores").items()
        }
        executors[e] = ExecutorInventory(
            executor=e,
            pod=r.str_(info.get("pod"), f"executors.{e}.pod", optional=True),
            host=r.str_(info.get("host"), f"executors.{e}.host", optional=True),
            stores=MappingProxyType(stores),
        )
    restores: list[RestoreProgress] = []
    for i, item in enumerate(r.list_(doc.get("restores", []), "restores")):
        path = f"restores[{i}]"
        item = r.obj(item, path)
        role = r.str_(item.get("role"), f"{path}.role")
        if role not in ROLES:
            raise r.fail(f"{path}.role", f"{role!r} is not one of {', '.join(ROLES)}")
        restores.append(
            RestoreProgress(
                task=r.str_(item.get("task"), f"{path}.task") or "",
                executor=r.str_(item.get("executor"), f"{path}.executor") or "",
                role=role,
                restored=r.int_(item.get("restored"), f"{path}.restored") or 0,
                total=r.int_(item.get("total"), f"{path}.total") or 0,
            )
        )
    # absent in the runtime states of a driver that predates them
    load: dict[str, ExecutorLoad] = {}
    for e, info in r.obj(doc.get("load", {}), "load").items():
        info = r.obj(info, f"load.{e}")
        load[e] = ExecutorLoad(records=r.int_(info.get("records", 0), f"load.{e}.records") or 0,
                               busy_s=r.seconds(info.get("busyS", 0.0), f"load.{e}.busyS"),
                               per_round_s=r.seconds(info.get("perRoundS", 0.0), f"load.{e}.perRoundS"))
    return RuntimeState(
        app=app or "",
        updated_at=r.str_(doc.get("updatedAt"), "updatedAt") or "",
        assignment_generation=r.int_(doc.get("assignmentGeneration"), "assignmentGeneration", optional=True),
        changelog_end_offsets=MappingProxyType(end),
        executors=MappingProxyType(executors),
        restores=tuple(restores),
        input_lag=MappingProxyType(lag),
        batch_id=r.int_(doc.get("batchId"), "batchId", optional=True),
        load=MappingProxyType(load),
        load_since=r.str_(doc.get("loadSince"), "loadSince", optional=True),
    )
