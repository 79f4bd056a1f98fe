"""The operator and the runtime joined: a word-count StreamApp run end to end.

Everything is real except what cannot run on this machine: the operator (kopf's KopfRunner)
against a real kube-apiserver, the real driver (`python -m eddy_runtime.driver`, the command the
operator's driver pod runs) on Spark ``local-cluster[2,1,1024]`` with a real Kafka broker and
RocksDB stores. There is no kubelet or image, so the executor pods are kwok pods in the
StatefulSet Spark's allocator would create, labelled with the ids of the local-cluster executor
JVMs they stand for (pod ``-0`` is executor 0, pod ``-1`` executor 1). Losing an executor is
both halves of what a node loss does: its pod is deleted (the operator's signal) and its JVM is
SIGKILLed (the driver's).

The two halves meet only through their ConfigMaps (`eddy_operator.channel`): the driver
publishes its tasks and volumes in ``<app>-runtime-state``, the operator publishes
``<app>-assignment``, the driver follows it and reports the generation it runs.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest
import yaml

from eddy_operator import builders, channel
from eddy_operator.assignor import diff
from tests.operator.cluster import (
    FakeSparkDriver,
    apply,
    create_executor_statefulset,
    example,
    get,
    get_or_none,
    report,
    running_operator,
    wait_for,
)
from tests.runtime.apps import latest_counts, produce
from tests.servers import REPO, ControlPlane, KafkaBroker, free_port, spark_env

pytestmark = pytest.mark.e2e

APP = "wordcount"
PARTITIONS = 4
#: ~500 keys per counts task, so a copy on an empty volume is far more than RECOVERY_LAG behind
WORDS = [f"w{i:04d}" for i in range(2000)]
#: spec.state.acceptableRecoveryLag: a promoted standby may restore at most this much, and an
#: active moves only to a copy this close to its changelog's end
RECOVERY_LAG = 100
EXECUTOR_BACKEND = b"org.apache.spark.executor.CoarseGrainedExecutorBackend"
WAITING = "waiting for the operator's first assignment"

T = TypeVar("T")


def lines(n: int, seed: int) -> list[str]:
    rnd = random.Random(seed)
    return [" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(1, 10))) for _ in range(n)]


def word_counts(fed: list[str]) -> Counter[str]:
    return Counter(w for line in fed for w in line.split())


# --- the driver process ------------------------------------------------------------------------


class DriverProcess:
    """`python -m eddy_runtime.driver` as the operator's driver pod runs it, minus the pod:
    the channel ConfigMaps from the same environment variables, Spark on a local-cluster."""

    def __init__(self, kube: ControlPlane, namespace: str, streamapp: Path, work: Path) -> None:
        self.state_dir = work / "state"
        self.log_path = work / "driver.log"
        self.metrics_port = free_port()
        env = {
            **os.environ,
            **spark_env(),
            "KUBECONFIG": str(kube.kubeconfig),
            "EDDY_APP": APP,
            "EDDY_NAMESPACE": namespace,
            "EDDY_ASSIGNMENT_CONFIGMAP": channel.assignment_configmap_name(APP),
            "EDDY_RUNTIME_STATE_CONFIGMAP": channel.runtime_state_configmap_name(APP),
            "PYTHONUNBUFFERED": "1",
        }
        args = [
            sys.executable, "-m", "eddy_runtime.driver",
            "--streamapp", str(streamapp),
            "--master", "local-cluster[2,1,1024]",
            "--state-dir", str(self.state_dir),
            # the two executor JVMs share this disk: one state folder each, as one volume each
            "--per-executor-state-dirs",
            "--metrics-port", str(self.metrics_port),
        ]
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        # Its own process group: the executor JVMs are its descendants and go with it.
        self.proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def log_tail(self, n: int = 60) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def check_running(self) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(f"the driver exited with {self.proc.returncode}:\n{self.log_tail()}")

    def executor_jvm_pid(self, executor_id: str) -> int:
        """The pid of this driver's executor JVM `executor_id`: Spark's executor backend below the
        driver whose command line says `--executor-id <id>` (other Spark apps may run on this
        machine, and each executor's task runner process carries the same argument)."""
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                args = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if (EXECUTOR_BACKEND in args and b"--executor-id" in args
                    and args[args.index(b"--executor-id") + 1].decode() == executor_id
                    and self._descends(int(entry))):
                return int(entry)
        raise AssertionError(f"no executor JVM {executor_id} below the driver (pid {self.proc.pid})")

    def _descends(self, pid: int) -> bool:
        while pid > 1:
            if pid == self.proc.pid:
                return True
            try:
                pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                return False
        return False

    def runner_log(self, executor_id: str) -> Path:
        """The task runner's log on executor `executor_id` (runner.py writes it beside the stores)."""
        return self.state_dir / f"executor-{executor_id}" / "eddy-runner.log"

    def metric(self, name: str) -> float | None:
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).read().decode()
        for line in text.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
        return None

    def stop(self) -> None:
        """SIGTERM (the pod's stop): the running batch finishes and the stores close."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(90)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)
        self._log.close()


# --- the channel, as seen from outside ------------------------------------------------------------


@dataclass
class Channel:
    """Both channel ConfigMaps as the two halves see them, watched so that a document that lived
    for one batch is not missed: every runtime state the driver published and every assignment
    generation the operator published, in order."""

    kube: ControlPlane
    namespace: str
    states: list[channel.RuntimeState] = field(default_factory=list)
    assignments: list[channel.AssignmentMessage] = field(default_factory=list)

    def __post_init__(self) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(self.kube.api_client())
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="channel-watch", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        from kubernetes import watch

        selector = f"{builders.APP_LABEL}={APP},{channel.LABEL_CHANNEL}"
        version = None
        while not self._stop.is_set():
            w = watch.Watch()
            try:
                for event in w.stream(self.core.list_namespaced_config_map, self.namespace, label_selector=selector,
                                      resource_version=version, timeout_seconds=5):
                    cm = event["object"]
                    version = cm.metadata.resource_version
                    self._record(cm.data or {})
                    if self._stop.is_set():
                        break
            except Exception:  # noqa: BLE001 - an expired resourceVersion: list again
                version = None
                time.sleep(0.2)
            finally:
                w.stop()

    def _record(self, data: dict[str, str]) -> None:
        if channel.RUNTIME_STATE_KEY in data:
            self.states.append(channel.decode_runtime_state(data))
        if channel.ASSIGNMENT_KEY in data:
            message = channel.decode_assignment(data)
            if not self.assignments or message.assignment.generation != self.assignments[-1].assignment.generation:
                self.assignments.append(message)

    def assignment(self) -> channel.AssignmentMessage | None:
        return self.assignments[-1] if self.assignments else None

    def runtime_state(self) -> channel.RuntimeState | None:
        return self.states[-1] if self.states else None

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def describe(self) -> str:
        """The newest documents of both sides, for a failure message."""
        state, message = self.runtime_state(), self.assignment()
        lines = [f"{len(self.states)} runtime states seen"]
        if message is not None:
            lines.append(f"assignment generation {message.assignment.generation} ({message.reason}): "
                         + ", ".join(f"{t}={a.active}/{','.join(a.standbys)}"
                                     for t, a in sorted(message.assignment.tasks.items())))
        if state is not None:
            lines.append(f"runtime state batch {state.batch_id} generation {state.assignment_generation} "
                         f"at {state.updated_at}: ends {dict(state.end_offsets())}, lag {dict(state.input_lag)}, "
                         f"restores {state.restores}")
            lines += [f"  executor {e}: {dict(inv.task_offsets())}" for e, inv in state.executors.items()]
        return "\n".join(lines)

    def save(self, folder: Path) -> None:
        """Both histories, one JSON document a line, kept with the test's files."""
        (folder / "runtime-states.jsonl").write_text(
            "".join(channel.encode_runtime_state(s)[channel.RUNTIME_STATE_KEY] + "\n" for s in self.states))
        (folder / "assignments.jsonl").write_text(
            "".join(channel.encode_assignment(m)[channel.ASSIGNMENT_KEY] + "\n" for m in self.assignments))



