"""Scale on lag, warm before moving (issue 31): a step in the input rate, Eddy's autoscaler and its peers.

    infra/cluster/netns.sh .venv/bin/python bench/autoscale.py                    # all three, one run each
    infra/cluster/netns.sh .venv/bin/python bench/autoscale.py --repeat 3 --json out.json
    infra/cluster/netns.sh .venv/bin/python bench/autoscale.py --short --systems eddy   # development

The job is bench/upgrade.py's word count (one word per input record, re-keyed by word, counted in
a RocksDB store, exactly-once), on one broker on the real node's address (upgrade_eddy.cluster).
Every run of every system gets fresh topics and the same input profile: ``--rate`` records/s of
Zipf words for ``--before`` s, ``--step`` times that for ``--high`` s, then ``--rate`` again for
``--after`` s; each second's rate is drawn within +-``--noise`` of it (seeded: every system gets the
same seconds). Each record goes to partition i mod ``--partitions`` and is stamped with its send
time; every 0.2 s a probe word (throughput.py's) tells the drain when all was counted.

Systems (settings and their reasons: bench/README.md, "autoscale.py"):

- ``eddy``: the word-count StreamApp on real pods, executors limited to ``--cpu`` of a core each
  (``spec.executors.cpu``), ``spec.autoscaling`` on (``--min``..``--max`` executors and the windows
  below), one standby per stateful task;
- ``eddy-fixed``: the same with the autoscaler off, ``--min`` executors all through;
- ``kstreams``: Kafka Streams instances (``bench/kstreams/run.sh wordcount``, one stream thread
  each, each JVM in a cgroup of its own limited to ``--kstreams-cpu`` of a core), scaled by the bench
  as KEDA's Kafka scaler and the HorizontalPodAutoscaler would: every ``--keda-polling`` s, the
  consumer group's lag over every topic it reads, ``ceil(lag / --keda-lag-threshold)`` instances
  within ``--min``..min(``--max``, partitions) (KEDA does not scale past the partition count), taken
  through the same stabilisation windows as Eddy's (eddy_operator.autoscaler's `decide`, the HPA's
  behaviour windows); a new instance is started (it gets warmups: ``max.warmup.replicas``), one is
  closed (leaving the group) to scale in, newest first.

Printed per run: a timeline per 10 s (input rate, lag, executors, warmups, p99 lateness), and:

- **decision**: from the step up to the first scale-out (Eddy: ``spec.executors.replicas`` seen
  changed, sampled every ``--sample`` s; kstreams: the rule's action);
- **lag back**: from the step up until the lag stays at or under ``--lag-target`` records until
  the step down (lag: records sent and not yet counted visibly, from the observer);
- **max lateness**: the largest send -> visible count among records sent from the step on;
- **longest pause by a move**: a group is an input partition (its source task) or a count task
  (the words Kafka's murmur2 puts in one repartition partition); a record's wait is from its send,
  or the group's previous visible update if later, to its own; the longest such wait within a move
  (a sampled change of placement that moved an active, from the sample before it to 5 s after),
  next to the longest outside moves (the cadence of commits under that load);
- **restored**: records restored into copies from the first scale action on (Eddy: what the task
  runners logged restoring or tailing from changelogs as copies opened, on every executor's volume;
  kstreams: its restore listener's records into actives, and its standby listener's on the
  instances the rule started);
- **actions** and **flaps** (two actions closer than the window of the second: out within
  ``--out-window``, in within ``--in-window``, a reversal within the longer of the two); **cold
  moves**: stateful tasks whose active went to an executor that held no copy of it (after the step
  down: the scale-in's);
- **counts**: every word's last count equals the input's, no update repeats or lowers a count.

``--repeat N`` runs every system N times, interleaved, lists every run and quotes the middle one
by time to lag back (a failed or wrong run instead). ``--json FILE`` writes every run. ``--short``:
a 20 s / 60 s / 60 s profile with short windows, for development. Exit code 1 if a run failed or
its counts were wrong.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import math
import os
import pickle
import random
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import failover as fo
import throughput as tp
import upgrade
from upgrade_peers import KafkaStreamsBounce, wait_for

REPO = tp.REPO
sys.path.insert(0, str(REPO))

from eddy_contract.autoscaling import AutoscalingSpec  # noqa: E402
from eddy_operator.autoscaler import History, decide  # noqa: E402
from eddy_runtime.queries.routing import kafka_partition  # noqa: E402

SYSTEMS = ("eddy", "eddy-fixed", "kstreams")
TIMELINE_S = 10
#: a move's pause shows in records made visible up to this long after the sample that saw it
MOVE_MARGIN_S = 5


@dataclass(frozen=True)
class Profile:
    """The input's rate, second by second."""

    rate: float
    step: float
    before_s: int
    high_s: int
    after_s: int
    noise: float
    seed: int

    @property
    def length_s(self) -> int:
        return self.before_s + self.high_s + self.after_s

    def rates(self) -> list[float]:
        rnd = random.Random(self.seed)
        return [self.rate * (self.step if self.before_s <= t < self.before_s + self.high_s else 1.0)
                * (1 + rnd.uniform(-self.noise, self.noise)) for t in range(self.length_s)]


@dataclass(frozen=True)
class Scaling:
    """What every system is told about scaling."""

    min_n: int
    max_n: int
    window_s: float
    out_window_s: float
    in_window_s: float
    max_step: int
    target_utilization: int
    catch_up_s: float
    lag_target: int
    keda_lag_threshold: int
    keda_polling_s: float

    def hpa(self, max_n: int) -> AutoscalingSpec:
        """The HorizontalPodAutoscaler's behaviour windows, as Eddy's autoscaler takes them."""
        return AutoscalingSpec(True, self.min_n, max_n, scale_out_stabilization_s=self.out_window_s,
                               scale_in_stabilization_s=self.in_window_s, max_step=self.max_step)


