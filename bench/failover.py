"""Failover against the peers: one of two instances of the stateful word count is SIGKILLed.

The job is bench/throughput.py's (one word per input record, re-keyed by word through a
repartition topic, counted in a RocksDB store with a changelog, exactly-once, commit interval /
trigger ``--commit-interval-ms`` (100), output ``word`` -> 64-bit big-endian count), on one
broker, run by each system with two instances:

- ``kstreams``: Kafka Streams 4.x, two JVMs (``bench/kstreams/run.sh wordcount``, one stream
  thread each, ``num.standby.replicas=1``); the JVM holding the most active tasks (from its
  status file) is killed;
- ``eddy-sb1`` and ``eddy-sb0``: Eddy's ``examples/wordcount/app.py`` (``build_words``) with ``standbyReplicas`` 1
  and 0, its driver on Spark ``local-cluster[2,1,1024]`` (two executor JVMs) in a child process
  (``failover.py _eddy ...``); the executor JVM holding the most active tasks (from the driver's
  assignment) is killed; its task runner (``python -m eddy_runtime.executor.runner``) notices and exits.
- ``sss``: Spark Structured Streaming's word count (bench/sss/wordcount.py, micro-batch) on
  ``local-cluster[2,1,1024]``; executor ``0`` is killed (no executor owns a state partition); its
  sink is at-least-once, so re-processing is counted as count updates written again.

Once both instances hold active tasks (and standbys, if any, are placed), a producer sends
``--rate`` records/s (Zipf words), each stamped with its send time, and every 0.2 s a probe word
whose count the observer (throughput.py's, read_committed) reports to this script at once.
Warm-up: once the probes of ``--steady-s`` seconds (those sent over ``--within-s`` ago) were
each counted within ``--within-s`` (or after ``--warmup-max-s`` in any case; the report says
so), the instance holding the most active tasks is SIGKILLed and the producer goes on for
``--duration`` s. Then the input is drained (the group's committed input offsets reach the
end), the survivors are stopped cleanly:

- latency of an input record: from its send to the first visible count update that includes it
  (throughput.py's definition: the k-th occurrence of a word once the word's count is >= k);
- in flight at the kill: records sent less than G before it, G being the longest probe latency
  of the last ``--steady-s`` seconds before it;
- **steady p50/p99**: over the records sent in the ``--steady-s`` seconds before those;
- **recovery**: from the kill to the send time of the first record after which every record
  has a latency <= ``--within-s`` (over the records in flight at the kill and later ones); 0 if
  none was late; "> duration" if the last record was late. **outage max**: the largest latency
  among those records; **late**: how many of them were over ``--within-s``;
- **reassigned**: from the kill to the moment the survivor was given every active task (Kafka
  Streams: the survivor's status shows them, state RUNNING; Eddy: the driver took or pushed to
  the runners an assignment without the lost executor; the status files are read every 50 ms);
- **records re-processed**: input records whose first step (read, re-key, write to the
  repartition topic) was done in a transaction that was then aborted, so done again: the
  repartition topic read read_uncommitted minus read_committed (Kafka Streams writes one record
  per input record, Eddy one partial count per word and batch: the partial counts are summed).
  **aborted updates**: the same difference over the output topic (count updates thrown away);
- **counts**: the last count of every word equals the input's; no visible update repeats or
  lowers an already seen count of its word.

    .venv/bin/python bench/failover.py                        # the three scenarios, minutes each
    .venv/bin/python bench/failover.py --systems eddy-sb1,kstreams --duration 40 --within-s 3
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import throughput as tp
from sss import peer as sss

from eddy_runtime.protocol.runner_client import RUNNER_MODULE

REPO = tp.REPO
PROBE = tp.WARMUP_WORD
PROBE_INTERVAL_S = 0.2


@dataclass(frozen=True)
class Scenario:
    name: str
    system: str
    standbys: int


SCENARIOS = (Scenario("kstreams", "kstreams", 1), Scenario("sss", "sss", 0), Scenario("eddy-sb1", "eddy", 1),
             Scenario("eddy-sb0", "eddy", 0))


# -- processes ------------------------------------------------------------------------------------------


def process_table() -> dict[int, tuple[int, list[str]]]:
    """pid -> (parent pid, command line) of every process."""
    out: dict[int, tuple[int, list[str]]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
            cmd = Path(entry.path, "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        out[int(entry.name)] = (int(stat[stat.rfind(")") + 2:].split()[1]), cmd)
    return out


def descendants(root: int, table: dict[int, tuple[int, list[str]]]) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


def option(cmd: Sequence[str], name: str) -> str | None:
    return cmd[cmd.index(name) + 1] if name in cmd and cmd.index(name) + 1 < len(cmd) else None


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def read_status(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


# -- the systems ---------------------------------------------------------------------------------------------


@dataclass
class Victim:
    instance: str
    pid: int
    active: list[str]
    #: Eddy: the killed executor's task runner, and when it exited
    runner_pid: int | None = None
    runner_exit_s: float = math.nan


class System(Protocol):
    app_id: str
    log: Path

    def alive(self) -> bool: ...

    def ready(self) -> bool:
        """Both instances hold active tasks (and standbys are placed, if any)."""

    def kill_busiest(self) -> Victim: ...

    def reassigned(self, victim: Victim) -> bool:
        """The survivors hold every active task."""

    def notes(self) -> list[str]: ...

    def stop(self) -> dict[str, Any]: ...

    def kill_all(self) -> None: ...


class KafkaStreamsPair:
    """Two Kafka Streams JVMs of one application id, each with its state dir and status file."""

    def __init__(self, s: Settings, sc: Scenario, input_topic: str, output: str, app_id: str) -> None:
        self.app_id, self.standbys = app_id, sc.standbys
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self.status: dict[str, Path] = {}
        self.logs: dict[str, Path] = {}
        self.killed: str | None = None
        self.total_active = 0
        for name in ("a", "b"):
            self.status[name] = s.work_dir / f"{app_id}-{name}.status"
            self.logs[name] = s.work_dir / f"{app_id}-{name}.log"
            argv = [str(tp.KSTREAMS_SH), "wordcount", "--bootstrap", s.bootstrap, "--input", input_topic,
                    "--output", output, "--app-id", app_id, "--expected-records", "0", "--threads", "1",
                    "--instance", name, "--status-file", str(self.status[name]),
                    "--state-dir", str(s.work_dir / "state" / f"{app_id}-{name}"), "--timeout-s", "3600",
                    "--config", f"commit.interval.ms={s.commit_interval_ms}",
                    "--config", f"num.standby.replicas={sc.standbys}",
                    "--config", f"session.timeout.ms={s.kstreams_session_timeout_ms}",
                    # Kept until the end: re-processing is read from the repartition topic.
                    "--config", "repartition.purge.interval.ms=86400000"]
            with self.logs[name].open("w") as err:
                self.procs[name] = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                                    text=True, cwd=REPO, start_new_session=True)
        self.log = self.logs["a"]  # the first one's; "b" is next to it

    def alive(self) -> bool:
        return all(p.poll() is None for n, p in self.procs.items() if n != self.killed)

    def _statuses(self) -> dict[str, dict[str, Any]]:
        return {n: read_status(p) for n, p in self.status.items() if n != self.killed}

    def ready(self) -> bool:
        st = self._statuses()
        return (len(st) == 2 and all(x.get("state") == "RUNNING" and x.get("active") for x in st.values())
                and (self.standbys == 0 or any(x.get("standby") for x in st.values())))

    def kill_busiest(self) -> Victim:
        st = self._statuses()
        name = max(sorted(st), key=lambda n: len(st[n].get("active", [])))
        self.killed = name
        self.total_active = sum(len(x.get("active", [])) for x in st.values())
        pid = self.procs[name].pid  # run.sh execs java: the same pid
        os.kill(pid, signal.SIGKILL)
        return Victim(name, pid, list(st[name].get("active", [])))

    def reassigned(self, victim: Victim) -> bool:
        st = self._statuses()
        return sum(len(x.get("active", [])) for x in st.values() if x.get("state") == "RUNNING") >= self.total_active

    def notes(self) -> list[str]:
        return []

    def stop(self) -> dict[str, Any]:
        results: dict[str, Any] = {}
        for name, p in self.procs.items():
            if name == self.killed:
                p.wait(30)
                continue
            try:
                out, _ = p.communicate(input="", timeout=120)
            except subprocess.TimeoutExpired:
                self.kill_all()
                out = ""
            lines = [ln for ln in out.splitlines() if ln.startswith("{")]
            results[name] = json.loads(lines[-1]) if lines else {"error": f"exit code {p.returncode}"}
        return results

    def kill_all(self) -> None:
        for p in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(30)


class _OnTwoExecutors:
    """A Spark application on local-cluster[2,1,1024] in a child process of this script: its
    executor JVMs, the events noted after the kill, and its one JSON line at the end (`label`)."""

    label = ""
    proc: subprocess.Popen[str]
    events: dict[str, float]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def executor_pids(self) -> dict[str, int]:
        """Executor id -> pid of its JVM (CoarseGrainedExecutorBackend) under the child process."""
        table = process_table()
        return {ex: pid for pid in descendants(self.proc.pid, table)
                if any("CoarseGrainedExecutorBackend" in c for c in table[pid][1])
                and (ex := option(table[pid][1], "--executor-id"))}

    def notes(self) -> list[str]:
        return [f"{what} after {at:.1f} s" for what, at in self.events.items()]

    def stop(self) -> dict[str, Any]:
        try:
            out, _ = self.proc.communicate(input="", timeout=240)
        except subprocess.TimeoutExpired:
            self.kill_all()
            out = ""
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        return {self.label: json.loads(lines[-1]) if lines else {"error": f"exit code {self.proc.returncode}"}}

    def kill_all(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(30)


class EddyOnTwoExecutors(_OnTwoExecutors):
    """Eddy's driver on local-cluster[2,1,1024] in a child process (`eddy_program`)."""

    label = "driver"

    def __init__(self, s: Settings, sc: Scenario, input_topic: str, output: str, app_id: str) -> None:
        self.app_id, self.standbys = app_id, sc.standbys
        self.log = s.work_dir / f"{app_id}.log"
        self.status_file = s.work_dir / f"{app_id}.status"
        argv = [sys.executable, str(Path(__file__).resolve()), "_eddy", "--bootstrap", s.bootstrap,
                "--input", input_topic, "--output", output, "--app-id", app_id,
                "--state-dir", str(s.work_dir / "state" / app_id), "--standbys", str(sc.standbys),
                "--trigger-ms", str(s.commit_interval_ms), "--status-file", str(self.status_file)]
        with self.log.open("w") as err:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                                         cwd=REPO, start_new_session=True)
        self.killed_at = math.nan
        self.before: set[str] = set()
        self.events: dict[str, float] = {}
        self._next_scan = 0.0

    def _executors(self) -> dict[str, dict[str, list[str]]]:
        return dict(read_status(self.status_file).get("executors", {}))

    def ready(self) -> bool:
        ex = self._executors()
        return (len(ex) == 2 and all(x["active"] for x in ex.values())
                and (self.standbys == 0 or any(x["standby"] for x in ex.values())))

    def kill_busiest(self) -> Victim:
        ex = self._executors()
        pids = self.executor_pids()
        name = max(sorted(e for e in ex if e in pids), key=lambda e: len(ex[e]["active"]))
        runner = [pid for pid, (_, cmd) in process_table().items()
                  if RUNNER_MODULE in cmd and option(cmd, "--executor-pid") == str(pids[name])]
        self.before = set(ex)
        self.killed_at = time.time()
        os.kill(pids[name], signal.SIGKILL)
        victim = Victim(name, pids[name], list(ex[name]["active"]), runner[0] if runner else None)
        if victim.runner_pid is not None:
            threading.Thread(target=self._watch_runner, args=(victim,), daemon=True).start()
        return victim

    def _watch_runner(self, victim: Victim) -> None:
        assert victim.runner_pid is not None
        deadline = time.monotonic() + 120
        while alive(victim.runner_pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        if not alive(victim.runner_pid):
            victim.runner_exit_s = time.time() - self.killed_at

    def reassigned(self, victim: Victim) -> bool:
        ex = self._executors()
        now = time.time() - self.killed_at
        if "replacement executor JVM started" not in self.events and now >= self._next_scan:
            self._next_scan = now + 0.5  # a scan of /proc: not at every check
            if set(self.executor_pids()) - self.before:
                self.events["replacement executor JVM started"] = now
        if any(ex[e]["active"] for e in set(ex) - self.before) and "tasks moved to it" not in self.events:
            self.events["tasks moved to it"] = now
        return victim.instance not in ex


class SssOnTwoExecutors(_OnTwoExecutors):
    """Spark Structured Streaming's word count (bench/sss/wordcount.py, micro-batch) on
    local-cluster[2,1,1024]: its state (RocksDB state store provider) lives in the checkpoint, so
    either executor can run any state partition; the killed one is executor "0" (Spark spreads
    each batch's tasks over both, no executor owns a partition)."""

    label = "spark"

    def __init__(self, s: Settings, sc: Scenario, input_topic: str, output: str, app_id: str) -> None:
        self.app_id = app_id
        self.log = s.work_dir / f"{app_id}.log"
        argv = [*sss.command("sss", bootstrap=s.bootstrap, input_topic=input_topic, output=output,
                             state_dir=s.work_dir / "state" / app_id, expected=0, timeout_s=3600,
                             partitions=s.partitions, commit_interval_ms=s.commit_interval_ms, realtime_batch_ms=0),
                "--master", "local-cluster[2,1,1024]"]
        with self.log.open("w") as err:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                                         cwd=REPO, start_new_session=True)
        self.before: set[str] = set()
        self.events: dict[str, float] = {}
        self.killed_at = math.nan

    def ready(self) -> bool:
        return len(self.executor_pids()) == 2 and "query started" in self.log.read_text(errors="replace")

    def kill_busiest(self) -> Victim:
        pids = self.executor_pids()
        name = min(pids)
        self.before, self.killed_at = set(pids), time.time()
        os.kill(pids[name], signal.SIGKILL)
        return Victim(name, pids[name], [])

    def reassigned(self, victim: Victim) -> bool:
        """Not observable from outside (Spark reschedules the failed batch's tasks by itself);
        notes when the replacement executor JVM started."""
        if "replacement executor JVM started" not in self.events and set(self.executor_pids()) - self.before:
            self.events["replacement executor JVM started"] = time.time() - self.killed_at
        return False


