"""A fault campaign: many faults of every kind, in a row, while data flows; nothing lost, nothing
counted twice, every recovery timed.

    infra/cluster/netns.sh .venv/bin/python bench/chaos.py [--faults 56] [--seed 1] [--out DIR]

(`make chaos` runs that under the heavy lock.) It starts, inside the network namespace netns.sh
made, three real nodes (infra/cluster/node.sh, EDDY_NODES=3), a three-broker KRaft cluster on
node 1's address (every topic replicated three times, min.insync.replicas 2), and the operator
from its Helm chart (two replicas). It applies the campaign app (examples/chaos: a stream-table
join, a repartition hop, 10 s windows; exactly-once, two executors, one standby) and feeds it a
steady rate of events from a known sequence (the producer is never faulted). After a warm-up
that sets the steady lateness, it injects a seeded random schedule of faults
(`chaos_report.plan`), one after the other: each waits until the app has settled from the one
before (every event sent `--settle-late` seconds ago joined), then the planned gap:

- ``executor-pod-deleted``: an executor pod deleted (its StatefulSet makes it again);
- ``executor-killed``: an executor's JVM and its task runner SIGKILLed in its container;
- ``driver-pod-deleted``: the driver pod deleted;
- ``operator-leader-killed``: the operator pod holding the Lease SIGKILLed (its container's
  process, from the node), so its Lease must expire;
- ``broker-killed``: a broker SIGKILLed and started again after a while: the KRaft quorum's
  leader, the app's group coordinator, a runner's transaction coordinator or any, in turn;
- ``node-lost``: node 2 or 3 killed (``node.sh kill-node``) and restarted after a while (past
  the app's ``nodeLossTimeout`` of 30 s, or not);
- ``executor-cut-off``: an executor cut off from the brokers for some seconds: packets to the
  brokers' ports dropped by a rule in that pod's own network namespace (never the host's).

A full state volume is not among them: the volumes are directories of the machine's one file
system here, and filling one would fill the host's disk.

Then it stops the producer, waits until every event is joined (or the time runs out), and the
verifier (`chaos_verify`) reads every output to its end. The report (`chaos_report`) gives, per
fault kind, the count, the recovery time p50 and max, the largest lateness, the verdict and the
seed, and checks what Eddy itself reported (Events, status, the operator's and the driver's
metrics) against the faults injected, listing every mismatch. Written to ``--out``: report.txt,
report.json, lateness.png, and the driver, operator, executor and task runner logs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.chaos_report import (  # noqa: E402 - after the path is set
    KINDS,
    Fault,
    Planned,
    Report,
    Sample,
    analyse,
    percentile,
    plan,
    plot,
)
from bench.chaos_verify import Event, Verdict, joined_event, verify_topics  # noqa: E402
from e2e.test_real_pods import METRICS_PORT, operator_pods  # noqa: E402
from e2e.wordcount import APP, Channel, WordCount, until  # noqa: E402
from eddy_operator import builders  # noqa: E402
from eddy_operator.pods import instant  # noqa: E402
from tests.operator.cluster import apply, get  # noqa: E402
from tests.scrape import metric_sum, samples_at  # noqa: E402
from tests.servers import (  # noqa: E402
    OPERATOR_NAMESPACE,
    KafkaCluster,
    NodeCluster,
    install_operator,
    kafka_nodes,
    node_cluster,
)

NAMESPACE = "chaos"
PARTITIONS = 4
USERS = 60
REGIONS = 6
WINDOW_MS = 10_000
EXECUTORS = 2
#: the app's spec.state.nodeLossTimeout: a node down longer than NotReady (20 s) plus this has
#: its executor's pod deleted and its claim released (a NodeLost Event)
NODE_LOSS_TIMEOUT_S = 30
NOT_READY_S = 20
#: how long a fault waits for an operator leader whose process runs (the last one's may be restarting)
LEADER_WAIT_S = 90.0
#: how long after the campaign the status may take to count every executor ready again
READY_AGAIN_S = 180.0


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


# -- the input: a known sequence ------------------------------------------------------------------


def user_of(seq: int) -> str:
    return f"u{(seq * 7919) % USERS:03d}"


def region_of(user: str) -> str:
    return f"r{int(user[1:]) % REGIONS}"


def event(seq: int, t0_ms: int, rate: float) -> Event:
    """Event `seq` of the sequence: its user, amount and timestamp follow from it."""
    return Event(seq, user_of(seq), seq % 97, t0_ms + int(seq * 1000 / rate))


def java_hash(text: str) -> int:
    """Java's String.hashCode, which Kafka partitions its coordinators' topics by."""
    h = 0
    for ch in text:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def coordinator_partition(key: str, partitions: int) -> int:
    """The partition of __consumer_offsets / __transaction_state whose leader coordinates `key`
    (Kafka's Utils.abs(key.hashCode()) % partitions)."""
    return (java_hash(key) & 0x7FFFFFFF) % partitions


# -- the flow: a steady producer and a reader of the join's output --------------------------------


class Flow:
    """Events at a steady rate (each sent at its time, idempotent, acks=all), and when each one's
    join record became readable (read_committed)."""

    def __init__(self, bootstrap: str, events_topic: str, enriched_topic: str, rate: float) -> None:
        from confluent_kafka import Consumer, Producer, TopicPartition

        self.rate = rate
        self.origin = time.monotonic()
        self.t0_ms = int(time.time() * 1000)
        self.sent: dict[int, float] = {}
        self.seen: dict[int, float] = {}
        self.failed: list[str] = []
        self.lag: list[tuple[float, int]] = []
        self._events = events_topic
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                   "linger.ms": 5, "message.timeout.ms": 600_000})
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"chaos-flow-{time.time_ns()}",
                                   "isolation.level": "read_committed", "enable.auto.commit": False})
        parts = self._consumer.list_topics(enriched_topic, timeout=30).topics[enriched_topic].partitions
        self._consumer.assign([TopicPartition(enriched_topic, p, 0) for p in parts])
        self._stop_feeding, self._stop = threading.Event(), threading.Event()
        self._threads = [threading.Thread(target=f, daemon=True, name=f.__name__)
                         for f in (self._feed, self._read, self._sample)]

    def now(self) -> float:
        return time.monotonic() - self.origin

    def start(self) -> Flow:
        for t in self._threads:
            t.start()
        return self

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed.append(str(err))

    def _feed(self) -> None:
        seq = 0
        while not self._stop_feeding.is_set():
            due = seq / self.rate
            wait = due - self.now()
            if wait > 0:
                time.sleep(min(wait, 0.05))
                continue
            e = event(seq, self.t0_ms, self.rate)
            self._producer.produce(self._events, key=e.user.encode(), value=e.value(), timestamp=e.timestamp,
                                   on_delivery=self._delivered)
            self.sent[seq] = self.now()
            self._producer.poll(0)
            seq += 1
        self._producer.flush(600)

    def _read(self) -> None:
        while not self._stop.is_set():
            for m in self._consumer.consume(1000, 0.1):
                if m.error() is None and m.value() is not None:
                    with contextlib.suppress(ValueError, KeyError, TypeError):
                        self.seen.setdefault(int(joined_event(json.loads(m.value()))["seq"]), self.now())

    def _sample(self) -> None:
        while not self._stop.wait(1.0):
            self.lag.append((self.now(), len(self.sent) - len(self.seen)))

    def settled(self, late_s: float) -> bool:
        """Every event sent more than `late_s` seconds ago has been joined."""
        horizon = self.now() - late_s
        return all(seq in self.seen for seq, t in list(self.sent.items())[-int(self.rate * 120):] if t < horizon)

    def samples(self) -> list[Sample]:
        return [Sample(t, self.seen[seq] - t if seq in self.seen else math.inf) for seq, t in self.sent.items()]

    def stop_feeding(self) -> int:
        self._stop_feeding.set()
        self._threads[0].join(600)
        return len(self.sent)

    def close(self) -> None:
        self._stop.set()
        for t in self._threads[1:]:
            t.join(10)
        self._consumer.close()