@dataclass(frozen=True)
class Placement:
    """Where one task's copies are: the active, and the executors holding any other copy."""

    active: str
    others: frozenset[str]


@dataclass
class Sample:
    """What the bench saw of a system at one moment."""

    at_ms: float
    #: executors wanted (Eddy: spec.executors.replicas; kstreams: instances the rule runs)
    wanted: int
    #: executors running
    live: int
    #: copies catching up (Eddy: warmups in the assignment; kstreams: standby copies past one per task)
    warmups: int
    #: the system's own lag figure (Eddy: the driver's input lag; kstreams: the group's lag), or None
    lag: int | None
    placement: dict[str, Placement]
    note: str = ""


@dataclass(frozen=True)
class Action:
    at_ms: float
    before: int
    after: int
    why: str


class Subject(Protocol):
    system: str
    log: Path

    def start(self) -> None: ...

    def ready(self) -> bool: ...

    def alive(self) -> bool: ...

    def sample(self) -> Sample: ...

    def react(self, s: Sample) -> Action | None:
        """A scaling rule the bench drives (KEDA's); None for a system that scales itself."""

    def mark(self) -> None:
        """The first scale action: what `restored` counts from."""

    def restored(self) -> int: ...

    def notes(self) -> list[str]: ...

    def stop(self) -> dict[str, Any]: ...

    def kill_all(self) -> None: ...


# -- Eddy -----------------------------------------------------------------------------------------------------------


def eddy_subject(cluster: Any, sc: Scaling, cpu: str, recovery_lag: int, autoscale: bool) -> Any:
    """A factory of Eddy subjects on `cluster` (upgrade_eddy.EddyCluster)."""
    import upgrade_eddy

    from e2e.wordcount import RESTORE_LINE, Channel, WordCount
    from tests.operator.cluster import apply

    class EddyAutoscaled(upgrade_eddy.EddyChange):
        system = "eddy" if autoscale else "eddy-fixed"
        needs_upgrade_feature = False

        def __init__(self, s: upgrade.Settings, input_topic: str, output: str, app_id: str) -> None:
            super().__init__(cluster, s, input_topic, output, app_id)
            spec = self.body["spec"]
            spec["sparkConf"].pop("spark.kubernetes.executor.request.cores")  # spec.executors.cpu owns it
            spec["executors"].update(replicas=sc.min_n, cpu={"request": cpu, "limit": cpu})
            spec["state"]["acceptableRecoveryLag"] = recovery_lag
            spec["autoscaling"] = {
                "enabled": autoscale, "minReplicas": sc.min_n, "maxReplicas": sc.max_n,
                "targetUtilization": sc.target_utilization, "catchUpDuration": f"{sc.catch_up_s:g}s",
                "metricsWindow": f"{sc.window_s:g}s", "scaleOutStabilization": f"{sc.out_window_s:g}s",
                "scaleInStabilization": f"{sc.in_window_s:g}s", "maxStep": sc.max_step}
            self.generation: int | None = None
            self.placement: dict[str, Placement] = {}
            self.logs: dict[str, Path] = {}
            #: each runner log's length at the first scale action
            self.offsets: dict[str, int] | None = None

        def start(self) -> None:
            self.c.node.kubectl("create", "namespace", self.namespace)
            apply(self.c.node, self.body)
            args = self.body["spec"]["pipeline"]["args"]
            self.app = WordCount(self.c.node, self.c.kafka, self.namespace, self.body["spec"]["applicationId"],
                                 args["input_topic"], args["output_topic"], Channel(self.c.node, self.namespace),
                                 executors=sc.min_n)

        def sample(self) -> Sample:
            assert self.app is not None
            app = self.streamapp()
            status = (app.get("status") or {}).get("autoscaling") or {}
            wanted = int(app["spec"]["executors"]["replicas"])
            pods = [p for p in self.app.executor_pods() if p.metadata.deletion_timestamp is None]
            for p in pods:
                if p.metadata.name not in self.logs and p.spec.volumes:
                    with contextlib.suppress(Exception):  # a claim not bound yet: the next sample
                        self.logs[p.metadata.name] = self.app.volume_dir(p) / "eddy-runner.log"
            m, st = self.app.channel.assignment(), self.app.channel.runtime_state()
            warmups = 0
            if m is not None:
                warmups = sum(len(t.warmups) for t in m.assignment.tasks.values())
                if m.assignment.generation != self.generation:
                    self.generation = m.assignment.generation
                    self.placement = {task: Placement(t.active, frozenset(t.copies[1:]))
                                      for task, t in m.assignment.tasks.items()}
            note = status.get("holding") or (f"recommends {status['recommended']}" if "recommended" in status
                                             else "")
            if "capacityPerExecutor" in status:
                note += f"; capacity {status['capacityPerExecutor']:,.0f}/s, busy {status.get('busyPercent')}%"
            return Sample(time.time() * 1000, wanted, sum(1 for p in pods if p.status.phase == "Running"), warmups,
                          sum(st.input_lag.values()) if st is not None else None, dict(self.placement), note)

        def react(self, s: Sample) -> Action | None:
            return None

        def mark(self) -> None:
            self.offsets = {pod: path.stat().st_size if path.exists() else 0 for pod, path in self.logs.items()}

        def restored(self) -> int:
            if self.offsets is None:
                return 0
            return sum(int(x[4]) - int(x[3]) for pod, path in self.logs.items() if path.exists()
                       for x in RESTORE_LINE.finditer(path.read_text(errors="replace")[self.offsets.get(pod, 0):]))

        def notes(self) -> list[str]:
            assert self.app is not None
            said = [f"Autoscaled: {m}" for m in self.app.events("Autoscaled")]
            said += [f"ScaledIn: {m}" for m in self.app.events("ScaledIn")]
            said += [f"ExecutorLost: {m}" for m in self.app.events("ExecutorLost")]
            return said

    return EddyAutoscaled