def start_system(s: Settings, sc: Scenario, input_topic: str, output: str, app_id: str) -> System:
    if sc.system == "kstreams":
        return KafkaStreamsPair(s, sc, input_topic, output, app_id)
    if sc.system == "eddy":
        return EddyOnTwoExecutors(s, sc, input_topic, output, app_id)
    if sc.system == "sss":
        return SssOnTwoExecutors(s, sc, input_topic, output, app_id)
    raise ValueError(sc.system)


# -- measuring --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    bootstrap: str
    partitions: int
    rate: float
    within_s: float
    steady_s: float
    warmup_max_s: float
    duration_s: float
    commit_interval_ms: int
    kstreams_session_timeout_ms: int
    work_dir: Path


@dataclass
class Failover:
    scenario: str
    standbys: int
    records: int = 0
    warmup_s: float = math.nan
    #: the warm-up ended at --warmup-max-s without the probes meeting --within-s
    warmup_met: bool = False
    #: the longest probe latency in the --steady-s before the kill: records sent since were in flight
    in_flight_ms: float = math.nan
    steady_p50_ms: float = math.nan
    steady_p99_ms: float = math.nan
    killed: str = ""
    killed_active: int = 0
    reassigned_s: float = math.nan
    recovery_s: float = math.nan
    recovered: bool = False
    outage_max_ms: float = math.nan
    late_records: int = 0
    #: each run of late records (`late_episodes`): (start s after the kill, length s, records, max ms)
    late_episodes: list[tuple[float, float, int, float]] = field(default_factory=list)
    reprocessed: int = 0
    aborted_updates: int = 0
    visible_duplicates: int = 0
    notes: list[str] = field(default_factory=list)
    load: tuple[float, float, float] = (math.nan, math.nan, math.nan)
    wrong: list[str] = field(default_factory=list)
    error: str | None = None