# -- the app ---------------------------------------------------------------------------------------


@dataclass
class Topics:
    events: str
    users: str
    enriched: str
    windows: str


def deploy(node: NodeCluster, kafka: KafkaCluster, namespace: str) -> tuple[WordCount, Topics]:
    """Topics (RF 3, min.insync.replicas 2), the users table, and examples/chaos/streamapp.yaml
    applied into `namespace`. The StreamApp is named as the word count's (`e2e.wordcount.APP`),
    so that the end-to-end tests' helpers (its pods, channel and Events) serve it as they are."""
    node.kubectl("create", "namespace", namespace)
    app_id = kafka.unique_name("chaos")
    replicated = {"min.insync.replicas": "2"}
    t = Topics(f"{app_id}-events", f"{app_id}-users", f"{app_id}-enriched", f"{app_id}-windows")
    for topic in (t.events, t.enriched, t.windows):
        kafka.create_topic(topic, PARTITIONS, replicated, replication_factor=3)
    kafka.create_topic(t.users, PARTITIONS, {**replicated, "cleanup.policy": "compact"}, replication_factor=3)
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": kafka.bootstrap, "acks": "all", "enable.idempotence": True})
    table_time = int(time.time() * 1000) - 3_600_000  # older than every event: each joins its user
    for i in range(USERS):
        user = f"u{i:03d}"
        producer.produce(t.users, key=user.encode(), value=region_of(user).encode(), timestamp=table_time)
    assert producer.flush(60) == 0, "the users table was not written"

    body = yaml.safe_load((REPO / "examples/chaos/streamapp.yaml").read_text())
    body["metadata"] = {"name": APP, "namespace": namespace}
    spec = body["spec"]
    spec.update(applicationId=app_id, imagePullPolicy="Never")
    spec["pipeline"]["args"] = {"events_topic": t.events, "users_topic": t.users, "enriched_topic": t.enriched,
                                "windows_topic": t.windows}
    spec["kafka"]["bootstrapServers"] = kafka.bootstrap
    spec["executors"]["replicas"] = EXECUTORS
    spec["state"]["nodeLossTimeout"] = f"{NODE_LOSS_TIMEOUT_S}s"
    spec["sparkConf"] = {"spark.kubernetes.executor.request.cores": "200m", "spark.ui.enabled": "false",
                         "spark.ui.showConsoleProgress": "false", "spark.sql.shuffle.partitions": str(PARTITIONS)}
    apply(node, body)
    app = WordCount(node, kafka, namespace, app_id, t.events, t.enriched, Channel(node, namespace),
                    executors=EXECUTORS)
    return app, t