# -- Kafka Streams, scaled as KEDA would ----------------------------------------------------------------------------


class CpuLimit:
    """A cgroup (v1 cpu controller) of its own for one process: `share` of a core, as a pod's CPU
    limit is (CFS quota over a 100 ms period)."""

    ROOT = Path("/sys/fs/cgroup/cpu")

    def __init__(self, name: str, share: float) -> None:
        self.path = self.ROOT / name
        self.path.mkdir()
        (self.path / "cpu.cfs_period_us").write_text("100000")
        (self.path / "cpu.cfs_quota_us").write_text(str(int(share * 100000)))

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.path.rmdir()


def group_lag(bootstrap: str, group: str) -> int:
    """The consumer group's lag over every partition it committed (what KEDA's Kafka scaler reads
    when no topic is named): end offset minus committed offset."""
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition

    admin = tp.admin_client(bootstrap)
    [future] = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
    committed = [x for x in future.result(timeout=30).topic_partitions if x.offset >= 0]
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-lag-{uuid.uuid4().hex[:6]}",
                  "isolation.level": "read_committed"})
    try:
        return sum(max(0, c.get_watermark_offsets(TopicPartition(x.topic, x.partition), timeout=10)[1] - x.offset)
                   for x in committed)
    finally:
        c.close()


def kstreams_subject(sc: Scaling, cpu: float, standbys: int, max_warmups: int, recovery_lag: int,
                     probing_ms: int) -> Any:
    """A factory of Kafka Streams subjects: instances started and closed by a KEDA-style rule."""

    class KafkaStreamsKeda(KafkaStreamsBounce):
        system = "kstreams"
        case = "KEDA-style lag rule"
        leave_group = True
        extra_config = (f"num.standby.replicas={standbys}", f"max.warmup.replicas={max_warmups}",
                        f"acceptable.recovery.lag={recovery_lag}", f"probing.rebalance.interval.ms={probing_ms}")

        def __init__(self, s: upgrade.Settings, input_topic: str, output: str, app_id: str) -> None:
            super().__init__(s, input_topic, output, app_id)
            self.names: list[str] = []  # running instances, oldest first
            self.started = 0
            self.limits: dict[str, CpuLimit] = {}
            self.lines: dict[str, dict[str, Any]] = {}
            self.final: dict[str, dict[str, Any]] = {}  # the last status of instances closed
            self.history = History()
            self.hpa = sc.hpa(min(sc.max_n, s.partitions))
            self.next_poll = 0.0
            self.placement: dict[str, Placement] = {}
            self.base: dict[str, dict[str, Any]] | None = None

        def _add(self) -> None:
            self.started += 1
            name = chr(ord("a") + self.started - 1)
            self.ports[name] = tp.free_port()
            self._start(name, 1)
            limit = CpuLimit(f"eddy-bench-{self.app_id}-{name}", cpu)
            limit.add(self.procs[name].pid)
            self.limits[name] = limit
            self.names.append(name)

        def _remove(self) -> None:
            name = self.names.pop()
            self.final[name] = self.status(name)
            self.lines[name] = self._close(name)
            self.limits.pop(name).remove()

        def start(self) -> None:
            for _ in range(sc.min_n):
                self._add()

        def alive(self) -> bool:
            return all(self.procs[n].poll() is None for n in self.names)

        def ready(self) -> bool:
            st = [self.status(n) for n in self.names]
            return (all(x.get("state") == "RUNNING" and x.get("active") for x in st)
                    and sum(len(x["active"]) for x in st) >= 2 * self.s.partitions
                    and sum(len(x.get("standby", [])) for x in st) >= standbys * self.s.partitions)

        def sample(self) -> Sample:
            st = {n: self.status(n) for n in self.names}
            seen: dict[str, Placement] = {}
            for n, x in st.items():
                for task in x.get("active", []):
                    seen[task] = Placement(n, seen[task].others if task in seen else frozenset())
                for task in x.get("standby", []):
                    old = seen.get(task, Placement("", frozenset()))
                    seen[task] = Placement(old.active, old.others | {n})
            # a task between owners mid-rebalance keeps its last known placement
            self.placement.update({t: p for t, p in seen.items() if p.active})
            extra = sum(len(x.get("standby", [])) for x in st.values()) - standbys * self.s.partitions
            lag = group_lag(self.s.bootstrap, self.app_id)
            live = sum(1 for x in st.values() if x.get("state") == "RUNNING")
            return Sample(time.time() * 1000, len(self.names), live, max(0, extra), lag, dict(self.placement))

        def react(self, s: Sample) -> Action | None:
            now = time.time()
            if now < self.next_poll or s.lag is None:
                return None
            self.next_poll = now + sc.keda_polling_s
            want = max(1, math.ceil(s.lag / sc.keda_lag_threshold))
            self.history.add(now, min(max(want, self.hpa.min_replicas), self.hpa.max_replicas),
                             keep_s=max(sc.in_window_s, sc.out_window_s) + sc.keda_polling_s)
            d = decide(self.history, now, len(self.names), self.hpa)
            if d is None:
                return None
            while len(self.names) < d.target:
                self._add()
            while len(self.names) > d.target:
                self._remove()
            self.history.clear()
            return Action(now * 1000, d.current, d.target, f"group lag {s.lag:,}: {d.reason}")

        def mark(self) -> None:
            self.base = {n: self.status(n) for n in self.names}

        def restored(self) -> int:
            """Records restored into actives since the first action, and applied to warmups and
            standbys by the instances the rule started."""
            if self.base is None:
                return 0
            base = self.base
            st = {**self.final, **{n: self.status(n) for n in self.names}}
            return sum(int(x.get("restored", 0)) - int(base.get(n, {}).get("restored", 0))
                       + (0 if n in base else int(x.get("standby_applied", 0))) for n, x in st.items())

        def notes(self) -> list[str]:
            st = {**self.final, **{n: self.status(n) for n in self.names}}
            return [f"instance {n}: restored into actives {x.get('restored', 0):,}, applied to standbys and warmups "
                    f"{x.get('standby_applied', 0):,}, rebalances {x.get('rebalances', 0)}" for n, x in st.items()]

        def stop(self) -> dict[str, Any]:
            while self.names:
                self._remove()
            return self.lines

        def kill_all(self) -> None:
            super().kill_all()
            for limit in self.limits.values():
                limit.remove()

    return KafkaStreamsKeda