def record_latencies(sent: Sequence[tuple[bytes, int]], seen: Sequence[tuple[bytes, int, float]]) -> list[float]:
    """Per input record, in send order: its latency in ms (nan if never counted), as in
    `throughput.input_latencies` (the k-th occurrence of a word is counted once its count >= k)."""
    occurrences: dict[bytes, list[int]] = {}
    for i, (word, _) in enumerate(sent):
        occurrences.setdefault(word, []).append(i)
    out = [math.nan] * len(sent)
    shown: dict[bytes, int] = {}
    for word, count, at in seen:
        idx = occurrences.get(word)
        if idx is None:
            continue
        before, upto = shown.get(word, 0), min(count, len(idx))
        for k in range(before, upto):
            out[idx[k]] = at - sent[idx[k]][1]
        shown[word] = max(before, upto)
    return out


def recovery(sent: Sequence[tuple[bytes, int]], lat: Sequence[float], kill_ms: float, within_ms: float,
             from_ms: float) -> tuple[float, bool, float, int]:
    """(recovery s, recovered, outage max ms, late records) over the records sent from `from_ms`
    on (those in flight at the kill, and later ones)."""
    first = next((i for i, (_, ts) in enumerate(sent) if ts >= from_ms), len(sent))
    late = [i for i in range(first, len(sent)) if not lat[i] <= within_ms]
    outage = max((x for x in lat[first:] if not math.isnan(x)), default=math.nan)
    if any(math.isnan(x) for x in lat[first:]):
        outage = math.inf
    if not late:
        return 0.0, True, outage, 0
    if late[-1] == len(sent) - 1:
        return math.nan, False, outage, len(late)
    return max(0.0, (sent[late[-1] + 1][1] - kill_ms) / 1000), True, outage, len(late)