# -- the faults ------------------------------------------------------------------------------------


class Injector:
    """Injects faults into the running app and the cluster under it."""

    def __init__(self, node: NodeCluster, kafka: KafkaCluster, app: WordCount, rng: random.Random) -> None:
        self.node, self.kafka, self.app, self.rng = node, kafka, app, rng
        self.down_nodes: set[str] = set()

    # the pieces
    def live_executor_pods(self) -> list[Any]:
        return [p for p in self.app.executor_pods() if p.metadata.deletion_timestamp is None
                and p.status.phase == "Running" and p.spec.node_name not in self.down_nodes]

    def pick_executor(self, timeout_s: float = 120) -> Any:
        """A running, ready executor pod (waits for one while none is)."""
        deadline = time.monotonic() + timeout_s
        while True:
            ready = [p for p in self.live_executor_pods()
                     if p.status.container_statuses and all(c.ready for c in p.status.container_statuses)]
            if ready:
                return self.rng.choice(sorted(ready, key=lambda p: p.metadata.name))
            if time.monotonic() > deadline:
                raise Skip(f"no executor pod running and ready for {timeout_s:g} s")
            time.sleep(1)

    def container_pid(self, pod: Any, container: str) -> int:
        """The host PID of `container`'s process in `pod`, from its node's containerd."""
        status = next(s for s in pod.status.container_statuses or [] if s.name == container)
        container_id = (status.container_id or "").split("://")[-1]
        sock = self.node.node(pod.spec.node_name).dir / "containerd" / "containerd.sock"
        tasks = subprocess.run(["ctr", "--address", str(sock), "-n", "k8s.io", "task", "ls"], capture_output=True,
                               text=True, timeout=30, check=True).stdout
        for line in tasks.splitlines()[1:]:
            parts = line.split()
            if parts and parts[0] == container_id:
                return int(parts[1])
        raise RuntimeError(f"no task {container_id} of {pod.metadata.name}/{container} in {sock}")

    def inject(self, p: Planned) -> Fault:
        started = time.time()
        target, detail, executors = getattr(self, p.kind.replace("-", "_"))(p)
        return Fault(p.kind, target, started, time.time(), detail, executor_pods=executors)

    # one method per kind: returns (target, detail, the executor pods it takes away)
    def executor_pod_deleted(self, p: Planned) -> tuple[str, str, list[str]]:
        pod = self.pick_executor()
        self.app.core.delete_namespaced_pod(pod.metadata.name, self.app.namespace)
        return pod.metadata.name, f"executor {pod.metadata.labels.get(builders.SPARK_EXEC_ID_LABEL)}", \
            [pod.metadata.name]

    def executor_killed(self, p: Planned) -> tuple[str, str, list[str]]:
        pod = self.pick_executor()
        out = self.app.kubectl("exec", pod.metadata.name, "-c", builders.EXECUTOR_CONTAINER, "--", "bash", "-c",
                               "pids=\"$(pgrep -x java) $(pgrep -f 'eddy_runtime[.]executor[.]runner')\"; "
                               "kill -9 $pids; echo $pids", check=False)
        return pod.metadata.name, f"executor {pod.metadata.labels.get(builders.SPARK_EXEC_ID_LABEL)}: " \
                                  f"SIGKILL to pids {out.strip()} (JVM and task runner)", [pod.metadata.name]

    def driver_pod_deleted(self, p: Planned) -> tuple[str, str, list[str]]:
        name = builders.driver_pod_name(APP)
        self.app.core.delete_namespaced_pod(name, self.app.namespace)
        return name, "", []

    def operator_leader_killed(self, p: Planned) -> tuple[str, str, list[str]]:
        # The Lease may still name a leader killed by the fault before, whose container is not
        # running (restarting, or backing off): wait for a leader with a process to kill.
        deadline = time.monotonic() + LEADER_WAIT_S
        while True:
            leader, _ = operator_pods(self.app)
            try:
                pid = self.container_pid(leader, leader.spec.containers[0].name)
                break
            except (RuntimeError, StopIteration) as err:
                if time.monotonic() > deadline:
                    raise Skip(f"no operator leader with a running process for {LEADER_WAIT_S:g} s: {err}") from err
                time.sleep(2)
        os.kill(pid, signal.SIGKILL)
        return leader.metadata.name, f"SIGKILL to its container's pid {pid} on {leader.spec.node_name}", []

    def broker_for(self, role: str) -> tuple[int, str]:
        live = sorted(self.kafka.live_brokers())
        if role == "controller":
            return self.quorum_leader(), "the KRaft quorum's leader"
        meta = self.kafka.admin.list_topics(timeout=10).topics
        if role == "group-coordinator":
            part = coordinator_partition(self.app.app_id, len(meta["__consumer_offsets"].partitions))
            return meta["__consumer_offsets"].partitions[part].leader, f"the group coordinator ({self.app.app_id})"
        if role == "transaction-coordinator":
            pods = self.live_executor_pods()
            if pods:
                tid = f"{self.app.app_id}-runner-{self.rng.choice(pods).status.pod_ip}"
                part = coordinator_partition(tid, len(meta["__transaction_state"].partitions))
                return meta["__transaction_state"].partitions[part].leader, f"the transaction coordinator of {tid}"
        return self.rng.choice(live), "any broker"

    def quorum_leader(self) -> int:
        """The KRaft quorum's leader, as the live nodes' quorum-state files say (the newest epoch)."""
        best = (-1, -1)
        for i in range(1, self.kafka.nodes + 1):
            path = self.kafka.node_dir(i) / "logs" / "__cluster_metadata-0" / "quorum-state"
            with contextlib.suppress(OSError, ValueError, KeyError):
                state = json.loads(path.read_text())
                best = max(best, (int(state["leaderEpoch"]), int(state["leaderId"])))
        if best[1] < 1:
            raise RuntimeError("no quorum-state names a leader")
        return best[1]

    def broker_killed(self, p: Planned) -> tuple[str, str, list[str]]:
        broker, why = self.broker_for(p.role)
        pid = self.kafka.kill_broker(broker)
        time.sleep(p.down_s)
        t0 = time.monotonic()
        self.kafka.start_broker(broker, timeout_s=120)
        started = time.monotonic() - t0
        # the next fault finds every replica back in sync: two brokers behind at once is beyond RF 3 / min ISR 2
        self.kafka.wait_in_sync(sorted(self.kafka.admin.list_topics(timeout=10).topics), timeout_s=300)
        return f"broker {broker}", f"{why}, pid {pid} SIGKILLed, down {p.down_s:g} s, started again in " \
                                   f"{started:.1f} s, in sync {time.monotonic() - t0:.1f} s after", []

    def node_lost(self, p: Planned) -> tuple[str, str, list[str]]:
        candidates = [n for n in self.node.nodes[1:] if n.name not in self.down_nodes and self.node_ready(n.name)]
        if not candidates:
            raise Skip("no node but node 1 (the control plane's) is up")
        with_executor = {p_.spec.node_name for p_ in self.live_executor_pods()}
        preferred = [n for n in candidates if n.name in with_executor] or candidates
        victim = self.rng.choice(preferred)
        pods = sorted(f"{p_.metadata.namespace}/{p_.metadata.name}" for p_ in self.app.core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={victim.name}").items)
        executors = sorted(p_.metadata.name for p_ in self.live_executor_pods() if p_.spec.node_name == victim.name)
        said = self.node.kill_node(victim)
        self.down_nodes.add(victim.name)
        time.sleep(p.down_s)
        t0 = time.monotonic()
        self.node.restart_node(victim)
        self.down_nodes.discard(victim.name)
        return victim.name, f"down {p.down_s:g} s, Ready again in {time.monotonic() - t0:.1f} s; pods on it: " \
                            f"{', '.join(pods) or 'none'} ({said[:120]})", executors

    def node_ready(self, name: str) -> bool:
        node = self.app.core.read_node(name)
        return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])

    def executor_cut_off(self, p: Planned) -> tuple[str, str, list[str]]:
        pod = self.pick_executor()
        pid = self.container_pid(pod, builders.EXECUTOR_CONTAINER)
        if os.readlink(f"/proc/{pid}/ns/net") == os.readlink("/proc/self/ns/net"):
            raise RuntimeError(f"{pod.metadata.name} shares this process's network namespace: not cutting it")
        listed = sorted(int(b.rsplit(":", 1)[1]) for b in self.kafka.bootstrap.split(","))
        ports = f"{listed[0]}:{listed[-1] + 1}"  # every broker's client and controller port, and nothing else
        rule = ["OUTPUT", "-p", "tcp", "-d", self.kafka.host, "--dport", ports, "-j", "DROP"]
        in_pod = ["nsenter", "-t", str(pid), "-n", "iptables", "-w"]
        subprocess.run([*in_pod, "-I", *rule], check=True, capture_output=True, timeout=30)
        try:
            time.sleep(p.down_s)
        finally:
            subprocess.run([*in_pod, "-D", *rule], check=True, capture_output=True, timeout=30)
        return pod.metadata.name, f"packets to the brokers ({self.kafka.host}:{ports}) dropped in its network " \
                                  f"namespace for {p.down_s:g} s", []


