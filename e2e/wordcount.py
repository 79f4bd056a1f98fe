"""The word-count StreamApp as the end-to-end tests drive it: its input, its expected counts, and
the two channel ConfigMaps (`eddy_contract.channel`) watched from outside, so that a document
that lived for one batch is not missed."""

from __future__ import annotations

import contextlib
import itertools
import json
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from prometheus_client.samples import Sample

from eddy_contract import channel
from eddy_operator import builders
from tests.operator.cluster import apply, example
from tests.runtime.apps import latest_counts, produce
from tests.scrape import samples_at
from tests.servers import OPERATOR_NAMESPACE, ControlPlane, KafkaBroker, NodeCluster

APP = "wordcount"
PARTITIONS = 4
#: ~2,500 keys per counts task once the first 3,000 lines are in: a copy on an empty volume is far
#: more than RECOVERY_LAG behind, and a copy that was away for a few hundred lines far less
WORDS = [f"w{i:05d}" for i in range(20_000)]
#: spec.state.acceptableRecoveryLag: a promoted standby may restore at most this much, and an
#: active moves only to a copy this close to its changelog's end
RECOVERY_LAG = 100
#: what a copy read from its changelog when it opened: an active's restore or a standby's catch-up
RESTORE_LINE = re.compile(r"task (\S+): store (\S+) (?:restores|tails) from \S+ offset (\d+) to (\d+)")

T = TypeVar("T")


