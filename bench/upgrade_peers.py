"""The peers of bench/upgrade.py: how Kafka Streams and Spark Structured Streaming take a new version.

- `KafkaStreamsBounce`: two Kafka Streams JVMs (``bench/kstreams/run.sh wordcount``, one stream
  thread each, ``num.standby.replicas=1``, exactly_once_v2, a state dir and an
  ``application.server`` each, static members) bounced one after the other onto the new version
  (``--version 2``), keeping their state dirs;
- `SssRestart`: Spark Structured Streaming's word count (``bench/sss/wordcount.py``, micro-batch,
  RocksDB state store provider) stopped with ``query.stop()`` and started again from its
  checkpoint as the new version (``--version 2``).

Both follow `upgrade.Subject`; their settings and the reasons for them are in bench/README.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import failover as fo
import throughput as tp
from sss import peer as sss
from upgrade import Marks, Settings

REPO = tp.REPO
INSTANCES = ("a", "b")


def wait_for(check: Any, timeout_s: float, what: str, alive: Any = lambda: True) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout_s:g} s")
        if not alive():
            raise RuntimeError(f"{what}: a process exited")
        time.sleep(0.02)


def json_line(out: str, returncode: int | None) -> dict[str, Any]:
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    return dict(json.loads(lines[-1])) if lines else {"error": f"exit code {returncode}"}


class KafkaStreamsBounce:
    """A rolling bounce: close instance a (cleanly), start it as the new version on the same state
    dir, wait until it is RUNNING and its stores are within ``--kstreams-caught-up-lag`` of their
    changelogs, then the same for b. The new version holds every task once both new instances
    are RUNNING and hold every active task between them."""

    system = "kstreams"
    case = "rolling bounce, static members stay"
    repeats_allowed = False
    #: close without leaving the group: the static member keeps its tasks over its restart
    leave_group = False
    #: more ``key=value`` settings for every instance (they win over the ones above; bench/autoscale.py)
    extra_config: tuple[str, ...] = ()

    def __init__(self, s: Settings, input_topic: str, output: str, app_id: str) -> None:
        self.s, self.input, self.output, self.app_id = s, input_topic, output, app_id
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self.version: dict[str, int] = {}
        self.results: dict[str, dict[str, Any]] = {}
        self.log = s.work_dir / f"{app_id}-a-v1.log"
        self.ports = {name: tp.free_port() for name in INSTANCES}

    def status_file(self, name: str) -> Path:
        return self.s.work_dir / f"{self.app_id}-{name}.status"

    def status(self, name: str) -> dict[str, Any]:
        return fo.read_status(self.status_file(name))

    def _start(self, name: str, version: int) -> None:
        s = self.s
        self.status_file(name).unlink(missing_ok=True)
        argv = [str(tp.KSTREAMS_SH), "wordcount", "--bootstrap", s.bootstrap, "--input", self.input,
                "--output", self.output, "--app-id", self.app_id, "--expected-records", "0", "--threads", "1",
                "--instance", name, "--status-file", str(self.status_file(name)),
                "--state-dir", str(s.work_dir / "state" / f"{self.app_id}-{name}"), "--timeout-s", "7200",
                "--version", str(version), "--keep-state", "true",
                "--leave-group", "true" if self.leave_group else "false",
                "--config", f"commit.interval.ms={s.commit_interval_ms}",
                "--config", "num.standby.replicas=1",
                "--config", f"session.timeout.ms={s.kstreams_session_timeout_ms}",
                # Distinct per instance, as a deployment with interactive queries sets it; nothing listens.
                "--config", f"application.server=127.0.0.1:{self.ports[name]}",
                *(arg for kv in self.extra_config for arg in ("--config", kv))]
        log = s.work_dir / f"{self.app_id}-{name}-v{version}.log"
        with log.open("w") as err:
            self.procs[name] = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                                text=True, cwd=REPO, start_new_session=True)
        self.version[name] = version

    def _close(self, name: str) -> dict[str, Any]:
        """Close stdin: the program closes Kafka Streams cleanly (checkpoints written) and exits."""
        p = self.procs[name]
        try:
            out, _ = p.communicate(input="", timeout=120)
        except subprocess.TimeoutExpired:
            self._kill(p)
            out = ""
        return json_line(out, p.returncode)

    def start(self) -> None:
        for name in INSTANCES:
            self._start(name, 1)

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs.values())

    def _running(self, name: str, version: int) -> bool:
        st = self.status(name)
        return st.get("version") == version and st.get("state") == "RUNNING"

    def _all_tasks_held(self, version: int) -> bool:
        st = [self.status(n) for n in INSTANCES]
        return (all(x.get("version") == version and x.get("state") == "RUNNING" for x in st)
                and sum(len(x.get("active", [])) for x in st) >= 2 * self.s.partitions)

    def ready(self) -> bool:
        st = [self.status(n) for n in INSTANCES]
        return (self._all_tasks_held(1) and all(x.get("active") for x in st) and any(x.get("standby") for x in st)
                and all(0 <= x.get("lag", -1) <= self.s.kstreams_caught_up_lag for x in st))

    def prepare(self) -> None:
        pass

    def change(self, marks: Marks) -> None:
        restored = 0
        rebalances = 0
        marks.start()
        for name in INSTANCES:
            before = self.status(name)
            line = self._close(name)
            after = self.status(name)  # its last status, written before the close
            restored += int(after.get("restored", 0)) - int(before.get("restored", 0))
            rebalances += int(after.get("rebalances", 0)) - int(before.get("rebalances", 0))
            if "error" in line:
                marks.notes.append(f"{name} v1: {json.dumps(line)}")
            marks.step(f"{name} v1 closed")
            self._start(name, 2)
            wait_for(lambda n=name: self._running(n, 2), self.s.change_timeout_s, f"{name} v2 RUNNING", self.alive)
            marks.step(f"{name} v2 RUNNING")
            if name == INSTANCES[-1]:
                wait_for(lambda: self._all_tasks_held(2), self.s.change_timeout_s, "v2 holds every task",
                         self.alive)
                marks.done()
                marks.step("v2 holds every task")
            wait_for(lambda n=name: 0 <= self.status(n).get("lag", -1) <= self.s.kstreams_caught_up_lag,
                     self.s.change_timeout_s, f"{name} v2 caught up", self.alive)
            marks.step(f"{name} v2 caught up")
        st = {n: self.status(n) for n in INSTANCES}
        restored += sum(int(x.get("restored", 0)) for x in st.values())
        rebalances += sum(int(x.get("rebalances", 0)) for x in st.values())
        marks.restored = restored
        marks.restored_label = ("records restored into active tasks during the bounce, by both versions "
                                "(Kafka Streams' restore listener, onBatchRestored)")
        # Each new instance enters REBALANCING once as it first joins: not a rebalance of the others.
        marks.notes.append(f"rebalances during the bounce (REBALANCING entered by an instance already in the "
                           f"group, summed over instances and versions): {rebalances - len(INSTANCES)}; standby "
                           f"records applied by v2: {sum(int(x.get('standby_applied', 0)) for x in st.values())}")

    def stop(self) -> dict[str, Any]:
        return {f"{n} v{self.version[n]}": self._close(n) for n in INSTANCES if self.procs[n].poll() is None}

    @staticmethod
    def _kill(p: subprocess.Popen[str]) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(30)

    def kill_all(self) -> None:
        for p in self.procs.values():
            self._kill(p)


class KafkaStreamsBounceLeaving(KafkaStreamsBounce):
    """The same bounce, each instance leaving the group as it closes: a rebalance hands its active
    tasks to the other instance, which holds them as standbys (warm), and the restarted instance
    gets tasks back in the rebalance its return starts (its stores, from its kept state dir, are
    within ``acceptable.recovery.lag`` of their changelogs)."""

    case = "rolling bounce, leaving the group"
    leave_group = True


class SssRestart:
    """The query stopped (``query.stop()``, the process then exits) and started again from its
    checkpoint as the new version. ``--sss-restart warm``: the new version's process is started
    before the change and waits with its Spark session up (`prepare`), so the change is: stop the
    old query, start the new one; ``cold``: the new process starts once the old one exited. The
    new version holds every task once its first batch completed (it loaded every state partition
    from the checkpoint)."""

    system = "sss"
    case = "query restarted from its checkpoint as a new version"
    #: Spark's Kafka sink is at-least-once: a batch stopped after it wrote and before it committed is run again
    repeats_allowed = True
    #: two task slots, as the two Kafka Streams instances have one stream thread each
    MASTER = "local[2]"

    def __init__(self, s: Settings, input_topic: str, output: str, app_id: str) -> None:
        self.s, self.input, self.output, self.app_id = s, input_topic, output, app_id
        self.state_dir = s.work_dir / "state" / app_id
        self.go_file = s.work_dir / f"{app_id}.go"
        self.procs: dict[int, subprocess.Popen[str]] = {}
        self.log = s.work_dir / f"{app_id}-v1.log"
        self.closed_line: dict[str, Any] = {}

    def status_file(self, version: int) -> Path:
        return self.s.work_dir / f"{self.app_id}-v{version}.status"

    def status(self, version: int) -> dict[str, Any]:
        return fo.read_status(self.status_file(version))

    def _start(self, version: int, go_file: Path | None) -> None:
        s = self.s
        argv = [*sss.command("sss", bootstrap=s.bootstrap, input_topic=self.input, output=self.output,
                             state_dir=self.state_dir, expected=0, timeout_s=7200, partitions=s.partitions,
                             commit_interval_ms=s.commit_interval_ms, realtime_batch_ms=0),
                "--master", self.MASTER, "--version", str(version), "--status-file", str(self.status_file(version))]
        if go_file is not None:
            argv += ["--go-file", str(go_file)]
        with (s.work_dir / f"{self.app_id}-v{version}.log").open("w") as err:
            self.procs[version] = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                                   text=True, cwd=REPO, start_new_session=True)

    def start(self) -> None:
        self._start(1, None)

    def alive(self) -> bool:
        return all(p.poll() is None for v, p in self.procs.items() if v == max(self.procs))

    def ready(self) -> bool:
        st = self.status(1)
        return st.get("phase") == "query" and st.get("batches", 0) >= 1

    def prepare(self) -> None:
        if self.s.sss_restart == "warm":
            self._start(2, self.go_file)
            wait_for(lambda: self.status(2).get("phase") == "ready", 300, "sss v2's session ready",
                     lambda: self.procs[2].poll() is None)

    def change(self, marks: Marks) -> None:
        marks.start()
        old = self.procs[1]
        if old.stdin is not None:
            old.stdin.close()  # the program stops its query, then Spark
        wait_for(lambda: self.status(1).get("phase") == "stopped" or old.poll() is not None, 120,
                 "sss v1's query stopped")
        marks.step("v1 query stopped")
        if self.s.sss_restart == "warm":
            self.go_file.touch()
            marks.step("v2 told to start its query")
        else:
            old.wait(120)
            marks.step("v1 process exited")
            self._start(2, None)
        wait_for(lambda: self.status(2).get("phase") == "query", self.s.change_timeout_s, "sss v2's query started",
                 lambda: self.procs[2].poll() is None)
        marks.step("v2 query started")
        wait_for(lambda: self.status(2).get("batches", 0) >= 1, self.s.change_timeout_s, "sss v2's first batch",
                 lambda: self.procs[2].poll() is None)
        marks.done()
        marks.step("v2 first batch done")
        first = self.status(2).get("first_batch") or {}
        ops = first.get("stateOperators") or [{}]
        marks.restored = int(ops[0].get("numRowsTotal", 0))
        marks.restored_label = ("state rows the restarted query's first batch held (Spark's numRowsTotal: the "
                                "rows loaded from the checkpoint plus the keys that batch added; an upper bound)")
        custom = ops[0].get("customMetrics", {})
        loaded = {k: v for k, v in custom.items() if any(w in k for w in ("Copied", "Load", "Replay"))}
        marks.notes.append(f"v2's first batch (batch {first.get('batchId')}): {first.get('numInputRows')} input rows, "
                           f"{first.get('durationMs', {}).get('triggerExecution')} ms, {ops[0].get('numRowsUpdated')} "
                           f"rows updated; load metrics {json.dumps(loaded)}")
        out = old.stdout.read() if old.stdout else ""
        old.wait(120)
        self.closed_line = json_line(out, old.returncode)

    def stop(self) -> dict[str, Any]:
        lines = {"v1": self.closed_line} if self.closed_line else {}
        for v, p in self.procs.items():
            if p.poll() is None:
                try:
                    out, _ = p.communicate(input="", timeout=240)
                except subprocess.TimeoutExpired:
                    self.kill_all()
                    out = ""
                lines[f"v{v}"] = json_line(out, p.returncode)
        return lines

    def kill_all(self) -> None:
        for p in self.procs.values():
            KafkaStreamsBounce._kill(p)