class Skip(Exception):
    """A planned fault that cannot be injected now (said in the report, not counted)."""


# -- what Eddy reports -----------------------------------------------------------------------------


class Process(NamedTuple):
    """A pod's process: the pod's uid and how often its first container had restarted."""

    uid: str
    restarts: int


@dataclass
class Watch:
    """Eddy's own figures over the run, scraped every few seconds: the newest value of each
    counter per process (a driver or operator leader pod's container, by `process_of`), whose
    counters start at 0."""

    app: WordCount
    driver_losses: dict[Process, tuple[float, float, float]] = field(default_factory=dict)  # first, last t, value
    operator_failovers: dict[Process, tuple[float, float, float]] = field(default_factory=dict)
    driver_logs: dict[Process, str] = field(default_factory=dict)
    #: each operator pod's log (by name: a pod of the chart's Deployment is never made again
    #: under its name), as last scraped: a pod the campaign killed keeps what it said before
    operator_logs: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._scrapes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="watch")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(3.0):
            with contextlib.suppress(Exception):
                self.scrape()

    @staticmethod
    def _keep(store: dict[Process, tuple[float, float, float]], process: Process, value: float) -> None:
        now = time.time()
        first = store.get(process, (now, now, 0.0))[0]
        store[process] = (first, now, value)

    def scrape(self) -> None:
        app = self.app
        driver = app.pod(builders.driver_pod_name(APP))
        if driver is not None and driver.status.pod_ip and driver.status.phase == "Running":
            figures = samples_at(f"http://{driver.status.pod_ip}:{METRICS_PORT}/metrics")
            process = process_of(driver)
            self._keep(self.driver_losses, process,
                       metric_sum(figures, "eddy_driver_executor_losses_total", app=app.app_id))
            self.driver_logs[process] = app.driver_log(tail=400)
        leader, others = operator_pods(app)
        self._scrapes += 1
        for pod in (leader, *others) if self._scrapes % 5 == 1 else ():  # every 15 s: kubectl costs CPU
            said = app.kubectl("logs", "-n", OPERATOR_NAMESPACE, pod.metadata.name, "--tail", "3000", check=False)
            if said.strip():
                self.operator_logs[pod.metadata.name] = said
        if leader.status.pod_ip:
            figures = samples_at(f"http://{leader.status.pod_ip}:8080/metrics")
            self._keep(self.operator_failovers, process_of(leader),
                       metric_sum(figures, "eddy_operator_failovers_total", namespace=app.namespace, app=APP))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(20)
        self._scrapes = 0  # the last scrape takes the logs too
        with contextlib.suppress(Exception):
            self.scrape()