def late_episodes(sent: Sequence[tuple[bytes, int]], lat: Sequence[float], kill_ms: float, within_ms: float,
                  from_ms: float, gap_ms: float = 1000.0) -> list[tuple[float, float, int, float]]:
    """The late records (over `within_ms`, sent from `from_ms` on) in runs: a record sent less
    than `gap_ms` after the previous late one continues its run. Per run: (its first record's
    send, s after the kill; from its first to its last record's send, s; late records; their
    largest latency, ms). What `recovery` alone does not show: whether the last late record
    belongs to the kill or to something later."""
    runs: list[list[float]] = []  # [first send, last send, records, max latency]
    for (_, ts), x in zip(sent, lat, strict=True):
        if ts < from_ms or x <= within_ms:
            continue
        x = math.inf if math.isnan(x) else x
        if runs and ts - runs[-1][1] < gap_ms:
            run = runs[-1]
            run[1], run[2], run[3] = ts, run[2] + 1, max(run[3], x)
        else:
            runs.append([ts, ts, 1, x])
    return [((a - kill_ms) / 1000, (b - a) / 1000, int(n), m) for a, b, n, m in runs]


def topic_totals(bootstrap: str, topic: str, isolation: str, counts: bool) -> tuple[int, int]:
    """(records, sum) of a topic read to its end; sum adds 8-byte big-endian values when `counts`
    (Eddy's partial counts), else counts each record as 1."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-totals-{uuid.uuid4().hex[:8]}",
                  "isolation.level": isolation, "enable.auto.commit": False, "enable.partition.eof": True})
    partitions = len(c.list_topics(topic, timeout=30).topics[topic].partitions)
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    records = total = 0
    at_end: set[int] = set()
    last = time.monotonic()
    deadline = time.monotonic() + 300
    try:
        while (len(at_end) < partitions or time.monotonic() - last < 1.0) and time.monotonic() < deadline:
            for m in c.consume(10_000, timeout=0.2):
                err, partition, value = m.error(), m.partition(), m.value()
                assert partition is not None
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_end.add(partition)
                        continue
                    raise RuntimeError(f"reading {topic}: {err}")
                at_end.discard(partition)
                last = time.monotonic()
                records += 1
                total += int.from_bytes(value or b"", "big", signed=True) if counts else 1
    finally:
        c.close()
    return records, total


def drained(bootstrap: str, group: str, topics: Sequence[str]) -> bool:
    """The group's committed offsets are at the end of `topics` (a transactional topic's last
    offset may be its commit marker, which is never consumed)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        for topic in topics:
            n = len(c.list_topics(topic, timeout=30).topics[topic].partitions)
            for tp_ in c.committed([TopicPartition(topic, p) for p in range(n)], timeout=30):
                _, high = c.get_watermark_offsets(tp_, timeout=30)
                if high > 0 and tp_.offset < high - (1 if topic.endswith("-repartition") else 0):
                    return False
        return True
    finally:
        c.close()


def output_settled(bootstrap: str, topic: str, probes_counted: int, probes_sent: int, quiet_s: float = 3.0) -> bool:
    """A system that commits no consumer-group offsets (Spark Structured Streaming keeps them in
    its checkpoint) is drained once every probe was counted and its output topic stopped growing
    for `quiet_s`."""
    from confluent_kafka import Consumer, TopicPartition

    if probes_counted < probes_sent:
        return False
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-settled-{uuid.uuid4().hex[:6]}"})
    try:
        parts = [TopicPartition(topic, p) for p in c.list_topics(topic, timeout=30).topics[topic].partitions]

        def ends() -> list[int]:
            return [c.get_watermark_offsets(tp_, timeout=10)[1] for tp_ in parts]

        before = ends()
        time.sleep(quiet_s)
        return ends() == before
    finally:
        c.close()


