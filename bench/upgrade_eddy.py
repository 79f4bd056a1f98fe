"""Eddy's cases of bench/upgrade.py: the word-count StreamApp on real pods, changed five ways.

What the end-to-end tests run (docs/testing.md), as bench/failover_pods.py does: a one-node
cluster whose pods really run, inside the network namespace infra/cluster/netns.sh made, a broker
on the node's address and the operator from its Helm chart. Each case applies the word-count
StreamApp (``build_own_steps``, exactly-once, two executor pods, one standby per stateful task,
``triggerInterval`` = the commit interval) in a namespace of its own, with upgrade.py's topics,
and changes it while upgrade.py's producer runs:

- ``driver pod deleted``: ``<app>-driver-0`` deleted; its StatefulSet brings it back. Done (the
  app holds every task) when the new driver pod runs and has published a runtime state on the
  operator's newest generation with no active task restoring and both executors running.
- ``compatible image upgrade``: ``spec.image`` to a new tag of the same image (tagged in the
  node's containerd) and ``spec.pipeline.function`` ``build_own_steps`` -> ``build_words`` (no
  store, topic or partition changes: compatible by eddy_contract.topology). Done when every pod
  runs the new image, then as above.
- ``config change``: ``spec.triggerInterval`` doubled. Done when the driver took it (in place,
  as its log says, or as a driver pod started after the patch), then as above.
- ``incompatible change refused``: ``spec.pipeline.args.store`` renames the store (``counts`` ->
  ``counts2``). Done when the condition ``UpgradeRefused`` is True and the old version still holds
  every task.
- ``rollback``: ``spec.pipeline.module`` that does not exist (crashes at start). Done when the
  condition ``RolledBack`` is True, then as in the first case.
- ``node drained`` and ``node drained without hand-over`` (``--nodes 3``): ``kubectl drain`` of
  the node of an executor that is not the driver's, with the operator's hand-over (the default)
  and with the chart's ``drains.handOver=false``; the node is uncordoned once the drain completed.
  Done when the drained executor is back on its node and the app holds every task.
- ``node lost`` (``--nodes 3``): the node of an executor that is not the driver's killed without
  warning (``node.sh kill-node``: kubelet, containerd and containers SIGKILLed, its pod range a
  blackhole); the operator finds the executor's runner silent (the chart's
  ``failover.unreachableAfterSeconds``) and fails its actives over to their standbys; 15 s
  later the node restarts as a machine that rebooted (``node.sh restart-node``), and its pod
  comes back to its volume (within ``spec.state.nodeLossTimeout``). Phases "the loss" (kill to
  restart) and "the return". Done when the executor runs again and the app holds every task.
- ``node lost for good`` (``--nodes 3``): the same kill, and the node stays down (a machine that
  is gone): after ``spec.state.nodeLossTimeout`` (`NODE_LOSS_TIMEOUT_S` here) the operator
  releases the executor's claim, its pod is made again on a live node with a fresh volume, which
  restores its copies from the changelogs as warmups and takes its actives back once caught up.
  Phases "the failover" (kill to the driver running the generation without the executor) and "the
  re-creation" (to every copy caught up). Done when the new executor holds every copy caught up;
  the node is restarted after that, for the next run.

Both node cases kill an executor's node that has neither the driver nor the operator's leader on
it (a leader lost with the node costs a Lease duration first, 15 s by the chart's default: the
fault campaign's story), and say so in the notes.

``--state-keys N`` gives the counts store N keys before the app starts: their records are written
to its changelog topic (created for it, compacted, one record per key, on the partition Kafka's
partitioner gives the key), so the app starts by restoring them, and a copy made from scratch
(``node lost for good``) restores them again; the input never names those keys.

The four upgrade cases check the installed CRD for ``spec.upgrade`` first (an older operator
reports "not run: <reason>" through `upgrade.NotRun` instead of failing obscurely), as they do
when a condition they wait for never appears; marked ``needs_upgrade_feature``.

Records restored: what the task runners logged restoring or tailing from changelogs (their logs
on the executors' volumes, `e2e.wordcount.RESTORE_LINE`) between the change and the end of the
run.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import throughput as tp  # noqa: E402
from upgrade import Marks, NotRun, Settings, SubjectFactory  # noqa: E402

from e2e.wordcount import APP, RECOVERY_LAG, RESTORE_LINE, Channel, WordCount, caught_up  # noqa: E402
from eddy_operator import builders  # noqa: E402
from eddy_runtime.state.serde import INT64  # noqa: E402
from tests.operator.cluster import apply, condition, example, get  # noqa: E402
from tests.servers import (  # noqa: E402
    OPERATOR_NAMESPACE,
    KafkaBroker,
    NodeCluster,
    helm,
    install_operator,
    kafka_broker,
    node_cluster,
)

#: the word count's store (examples/wordcount/app.py's default `store`)
STORE = "counts"
#: spec.state.nodeLossTimeout of the app in ``node lost for good``: well after the node is NotReady
#: (20 s in these clusters), as in e2e/test_node_loss.py
NODE_LOSS_TIMEOUT_S = 30
#: the operator's leader election Lease (the chart's release ``eddy``)
OPERATOR_LEASE = "eddy-eddy-operator"
#: how long a refused change or a rollback may take to show its condition before the case says "not run"
CONDITION_TIMEOUT_S = 300
#: spec.upgrade of the app in every case; `healthTimeout` the StreamApp's default (300 s): at 120 s
#: the new version's driver (100m, beside runners at 2,000 records/s) was rolled back in 2 runs of 5
#: of the image upgrade, before its first batch (it reached it ~120 s after its pod started in a
#: run that passed)
UPGRADE_SPEC = {"mode": "keepState", "rollback": True, "healthTimeout": "300s"}
NEW_IMAGE_SUFFIX = "-bench-upgrade"


def fill_store(bootstrap: str, changelog: str, partitions: int, keys: int) -> None:
    """`keys` records ``state-<n>`` -> 1 (Kafka's LongSerializer, as the count store writes its
    values) on the compacted changelog topic `changelog`, created here with the app's partition
    count, each on the partition Kafka's partitioner gives its key (the task that would count it)."""
    from confluent_kafka import Producer

    tp.create_topics(bootstrap, [changelog], partitions, {"cleanup.policy": "compact"})
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20, "compression.type": "lz4",
                  "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2 << 20,
                  "partitioner": "murmur2_random"})  # the Java client's partitioner, as the app's producers
    one = INT64.pack(1)
    started = time.monotonic()
    for n in range(keys):
        key = b"state-%09d" % n
        while True:
            try:
                p.produce(changelog, one, key)
                break
            except BufferError:
                p.poll(0.1)
    if p.flush(300):
        raise RuntimeError(f"{changelog}: the store's records were not all written within 300 s")
    tp.say(f"  {keys:,} records of the store written to {changelog} in {time.monotonic() - started:.1f} s")