def stateful_tasks(state: channel.RuntimeState) -> list[str]:
    """Tasks with stores (sub-topology 1, the counts); the splitting tasks have none."""
    return sorted(t for t, stores in state.changelog_end_offsets.items() if stores)


def caught_up(state: channel.RuntimeState, message: channel.AssignmentMessage) -> bool:
    """Every copy the assignment names holds its task's whole changelog (per the volumes)."""
    for task in stateful_tasks(state):
        end = sum(state.changelog_end_offsets[task].values())
        for e in message.assignment.tasks[task].copies:
            held = state.executors.get(e)
            # Under exactly-once the end is past the last commit marker: one offset per store.
            stores = (held.stores.get(task) or {}) if held is not None else {}
            if sum(stores.values()) < end - len(state.changelog_end_offsets[task]):
                return False
    return True


def processed_all(ch: Channel, after_batch: int) -> channel.RuntimeState | None:
    """A runtime state from a batch after `after_batch` that found no input left to process
    (lag is measured at the batch's start, so everything produced before is committed)."""
    state = ch.runtime_state()
    if state is None or state.batch_id is None or state.batch_id <= after_batch + 1:
        return None
    return state if state.input_lag and not any(state.input_lag.values()) and not state.restores else None


def batch_id(ch: Channel) -> int:
    state = ch.runtime_state()
    return (state.batch_id or 0) if state is not None else 0