def repartition_topic(bootstrap: str, app_id: str) -> str | None:
    names = tp.admin_client(bootstrap).list_topics(timeout=30).topics
    found = sorted(t for t in names if t.startswith(app_id) and t.endswith("-repartition"))
    return found[0] if found else None


def run_scenario(s: Settings, sc: Scenario, words: Sequence[bytes]) -> Failover:
    from confluent_kafka import Producer

    result = Failover(sc.name, sc.standbys)
    tag = uuid.uuid4().hex[:6]
    input_topic = f"bench-fo-{sc.name}-in-{tag}"
    tp.create_topics(s.bootstrap, [input_topic], s.partitions)
    out = tp.output_topic(s.bootstrap, f"bench-fo-{sc.name}-out-{tag}", s.partitions)
    ctx = multiprocessing.get_context("spawn")
    warm, stop = ctx.Value("q", 0), ctx.Event()
    seen_path = s.work_dir / f"seen-{sc.name}-{tag}.pickle"
    observer = ctx.Process(target=tp.observe, args=(s.bootstrap, out, s.partitions, warm, stop, str(seen_path)),
                           daemon=True)
    observer.start()
    app_id = f"bench-fo-{sc.name}-{tag}"
    system = start_system(s, sc, input_topic, out, app_id)
    load_start = tp.loadavg()
    tp.say(f"{sc.name}: two instances starting (app {app_id}, log {system.log})")
    producer = Producer({"bootstrap.servers": s.bootstrap, "linger.ms": 1})
    sent: list[tuple[bytes, int]] = []
    probes: list[tuple[float, float]] = []  # (send ms, latency ms or nan)
    victim: Victim | None = None
    kill_ms = math.nan
    try:
        # Input starts once both instances hold tasks, so that no start-up backlog is measured.
        deadline = time.monotonic() + 600
        while not system.ready():
            if not system.alive() or time.monotonic() > deadline:
                raise RuntimeError("the two instances did not both hold active tasks within 600 s")
            time.sleep(0.2)
        tp.say(f"{sc.name}: both instances hold active tasks after {time.monotonic() - deadline + 600:.0f} s; "
               "producing")
        start = time.time()
        i = probes_counted = 0
        next_probe = start
        next_check = start
        while True:
            now = time.time()
            check = now >= next_check  # the instances' status, 20 times a second
            if check:
                next_check = now + 0.05
            if victim is None and check:
                if not system.alive():
                    raise RuntimeError("an instance exited during the warm-up")
                # Steady: the probes of `steady_s` seconds that should have been counted by now (sent
                # over `within_s` ago) were, each within `within_s`; younger ones are not late yet.
                window = [(t, x) for t, x in probes if t >= (now - s.steady_s - s.within_s) * 1000]
                steady = (now - start >= s.steady_s + s.within_s
                          and all(x <= s.within_s * 1000 if not math.isnan(x) else now * 1000 - t <= s.within_s * 1000
                                  for t, x in window))
                if steady or now - start > s.warmup_max_s:
                    result.warmup_s, result.warmup_met = now - start, steady
                    # Records sent this long before the kill may be in flight when it comes.
                    result.in_flight_ms = max((x for t, x in window if not math.isnan(x)), default=s.within_s * 1000)
                    kill_ms = time.time() * 1000
                    victim = system.kill_busiest()
                    result.killed, result.killed_active = victim.instance, len(victim.active)
                    result.load = (load_start, tp.loadavg(), math.nan)
                    tp.say(f"{sc.name}: {'steady' if steady else 'NOT steady (warm-up max reached)'} after "
                           f"{now - start:.0f} s; SIGKILL {victim.instance} (pid {victim.pid}, {len(victim.active)} "
                           f"active tasks)")
            elif victim is not None:
                if check and system.reassigned(victim) and math.isnan(result.reassigned_s):
                    result.reassigned_s = now - kill_ms / 1000
                if now * 1000 - kill_ms > s.duration_s * 1000:
                    break
            if i >= len(words):
                raise RuntimeError("ran out of words")  # the workload covers --warmup-max-s + --duration
            due = min(len(words), int((now - start) * s.rate) + 1)
            while i < due:
                now_ms = int(time.time() * 1000)
                word = words[i]
                if now >= next_probe:
                    word, next_probe = PROBE, next_probe + PROBE_INTERVAL_S
                    probes.append((now_ms, math.nan))
                producer.produce(input_topic, word, timestamp=now_ms)
                sent.append((word, now_ms))
                i += 1
            producer.poll(0)
            while probes_counted < min(warm.value, len(probes)):
                t = probes[probes_counted][0]
                probes[probes_counted] = (t, time.time() * 1000 - t)
                probes_counted += 1
            time.sleep(0.001)
        producer.flush(30)
        tp.say(f"{sc.name}: sent {len(sent)} records; waiting for the input to be drained")
        rep = repartition_topic(s.bootstrap, app_id)
        deadline = time.monotonic() + 180
        while not (output_settled(s.bootstrap, out, warm.value, len(probes)) if sc.system == "sss"
                   else drained(s.bootstrap, app_id, [input_topic, *([rep] if rep else [])])):
            if time.monotonic() > deadline or not system.alive():
                raise RuntimeError("the input was not drained within 180 s")
            time.sleep(1)
        time.sleep(2)  # the last count updates' transactions
        lines = system.stop()
        result.notes += [f"{n}: {json.dumps(x)}" for n, x in lines.items() if "error" in x or sc.system == "eddy"]
    except Exception as e:  # noqa: BLE001 - one system's failure is reported in its row
        result.error = str(e)
        tp.say(f"{sc.name}: failed: {e}")
        system.kill_all()
    except BaseException:  # Ctrl-C: no process of the run is left behind
        system.kill_all()
        raise
    finally:
        stop.set()
        observer.join(120)
    result.load = (result.load[0], result.load[1], tp.loadavg())
    if victim is not None:
        if victim.runner_pid is not None:
            result.notes.append(f"the killed executor's task runner (pid {victim.runner_pid}) exited "
                                + (f"{victim.runner_exit_s:.2f} s after the JVM" if not math.isnan(victim.runner_exit_s)
                                   else "NOT within 120 s"))
        elif sc.system == "eddy":
            result.notes.append("no task runner found for the killed executor")
        result.notes += system.notes()
    if result.error is not None:
        return result
    with seen_path.open("rb") as f:
        seen: list[tuple[bytes, int, float]] = pickle.load(f)
    lat = record_latencies(sent, seen)
    with (s.work_dir / f"latencies-{sc.name}-{tag}.pickle").open("wb") as f:  # kept with --keep
        pickle.dump({"sent": sent, "latency_ms": lat, "kill_ms": kill_ms}, f)
    result.records = len(sent)
    within_ms = s.within_s * 1000
    steady_end = kill_ms - result.in_flight_ms
    before = sorted(x for (_, ts), x in zip(sent, lat, strict=True)
                    if steady_end - s.steady_s * 1000 <= ts < steady_end and not math.isnan(x))
    result.steady_p50_ms, result.steady_p99_ms = tp.percentile(before, 0.5), tp.percentile(before, 0.99)
    result.recovery_s, result.recovered, result.outage_max_ms, result.late_records = recovery(
        sent, lat, kill_ms, within_ms, steady_end)
    result.late_episodes = late_episodes(sent, lat, kill_ms, within_ms, steady_end)
    expected: dict[bytes, int] = {}
    for w, _ in sent:
        expected[w] = expected.get(w, 0) + 1
    latest: dict[bytes, int] = {}
    repeats_allowed, _ = sss.allowed_reemissions(sc.system)
    for word, count, _ in seen:
        if count < latest.get(word, 0) or (count == latest.get(word, 0) and not repeats_allowed):
            result.visible_duplicates += 1
        elif count == latest.get(word, 0):
            result.reprocessed += 1  # at-least-once: a re-run batch wrote this count again
        latest[word] = count
    result.wrong = tp.count_errors(expected, latest)
    missing = sum(1 for x in lat if math.isnan(x))
    if missing:
        result.wrong.append(f"{missing} input records never seen counted")
    if result.visible_duplicates:
        result.wrong.append(f"{result.visible_duplicates} updates repeated or lowered a count")
    rep = repartition_topic(s.bootstrap, app_id)
    if sc.system == "sss":
        result.notes.append("re-processed: count updates written again by a re-run batch (at-least-once sink)")
    elif rep is None:
        result.notes.append("no repartition topic found: re-processing not measured")
    else:
        partial = sc.system == "eddy"
        _, everything = topic_totals(s.bootstrap, rep, "read_uncommitted", partial)
        _, committed = topic_totals(s.bootstrap, rep, "read_committed", partial)
        result.reprocessed = everything - committed
        if committed != len(sent):
            result.wrong.append(f"the repartition topic's committed records count {committed} input records, "
                                f"not {len(sent)}")
    all_out, _ = topic_totals(s.bootstrap, out, "read_uncommitted", False)
    committed_out, _ = topic_totals(s.bootstrap, out, "read_committed", False)
    result.aborted_updates = all_out - committed_out
    tp.say(f"{sc.name}: steady p50/p99 {result.steady_p50_ms:.0f}/{result.steady_p99_ms:.0f} ms; recovery "
           f"{result.recovery_s:.1f} s, outage max {result.outage_max_ms:.0f} ms, {result.reprocessed} re-processed, "
           "counts " + ("exact" if not result.wrong else f"WRONG {result.wrong[:3]}"))
    return result