class EddyCluster:
    """The node, its broker and the operator, shared by every Eddy case of a run."""

    def __init__(self, node: NodeCluster, kafka: KafkaBroker) -> None:
        self.node, self.kafka = node, kafka

    def crd_has_upgrade(self) -> bool:
        """The installed StreamApp CRD knows spec.upgrade (the upgrade feature has landed)."""
        crd = json.loads(self.node.kubectl("get", "crd", "streamapps.eddy.dev", "-o", "json").stdout)
        for version in crd["spec"]["versions"]:
            spec = version.get("schema", {}).get("openAPIV3Schema", {}).get("properties", {}).get("spec", {})
            if "upgrade" in spec.get("properties", {}):
                return True
        return False

    def set_drain_hand_over(self, on: bool) -> None:
        """The operator's `drains.handOver` (a `helm upgrade` that keeps the other values; the operator
        pods roll, and the new leader reconciles every app's disruption budget)."""
        value = "true" if on else "false"
        current = json.loads(helm(self.node, "get", "values", "eddy", "--namespace", OPERATOR_NAMESPACE, "--all",
                                  "-o", "json"))
        if str((current.get("drains") or {}).get("handOver", True)).lower() == value:
            return
        helm(self.node, "upgrade", "eddy", "charts/eddy-operator", "--namespace", OPERATOR_NAMESPACE,
             "--reuse-values", "--set", f"drains.handOver={value}", "--wait", "--timeout", "300s")

    def tag_image(self, image: str) -> str:
        """A new tag of `image` in the node's containerd: a new image from the same Dockerfile, as
        far as Kubernetes can tell (the operator must roll every pod onto it)."""
        new = image + NEW_IMAGE_SUFFIX
        full = lambda ref: ref if "/" in ref else f"docker.io/library/{ref}"  # noqa: E731 - the kubelet's names
        sock = self.node.dir / "containerd" / "containerd.sock"
        proc = subprocess.run(["ctr", "--address", str(sock), "-n", "k8s.io", "images", "tag", "--force",
                               full(image), full(new)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise NotRun(f"could not tag {image} as {new} in the node's containerd: {proc.stderr.strip()}")
        return new


@contextlib.contextmanager
def cluster(work_dir: Path, nodes: int = 1) -> Iterator[tuple[str, EddyCluster]]:
    """(bootstrap, cluster): the nodes, a broker on node 1's address, the operator from its chart."""
    with node_cluster(work_dir, nodes=nodes) as node, kafka_broker(work_dir, host=node.node_ip) as kafka:
        install_operator(node)
        yield kafka.bootstrap, EddyCluster(node, kafka)


class EddyChange:
    """The word-count StreamApp in a namespace of its own; subclasses make one kind of change."""

    system = "eddy"
    case = ""
    repeats_allowed = False
    needs_upgrade_feature = True

    def __init__(self, c: EddyCluster, s: Settings, input_topic: str, output: str, app_id: str) -> None:
        self.c, self.s = c, s
        self.namespace = app_id
        self.log = s.work_dir / f"{app_id}-driver.log"
        self.body = example(
            self.namespace,
            applicationId=app_id,
            imagePullPolicy="Never",
            pipeline__function="build_own_steps",
            pipeline__args={"input_topic": input_topic, "output_topic": output},
            kafka=c.kafka.kafka_spec(),
            triggerInterval=f"{s.commit_interval_ms}ms",
            executors__replicas=2,
            state__standbyReplicas=1,
            state__acceptableRecoveryLag=RECOVERY_LAG,
            # Tuned for two cores: the executors' pods (their runners process all along) ask for a
            # larger CPU share than the driver's, which is idle between syncs and only starts up
            # during a change (the CPU weights Kubernetes gives pods follow their requests).
            sparkConf={"spark.kubernetes.executor.request.cores": "500m",
                       "spark.kubernetes.driver.request.cores": "100m", "spark.ui.enabled": "false",
                       "spark.ui.showConsoleProgress": "false", "spark.sql.shuffle.partitions": str(s.partitions)},
        )
        self.upgrade_ready = c.crd_has_upgrade()
        if self.upgrade_ready:
            self.body["spec"]["upgrade"] = dict(UPGRADE_SPEC)
        self.app: WordCount | None = None
        self.volumes: dict[str, tuple[Path, int]] = {}

    # -- the app --------------------------------------------------------------------------------

    def start(self) -> None:
        self.require_upgrade_feature()  # before anything is deployed
        if self.s.state_keys:
            fill_store(self.s.bootstrap, f"{self.body['spec']['applicationId']}-{STORE}-changelog", self.s.partitions,
                       self.s.state_keys)
        self.c.node.kubectl("create", "namespace", self.namespace)
        apply(self.c.node, self.body)
        self.app = WordCount(self.c.node, self.c.kafka, self.namespace, self.body["spec"]["applicationId"],
                             self.body["spec"]["pipeline"]["args"]["input_topic"],
                             self.body["spec"]["pipeline"]["args"]["output_topic"],
                             Channel(self.c.node, self.namespace), executors=2)

    def alive(self) -> bool:
        assert self.app is not None
        try:
            self.app.check_driver()
        except AssertionError:
            return False
        return True

    def ready(self) -> bool:
        """Both executors run, and the driver runs the operator's newest assignment with every
        copy caught up (standbys placed)."""
        assert self.app is not None
        m, st = self.app.channel.assignment(), self.app.channel.runtime_state()
        return bool(m and st and st.assignment_generation == m.assignment.generation and caught_up(st, m)
                    and self.app.running_executors() is not None)

    def prepare(self) -> None:
        pass

    def streamapp(self) -> dict[str, Any]:
        return get(self.c.node, "streamapp", APP, self.namespace)

    def patch(self, spec: dict[str, Any]) -> None:
        self.c.node.kubectl("-n", self.namespace, "patch", "streamapp", APP, "--type", "merge", "-p",
                            json.dumps({"spec": spec}))

    # -- what the change is measured by ------------------------------------------------------------------

    def note_volumes(self) -> None:
        """Where each executor's runner log is, and how long it was at the change."""
        assert self.app is not None
        pods = self.app.running_executors() or {}
        for e, pod in pods.items():
            path = self.app.volume_dir(pod) / "eddy-runner.log"
            self.volumes[e] = (path, path.stat().st_size if path.exists() else 0)

    def restored(self) -> int:
        total = 0
        for path, offset in self.volumes.values():
            text = path.read_text(errors="replace")[offset:] if path.exists() else ""
            total += sum(int(m[4]) - int(m[3]) for m in RESTORE_LINE.finditer(text))
        return total

    def driver_pod(self) -> Any | None:
        assert self.app is not None
        return self.app.pod(builders.driver_pod_name(APP))

    def holds_every_task(self, since_ms: float) -> bool:
        """A runtime state published after `since_ms` on the operator's newest generation, with no
        active task restoring, and both executors running: the running version holds every task."""
        assert self.app is not None
        m, st = self.app.channel.assignment(), self.app.channel.runtime_state()
        if not (m and st and st.assignment_generation == m.assignment.generation and st.batch_id is not None):
            return False
        updated = _epoch_ms(st.updated_at)
        restoring = [r for r in st.restores if r.role == "active"]
        return updated > since_ms and not restoring and self.app.running_executors() is not None

    def wait(self, check: Any, timeout_s: float, what: str) -> None:
        """Until `check()`. A case that needs the upgrade feature reports "not run" when it times out
        (the feature may be missing, or only partly there); the driver pod deletion fails."""
        deadline = time.monotonic() + timeout_s
        while not check():
            if time.monotonic() > deadline:
                if self.needs_upgrade_feature:
                    raise NotRun(f"timed out after {timeout_s:g} s waiting for {what} (the upgrade feature has not "
                                 f"landed, or not all of it?); {self.describe()}")
                raise RuntimeError(f"{what}: not within {timeout_s:g} s")
            time.sleep(0.1)

    def describe(self) -> str:
        """The StreamApp's conditions and each pod's image and phase, for a "not run" reason."""
        assert self.app is not None
        with contextlib.suppress(Exception):
            conditions = [(c.get("type"), c.get("status"), c.get("reason"), c.get("message")) for c in
                          (self.streamapp().get("status") or {}).get("conditions") or []]
            pods = [self.driver_pod(), *self.app.executor_pods()]
            images = [(p.metadata.name, p.status.phase, [c.image for c in p.spec.containers]) for p in pods if p]
            return f"conditions {conditions}; pods {images}"
        return "(no status)"

    def wait_condition(self, type_: str, timeout_s: float = CONDITION_TIMEOUT_S) -> dict[str, Any]:
        """The StreamApp's condition `type_` once True; NotRun if it never appears (feature not landed)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            app = self.streamapp()
            cond = condition(app, type_)
            if cond is not None and cond.get("status") == "True":
                return cond
            time.sleep(0.5)
        conditions = [(c.get("type"), c.get("status"), c.get("reason")) for c in
                      (self.streamapp().get("status") or {}).get("conditions") or []]
        raise NotRun(f"condition {type_} never became True within {timeout_s:g} s (the upgrade feature has not "
                     f"landed?); conditions: {conditions}")

    def require_upgrade_feature(self) -> None:
        if self.needs_upgrade_feature and not self.upgrade_ready:
            raise NotRun("spec.upgrade is not in the installed StreamApp CRD: the upgrade feature has not landed")

    def change(self, marks: Marks) -> None:
        self.note_volumes()
        marks.start()
        try:
            self.make_change(marks)
        finally:
            marks.restored = self.restored()
            marks.restored_label = ("records the task runners logged restoring or tailing from changelogs since the "
                                    "change (runner logs on the executors' volumes)")

    def make_change(self, marks: Marks) -> None:
        raise NotImplementedError

    def wait_new_driver(self, marks: Marks, old_uid: str) -> float:
        """Until a driver pod other than `old_uid` runs; returns when (epoch ms)."""
        self.wait(lambda: (p := self.driver_pod()) is not None and p.metadata.uid != old_uid
                  and p.status.phase == "Running", self.s.change_timeout_s, "a new driver pod running")
        marks.step("new driver pod running")
        return time.time() * 1000

    def wait_holds_every_task(self, marks: Marks, since_ms: float) -> None:
        self.wait(lambda: self.holds_every_task(since_ms), self.s.change_timeout_s, "the app holding every task")
        marks.done()
        marks.step("holds every task")

    # -- end ---------------------------------------------------------------------------------------------------

    def stop(self) -> dict[str, Any]:
        if self.app is not None:
            folder = self.s.work_dir / self.namespace
            folder.mkdir(exist_ok=True)
            self.app.close(folder)
            self.log.write_text((folder / "driver.log").read_text())
        self.c.node.kubectl("delete", "namespace", self.namespace, "--wait=true", "--timeout=180s", check=False)
        return {}

    def kill_all(self) -> None:
        with contextlib.suppress(Exception):
            if self.app is not None or self.namespace_exists():
                self.stop()

    def namespace_exists(self) -> bool:
        return self.c.node.kubectl("get", "namespace", self.namespace, "--ignore-not-found", "-o", "name",
                                   check=False).stdout.strip() != ""


def _epoch_ms(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000


class DriverPodDeleted(EddyChange):
    """Runs today: the driver StatefulSet brings the pod back, and the new driver takes the app over
    (its executor pods, and their stores on their volumes, either outlive the old driver or are
    replaced; what is measured is the same)."""

    case = "driver pod deleted"
    needs_upgrade_feature = False

    def make_change(self, marks: Marks) -> None:
        old = self.driver_pod()
        assert old is not None
        self.c.node.kubectl("-n", self.namespace, "delete", "pod", builders.driver_pod_name(APP), "--wait=false")
        marks.step("driver pod deleted")
        since = self.wait_new_driver(marks, old.metadata.uid)
        marks.phases.append(("no driver", marks.started_ms, since))
        self.wait_holds_every_task(marks, since)
        marks.phases.append(("the new driver's start", since, marks.done_ms))


class CompatibleImageUpgrade(EddyChange):
    """A new image and a changed, compatible pipeline, kept state."""

    case = "compatible image upgrade"

    def make_change(self, marks: Marks) -> None:
        image = self.body["spec"]["image"]
        new = self.c.tag_image(image)
        self.patch({"image": new, "pipeline": {"function": "build_words"}})
        marks.step(f"spec.image -> {new}, pipeline.function -> build_words")
        self.fail_if_refused()

        def all_new() -> bool:
            assert self.app is not None
            back = condition(self.streamapp(), "RolledBack")
            if back is not None and back.get("status") == "True":
                # The feature is there and said no: a result, not a missing feature; the figures stand.
                raise NotRun(f"the operator rolled the compatible upgrade back: {back.get('message')}")
            pods = [self.driver_pod(), *self.app.executor_pods()]
            return all(p is not None and p.status.phase == "Running" and p.metadata.deletion_timestamp is None
                       and all(c.image.endswith(new) for c in p.spec.containers) for p in pods)

        self.wait(all_new, self.s.change_timeout_s, f"every pod on {new}")
        marks.step("every pod on the new image")
        self.wait_holds_every_task(marks, time.time() * 1000)

    def fail_if_refused(self) -> None:
        cond = condition(self.streamapp(), "UpgradeRefused")
        if cond is not None and cond.get("status") == "True":
            raise RuntimeError(f"a compatible change was refused: {cond.get('message')}")


class ConfigChange(EddyChange):
    """spec.triggerInterval changed with the state kept. The driver
    either takes it in place (its log says "settings changed in place") or is restarted with it;
    done once a runtime state after that shows the app holding every task."""

    case = "config change"
    IN_PLACE = "settings changed in place"

    def make_change(self, marks: Marks) -> None:
        old = self.driver_pod()
        assert old is not None
        interval_s = 2 * self.s.commit_interval_ms / 1000
        self.patch({"triggerInterval": f"{2 * self.s.commit_interval_ms}ms"})
        marks.step(f"spec.triggerInterval -> {2 * self.s.commit_interval_ms}ms")
        taken: list[str] = []

        def applied() -> bool:
            assert self.app is not None
            pod = self.driver_pod()
            if pod is not None and pod.metadata.uid != old.metadata.uid and pod.status.phase == "Running":
                taken.append("new driver pod running")
            elif any(self.IN_PLACE in line and f"trigger_interval_s={interval_s:g}" in line
                     for line in self.app.driver_log(tail=300).splitlines()):
                taken.append("the driver took it in place")
            return bool(taken)

        self.wait(applied, self.s.change_timeout_s, "the new triggerInterval taken (in place or by a new driver)")
        marks.step(taken[0])
        self.wait_holds_every_task(marks, time.time() * 1000)


class RefusedChange(EddyChange):
    """A store rename (the `store` argument of the example's `build_own_steps`), which the upgrade
    gate refuses; the old version must go on undisturbed."""

    case = "incompatible change refused"

    def make_change(self, marks: Marks) -> None:
        args = dict(self.body["spec"]["pipeline"]["args"], store="counts2")
        self.patch({"pipeline": {"args": args}})
        marks.step("pipeline.args.store -> counts2")
        cond = self.wait_condition("UpgradeRefused")
        marks.step(f"UpgradeRefused: {cond.get('reason')}")
        marks.notes.append(f"UpgradeRefused: {cond.get('message')}")
        self.wait_holds_every_task(marks, time.time() * 1000)


class Rollback(EddyChange):
    """A pipeline that crashes at start; rolled back once its driver container restarted 3 times
    (or after healthTimeout)."""

    case = "rollback"

    def make_change(self, marks: Marks) -> None:
        self.patch({"pipeline": {"module": "examples.wordcount.no_such_module"}})
        marks.step("pipeline.module -> examples.wordcount.no_such_module")
        refused = condition(self.streamapp(), "UpgradeRefused")
        if refused is not None and refused.get("status") == "True":
            raise NotRun(f"refused before it ran, not rolled back: {refused.get('message')}")
        cond = self.wait_condition("RolledBack")
        marks.step(f"RolledBack: {cond.get('reason')}")
        self.wait_holds_every_task(marks, time.time() * 1000)


class NodeDrained(EddyChange):
    """`kubectl drain` of the node of an executor that is not the driver's (a driver restart is the
    first case's story), with the operator's hand-over (docs/operations.md, "Draining a node"), then
    `kubectl uncordon` once the drain has completed: a maintenance drain. Needs ``--nodes`` 2 or
    more. Done when the drain has completed, the node is back and the app holds every task with both
    executors (the drained one back on its volume)."""

    case = "node drained"
    needs_upgrade_feature = False
    hand_over = True

    def prepare(self) -> None:
        if len(self.c.node.nodes) < 2:
            raise NotRun("needs two nodes or more (--nodes 3)")
        self.c.set_drain_hand_over(self.hand_over)

    def off_driver_node(self) -> list[Any]:
        """The executor pods that are not on the driver's node (NotRun if there is none)."""
        assert self.app is not None
        driver = self.driver_pod()
        assert driver is not None
        pods = [p for p in self.app.executor_pods() if p.spec.node_name != driver.spec.node_name]
        if not pods:
            raise NotRun(f"every executor is on the driver's node {driver.spec.node_name}")
        return pods

    def make_change(self, marks: Marks) -> None:
        assert self.app is not None
        pod = self.off_driver_node()[0]
        node = pod.spec.node_name
        others = [name for name, p in self._pods_on(node) if name != pod.metadata.name]
        marks.notes.append(f"drained {node}: executor pod {pod.metadata.name}"
                           + (f", and {', '.join(others)}" if others else ""))
        t0, t0_ms = time.monotonic(), time.time() * 1000
        proc = subprocess.run(
            [str(self.c.node.bin_dir / "kubectl"), "--kubeconfig", str(self.c.node.kubeconfig), "drain", node,
             "--ignore-daemonsets", "--delete-emptydir-data", "--force", f"--timeout={self.s.change_timeout_s:g}s"],
            capture_output=True, text=True, timeout=self.s.change_timeout_s + 60)
        took = time.monotonic() - t0
        said = (proc.stdout + proc.stderr).splitlines()
        # the executors' budget's refusals (an operator replica's budget may refuse one too)
        refused = sum(1 for line in said if "disruption budget" in line and f'pods/"{pod.metadata.name}"' in line)
        try:
            if proc.returncode != 0:
                raise RuntimeError(f"kubectl drain {node} failed after {took:.0f} s: {proc.stdout}{proc.stderr}")
            marks.step(f"kubectl drain {node} completed in {took:.1f} s ({refused} evictions of the executor refused)")
            marks.notes.append(f"the drain took {took:.1f} s; {refused} evictions of the executor refused")
        finally:
            self.c.node.kubectl("uncordon", node)
        since = time.time() * 1000
        marks.phases.append(("the drain", t0_ms, since))
        marks.step(f"{node} uncordoned")
        self.wait(lambda: self._back(pod.metadata.name, node, pod.metadata.uid), self.s.change_timeout_s,
                  f"{pod.metadata.name} back on {node}")
        marks.step(f"{pod.metadata.name} back on {node}")
        self.wait_holds_every_task(marks, since)
        marks.phases.append(("the return", since, marks.done_ms))

    def _pods_on(self, node: str) -> list[tuple[str, str]]:
        found = json.loads(self.c.node.kubectl("get", "pods", "-A", "--field-selector", f"spec.nodeName={node}",
                                               "-o", "json").stdout)["items"]
        return [(p["metadata"]["name"], p["metadata"]["namespace"]) for p in found]

    def _back(self, name: str, node: str, old_uid: str) -> bool:
        assert self.app is not None
        p = self.app.pod(name)
        return bool(p is not None and p.metadata.uid != old_uid and p.spec.node_name == node
                    and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or []))

    def stop(self) -> dict[str, Any]:
        try:
            return super().stop()
        finally:
            if not self.hand_over:
                self.c.set_drain_hand_over(True)


class NodeDrainedPlainly(NodeDrained):
    """The same drain with the operator's hand-over off (the chart's ``drains.handOver=false``): the
    executors' budget lets one be evicted at a time, and its actives move as it stops."""

    case = "node drained without hand-over"
    hand_over = False


#: how long a new operator leader probes the runners before a node is killed
LEADER_SETTLE_S = 10.0


class NodeLost(NodeDrained):
    """The node of an executor that is not the driver's killed without warning, then restarted
    `HOLD_S` after the failover. Needs ``--nodes`` 2 or more."""

    case = "node lost"
    #: how long the app runs on the other executors before the node comes back
    HOLD_S = 15.0

    def prepare(self) -> None:
        if len(self.c.node.nodes) < 2:
            raise NotRun("needs two nodes or more (--nodes 3)")

    def victim(self, marks: Marks) -> tuple[Any, Any, str]:
        """(executor pod, its node, its executor id) to lose: on a node with neither the driver nor
        the operator's leader, and with as few operator replicas as there are (with every replica on
        the node that dies, nothing acts until Kubernetes evicts them, 5 min: another fault)."""
        assert self.app is not None
        operator_pods = self.app.core.list_namespaced_pod(OPERATOR_NAMESPACE).items
        leader = self.leader_node(operator_pods)
        if not [p for p in self.off_driver_node() if p.spec.node_name != leader]:
            operator_pods = self.move_leader_off(leader, marks, "the only executor node off the driver's")
            leader = self.leader_node(operator_pods)
        operator_nodes = [p.spec.node_name for p in operator_pods]
        pods = [p for p in self.off_driver_node() if p.spec.node_name != leader]
        if not pods:
            raise NotRun(f"every executor off the driver's node is on the operator leader's node {leader}")
        pod = min(pods, key=lambda p: operator_nodes.count(p.spec.node_name))
        node = self.c.node.node(pod.spec.node_name)
        if set(operator_nodes) <= {node.name}:
            raise NotRun(f"every operator replica is on {node.name}, the executor's node")
        before = self.app.channel.assignment()
        assert before is not None
        (lost,) = [e.id for e in before.executors if e.pod == pod.metadata.name]
        # what else dies with it (an operator replica changes the story)
        others = [name for name, _ in self._pods_on(node.name) if name != pod.metadata.name]
        marks.notes.append(f"pods on {node.name} besides the executor: {', '.join(others) or 'none'} "
                           f"(the operator's leader is on {leader})")
        return pod, node, lost

    def move_leader_off(self, leader: str | None, marks: Marks, why: str) -> list[Any]:
        """Delete the operator leader's pod (on node `leader`): a standby takes the Lease over (the
        leader lets it go as it stops), and the Deployment makes a new standby. The operator pods after."""
        assert self.app is not None
        operator_pods = self.app.core.list_namespaced_pod(OPERATOR_NAMESPACE).items
        old = next(p.metadata.name for p in operator_pods if p.spec.node_name == leader)
        self.c.node.kubectl("-n", OPERATOR_NAMESPACE, "delete", "pod", old, "--wait=true", "--timeout=120s")
        self.wait(lambda: (n := self.leader_node(self.app.core.list_namespaced_pod(OPERATOR_NAMESPACE).items
                                                 if self.app else [])) is not None and n != leader,
                  120, "the operator's Lease taken over by a replica on another node")
        # a runner the new leader never heard from is judged lost only after STARTUP_GRACE_S: let
        # its probes (every second) hear each runner first, as a leader that ran a while has
        time.sleep(LEADER_SETTLE_S)
        marks.notes.append(f"the operator's leader was on {leader}, {why}: its pod {old} was deleted first, "
                           f"{LEADER_SETTLE_S:g} s before the kill")
        return list(self.app.core.list_namespaced_pod(OPERATOR_NAMESPACE).items)

    def leader_node(self, operator_pods: list[Any]) -> str | None:
        """The node of the operator replica that holds the leader election Lease."""
        lease = json.loads(self.c.node.kubectl("-n", OPERATOR_NAMESPACE, "get", "lease", OPERATOR_LEASE, "-o", "json",
                                               check=False).stdout or "{}")
        holder = (lease.get("spec") or {}).get("holderIdentity") or ""
        return next((p.spec.node_name for p in operator_pods if holder.startswith(p.metadata.name + "-")), None)

    def kill(self, marks: Marks) -> tuple[Any, Any, float]:
        """Kill the victim's node; (pod, node, epoch ms of the kill) once the driver runs a generation
        without its executor."""
        pod, node, lost = self.victim(marks)
        t0_ms = time.time() * 1000
        killed = self.c.node.kill_node(node)
        marks.step(f"{node.name} killed ({killed})")
        self.wait(lambda: self.failed_over(lost), self.s.change_timeout_s,
                  f"an assignment without executor {lost}, {self.FAILED_OVER_BY}")
        failover_s = (time.time() * 1000 - t0_ms) / 1000
        marks.step(f"executor {lost} ({pod.metadata.name}) failed over: {self.FAILED_OVER_BY}")
        said = [m for m in self.app.events("ExecutorLost") if f"({pod.metadata.name})" in m] if self.app else []
        marks.notes.append(f"killed {node.name} (executor {lost}, {pod.metadata.name}); its actives' new owners "
                           f"ran {failover_s:.1f} s after the kill; ExecutorLost: {said[-1] if said else '(none)'}")
        return pod, node, t0_ms

    def make_change(self, marks: Marks) -> None:
        assert self.app is not None
        pod, node, t0_ms = self.kill(marks)
        try:
            time.sleep(self.HOLD_S)
        finally:
            since = time.time() * 1000
            marks.phases.append(("the loss", t0_ms, since))
            marks.step(f"{node.name} restarted ({self.c.node.restart_node(node)})")
        # Until the node's kubelet reports again, the pod's status is the one from before the kill
        # (Running, ready): the executor is back once its containers started after the restart.
        self.wait(lambda: self._restarted(pod.metadata.name, since) and self.app is not None
                  and self.app.running_executors() is not None, self.s.change_timeout_s,
                  f"{pod.metadata.name}'s containers started again, every executor running")
        back = self.app.pod(pod.metadata.name)
        marks.step(f"{pod.metadata.name} running again on {back.spec.node_name if back else '?'}")
        self.wait_holds_every_task(marks, since)
        marks.phases.append(("the return", since, marks.done_ms))

    def _restarted(self, name: str, since_ms: float) -> bool:
        """Whether every container of pod `name` is ready and started at `since_ms` or later."""
        assert self.app is not None
        p = self.app.pod(name)
        statuses = (p.status.container_statuses or []) if p is not None else []
        return bool(statuses) and all(
            s.ready and s.state.running is not None and s.state.running.started_at is not None
            and s.state.running.started_at.timestamp() * 1000 >= since_ms for s in statuses)

    #: who runs the generation without the lost executor (`failed_over`)
    FAILED_OVER_BY = "run by the driver"

    def failed_over(self, lost: str) -> bool:
        assert self.app is not None
        m, st = self.app.channel.assignment(), self.app.channel.runtime_state()
        return bool(m and st and lost not in {e.id for e in m.executors}
                    and st.assignment_generation == m.assignment.generation)


class NodeLostWithDriver(NodeLost):
    """The node of the driver and of an executor killed without warning, then restarted `HOLD_S`
    after the failover: with no driver, the operator hands the failover to the runners itself
    (docs/operations.md, "A failover without a driver"). Before the steady window, a driver that
    has no executor beside it is made again beside one (the other nodes cordoned meanwhile).
    Needs ``--nodes`` 2 or more."""

    case = "node lost with the driver"
    FAILED_OVER_BY = "handed to the runners by the operator (HandedOverWithoutDriver)"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._cordoned: list[str] = []
        #: the driver pod deleted to place its successor, and when (epoch ms)
        self._moved: tuple[str, float] | None = None
        self._handed_before = 0

    def ready(self) -> bool:
        if not super().ready():
            return False
        assert self.app is not None
        driver = self.driver_pod()
        if driver is None:
            return False
        if self._moved is not None and (driver.metadata.uid == self._moved[0]
                                        or not self.holds_every_task(self._moved[1])):
            return False  # the new driver has not taken over yet
        executor_nodes = {p.spec.node_name for p in self.app.executor_pods()}
        if driver.spec.node_name in executor_nodes:
            for name in self._cordoned:
                self.c.node.kubectl("uncordon", name)
            self._cordoned = []
            self._handed_before = len(self.app.events("HandedOverWithoutDriver"))
            return True
        if not self._cordoned:
            self._cordoned = [n.name for n in self.c.node.nodes if n.name not in executor_nodes]
            for name in self._cordoned:
                self.c.node.kubectl("cordon", name)
            self._moved = (driver.metadata.uid, time.time() * 1000)
            self.c.node.kubectl("-n", self.namespace, "delete", "pod", driver.metadata.name, "--wait=false")
        return False

    def victim(self, marks: Marks) -> tuple[Any, Any, str]:
        """(executor pod, its node, its executor id): the executor beside the driver."""
        assert self.app is not None
        driver = self.driver_pod()
        assert driver is not None
        here = driver.spec.node_name
        pods = [p for p in self.app.executor_pods() if p.spec.node_name == here]
        if not pods:
            raise NotRun(f"no executor on the driver's node {here}")
        operator_pods = self.app.core.list_namespaced_pod(OPERATOR_NAMESPACE).items
        if self.leader_node(operator_pods) == here:
            operator_pods = self.move_leader_off(here, marks, "the driver's node")
        if {p.spec.node_name for p in operator_pods} <= {here}:
            raise NotRun(f"every operator replica is on {here}, the driver's node")
        pod = pods[0]
        before = self.app.channel.assignment()
        assert before is not None
        (lost,) = [e.id for e in before.executors if e.pod == pod.metadata.name]
        others = [name for name, _ in self._pods_on(here) if name != pod.metadata.name]
        marks.notes.append(f"pods on {here} besides the executor: {', '.join(others)}")
        return pod, self.c.node.node(here), lost

    def failed_over(self, lost: str) -> bool:
        assert self.app is not None
        m = self.app.channel.assignment()
        return bool(m and lost not in {e.id for e in m.executors}
                    and len(self.app.events("HandedOverWithoutDriver")) > self._handed_before)


class NodeLostForGood(NodeLost):
    """The same kill, and the node stays down until the app is whole again without it: its
    executor's claim released after ``spec.state.nodeLossTimeout``, the pod made again on a live
    node with a fresh volume, every copy restored from the changelogs."""

    case = "node lost for good"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.body["spec"].setdefault("state", {})["nodeLossTimeout"] = f"{NODE_LOSS_TIMEOUT_S}s"

    def make_change(self, marks: Marks) -> None:
        assert self.app is not None
        pod, node, t0_ms = self.kill(marks)
        failed_over_ms = time.time() * 1000
        marks.phases.append(("the failover", t0_ms, failed_over_ms))
        try:
            self.wait(lambda: any(pod.metadata.name in m for m in self.app.events("NodeLost")) if self.app else False,
                      self.s.change_timeout_s, f"the NodeLost Event of {pod.metadata.name}")
            marks.step(f"NodeLost: {pod.metadata.name}'s claim released")
            self.wait(lambda: self.app is not None and self.app.remade(pod, node.name) is not None,
                      self.s.change_timeout_s, f"{pod.metadata.name} made again and ready on a live node")
            new = self.app.remade(pod, node.name)
            assert new is not None
            marks.step(f"{pod.metadata.name} made again on {new.spec.node_name}")
            path = self.app.volume_dir(new) / "eddy-runner.log"
            self.volumes[f"{pod.metadata.name} again"] = (path, 0)  # its fresh volume's restores count too
            self.wait(self.caught_up_while_fed, self.s.change_timeout_s,
                      "every copy caught up, the new executor's included")
            marks.done()
            marks.step("holds every task, every copy caught up")
            marks.phases.append(("the re-creation", failed_over_ms, marks.done_ms))
        finally:  # the next run has its three nodes again
            marks.step(f"{node.name} restarted ({self.c.node.restart_node(node)})")

    def caught_up_while_fed(self) -> bool:
        """The driver runs the operator's newest generation, nothing restores, both executors run,
        and every copy is within the app's acceptable recovery lag of its changelog (input flows:
        a standby is always a little behind)."""
        assert self.app is not None
        m, st = self.app.channel.assignment(), self.app.channel.runtime_state()
        return bool(m and st and st.assignment_generation == m.assignment.generation and not st.restores
                    and caught_up(st, m, slack=RECOVERY_LAG) and self.app.running_executors() is not None)


CASES: tuple[type[EddyChange], ...] = (DriverPodDeleted, CompatibleImageUpgrade, ConfigChange, RefusedChange,
                                       Rollback, NodeDrained, NodeDrainedPlainly, NodeLost, NodeLostWithDriver,
                                       NodeLostForGood)


def cases(c: EddyCluster) -> list[tuple[str, SubjectFactory]]:
    """(case, factory) for upgrade.py: each factory binds the shared cluster."""
    def bind(kind: type[EddyChange]) -> SubjectFactory:
        return lambda s, input_topic, output, app_id: kind(c, s, input_topic, output, app_id)

    return [(kind.case, bind(kind)) for kind in CASES]