def lines(n: int, seed: int) -> list[str]:
    rnd = random.Random(seed)
    return [" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(1, 10))) for _ in range(n)]


def word_counts(fed: list[str]) -> Counter[str]:
    return Counter(w for line in fed for w in line.split())


@dataclass
class Channel:
    """Both channel ConfigMaps as the two halves see them: every runtime state the driver
    published and every assignment generation the operator published, in order."""

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


def caught_up(state: channel.RuntimeState, message: channel.AssignmentMessage, slack: int = 0) -> bool:
    """Every copy the assignment names holds its task's whole changelog (per the volumes), or all
    but `slack` records of it (while input flows, a standby is always a little behind)."""
    for task in stateful_tasks(state):
        end = sum(state.changelog_end_offsets[task].values())
        for e in message.assignment.tasks[task].copies:
            held = state.executors.get(e)
            # Under exactly-once the end is past the last commit marker: one offset per store.
            stores = (held.stores.get(task) or {}) if held is not None else {}
            if sum(stores.values()) < end - len(state.changelog_end_offsets[task]) - slack:
                return False
    return True


def processed_all(ch: Channel, after_batch: int) -> channel.RuntimeState | None:
    """A runtime state from a batch after `after_batch` that found no input left to process
    (lag is measured at the batch's start, so everything produced before is committed)."""
    state = ch.runtime_state()
    if state is None or state.batch_id is None or state.batch_id <= after_batch + 1:
        return None
    restoring = [r for r in state.restores if r.role == "active"]  # standbys may trail the last commit
    return state if state.input_lag and not any(state.input_lag.values()) and not restoring else None


def until(check: Callable[[], T | None], timeout: float, what: str, interval: float = 0.5,
          alive: Callable[[], None] = lambda: None) -> T:
    """`check()` until it returns something truthy. Fails at once when `alive()` or `check`
    fails an assertion; any other error counts as "not yet"."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        alive()
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


@dataclass
class WordCount:
    """The deployed app and what the tests fed it."""

    node: NodeCluster
    kafka: KafkaBroker
    namespace: str
    app_id: str
    source: str
    output: str
    channel: Channel
    executors: int = 2
    fed: list[str] = field(default_factory=list)
    seed: int = 0

    # -- Kubernetes -------------------------------------------------------------------------

    @property
    def core(self) -> Any:
        return self.channel.core

    def pod(self, name: str) -> Any | None:
        from kubernetes.client.exceptions import ApiException

        try:
            return self.core.read_namespaced_pod(name, self.namespace)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def executor_pods(self) -> list[Any]:
        selector = builders.label_selector_string(builders.executor_selector(APP))
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=selector).items
        return sorted(pods, key=lambda p: p.metadata.name)

    def running_executors(self) -> dict[str, Any] | None:
        """Executor id -> pod, once every executor pod runs, is ready and carries its id."""
        pods = [p for p in self.executor_pods() if p.metadata.deletion_timestamp is None]
        if len(pods) != self.executors:
            return None
        out = {}
        for p in pods:
            exec_id = (p.metadata.labels or {}).get(builders.SPARK_EXEC_ID_LABEL)
            ready = any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
            # Spark's statefulset allocator labels a pod `EXECID` until its executor registered.
            if p.status.phase != "Running" or not ready or exec_id is None or not exec_id.isdigit():
                return None
            out[exec_id] = p
        return out

    def remade(self, lost: Any, dead_node: str) -> Any | None:
        """The pod made again under `lost`'s name, once it runs ready on a live node (not `dead_node`)."""
        pod = self.pod(lost.metadata.name)
        if pod is None or pod.metadata.uid == lost.metadata.uid or pod.spec.node_name in (None, dead_node):
            return None
        ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
        return pod if ready else None

    def claim_of(self, pod: Any) -> Any:
        """The bound state claim mounted by an executor pod."""
        claim = next(v.persistent_volume_claim.claim_name for v in pod.spec.volumes
                     if v.persistent_volume_claim is not None)
        return self.core.read_namespaced_persistent_volume_claim(claim, self.namespace)

    def volume_dir(self, pod: Any) -> Path:
        """Where the node keeps that claim's volume: the tests read the task runner's log there."""
        pv = self.core.read_persistent_volume(self.claim_of(pod).spec.volume_name)
        source = pv.spec.local or pv.spec.host_path
        return Path(source.path)

    def kubectl(self, *args: str, check: bool = True) -> str:
        return self.node.kubectl("-n", self.namespace, *args, check=check).stdout

    def driver_log(self, tail: int = 60) -> str:
        return self.kubectl("logs", builders.driver_pod_name(APP), "--tail", str(tail), check=False)

    def events(self, reason: str) -> list[str]:
        """The messages of the app namespace's Events of `reason`."""
        found = json.loads(self.kubectl("get", "events", "--field-selector", f"reason={reason}", "-o", "json"))
        return [e["message"] for e in found["items"]]

    def diagnosis(self, tail: int = 25) -> str:
        """What a failed test's report shows of the app: its pods, the newest lines of the driver's
        log, of each executor's task runner (on its volume) and of the operator's."""
        parts = [self.kubectl("get", "pods", "-o", "wide", check=False),
                 f"-- driver log:\n{self.driver_log(tail)}"]
        for pod in self.executor_pods():
            try:
                runner = (self.volume_dir(pod) / "eddy-runner.log").read_text().splitlines()[-tail:]
            except Exception as err:  # noqa: BLE001 - a pod without a bound claim, a volume gone
                runner = [f"({err})"]
            parts.append(f"-- {pod.metadata.name} runner log:\n" + "\n".join(runner))
        parts.append("-- operator log:\n" + self.node.kubectl(
            "-n", OPERATOR_NAMESPACE, "logs", "-l", "app.kubernetes.io/name=eddy-operator", "--prefix", "--tail",
            str(tail), check=False).stdout)
        return "\n".join(parts)

    def check_driver(self) -> None:
        """Fail at once, with its log, if the driver container keeps crashing."""
        pod = self.pod(builders.driver_pod_name(APP))
        for status in (pod.status.container_statuses or []) if pod is not None else []:
            waiting = status.state.waiting
            if waiting is not None and waiting.reason in ("CrashLoopBackOff", "ErrImageNeverPull",
                                                          "CreateContainerConfigError"):
                raise AssertionError(f"driver container {waiting.reason}:\n{self.driver_log()}")

    # -- Kafka ------------------------------------------------------------------------------

    def feed(self, n: int, make: Callable[[int, int], list[str]] = lines) -> None:
        self.seed += 1
        more = make(n, self.seed)
        produce(self.kafka.bootstrap, self.source, ((None, line.encode()) for line in more))
        self.fed += more

    def counted_everything(self, timeout: float, what: str) -> channel.RuntimeState:
        """Wait for a batch on the operator's newest generation that found no input left, then
        compare every word's latest count with what was fed: exact, no duplicates."""
        after = self.batch_id()

        def done() -> channel.RuntimeState | None:
            state, message = processed_all(self.channel, after), self.channel.assignment()
            return state if state and message and state.assignment_generation == message.assignment.generation \
                else None

        state = until(done, timeout, what, alive=self.check_driver)
        counts, expected = latest_counts(self.kafka.bootstrap, self.output), word_counts(self.fed)
        wrong = {w: (counts.get(w), n) for w, n in expected.items() if counts.get(w) != n}
        wrong.update({w: (n, None) for w, n in counts.items() if w not in expected})
        assert not wrong, (f"{what}: {len(wrong)} of {len(expected)} words' counts wrong (counted, fed): "
                           f"{dict(sorted(wrong.items())[:10])}; batch {state.batch_id}, generation "
                           f"{state.assignment_generation}")
        return state

    def batch_id(self) -> int:
        state = self.channel.runtime_state()
        return (state.batch_id or 0) if state is not None else 0

    def steady(self, timeout: float = 240) -> channel.AssignmentMessage:
        """The newest assignment, run by the driver, with every copy caught up."""
        return until(lambda: (m := self.channel.assignment()) and (s := self.channel.runtime_state())
                     and s.assignment_generation == m.assignment.generation and caught_up(s, m)
                     and self.running_executors() is not None and m,
                     timeout, "every standby caught up with its changelog", alive=self.check_driver)

    def close(self, folder: Path) -> None:
        """Stop watching; keep both channel histories, the driver's log (and its container's before,
        if it restarted), each executor pod's and the namespace's Events in `folder`."""
        self.channel.close()
        self.channel.save(folder)
        (folder / "driver.log").write_text(self.driver_log(tail=2000))
        if previous := self.kubectl("logs", builders.driver_pod_name(APP), "--previous", "--tail", "2000",
                                    check=False):
            (folder / "driver-previous.log").write_text(previous)
        for pod in self.executor_pods():
            name = pod.metadata.name
            (folder / f"{name}.log").write_text(self.kubectl("logs", name, "--tail", "2000", check=False))
        (folder / "events.txt").write_text(self.kubectl("get", "events", "--sort-by=.lastTimestamp", check=False))

    @contextlib.contextmanager
    def serving(self, keep: Callable[[], Path], lines: int = 2000) -> Iterator[WordCount]:
        """The app once `lines` lines were fed and counted; on leaving, closed into `keep()`'s folder."""
        try:
            self.feed(lines)
            self.counted_everything(400, "the first input counted")
            yield self
        finally:
            self.close(keep())

    def metrics(self, pod: Any, port: int) -> list[Sample]:
        """Scrape a pod's /metrics over the pod network."""
        return samples_at(f"http://{pod.status.pod_ip}:{port}/metrics")


class Flow:
    """Input all through a change, and how late each record was: a line every `period` seconds,
    each with a word of its own (`tick<seed>x<flow>x<n>`), and when that word's count first became
    visible in the output topic (read_committed). A record's lateness is that moment less when it
    was sent. The reader is assigned every output partition at the offset where it ended before the
    first line was sent (a subscription's "latest" is decided only once the group is joined, which
    may be after the first lines were counted: such a line was never seen)."""

    _flows = itertools.count(1)

    def __init__(self, app: WordCount, period: float = 0.1) -> None:
        from confluent_kafka import Consumer, Producer

        self.app, self.period = app, period
        self.id = next(Flow._flows)
        self.sent: dict[str, float] = {}
        self.seen: dict[str, float] = {}
        self._producer = Producer({"bootstrap.servers": app.kafka.bootstrap, "linger.ms": 0})
        self._consumer = Consumer({"bootstrap.servers": app.kafka.bootstrap, "group.id": f"{app.app_id}-flow",
                                   "isolation.level": "read_committed", "enable.auto.commit": False})
        # one each: a reader that saw the feeder's stop would end before it read the last lines
        self._stop_feeding, self._stop_reading = threading.Event(), threading.Event()
        self._threads = [threading.Thread(target=self._feed, daemon=True),
                         threading.Thread(target=self._read, daemon=True)]

    def start(self) -> Flow:
        """Take the output's partitions at their ends as of now (every line is sent after), then
        feed and read."""
        from confluent_kafka import TopicPartition

        topic = self.app.output
        partitions = self._consumer.list_topics(topic, timeout=30).topics[topic].partitions
        ends = {p: self._consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions}
        self._consumer.assign([TopicPartition(topic, p, end) for p, end in ends.items()])
        for t in self._threads:
            t.start()
        return self

    def _feed(self) -> None:
        n = 0
        while not self._stop_feeding.wait(self.period):
            n += 1
            word = f"tick{self.app.seed:03d}x{self.id:02d}x{n:07d}"
            self._producer.produce(self.app.source, word.encode())
            self._producer.poll(0)
            self.sent[word] = time.monotonic()
            self.app.fed.append(word)
        assert self._producer.flush(30) == 0

    def _read(self) -> None:
        while not self._stop_reading.is_set():
            for m in self._consumer.consume(500, 0.1):
                if m.error() is None and m.key() is not None:
                    self.seen.setdefault(m.key().decode(), time.monotonic())

    def stop(self) -> None:
        """Stop feeding; read on until every line sent was counted (or two minutes passed)."""
        feeder, reader = self._threads
        self._stop_feeding.set()
        feeder.join(30)
        try:
            until(lambda: set(self.sent) <= set(self.seen), 120, "every line of the flow counted", interval=0.2)
        except AssertionError as err:
            raise AssertionError(f"{err}: {self.describe_missing()}") from None
        finally:
            self._stop_reading.set()
            reader.join(10)
            self._consumer.close()

    def describe_missing(self) -> str:
        """Which lines sent were never seen counted, and when they were sent (seconds after the
        first line): for a failure message."""
        first = min(self.sent.values(), default=0.0)
        missing = sorted((t - first, w) for w, t in self.sent.items() if w not in self.seen)
        if not missing:
            return "none missing"
        last_seen = max((self.sent[w] - first for w in self.seen if w in self.sent), default=-1.0)
        return (f"{len(missing)} of {len(self.sent)} lines never counted, sent {missing[0][0]:.1f}-"
                f"{missing[-1][0]:.1f}s after the first ({missing[0][1]} .. {missing[-1][1]}); the last line "
                f"seen counted was sent {last_seen:.1f}s after the first")

    def describe_lateness(self, since: float, over: float = 2.0) -> str:
        """When the records sent from `since` on that were over `over` s late were sent (seconds
        after `since`), and how late: for a failure message."""
        late = sorted((t - since, self.seen[w] - t) for w, t in self.sent.items() if t >= since and w in self.seen
                      and self.seen[w] - t > over)
        if not late:
            return f"none over {over:.0f}s"
        return (f"{len(late)} records over {over:.0f}s late, sent {late[0][0]:.1f}-{late[-1][0]:.1f}s after the "
                f"change; the worst sent at {max(late, key=lambda x: x[1])[0]:.1f}s")

    def lateness(self, since: float, until_: float | None = None) -> list[float]:
        """The lateness of each line sent in [since, until_)."""
        return sorted(self.seen[w] - t for w, t in self.sent.items()
                      if t >= since and (until_ is None or t < until_) and w in self.seen)


def create_kafka_secrets(node: NodeCluster, kafka: KafkaBroker, namespace: str) -> None:
    """The Secrets `KafkaBroker.security_spec` names: the SCRAM user and the broker's CA."""
    creds = kafka.credentials
    assert creds is not None
    node.kubectl("-n", namespace, "create", "secret", "generic", "kafka-user",
                 f"--from-literal=username={creds.username}", f"--from-literal=password={creds.password}")
    node.kubectl("-n", namespace, "create", "secret", "generic", "kafka-ca", f"--from-file=ca.crt={creds.ca_file}")


def delete_namespace(node: NodeCluster, namespace: str) -> None:
    """Delete an app's namespace and wait until its pods are gone: the node has two cores, and a
    driver still running there would leave the next app's driver Pending. Its pods are not given
    their grace period (a test is done with them; the executors' would cost a minute)."""
    node.kubectl("delete", "namespace", namespace, "--wait=false")
    node.kubectl("-n", namespace, "delete", "pods", "--all", "--grace-period=0", "--force", "--wait=false",
                 check=False)
    node.kubectl("wait", "--for=delete", f"namespace/{namespace}", "--timeout=110s", check=False)
    assert node.kubectl("get", "namespace", namespace, "--ignore-not-found", "-o", "name").stdout.strip() == "", \
        f"namespace {namespace} still there 110 s after its delete"


def deploy_word_count(node: NodeCluster, kafka: KafkaBroker, namespace: str, executors: int, standbys: int,
                      recovery_lag: int = RECOVERY_LAG, listener: str = "plaintext", **spec: Any) -> WordCount:
    """`kubectl apply` the example StreamApp into a new namespace, with this broker, its own
    topics, `executors` executor pods and `standbys` standby copies per stateful task.

    `listener` ``sasl_ssl``: the app talks SASL_SSL + SCRAM-SHA-512 to the broker, its
    credentials and CA in Secrets that ``spec.kafka.security`` references, as a user sets it up.
    `spec`: more settings, as `tests.operator.cluster.example` takes them (``state__size="1Gi"``)."""
    node.kubectl("create", "namespace", namespace)
    if listener == "sasl_ssl":
        create_kafka_secrets(node, kafka, namespace)
    app_id = kafka.unique_name("wc")
    source = kafka.create_topic(f"{app_id}-lines", partitions=PARTITIONS)
    output = f"{app_id}-counts"
    body = example(
        namespace,
        applicationId=app_id,
        imagePullPolicy="Never",
        pipeline__args={"input_topic": source, "output_topic": output},
        kafka=kafka.kafka_spec(listener),
        triggerInterval="500ms",
        executors__replicas=executors,
        state__standbyReplicas=standbys,
        state__acceptableRecoveryLag=recovery_lag,
        sparkConf={
            # Two cores on the test node: the executors ask for a fifth of one each (unless the
            # test sets spec.executors.cpu, which owns this then).
            **({} if "executors__cpu" in spec else {"spark.kubernetes.executor.request.cores": "200m"}),
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "4",
        },
        **spec,
    )
    apply(node, body)
    return WordCount(node, kafka, namespace, app_id, source, output, Channel(node, namespace), executors=executors)