# -- Eddy's program (a child process of this script) ---------------------------------------------------------------


def eddy_program(argv: Sequence[str]) -> int:
    """Run Eddy's word count on local-cluster[2,1,1024] until stdin closes; print a line per batch,
    write the assignment (executor -> active and standby tasks) to --status-file as soon as the
    driver takes it; at the end print one JSON line (batches per outcome, executors lost,
    records applied from changelogs by restores and standby tails)."""
    ap = argparse.ArgumentParser(prog="failover.py _eddy")
    for name in ("--bootstrap", "--input", "--output", "--app-id", "--state-dir", "--status-file"):
        ap.add_argument(name, required=True)
    ap.add_argument("--standbys", type=int, default=1)
    ap.add_argument("--trigger-ms", type=int, default=100)
    ap.add_argument("--channel-dir", help="take the assignment from DIR/assignment.json, as from the operator's "
                    "ConfigMap, and publish the runtime state to DIR/runtime-state.json (bench/handover.py); "
                    "without it the driver runs the assignor itself")
    args = ap.parse_args(argv)

    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sys.path.insert(0, str(REPO))
    from eddy_contract.spec import StreamAppSpec
    from eddy_runtime.driver.channel_io import ChannelLocation
    from eddy_runtime.driver.loop import Driver
    from eddy_runtime.driver.options import DriverOptions
    from eddy_runtime.driver.outcomes import BatchReport
    from eddy_runtime.local.run import QUIET_LOG4J, local_spark_session
    from eddy_runtime.protocol.placement import wait_for_executors

    state_dir = Path(args.state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / "log4j2.properties").write_text(QUIET_LOG4J)
    spark = local_spark_session(2, args.app_id, [str(REPO)], state_dir / "log4j2.properties")
    spark.sparkContext.setLogLevel("ERROR")
    outcomes: dict[str, int] = {}
    restored: dict[str, int] = {}
    lost: list[str] = []
    status = Path(args.status_file)
    try:
        wait_for_executors(spark.sparkContext, 2, timeout=180)
        spec = StreamAppSpec.from_manifest({
            "apiVersion": "eddy.dev/v1alpha1", "kind": "StreamApp", "metadata": {"name": args.app_id},
            "spec": {
                "image": "eddy:bench",
                "pipeline": {"module": "examples.wordcount.app", "function": "build_words",
                             "args": {"input_topic": args.input, "output_topic": args.output}},
                "kafka": {"bootstrapServers": args.bootstrap},
                "processingGuarantee": "exactly_once",
                "triggerInterval": f"{args.trigger_ms}ms",
                "executors": {"replicas": 2, "cores": 1},
                "state": {"standbyReplicas": args.standbys},
            },
        })
        channel = Path(args.channel_dir) if args.channel_dir else None
        driver = Driver(spark, spec, DriverOptions(
            state_dir=str(state_dir / "stores"), per_executor_state_dirs=True,
            assignment_source=ChannelLocation(path=str(channel / "assignment.json")) if channel else None,
            runtime_state_target=ChannelLocation(path=str(channel / "runtime-state.json")) if channel else None))
        driver.prepare()

        def on_batch(report: BatchReport) -> None:
            print(f"eddy: batch {report.batch_id} {report.outcome} in {report.duration_s:.2f} s (plan "
                  f"{report.plan_s:.2f} s), generation {report.generation}: {report.records_in} in, "
                  f"{report.records_out} out, lag {sum(driver.last_lag.values())}", file=sys.stderr, flush=True)
            outcomes[report.outcome] = outcomes.get(report.outcome, 0) + 1
            lost.extend(report.lost_executors)
            for r in report.results:
                if r.figures is not None and r.figures.stores:
                    restored[f"{r.task}@{r.executor}"] = sum(x.restored_records for x in r.figures.stores)

        def publish_assignment() -> None:
            """As soon as the driver takes a new assignment (before its batch runs), or pushes one
            to the runners (an executor died mid-batch): the status."""
            generation = -1
            while True:
                a = max((x for x in (driver.assignment, driver.pushed) if x is not None),
                        key=lambda x: x.generation, default=None)
                if a is not None and a.generation != generation:
                    generation = a.generation
                    executors = {e: {"active": list(a.active_tasks(e)), "standby": list(a.standby_tasks(e))}
                                 for e in a.executors()}
                    tmp = status.with_suffix(".tmp")
                    tmp.write_text(json.dumps({"generation": generation, "executors": executors}))
                    tmp.replace(status)
                time.sleep(0.02)

        def stop_on_eof() -> None:
            sys.stdin.read()
            driver.request_stop()

        threading.Thread(target=publish_assignment, daemon=True).start()
        threading.Thread(target=stop_on_eof, daemon=True).start()
        driver.run(on_batch=on_batch)
    finally:
        spark.stop()
    # Per task copy, what it applied from changelogs since it opened: restores and standby tails.
    print(json.dumps({"batches": outcomes, "executors_lost": lost,
                      "changelog_records_applied": sum(restored.values())}), flush=True)
    return 0