def until(driver: DriverProcess, check: Callable[[], T | None], timeout: float, what: str,
          interval: float = 0.5) -> T:
    """`check()` until it returns something truthy. Fails at once when the driver exited or
    `check` failed an assertion; any other error counts as "not yet"."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        driver.check_running()
        try:
            result = check()
        except AssertionError:
            raise
        except Exception as err:  # noqa: BLE001 - e.g. a document not published yet
            result, last = None, err
        if result:
            return result
        if time.monotonic() > deadline:
            detail = f" (last: {last!r})" if last is not None else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{detail}")
        time.sleep(interval)


RESTORE_LINE = re.compile(r"task (\S+): store (\S+) restores from \S+ offset (\d+) to (\d+)")


# --- the test ----------------------------------------------------------------------------------


def apply_word_count(kube: ControlPlane, kafka: KafkaBroker, namespace: str) -> dict[str, str]:
    """Apply the example StreamApp with the test broker, 2 executors and 1 standby, after creating
    its input topic (the driver refuses to start without it). Returns the topics."""
    app_id = kafka.unique_name("e2e-wc")
    source = kafka.create_topic(f"{app_id}-lines", partitions=PARTITIONS)
    body = example(
        namespace,
        applicationId=app_id,
        pipeline__args={"input_topic": source, "output_topic": f"{app_id}-counts"},
        kafka__bootstrapServers=kafka.bootstrap,
        triggerInterval="300ms",
        executors__replicas=2,
        state__standbyReplicas=1,
        state__acceptableRecoveryLag=RECOVERY_LAG,
        sparkConf={"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                   "spark.sql.shuffle.partitions": "4"},
    )
    apply(kube, body)
    return {"source": source, "output": f"{app_id}-counts"}


def test_word_count_runs_on_the_operators_assignment_and_fails_over_to_standbys(crd, kafka, namespace, tmp_path):
    kube = crd
    t_start = time.monotonic()
    with running_operator(kube):
        topics = apply_word_count(kube, kafka, namespace)
        # The driver reads the manifest the operator rendered for its pod.
        conf = wait_for(lambda: get_or_none(kube, "configmap", builders.conf_configmap_name(APP), namespace), 60,
                        what="the driver's conf ConfigMap")
        streamapp = tmp_path / "streamapp.yaml"
        streamapp.write_text(conf["data"]["streamapp.yaml"])
        assert yaml.safe_load(streamapp.read_text())["spec"]["kafka"]["bootstrapServers"] == kafka.bootstrap
        wait_for(lambda: get_or_none(kube, "pod", builders.driver_pod_name(APP), namespace), 60, what="driver pod")

        ch = Channel(kube, namespace)
        driver = DriverProcess(kube, namespace, streamapp, tmp_path)
        try:
            # Spark on Kubernetes: executor pods from the StatefulSet allocator, each labelled
            # with its executor id once it registered. local-cluster's executors are 0 and 1.
            create_executor_statefulset(kube, namespace, APP, 2)
            pods = FakeSparkDriver(kube, namespace, APP)
            pods.next_id = 0
            ids = pods.register_running_executors(2)
            assert sorted(ids.values()) == ["0", "1"], ids

            fed = lines(3000, seed=1)
            produce(kafka.bootstrap, topics["source"], ((None, line.encode()) for line in fed))

            # 1. The driver publishes its tasks; the operator assigns them with standbys.
            def first_assignment() -> channel.AssignmentMessage | None:
                waited = driver.log_path.read_text(errors="replace").count(WAITING)
                if not ch.states and waited >= 20:
                    raise AssertionError(
                        f"the driver waited {waited} batches for the operator's first assignment without publishing "
                        "its runtime state, which the operator needs before it can assign anything (channel.py: the "
                        "driver patches in its tasks first)")
                return ch.assignment()

            first = until(driver, first_assignment, 180, "the operator's first assignment")
            state = until(driver, ch.runtime_state, 30, "a runtime state")
            stateful = stateful_tasks(state)
            assert len(stateful) == PARTITIONS and len(state.changelog_end_offsets) == 2 * PARTITIONS, state
            assert {e.id for e in first.executors} == {"0", "1"}
            for task in stateful:
                placement = first.assignment.tasks[task]
                assert placement.active in ("0", "1") and len(placement.standbys) == 1, (task, placement)
                assert placement.standbys[0] != placement.active
            report(f"\nfirst assignment after {time.monotonic() - t_start:.1f}s: generation "
                   f"{first.assignment.generation}, reason {first.reason!r}")

            # 2. The driver runs the operator's newest generation and says so; counts are exact.
            def following() -> channel.RuntimeState | None:
                message, state = ch.assignment(), processed_all(ch, 0)
                return state if state and message and state.assignment_generation == message.assignment.generation \
                    else None

            until(driver, following, 240, "the driver to count the first input on the newest assignment")
            assert latest_counts(kafka.bootstrap, topics["output"]) == word_counts(fed)
            steady = until(driver, lambda: (m := ch.assignment()) and (s := ch.runtime_state())
                           and s.assignment_generation == m.assignment.generation and caught_up(s, m) and m,
                           120, "every standby caught up with its changelog")
            report(f"counted {len(fed)} lines exactly on generation {steady.assignment.generation} after "
                   f"{time.monotonic() - t_start:.1f}s")

            # 3. Lose the executor with the most stateful actives: its pod and its JVM.
            actives = Counter(steady.assignment.tasks[t].active for t in stateful)
            victim = actives.most_common(1)[0][0]
            survivor = "1" if victim == "0" else "0"
            orphans = [t for t in stateful if steady.assignment.tasks[t].active == victim]
            assert all(steady.assignment.tasks[t].standbys == (survivor,) for t in orphans)
            victim_pod = next(e.pod for e in steady.executors if e.id == victim)
            survivor_log = driver.runner_log(survivor)
            log_offset = survivor_log.stat().st_size
            seen_states = len(ch.states)
            pid = driver.executor_jvm_pid(victim)
            t_kill = time.monotonic()
            pods.core.delete_namespaced_pod(victim_pod, namespace)
            os.kill(pid, signal.SIGKILL)

            failed_over = until(
                driver, lambda: (m := ch.assignment()) and m.assignment.generation > steady.assignment.generation
                and victim not in {e.id for e in m.executors} and m,
                30, "a new generation without the lost executor", interval=0.01)
            t_published = time.monotonic() - t_kill
            for task in orphans:
                assert failed_over.assignment.tasks[task].active == survivor, (task, failed_over.assignment.tasks[task])
            assert victim not in failed_over.assignment.executors()

            more = lines(2000, seed=2)
            produce(kafka.bootstrap, topics["source"], ((None, line.encode()) for line in more))
            fed += more
            after_kill = batch_id(ch)

            def continued() -> channel.RuntimeState | None:
                state = processed_all(ch, after_kill)
                return state if state and state.assignment_generation == ch.assignment().assignment.generation \
                    else None

            until(driver, continued, 180, "the driver to count new input after the failover")
            t_counted = time.monotonic() - t_kill
            assert latest_counts(kafka.bootstrap, topics["output"]) == word_counts(fed)

            # No full restore: the survivor promoted its standby copies, and what they restored
            # is what they lacked (at most the recovery lag), never the changelog from its start.
            promoted_log = survivor_log.read_text(errors="replace")[log_offset:]
            for task in orphans:
                assert f"promoting task {task} from standby" in promoted_log, (task, promoted_log[-3000:])
            restores = [(m[1], int(m[3]), int(m[4])) for m in RESTORE_LINE.finditer(promoted_log) if m[1] in orphans]
            assert all(end - start <= RECOVERY_LAG and start > 0 for _, start, end in restores), restores
            after = ch.states[seen_states:]
            restored = [r for s in after for r in s.restores if r.task in orphans]
            assert all(r.total <= RECOVERY_LAG for r in restored), restored
            assert driver.metric("eddy_driver_executor_losses_total") == 1.0
            status = get(kube, "streamapp", APP, namespace)["status"]
            assert status["lastFailover"]["executor"] == victim
            assert status["lastFailover"]["tasksMoved"] >= len(orphans)
            report(f"executor {victim} lost: generation {failed_over.assignment.generation} published in "
                   f"{t_published * 1000:.0f} ms ({len(orphans)} standbys promoted on executor {survivor}, restores "
                   f"{restores}); new input counted {t_counted:.1f}s after the loss")

            # 4. Spark replaces the executor (a new id); the StatefulSet re-creates its pod, which
            # Spark labels with that id. The operator places copies on it again.
            def replacement() -> str | None:
                state = ch.runtime_state()
                new = sorted(set(state.executors) - {"0", "1"}) if state is not None else []
                return new[0] if new else None

            new_id = until(driver, replacement, 120, "Spark's replacement executor")
            ids = pods.register_running_executors(2, timeout=120)
            assert ids[victim_pod] == new_id, (ids, new_id)
            rebalanced = until(
                driver, lambda: (m := ch.assignment()) and new_id in m.assignment.executors()
                and (s := ch.runtime_state()) and s.assignment_generation == m.assignment.generation
                and caught_up(s, m) and m,
                120, f"copies placed on executor {new_id} and caught up")
            for task in stateful:
                assert set(rebalanced.assignment.tasks[task].copies) == {survivor, new_id}, rebalanced
            first_on_new = next(m for m in ch.assignments if new_id in m.assignment.executors())
            assert not any(first_on_new.assignment.tasks[t].active == new_id for t in stateful), (
                f"an active moved to executor {new_id} before its copy caught up: {first_on_new}")

            # Its copies caught up, so it gets its share of the stateful actives back (promoted,
            # not restored): stateless tasks moving onto it must not count as its share.
            def balanced() -> channel.AssignmentMessage | None:
                message = ch.assignment()
                loads = Counter(message.assignment.tasks[t].active for t in stateful)
                return message if sorted(loads.values()) == [PARTITIONS // 2] * 2 else None

            until(driver, balanced, 60, f"half the stateful actives back on executor {new_id} once caught up")
            history = [m.assignment for m in ch.assignments]
            moves_back = [m for before, after in zip(history, history[1:], strict=False)
                          for m in diff(before, after) if m.task in stateful and m.target == new_id
                          and m.kind in ("promoted", "moved")]
            assert moves_back and all(m.kind == "promoted" for m in moves_back), moves_back

            last = lines(1000, seed=3)
            produce(kafka.bootstrap, topics["source"], ((None, line.encode()) for line in last))
            fed += last
            after_return = batch_id(ch)
            until(driver, lambda: processed_all(ch, after_return), 180, "the driver to count the last input")
            assert latest_counts(kafka.bootstrap, topics["output"]) == word_counts(fed)
            app = until(driver, lambda: (a := get(kube, "streamapp", APP, namespace))["status"]["phase"] == "Running"
                        and a, 30, "phase Running")
            assert app["status"]["executors"] == {"desired": 2, "ready": 2}
            final = ch.assignment()
            report(f"executor {new_id} joined: generation {final.assignment.generation}, actives "
                   f"{dict(Counter(final.assignment.tasks[t].active for t in stateful))}; "
                   f"{len(fed)} lines counted exactly")
        except AssertionError as err:
            raise AssertionError(f"{err}\n--- channel ---\n{ch.describe()}\n--- driver log ---\n"
                                 f"{driver.log_tail(40)}") from None
        finally:
            ch.close()
            ch.save(tmp_path)
            driver.stop()
        report(f"end to end in {time.monotonic() - t_start:.1f}s")