def run_by_the_driver_now_running(app: WordCount) -> bool:
    """The driver pod is ready and not going, and the newest runtime state is its process's (its
    load counters started after its container did). Right after a driver pod's deletion, the old
    driver goes on publishing for up to its grace period: a wait on the channel alone ended before
    the new driver had taken over, and the next fault overlapped the restart."""
    pod = app.pod(builders.driver_pod_name(APP))
    if pod is None or pod.metadata.deletion_timestamp is not None or not pod.status.container_statuses:
        return False
    container = pod.status.container_statuses[0]
    started = container.state.running.started_at if container.ready and container.state.running else None
    state = app.channel.runtime_state()
    return bool(started and state is not None and state.load_since
                and instant(state.load_since) >= started)


def process_of(pod: Any) -> Process:
    """One process of a pod: its uid and its first container's restarts. A container restarted in
    place (its JVM SIGKILLed, or its node lost and back with the pod still bound to it) keeps the
    pod's uid, but its counters start at 0 again."""
    statuses = pod.status.container_statuses or []
    return Process(pod.metadata.uid, statuses[0].restart_count if statuses else 0)


def events_of(app: WordCount, reason: str) -> list[dict[str, Any]]:
    found = json.loads(app.kubectl("get", "events", "--field-selector", f"reason={reason}", "-o", "json"))
    return list(found["items"])


def _event_time(e: dict[str, Any]) -> float:
    stamp = e.get("lastTimestamp") or e.get("eventTime") or e["metadata"]["creationTimestamp"]
    return instant(stamp).timestamp()


def loses_executor(f: Fault) -> bool:
    """A fault after which the operator must report an executor lost (`ExecutorLost`). A node's
    executors are lost within seconds when the operator's probe finds them silent
    (eddy_operator.reachability), which it judges only while another executor answers: when the
    node held every executor, only once Kubernetes marks the node not Ready."""
    if f.kind in ("executor-pod-deleted", "executor-killed"):
        return True
    if f.kind == "node-lost" and len(f.executor_pods) >= EXECUTORS:
        return f.healed - f.started >= NOT_READY_S + 10
    return bool(f.executor_pods)