# -- one run ----------------------------------------------------------------------------------------------------------


@dataclass
class Run:
    system: str
    records: int = 0
    timeline: list[dict[str, Any]] = field(default_factory=list)
    actions: list[tuple[float, int, int, str]] = field(default_factory=list)
    decision_s: float = math.nan
    lag_back_s: float = math.nan
    lag_back: bool = False
    steady_p99_ms: float = math.nan
    max_ms: float = math.nan
    pause_in_move_ms: float = math.nan
    pause_outside_ms: float = math.nan
    moves: list[tuple[float, float]] = field(default_factory=list)
    restored: int = 0
    flaps: int = 0
    cold_moves: int = 0
    cold_moves_in: int = 0
    repeated: int = 0
    lowered: int = 0
    wrong: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    load: tuple[float, float] = (math.nan, math.nan)
    error: str | None = None

    @property
    def failed(self) -> bool:
        return bool(self.error or self.wrong)


def moves(samples: Sequence[Sample], since_ms: float) -> list[tuple[float, float]]:
    """(from ms, to ms) around each placement change from `since_ms` on that moved an active: from the
    sample before it to MOVE_MARGIN_S after the sample that saw it."""
    return [(before.at_ms, after.at_ms + MOVE_MARGIN_S * 1000)
            for before, after in zip(samples, samples[1:], strict=False)
            if after.at_ms >= since_ms and any(before.placement.get(task, p).active != p.active
                                               for task, p in after.placement.items())]


def cold_moves(samples: Sequence[Sample], since_ms: float = 0) -> int:
    """Stateful tasks (those with any other copy) whose active went to an executor that held no copy."""
    cold = 0
    for before, after in zip(samples, samples[1:], strict=False):
        if after.at_ms < since_ms:
            continue
        for task, p in after.placement.items():
            old = before.placement.get(task)
            if old is None or not (old.others or p.others):
                continue  # new, or stateless
            if p.active != old.active and p.active not in old.others:
                cold += 1
    return cold


def flaps(actions: Sequence[Action], sc: Scaling) -> int:
    """Actions closer to the previous one than their own direction's window, or reversing it within
    the longer window."""
    def window_s(a: Action, b: Action) -> float:
        if (a.after > a.before) != (b.after > b.before):
            return max(sc.out_window_s, sc.in_window_s)
        return sc.out_window_s if b.after > b.before else sc.in_window_s

    return sum(1 for a, b in zip(actions, actions[1:], strict=False) if b.at_ms - a.at_ms < 1000 * window_s(a, b))