# -- report --------------------------------------------------------------------------------------------------------


def report(results: Sequence[Failover], args: argparse.Namespace) -> str:
    w = args.within_s
    rows = [("", "standbys", "steady p50/p99 ms", "killed (active)", "reassigned s", f"recovery s (<= {w:g} s)",
             "outage max ms", "late", "re-processed", "aborted updates", "counts")]
    for r in results:
        rows.append((
            r.scenario, str(r.standbys),
            f"{tp.fmt(r.steady_p50_ms)}/{tp.fmt(r.steady_p99_ms)}",
            f"{r.killed} ({r.killed_active})" if r.killed else "-",
            tp.fmt(r.reassigned_s, ".1f"),
            tp.fmt(r.recovery_s, ".1f") if r.recovered else f"> {args.duration:g}",
            tp.fmt(r.outage_max_ms),
            str(r.late_records),
            str(r.reprocessed),
            str(r.aborted_updates),
            "FAILED" if r.error else ("exact" if not r.wrong else "WRONG"),
        ))
    widths = [max(len(x[i]) for x in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.rjust(n) if i else c.ljust(n) for i, (c, n) in enumerate(zip(row, widths, strict=True)))
             for row in rows]
    by = {r.scenario: r for r in results if r.error is None}
    for name in ("kstreams", "sss"):
        peer = by.get(name)
        for r in results:
            if r.scenario.startswith("eddy") and peer and r.scenario in by and peer.recovered and r.recovered:
                ratio = (f"{r.recovery_s / peer.recovery_s:.2f}x" if peer.recovery_s > 0 else "-")
                lines.append(f"{r.scenario} / {name}: recovery {ratio}, outage max "
                             f"{r.outage_max_ms / peer.outage_max_ms:.2f}x, steady p99 "
                             f"{r.steady_p99_ms / peer.steady_p99_ms:.2f}x")
    for r in results:
        if not r.warmup_met and r.killed:
            lines.append(f"{r.scenario}: the warm-up never had every probe within {w:g} s for {args.steady_s:g} s; "
                         f"killed after {r.warmup_s:.0f} s anyway")
        if r.late_episodes:
            shown = ", ".join(f"{a:+.1f} s ({d:.1f} s, {n}, max {tp.fmt(m)} ms)" for a, d, n, m in r.late_episodes[:8])
            more = f" and {len(r.late_episodes) - 8} more" if len(r.late_episodes) > 8 else ""
            lines.append(f"{r.scenario}: late records in runs (start after the kill (length, records, max)): "
                         f"{shown}{more}")
        for n in r.notes:
            lines.append(f"{r.scenario}: {n}")
        if r.error:
            lines.append(f"{r.scenario}: FAILED: {r.error}")
        if r.wrong:
            lines.append(f"{r.scenario}: wrong: {r.wrong[:5]}")
    lines.append("load average (1 min) at start -> kill -> end: "
                 + ", ".join(f"{r.scenario} {r.load[0]:.1f}->{r.load[1]:.1f}->{r.load[2]:.1f}" for r in results))
    lines.append(f"{args.rate:g} records/s over {args.distinct} distinct words (Zipf {args.zipf}), {args.partitions} "
                 f"partitions, exactly-once (sss: at-least-once sink), commit interval / trigger "
                 f"{args.commit_interval_ms} ms, "
                 f"{args.duration:g} s after the kill; Kafka Streams session.timeout.ms "
                 f"{args.kstreams_session_timeout_ms}; "
                 f"{os.cpu_count()} CPUs on this machine")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_eddy"]:
        return eddy_program(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", help="an existing broker; default: start one with infra/kafka/kafka.sh")
    ap.add_argument("--systems", default=",".join(s.name for s in SCENARIOS),
                    help="comma-separated subset of " + ",".join(s.name for s in SCENARIOS))
    ap.add_argument("--rate", type=float, default=2000, help="input records/s, all through the run")
    ap.add_argument("--within-s", type=float, default=1.0, help="the latency a recovered system is back under")
    ap.add_argument("--steady-s", type=float, default=10, help="seconds of probes within --within-s before the kill")
    ap.add_argument("--warmup-max-s", type=float, default=60, help="kill after this long even if not steady")
    ap.add_argument("--duration", type=float, default=90, help="seconds of input after the kill")
    ap.add_argument("--distinct", type=int, default=50_000, help="distinct words")
    ap.add_argument("--zipf", type=float, default=1.0, help="Zipf exponent of the word frequencies")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--commit-interval-ms", type=int, default=100,
                    help="Kafka Streams' commit.interval.ms, Eddy's triggerInterval")
    ap.add_argument("--kstreams-session-timeout-ms", type=int, default=45_000,
                    help="how long Kafka's group coordinator waits for a silent member (Kafka's default 45000)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (logs, state)")
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.systems.split(",") if n.strip()]
    known = {s.name: s for s in SCENARIOS}
    if set(names) - set(known):
        ap.error(f"unknown systems: {', '.join(sorted(set(names) - set(known)))}")

    tp.say(f"machine: {os.cpu_count()} CPUs, load average {tp.loadavg():.2f}")
    if any(known[n].system == "kstreams" for n in names):
        subprocess.run([str(tp.KSTREAMS_SH), "build"], check=True, stdout=subprocess.DEVNULL)
    if any(known[n].system == "sss" for n in names):
        subprocess.run([str(sss.CONNECTOR_SH), "fetch"], check=True, stdout=subprocess.DEVNULL)
    total = int(args.rate * (args.warmup_max_s + args.duration + 10))
    words = tp.zipf_words(total, args.distinct, args.zipf, args.seed).words
    tp.CACHE.mkdir(parents=True, exist_ok=True)
    work_dir = Path(tempfile.mkdtemp(prefix="failover-", dir=tp.CACHE))
    results: list[Failover] = []
    with tp.broker(args.bootstrap) as bootstrap:
        settings = Settings(bootstrap, args.partitions, args.rate, args.within_s, args.steady_s, args.warmup_max_s,
                            args.duration, args.commit_interval_ms, args.kstreams_session_timeout_ms, work_dir)
        for n in names:
            results.append(run_scenario(settings, known[n], words))
    print(report(results, args), flush=True)
    tp.say(f"load average after the runs: {tp.loadavg():.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(tp._json_safe({
            "failover": {r.scenario: vars(r) for r in results}, "settings": vars(args)}), indent=2, default=str))
    failed = [r.scenario for r in results if r.error or r.wrong]
    if args.keep or failed:
        tp.say(f"logs and state kept in {work_dir}")
    else:
        subprocess.run(["rm", "-rf", str(work_dir)])
    if failed:
        tp.say(f"FAILED or wrong counts: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