def wait_ready_again(app: WordCount, timeout_s: float = READY_AGAIN_S) -> dict[str, Any]:
    """The status' executor counts once every executor is ready again, or after `timeout_s`. A pod
    made again by the last fault is ready once its JVM registered and its copies are warm, and
    the operator fails a loss over only once an executor is live: when the last fault took every
    executor, its failover comes after the campaign's last event was joined. Eddy's reports are
    judged after this (the status must say so within a few minutes, not at once)."""
    deadline = time.monotonic() + timeout_s
    while True:
        status = get(app.node, "streamapp", APP, app.namespace).get("status") or {}
        ready: dict[str, Any] = status.get("executors") or {}
        if (ready.get("ready"), ready.get("desired")) == (EXECUTORS, EXECUTORS) or time.monotonic() > deadline:
            return ready
        time.sleep(2)


def check_reports(app: WordCount, faults: Sequence[Fault], watch: Watch, epoch: float, ready: dict[str, Any],
                  out: Path) -> tuple[list[str], list[str]]:
    """(mismatches, notes): what Eddy reported (Events, status, metrics) against what was injected,
    once every executor was `ready` again (`wait_ready_again`). Faults' times are seconds since the
    campaign started, at `epoch` (Unix time). The Events judged are written to `out`/events.json."""
    mismatches: list[str] = []
    notes: list[str] = []
    lost_events = events_of(app, "ExecutorLost")
    node_events = events_of(app, "NodeLost")
    (out / "events.json").write_text(json.dumps(
        [{"reason": e.get("reason"), "time": e.get("lastTimestamp") or e.get("eventTime"), "count": e.get("count"),
          "message": e.get("message")} for e in sorted(lost_events + node_events, key=_event_time)], indent=2) + "\n")
    for f in faults:
        started, healed = f.started + epoch, f.healed + epoch
        window = [e for e in lost_events if started - 2 <= _event_time(e) <= healed + 180]
        if loses_executor(f):
            for pod in f.executor_pods:
                if not [e for e in window if pod in e.get("message", "")]:
                    mismatches.append(f"{f.kind} of {f.target} at {f.started:.0f} s: no ExecutorLost Event naming "
                                      f"{pod} within 180 s")
        long_down = f.healed - f.started >= NOT_READY_S + NODE_LOSS_TIMEOUT_S + 15
        if f.kind == "node-lost" and f.executor_pods and long_down and \
                not [e for e in node_events if started - 2 <= _event_time(e) <= healed + 60]:
            mismatches.append(f"node-lost of {f.target} (down {f.healed - f.started:.0f} s, executors "
                              f"{f.executor_pods} on it): no NodeLost Event")
    expected = sum(len(f.executor_pods) for f in faults if loses_executor(f))
    reported = sum(int(e.get("count") or 1) for e in lost_events)
    if reported != expected:
        mismatches.append(f"ExecutorLost Events: {reported} (summing their counts), executor-losing faults injected: "
                          f"{expected}")
    moved = [e for e in lost_events if " 0 active task(s)" not in e.get("message", "")]
    failovers = sum(v for _, _, v in watch.operator_failovers.values())
    notes.append(f"eddy_operator_failovers_total summed over {len(watch.operator_failovers)} leader process(es): "
                 f"{failovers:g}; ExecutorLost Events that moved actives: {len(moved)}")
    if len(watch.operator_failovers) == 1 and failovers != len(moved):
        mismatches.append(f"eddy_operator_failovers_total {failovers:g} against {len(moved)} ExecutorLost Events that "
                          "moved actives")
    # the driver's executor losses, per driver pod, against the executor faults during its life
    for process, (first, last, value) in watch.driver_losses.items():
        inside = sum(len(f.executor_pods) for f in faults
                     if loses_executor(f) and first + 5 <= f.started + epoch and f.healed + epoch + 30 <= last)
        around = sum(len(f.executor_pods) for f in faults
                     if loses_executor(f) and first - 30 <= f.started + epoch <= last)
        if not inside <= value <= around:
            mismatches.append(f"driver pod {process.uid[:8]} (restarts {process.restarts}): "
                              f"eddy_driver_executor_losses_total {value:g}, executor-losing "
                              f"faults during its life: {inside} (at least) to {around} (at most)")
    status = (get(app.node, "streamapp", APP, app.namespace).get("status") or {})
    last_failover: dict[str, Any] = status.get("lastFailover") or {}
    executor_faults = [f for f in faults if loses_executor(f)]
    if executor_faults and last_failover:
        newest = max(f.started for f in executor_faults) + epoch
        when = instant(str(last_failover.get("time"))).timestamp()
        notes.append(f"status.lastFailover: {last_failover}")
        if when < newest - 2 and int(last_failover.get("tasksMoved") or 0) >= 0:
            moved_after = [e for e in moved if _event_time(e) >= newest - 2]
            if moved_after:
                mismatches.append(f"status.lastFailover at {last_failover.get('time')} is older than the newest "
                                  f"failover Event ({moved_after[-1].get('message')})")
    elif executor_faults:
        mismatches.append("status.lastFailover is empty after executor faults")
    if ready.get("ready") != EXECUTORS or ready.get("desired") != EXECUTORS:
        mismatches.append(f"status.executors {ready} {READY_AGAIN_S:g} s after the end, {EXECUTORS} executors "
                          "running")
    return mismatches, notes