def pauses(sent: Sequence[tuple[bytes, int]], parts: Sequence[int], lat: Sequence[float], partitions: int,
           windows: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """(longest wait within a move, longest outside) over the groups: input partitions and count
    tasks. A record's wait: from its send, or its group's previous visible update if later, to its
    own visible update."""
    groups: dict[tuple[str, int], list[tuple[float, float]]] = {}
    task_of: dict[bytes, int] = {}
    for (word, ts), p, x in zip(sent, parts, lat, strict=True):
        if math.isnan(x):
            continue
        vis = ts + x
        if word not in task_of:
            task_of[word] = kafka_partition(word, partitions)
        groups.setdefault(("in", p), []).append((vis, ts))
        groups.setdefault(("count", task_of[word]), []).append((vis, ts))
    inside, outside = 0.0, 0.0
    for records in groups.values():
        records.sort()
        previous = records[0][0]
        for vis, sent_ms in records:
            if vis > previous:
                wait = vis - max(previous, sent_ms)
                if any(a <= vis and max(previous, sent_ms) <= b for a, b in windows):
                    inside = max(inside, wait)
                else:
                    outside = max(outside, wait)
                previous = vis
    return inside, outside


def timeline(t0_ms: float, sent: Sequence[tuple[bytes, int]], lat: Sequence[float], samples: Sequence[Sample],
             length_s: float) -> list[dict[str, Any]]:
    """A row per TIMELINE_S: rate sent, lag (records sent, not visible) at its end, executors
    (wanted / running at its end), warmups (most seen), the system's own lag figure, p99 of its records."""
    visible = sorted(ts + x if not math.isnan(x) else math.inf for (_, ts), x in zip(sent, lat, strict=True))
    sends = [ts for _, ts in sent]
    rows = []
    for k in range(int(math.ceil(length_s / TIMELINE_S))):
        a, b = t0_ms + k * TIMELINE_S * 1000, t0_ms + (k + 1) * TIMELINE_S * 1000
        i, j = bisect.bisect_left(sends, a), bisect.bisect_left(sends, b)
        inside = [s for s in samples if a <= s.at_ms < b]
        last = inside[-1] if inside else None
        rows.append({
            "t": k * TIMELINE_S, "rate": (j - i) / TIMELINE_S, "lag": j - bisect.bisect_right(visible, b),
            "wanted": last.wanted if last else None, "live": last.live if last else None,
            "warmups": max((s.warmups for s in inside), default=None),
            "system_lag": last.lag if last else None,
            "p99_ms": tp.percentile(sorted(math.inf if math.isnan(x) else x for x in lat[i:j]), 0.99),
            "note": last.note if last else ""})
    return rows


def lag_at(sent: Sequence[tuple[bytes, int]], lat: Sequence[float], at_ms: Sequence[float]) -> list[int]:
    visible = sorted(ts + x if not math.isnan(x) else math.inf for (_, ts), x in zip(sent, lat, strict=True))
    sends = [ts for _, ts in sent]
    return [bisect.bisect_right(sends, t) - bisect.bisect_right(visible, t) for t in at_ms]


def analyse(r: Run, p: Profile, sc: Scaling, t0_ms: float, sent: Sequence[tuple[bytes, int]], parts: Sequence[int],
            seen: Sequence[tuple[bytes, int, float]], samples: Sequence[Sample], actions: Sequence[Action]) -> None:
    lat = fo.record_latencies(sent, seen)
    r.records = len(sent)
    step_ms, down_ms = t0_ms + p.before_s * 1000, t0_ms + (p.before_s + p.high_s) * 1000
    r.timeline = timeline(t0_ms, sent, lat, samples, p.length_s)
    r.actions = [(round((a.at_ms - step_ms) / 1000, 1), a.before, a.after, a.why) for a in actions]
    out = [a for a in actions if a.at_ms >= step_ms and a.after > a.before]
    r.decision_s = (out[0].at_ms - step_ms) / 1000 if out else math.nan
    seconds = [step_ms + 1000 * k for k in range(int((down_ms - step_ms) / 1000) + 1)]
    over = [t for t, lag in zip(seconds, lag_at(sent, lat, seconds), strict=True) if lag > sc.lag_target]
    r.lag_back = not over or over[-1] < seconds[-1]
    r.lag_back_s = (over[-1] + 1000 - step_ms) / 1000 if over and r.lag_back else 0.0 if r.lag_back else math.nan
    before = sorted(x for (_, ts), x in zip(sent, lat, strict=True) if t0_ms + 1000 * p.before_s / 2 <= ts < step_ms)
    r.steady_p99_ms = tp.percentile(before, 0.99)
    r.max_ms = max((math.inf if math.isnan(x) else x for (_, ts), x in zip(sent, lat, strict=True) if ts >= step_ms),
                   default=math.nan)
    windows = moves(samples, actions[0].at_ms if actions else math.inf)
    r.moves = [((a - step_ms) / 1000, (b - step_ms) / 1000) for a, b in windows]
    r.pause_in_move_ms, r.pause_outside_ms = pauses(sent, parts, lat, max(parts) + 1, windows)
    if not windows:
        r.pause_in_move_ms = math.nan
    r.flaps = flaps(actions, sc)
    r.cold_moves = cold_moves(samples)
    r.cold_moves_in = cold_moves(samples, down_ms)
    counted = upgrade.Upgrade(r.system, "autoscale")
    upgrade.analyse(counted, None, sent, seen, upgrade.Marks(), repeats_allowed=False)  # type: ignore[arg-type]
    r.wrong, r.repeated, r.lowered = counted.wrong, counted.repeated, counted.lowered


def run_case(s: upgrade.Settings, system: str, factory: Any, p: Profile, sc: Scaling, words: Sequence[bytes],
             sample_s: float) -> Run:
    """Start the system, feed it the profile, drain, stop, measure."""
    from confluent_kafka import Producer

    r = Run(system)
    tag = uuid.uuid4().hex[:6]
    input_topic = f"bench-as-{system}-in-{tag}"
    tp.create_topics(s.bootstrap, [input_topic], s.partitions)
    out = tp.output_topic(s.bootstrap, f"bench-as-{system}-out-{tag}", s.partitions)
    seen_path = s.work_dir / f"seen-{system}-{tag}.pickle"
    probe_count, stop, observer = tp.start_observer(s.bootstrap, out, s.partitions, seen_path)
    subject = factory(s, input_topic, out, f"bench-as-{system}-{tag}")
    r.load = (tp.loadavg(), math.nan)
    sent: list[tuple[bytes, int]] = []
    parts: list[int] = []
    samples: list[Sample] = []
    actions: list[Action] = []
    done = threading.Event()
    failure: list[BaseException] = []
    t0_ms = math.nan
    tp.say(f"{system}: starting (log {subject.log})")

    def watch() -> None:
        next_line = time.time() + TIMELINE_S
        while not done.is_set():
            try:
                x = subject.sample()
                samples.append(x)
                a = subject.react(x)
                if a is None and len(samples) > 1 and x.wanted != samples[-2].wanted:
                    a = Action(x.at_ms, samples[-2].wanted, x.wanted, "spec.executors.replicas changed")
                if a is not None:
                    if not actions:
                        subject.mark()
                    actions.append(a)
                    tp.say(f"  {system}: scale {a.before} -> {a.after} at +{(a.at_ms - t0_ms) / 1000:.0f} s: {a.why}")
                if time.time() >= next_line:
                    next_line += TIMELINE_S
                    tp.say(f"  {system} +{(x.at_ms - t0_ms) / 1000:.0f} s: sent {len(sent):,}, executors "
                           f"{x.wanted}/{x.live}, warmups {x.warmups}, its lag {x.lag}; {x.note}")
            except Exception as e:  # noqa: BLE001 - handed to the producer's loop
                failure.append(e)
                return
            done.wait(sample_s)

    watcher = threading.Thread(target=watch, name="watch", daemon=True)
    try:
        subject.start()
        wait_for(subject.ready, 600, f"{system} holding its tasks", subject.alive)
        tp.say(f"{system}: holds its tasks; producing {p.length_s} s")
        producer = Producer({"bootstrap.servers": s.bootstrap, "linger.ms": 1})
        rates = p.rates()
        due_at = [0.0]
        for x in rates:
            due_at.append(due_at[-1] + x)
        start = time.time()
        t0_ms = start * 1000
        watcher.start()
        i, next_probe, probes = 0, start, 0
        while True:
            now = time.time()
            el = now - start
            if el >= p.length_s:
                break
            if failure:
                raise failure[0]
            if not subject.alive():
                raise RuntimeError(f"{system} exited")
            k = int(el)
            due = min(len(words), int(due_at[k] + (el - k) * rates[k]) + 1)
            if i >= len(words):
                raise RuntimeError("ran out of words")
            while i < due:
                now_ms = int(time.time() * 1000)
                word = words[i]
                if now >= next_probe:
                    word, next_probe, probes = upgrade.PROBE, next_probe + upgrade.PROBE_INTERVAL_S, probes + 1
                producer.produce(input_topic, word, partition=i % s.partitions, timestamp=now_ms)
                sent.append((word, now_ms))
                parts.append(i % s.partitions)
                i += 1
            producer.poll(0)
            time.sleep(0.002)
        producer.flush(30)
        tp.say(f"{system}: sent {len(sent):,} records; draining")
        wait_for(lambda: fo.output_settled(s.bootstrap, out, probe_count.value, probes), 600,
                 f"{system}: every probe counted", subject.alive)
        done.set()
        watcher.join(30)
        r.restored = subject.restored()
        r.notes += subject.notes()
        lines = subject.stop()
        r.notes += [f"{n}: {json.dumps(x)}" for n, x in lines.items() if "error" in x]
    except BaseException as e:  # one run's failure is reported in its row; Ctrl-C leaves no process behind
        subject.kill_all()
        if not isinstance(e, Exception):
            raise
        r.error = f"{type(e).__name__}: {e}"
        tp.say(f"{system}: failed: {r.error}")
    finally:
        done.set()
        stop.set()
        observer.join(120)
    r.load = (r.load[0], tp.loadavg())
    if r.error is None and seen_path.exists():
        seen: list[tuple[bytes, int, float]] = pickle.loads(seen_path.read_bytes())
        analyse(r, p, sc, t0_ms, sent, parts, seen, samples, actions)
        with (s.work_dir / f"run-{system}-{tag}.pickle").open("wb") as out_file:  # kept with --keep
            pickle.dump({"sent": sent, "parts": parts, "seen": seen, "samples": [asdict(x) for x in samples],
                         "actions": [asdict(a) for a in actions], "t0_ms": t0_ms}, out_file)
    tp.say(f"{system}: " + summary(r))
    return r


# -- report ---------------------------------------------------------------------------------------------------------


def summary(r: Run) -> str:
    if r.error:
        return f"FAILED: {r.error}"
    return (f"decision {tp.fmt(r.decision_s, '.0f')} s after the step, lag back {back(r)}, max lateness "
            f"{tp.fmt(r.max_ms)} ms, "
            f"longest pause in a move {tp.fmt(r.pause_in_move_ms)} ms (outside {tp.fmt(r.pause_outside_ms)} ms), "
            f"restored {r.restored:,}, {len(r.actions)} actions, {r.flaps} flaps, {r.cold_moves} cold moves "
            f"({r.cold_moves_in} after the step down), counts " + ("exact" if not r.wrong else f"WRONG {r.wrong[:3]}"))


def back(r: Run) -> str:
    return f"{tp.fmt(r.lag_back_s, '.0f')} s" if r.lag_back else "never"


def show_timeline(r: Run) -> list[str]:
    lines = [f"{r.system} timeline (s from the start; lag: records sent, not yet counted; executors wanted/running):",
             "     t  rate/s     lag  executors  warmups  its lag    p99 ms  note"]
    for row in r.timeline:
        ex = f"{row['wanted']}/{row['live']}" if row["wanted"] is not None else "-"
        lines.append(f"  {row['t']:4d}  {row['rate']:6,.0f}  {row['lag']:6,}  {ex:>9}  {row['warmups'] or 0:7}  "
                     f"{row['system_lag'] if row['system_lag'] is not None else '-':>7}  {tp.fmt(row['p99_ms']):>8}  "
                     f"{row['note'][:70]}")
    return lines


def middle(runs: list[Run]) -> Run:
    bad = [r for r in runs if r.failed]
    if bad:
        return bad[0]
    return sorted(runs, key=lambda r: r.lag_back_s if r.lag_back else math.inf)[(len(runs) - 1) // 2]


def report(runs: dict[str, list[Run]], args: argparse.Namespace, sc: Scaling) -> str:
    lines: list[str] = []
    quoted = {system: middle(rs) for system, rs in runs.items() if rs}
    for r in quoted.values():
        if not r.error:
            lines += show_timeline(r)
    rows = [("system", "decision s", f"lag <= {sc.lag_target:,} s", "max late ms", "steady p99", "pause in move ms",
             "outside ms", "restored", "actions", "flaps", "cold moves", "counts")]
    for system, r in quoted.items():
        if r.error:
            rows.append((system, "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "FAILED"))
            continue
        rows.append((system, tp.fmt(r.decision_s, ".0f"), tp.fmt(r.lag_back_s, ".0f") if r.lag_back else "never",
                     tp.fmt(r.max_ms), tp.fmt(r.steady_p99_ms), tp.fmt(r.pause_in_move_ms), tp.fmt(r.pause_outside_ms),
                     f"{r.restored:,}", str(len(r.actions)), str(r.flaps), f"{r.cold_moves} ({r.cold_moves_in} in)",
                     "exact" if not r.wrong else "WRONG"))
    widths = [max(len(x[i]) for x in rows) for i in range(len(rows[0]))]
    lines += ["  ".join(c.ljust(n) if i == 0 else c.rjust(n) for i, (c, n) in enumerate(zip(row, widths, strict=True)))
              for row in rows]
    for system, r in quoted.items():
        if r.error:
            lines.append(f"{system}: FAILED: {r.error}")
            continue
        if r.wrong:
            lines.append(f"{system}: wrong: {r.wrong[:5]}")
        lines.append(f"{system}: actions (s after the step): " + ("; ".join(
            f"+{at:.0f} s {a} -> {b}: {why[:160]}" for at, a, b, why in r.actions) or "none"))
        lines.append(f"{system}: moves (s after the step): "
                     + (", ".join(f"+{a:.0f}..+{b:.0f}" for a, b in r.moves) or "none"))
        lines += [f"{system}: {n[:400]}" for n in r.notes]
    if args.repeat > 1:
        for system, rs in runs.items():
            lines.append(f"{system} runs, decision s / lag back s / max late ms / pause in move ms / restored / "
                         "actions / flaps / cold moves / counts: " + " | ".join(
                             "FAILED" if r.error else
                             f"{tp.fmt(r.decision_s, '.0f')} / {back(r)} / "
                             f"{tp.fmt(r.max_ms)} / {tp.fmt(r.pause_in_move_ms)} / {r.restored:,} / {len(r.actions)} / "
                             f"{r.flaps} / {r.cold_moves} / {'exact' if not r.wrong else 'WRONG'}" for r in rs))
    loads = [f"{r.system} {r.load[0]:.1f}->{r.load[1]:.1f}" for rs in runs.values() for r in rs]
    lines.append(f"load average (1 min) at start -> end: {', '.join(loads)}")
    lines.append(f"{args.rate:g} records/s, x{args.step:g} for {args.high} s after {args.before} s, then "
                 f"{args.after} s back at the rate, +-{100 * args.noise:.0f}% per second; {args.partitions} "
                 f"partitions, {args.distinct} distinct words; executors {args.min}..{args.max} ({args.cpu} CPU "
                 f"each; kstreams {args.kstreams_cpu:g} of a core each); windows: metrics {sc.window_s:g} s, out "
                 f"{sc.out_window_s:g} s, in {sc.in_window_s:g} s; {os.cpu_count()} CPUs on this machine")
    if "eddy" in quoted:
        lines += targets(quoted["eddy"])
    return "\n".join(lines)


def targets(r: Run) -> list[str]:
    """Issue 31's targets, for Eddy's quoted run."""
    if r.error:
        return ["eddy: targets not judged: the run failed"]

    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    return [
        f"eddy: target decision within 60 s of the step {verdict(r.decision_s <= 60)} "
        f"({tp.fmt(r.decision_s, '.0f')} s)",
        f"eddy: target lag back under its target within 3 min {verdict(r.lag_back and r.lag_back_s <= 180)} "
        f"({back(r)})",
        f"eddy: target no partition paused > 250 ms by a move {verdict(r.pause_in_move_ms <= 250)} "
        f"({tp.fmt(r.pause_in_move_ms)} ms; {tp.fmt(r.pause_outside_ms)} ms outside moves)",
        f"eddy: target at most one scale action per stabilisation window {verdict(r.flaps == 0)} ({r.flaps} flaps)",
        f"eddy: target scale-in moves no task to a cold copy "
        f"{verdict(r.cold_moves_in == 0 and any(b < a for _, a, b, _ in r.actions))} ({r.cold_moves_in} cold moves; "
        f"{'a' if any(b < a for _, a, b, _ in r.actions) else 'NO'} scale-in)",
        f"eddy: target counts exact {verdict(not r.wrong)}",
    ]


# -- main -----------------------------------------------------------------------------------------------------------

#: (option, type, default, help) of the input and the systems
OPTIONS: tuple[tuple[str, type, Any, str], ...] = (
    ("--rate", float, 5000, "input records/s before and after the step"),
    ("--step", float, 3, "the rate is multiplied by this during the step"),
    ("--before", int, 60, "seconds at --rate before the step"),
    ("--high", int, 300, "seconds of the step"),
    ("--after", int, 240, "seconds at --rate after it"),
    ("--noise", float, 0.2, "each second's rate within +- this fraction"),
    ("--partitions", int, 4, "input partitions"),
    ("--distinct", int, 50_000, "distinct words"),
    ("--zipf", float, 1.0, "Zipf exponent of the word frequencies"),
    ("--commit-interval-ms", int, 100, "Eddy's triggerInterval, Kafka Streams' commit.interval.ms"),
    ("--min", int, 2, "executors / instances at least (and Eddy's fixed count)"),
    ("--max", int, 6, "executors / instances at most (kstreams: also <= partitions)"),
    ("--cpu", str, "100m", "each Eddy executor's CPU request and limit"),
    ("--kstreams-cpu", float, 0.1, "each Kafka Streams JVM's share of a core"),
    ("--target-utilization", int, 70, "spec.autoscaling.targetUtilization"),
    ("--catch-up", float, 60, "spec.autoscaling.catchUpDuration, s"),
    ("--window", float, 30, "spec.autoscaling.metricsWindow, s"),
    ("--out-window", float, 20, "scale-out stabilisation window, s (Eddy and KEDA)"),
    ("--in-window", float, 60, "scale-in stabilisation window, s (Eddy and KEDA)"),
    ("--max-step", int, 2, "executors one decision may add or remove"),
    ("--lag-target", int, 0, "lag (records) judged 'back' at or under this; default 5 s of the stepped rate"),
    ("--keda-lag-threshold", int, 0, "KEDA's lagThreshold (records per instance); default: --lag-target"),
    ("--keda-polling", float, 10, "KEDA's pollingInterval, s"),
    ("--kstreams-standbys", int, 1, "num.standby.replicas"),
    ("--kstreams-warmups", int, 2, "max.warmup.replicas (Kafka Streams' default)"),
    ("--recovery-lag", int, 10_000,
     "Eddy's state.acceptableRecoveryLag, Kafka Streams' acceptable.recovery.lag (its default)"),
    ("--kstreams-probing-ms", int, 60_000,
     "probing.rebalance.interval.ms (Kafka Streams' minimum; its default is 10 min)"),
)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated subset of {','.join(SYSTEMS)}")
    ap.add_argument("--short", action="store_true", help="development: 20 / 60 / 60 s, windows 10 / 5 / 20 s")
    for flag, kind, default, what in OPTIONS:
        ap.add_argument(flag, type=kind, default=default, help=what)
    ap.add_argument("--sample", type=float, default=2, help="seconds between the bench's looks at each system")
    ap.add_argument("--nodes", type=int, default=1, help="real nodes of Eddy's cluster")
    ap.add_argument("--repeat", type=int, default=1, help="runs of every system, interleaved; the middle one is quoted")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", help="also write every run's figures to this file")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (logs, state, records)")
    args = ap.parse_args(argv)
    if args.short:
        args.before, args.high, args.after = 20, 60, 60
        args.window, args.out_window, args.in_window = 10, 5, 20
    args.systems = [x.strip() for x in args.systems.split(",") if x.strip()]
    if set(args.systems) - set(SYSTEMS):
        ap.error(f"unknown systems: {', '.join(sorted(set(args.systems) - set(SYSTEMS)))}")
    lag_target = args.lag_target or int(5 * args.rate * args.step)
    sc = Scaling(args.min, args.max, args.window, args.out_window, args.in_window, args.max_step,
                 args.target_utilization, args.catch_up, lag_target, args.keda_lag_threshold or lag_target,
                 args.keda_polling)
    profile = Profile(args.rate, args.step, args.before, args.high, args.after, args.noise, args.seed)

    tp.say(f"machine: {os.cpu_count()} CPUs, load average {tp.loadavg():.2f}")
    if "kstreams" in args.systems and subprocess.run([str(tp.KSTREAMS_SH), "build"],
                                                     stdout=subprocess.DEVNULL).returncode != 0:
        tp.say("kstreams: bench/kstreams does not build (its error above): not run")
        args.systems.remove("kstreams")
    total = int(sum(profile.rates()) * 1.1) + 10_000
    words = tp.zipf_words(total, args.distinct, args.zipf, args.seed).words
    tp.CACHE.mkdir(parents=True, exist_ok=True)
    work_dir = Path(tempfile.mkdtemp(prefix="autoscale-", dir=tp.CACHE))
    runs: dict[str, list[Run]] = {system: [] for system in args.systems}
    import upgrade_eddy

    with upgrade_eddy.cluster(work_dir, args.nodes) as (bootstrap, cluster):
        s = upgrade.Settings(bootstrap, args.partitions, args.rate, 0, 0, 0, 2000, 0, 600, args.commit_interval_ms,
                             45_000, 0, "warm", work_dir)
        factories = {
            "eddy": eddy_subject(cluster, sc, args.cpu, args.recovery_lag, autoscale=True),
            "eddy-fixed": eddy_subject(cluster, sc, args.cpu, args.recovery_lag, autoscale=False),
            "kstreams": kstreams_subject(sc, args.kstreams_cpu, args.kstreams_standbys, args.kstreams_warmups,
                                         args.recovery_lag, args.kstreams_probing_ms),
        }
        for _ in range(args.repeat):
            for system in args.systems:
                runs[system].append(run_case(s, system, factories[system], profile, sc, words, args.sample))
    print(report(runs, args, sc), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(tp._json_safe({
            "runs": [asdict(r) for rs in runs.values() for r in rs],
            "quoted": [asdict(middle(rs)) for rs in runs.values() if rs],
            "settings": vars(args), "lag_target": lag_target}), indent=2, default=str))
    return tp.finish(work_dir, args.keep, sorted({r.system for rs in runs.values() for r in rs if r.failed}))


if __name__ == "__main__":
    # As the module `upgrade` that upgrade_eddy and upgrade_peers import: one Settings, one Marks.
    sys.exit(main())