# -- the campaign ----------------------------------------------------------------------------------


@dataclass
class Settings:
    seed: int = 1
    faults: int = 56
    rate: float = 40.0
    warmup_s: float = 60.0
    gap_s: tuple[float, float] = (5.0, 15.0)
    settle_late_s: float = 5.0
    settle_timeout_s: float = 600.0
    drain_timeout_s: float = 600.0
    kinds: tuple[str, ...] = KINDS
    node_down_s: tuple[float, float] = (25.0, 80.0)
    #: before each fault, also wait until Eddy is whole again (`WordCount.steady`: the driver runs
    #: the newest assignment on every executor pod, each registered, every copy caught up), not
    #: only until records are on time: a driver restart costs no lateness, so without this the next
    #: fault may land while the new driver is still adopting the pods (what found findings 12 and
    #: 14, and a pod that never registered again, finding 15). The short campaign in CI sets it,
    #: so that each fault kind is judged on a healthy app; the long one leaves faults to overlap.
    healthy_between: bool = False
    out: Path = Path(".")
    command: str = ""


def run_campaign(node: NodeCluster, kafka: KafkaCluster, s: Settings, namespace: str = NAMESPACE) -> Report:
    """Deploy the app, feed it, inject the schedule, verify, report (files in `s.out`)."""
    s.out.mkdir(parents=True, exist_ok=True)
    schedule = plan(s.seed, s.faults, s.kinds, gap_s=s.gap_s, node_down_s=s.node_down_s)
    say(f"seed {s.seed}: {len(schedule)} faults planned: "
        + ", ".join(f"{k} x{sum(1 for p in schedule if p.kind == k)}" for k in s.kinds))
    app, topics = deploy(node, kafka, namespace)
    watch: Watch | None = None
    flow: Flow | None = None
    faults: list[Fault] = []
    notes: list[str] = []
    ready: dict[str, Any] | None = None
    epoch = time.time()
    try:
        until(app.running_executors, 600, "both executor pods running", interval=2, alive=app.check_driver)
        flow = Flow(kafka.bootstrap, topics.events, topics.enriched, s.rate).start()
        until(lambda: len(flow.seen) > s.rate * 5, 600, "the first events joined", alive=app.check_driver)
        app.steady(timeout=600)
        watch = Watch(app)
        warm_from = flow.now()
        time.sleep(s.warmup_s)
        steady = [x.lateness for x in flow.samples() if warm_from <= x.sent < flow.now() - 5]
        p99 = percentile(steady, 0.99)
        say(f"steady: {len(steady)} events, lateness p50 {percentile(steady, 0.5):.3f} s, p99 {p99:.3f} s")
        injector = Injector(node, kafka, app, random.Random(s.seed))
        epoch = time.time() - flow.now()  # flow time = epoch seconds - epoch
        for i, planned in enumerate(schedule, 1):
            settle_late = max(s.settle_late_s, 3 * p99)
            deadline = time.monotonic() + s.settle_timeout_s
            while not flow.settled(settle_late):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the app did not settle within {s.settle_timeout_s:g} s after "
                                       f"{faults[-1].kind if faults else 'the warm-up'}")
                time.sleep(0.5)
            if s.healthy_between:
                until(lambda: run_by_the_driver_now_running(app), max(1.0, deadline - time.monotonic()),
                      "the app's state published by the driver now running", interval=1)
                app.steady(timeout=max(1.0, deadline - time.monotonic()))
            time.sleep(planned.gap_s)
            try:
                fault = injector.inject(planned)
            except Skip as why:
                notes.append(f"fault {i} ({planned.kind}) skipped: {why}")
                continue
            fault.started -= epoch
            fault.healed -= epoch
            faults.append(fault)
            say(f"fault {i}/{len(schedule)} at {fault.started:.0f} s: {fault.kind} of {fault.target} {fault.detail}")
        say("schedule done; the producer stops once the app settles")
        until(lambda: flow.settled(s.settle_late_s), s.settle_timeout_s, "the app settled after the last fault",
              interval=1)
        time.sleep(10)
        sent = flow.stop_feeding()
        end = flow.now()
        until(lambda: len(flow.seen) >= sent, s.drain_timeout_s, "every event joined", interval=1)
        ready = wait_ready_again(app)
    except Exception as err:  # noqa: BLE001 - the run's figures and verdict are reported all the same
        notes.append(f"the campaign stopped early: {err!r}")
        say(f"stopped early: {err!r}")
        sent = flow.stop_feeding() if flow is not None else 0
        end = flow.now() if flow is not None else 0.0
        p99 = locals().get("p99", math.nan)
        steady = locals().get("steady", [])
    finally:
        if watch is not None:
            if ready is None:  # stopped early: judged all the same, once the executors are back
                ready = wait_ready_again(app)
            watch.close()
        if flow is not None:
            flow.close()
    say("verifying every output")
    verdict: Verdict = verify_topics(kafka.bootstrap, topics.events, {f"u{i:03d}": region_of(f"u{i:03d}")
                                                                      for i in range(USERS)},
                                     sent, topics.enriched, topics.windows, WINDOW_MS)
    say(verdict.summary())
    samples = flow.samples() if flow is not None else []
    analyse(faults, samples, p99, end)
    mismatches, report_notes = check_reports(app, faults, watch, epoch, ready or {}, s.out) \
        if watch is not None else ([], [])
    if flow is not None and flow.failed:
        notes.append(f"the producer saw {len(flow.failed)} delivery errors: {flow.failed[:3]}")
    report = Report(seed=s.seed, command=s.command, duration_s=end, rate=s.rate,
                    steady_p50_s=percentile(steady, 0.5), steady_p99_s=p99, faults=faults,
                    verdict=verdict.to_json(), verdict_text=verdict.summary(), mismatches=mismatches,
                    notes=notes + report_notes)
    (s.out / "report.txt").write_text(report.text() + "\n")
    (s.out / "report.json").write_text(json.dumps(report.to_json(), indent=2) + "\n")
    if flow is not None:
        plot(s.out / "lateness.png", samples, flow.lag, faults, p99,
             f"Eddy fault campaign, seed {s.seed}: {len(faults)} faults, {s.rate:g} events/s")
    if watch is not None:
        for process, log in watch.driver_logs.items():
            (s.out / f"driver-{process.uid[:8]}-{process.restarts}.log").write_text(log)
        for name, log in watch.operator_logs.items():
            (s.out / f"operator-{name}.log").write_text(log)
    keep_executor_logs(app, s.out)
    app.close(s.out)
    return report


def keep_executor_logs(app: WordCount, out: Path) -> None:
    """Each executor pod's container log (and its previous container's, if it restarted) and its
    task runner's log (on its volume) into `out`: what a finding needs after the cluster is gone."""
    for pod in app.executor_pods():
        name = pod.metadata.name
        for previous in ((), ("--previous",)):
            log = app.kubectl("logs", name, "-c", builders.EXECUTOR_CONTAINER, *previous, check=False)
            if log:
                (out / f"{name}{'-previous' if previous else ''}.log").write_text(log)
        with contextlib.suppress(Exception):  # a volume gone with its node: nothing to keep
            shutil.copyfile(app.volume_dir(pod) / "eddy-runner.log", out / f"{name}-runner.log")


@contextlib.contextmanager
def campaign_cluster(work: Path, nodes: int = 3) -> Iterator[tuple[NodeCluster, KafkaCluster]]:
    """Three real nodes, three brokers on node 1's address, the operator from its chart."""
    with node_cluster(work, nodes=nodes) as node, kafka_nodes(work, nodes=3, host=node.node_ip) as kafka:
        install_operator(node)
        yield node, kafka


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", type=int, default=56, help="faults in the schedule (every kind equally often)")
    parser.add_argument("--seed", type=int, default=1, help="the schedule's seed: the same seed, the same run")
    parser.add_argument("--rate", type=float, default=40.0, help="input events per second")
    parser.add_argument("--warmup", type=float, default=60.0, help="seconds of steady flow before the first fault")
    parser.add_argument("--kinds", default=",".join(KINDS), help="fault kinds, comma-separated")
    parser.add_argument("--out", type=Path, help="where the report goes (default: a new folder under /tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the cluster's folder (logs, volumes) after the run")
    parser.add_argument("--healthy-between", action="store_true",
                        help="inject each fault only once Eddy is whole again after the last (as e2e/test_chaos.py "
                             "does), not as soon as records are on time")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix=f"eddy-chaos-{args.seed}-"))
    kinds = tuple(k for k in args.kinds.split(",") if k)
    unknown = set(kinds) - set(KINDS)
    if unknown:
        parser.error(f"unknown fault kinds {sorted(unknown)}; known: {', '.join(KINDS)}")
    settings = Settings(seed=args.seed, faults=args.faults, rate=args.rate, warmup_s=args.warmup, kinds=kinds,
                        healthy_between=args.healthy_between, out=out,
                        command="infra/cluster/netns.sh .venv/bin/python bench/chaos.py "
                        + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])))
    say(f"report in {out}; starting three nodes, three brokers and the operator")
    work = Path(tempfile.mkdtemp(prefix="eddy-chaos-cluster-"))
    try:
        with campaign_cluster(work) as (node, kafka):
            report = run_campaign(node, kafka, settings)
    finally:
        if not args.keep:  # the nodes' image stores and volumes: gigabytes
            shutil.rmtree(work, ignore_errors=True)
    print(report.text())
    print(f"\nreport: {out}/report.txt, {out}/report.json, {out}/lateness.png")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
