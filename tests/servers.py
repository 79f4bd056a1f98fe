"""Start and stop the real servers the tests run against: a Kafka broker, a Kubernetes
control plane (or, for e2e/, a cluster of one or more nodes whose pods really run) and a Spark
`local-cluster`. The pytest fixtures in conftest.py call these once per test session; a server
that cannot start fails the run with its log tail, never skips."""

from __future__ import annotations

import gc
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("EDDY_CACHE", REPO / ".cache"))


class ServerFailed(RuntimeError):
    """A real server the tests need did not start; the message carries its log tail."""


def _ephemeral_ports() -> tuple[int, int]:
    """The range the kernel picks outgoing connections' local ports from."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port(count: int = 1) -> int:
    """A port p such that p .. p+count-1 were free a moment ago (the scripts use consecutive ports).

    Picked below the kernel's ephemeral range: a port in it, free when checked, can be taken by
    any outgoing connection's local port before the server binds it (CI: a Kafka node of three
    failed to bind the port above the first one's while the other lanes' clients connected)."""
    low, high = _ephemeral_ports()
    first, last = (10000, low - count) if low - count > 11024 else (max(high + 1, 10000), 65535 - count)
    rnd = random.Random()
    for _ in range(200):
        base = rnd.randrange(first, last)
        if all(_port_free(base + i) for i in range(count)):
            return base
    raise ServerFailed(f"no {count} consecutive free ports on 127.0.0.1 in {first}-{last}")


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def run_script(*args: str, timeout: float = 1800, env: dict[str, str] | None = None) -> str:
    """Run one of the infra scripts; on failure raise with its output (which ends with the log tail)."""
    proc = subprocess.run(
        [str(a) for a in args], cwd=REPO, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, **env} if env else None,
    )
    if proc.returncode != 0:
        raise ServerFailed(
            f"{' '.join(map(str, args))} exited {proc.returncode}\n--- stdout ---\n{proc.stdout[-4000:]}"
            f"\n--- stderr ---\n{proc.stderr[-4000:]}"
        )
    return proc.stdout


@dataclass(frozen=True)
class KafkaCredentials:
    """The SCRAM-SHA-512 user of a broker's SASL_SSL listener and the CA that signed its
    certificate (made by kafka.sh under ``<data-dir>/tls/``), decided before the broker starts so
    that Spark's executors, which inherit the test process's environment, can be given them."""

    username: str
    password: str = field(repr=False)
    ca_file: Path

    @classmethod
    def for_broker(cls, data_dir: Path) -> KafkaCredentials:
        return cls("eddy-test", secrets.token_urlsafe(18), data_dir / "tls" / "ca.crt")

    def env(self) -> dict[str, str]:
        """The variables a user sets for ``eddy run`` (and the operator sets from Secrets)."""
        return {"EDDY_KAFKA_SASL_USERNAME": self.username, "EDDY_KAFKA_SASL_PASSWORD": self.password,
                "EDDY_KAFKA_SSL_CA_LOCATION": str(self.ca_file)}


@dataclass
class KafkaBroker:
    """A running one-node KRaft broker (on 127.0.0.1, or on the node address for real pods).

    It serves PLAINTEXT on `bootstrap` and SASL_SSL with SCRAM-SHA-512 on `secure_bootstrap`
    (user and CA in `credentials`); both listeners reach the same topics.
    """

    bootstrap: str
    data_dir: Path
    secure_bootstrap: str = ""
    credentials: KafkaCredentials | None = None
    _admin: object | None = field(default=None, repr=False)

    def kafka_spec(self, listener: str = "plaintext") -> dict[str, object]:
        """``spec.kafka`` of a StreamApp on the ``plaintext`` or the ``sasl_ssl`` listener."""
        return {"bootstrapServers": self.bootstrap} if listener == "plaintext" else self.security_spec()

    def client_config(self, listener: str = "plaintext"):  # -> eddy_runtime.kafka.client.KafkaClientConfig
        """What the runtime's clients get for that listener (credentials from the environment)."""
        from eddy_runtime.kafka.client import KafkaClientConfig

        if listener == "plaintext":
            return KafkaClientConfig.of(self.bootstrap)
        return KafkaClientConfig(self.secure_bootstrap, protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512")

    def security_spec(self) -> dict[str, object]:
        """``spec.kafka`` of a StreamApp that talks to the SASL_SSL listener (credentials from env)."""
        return {"bootstrapServers": self.secure_bootstrap,
                "security": {"protocol": "SASL_SSL",
                             "sasl": {"mechanism": "SCRAM-SHA-512",
                                      "usernameSecretRef": {"name": "kafka-user", "key": "username"},
                                      "passwordSecretRef": {"name": "kafka-user", "key": "password"}},
                             "tls": {"caSecretRef": {"name": "kafka-ca", "key": "ca.crt"}}}}

    @property
    def admin(self):  # -> confluent_kafka.admin.AdminClient
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient({"bootstrap.servers": self.bootstrap})
        return self._admin

    def create_topic(self, name: str, partitions: int = 1, config: dict[str, str] | None = None,
                     replication_factor: int = 1) -> str:
        from confluent_kafka.admin import NewTopic

        futures = self.admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=replication_factor, config=config or {})]
        )
        futures[name].result(30)
        self.topic_partitions(name, partitions, replication_factor)
        return name

    def topic_partitions(self, name: str, partitions: int, replication_factor: int) -> dict[int, Any]:
        """The topic's partition metadata once it shows every partition with all its replicas.

        Each broker answering metadata may learn of a new topic a moment after another did, so a
        single read can come back empty (seen on the three-node cluster)."""
        deadline = time.monotonic() + 30
        while True:
            topic = self.admin.list_topics(name, timeout=10).topics.get(name)
            found = dict(topic.partitions) if topic and topic.error is None else {}
            if len(found) == partitions and all(len(m.replicas) == replication_factor for m in found.values()):
                return found
            if time.monotonic() > deadline:
                shown = {p: len(m.replicas) for p, m in found.items()}
                raise AssertionError(f"topic {name}: metadata still shows {shown} (partition: replicas) after 30 s")
            time.sleep(0.1)

    def new_topic(self, prefix: str = "t", partitions: int = 1, config: dict[str, str] | None = None) -> str:
        """Create a topic with a unique name (tests share one broker)."""
        return self.create_topic(f"{prefix}-{uuid.uuid4().hex[:8]}", partitions, config)

    def unique_name(self, prefix: str = "app") -> str:
        return f"{prefix}-{uuid.uuid4().hex[:8]}"


@contextmanager
def kafka_broker(base_dir: Path, host: str = "127.0.0.1",
                 credentials: KafkaCredentials | None = None) -> Iterator[KafkaBroker]:
    """A broker in ``<base_dir>/kafka`` with a PLAINTEXT and a SASL_SSL listener (``KAFKA_SECURE=1``)."""
    run_script(REPO / "infra/kafka/kafka.sh", "fetch")
    port = free_port(3)
    data_dir = base_dir / "kafka"
    data_dir.mkdir(parents=True, exist_ok=True)
    credentials = credentials or KafkaCredentials.for_broker(data_dir)
    run_script(REPO / "infra/kafka/kafka.sh", "start", data_dir, str(port), timeout=180,
               env={"KAFKA_HOST": host, "KAFKA_SECURE": "1", "KAFKA_SCRAM_USER": credentials.username,
                    "KAFKA_SCRAM_PASSWORD": credentials.password})
    if not credentials.ca_file.is_file():
        raise ServerFailed(f"kafka.sh made no CA at {credentials.ca_file}")
    broker = KafkaBroker(bootstrap=f"{host}:{port}", data_dir=data_dir, secure_bootstrap=f"{host}:{port + 2}",
                         credentials=credentials)
    try:
        yield broker
    finally:
        # AdminClient has no close(): drop it before the broker stops, or librdkafka logs
        # "connection refused" while it reconnects at interpreter exit.
        broker._admin = None
        gc.collect()
        run_script(REPO / "infra/kafka/kafka.sh", "stop", data_dir, timeout=60)


@dataclass
class KafkaCluster(KafkaBroker):
    """Three (or `nodes`) KRaft nodes on 127.0.0.1, each broker and controller (the quorum is all
    of them, so one stopped node leaves a majority). Kafka's own topics and the brokers'
    default.replication.factor are 3, min.insync.replicas 1 (a topic's own setting is what counts).
    `data_dir` holds `node-<i>` per node."""

    nodes: int = 3
    host: str = "127.0.0.1"

    def node_dir(self, i: int) -> Path:
        return self.data_dir / f"node-{i}"

    def stop_broker(self, i: int) -> None:
        """Stop node `i` (1-based) cleanly (SIGTERM: controlled shutdown moves its leaderships)."""
        run_script(REPO / "infra/kafka/kafka.sh", "stop", self.node_dir(i), timeout=60)

    def kill_broker(self, i: int) -> int:
        """SIGKILL node `i`'s JVM (no controlled shutdown: its leaderships move only once the
        controller sees its session expire); returns its pid. `start_broker` brings it back."""
        pid = int((self.node_dir(i) / "kafka.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return pid

    def start_broker(self, i: int, timeout_s: float = 60) -> None:
        """Start node `i` again on its data; returns once the cluster lists it among its brokers."""
        run_script(REPO / "infra/kafka/kafka.sh", "cluster-node-start", self.data_dir, str(i), timeout=180,
                   env={"KAFKA_HOST": self.host})
        self.wait_for_brokers(set(range(1, self.nodes + 1)), timeout_s)

    def live_brokers(self) -> set[int]:
        return set(self.admin.list_topics(timeout=10).brokers)

    def wait_for_brokers(self, ids: set[int], timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while (live := self.live_brokers()) != ids:
            if time.monotonic() > deadline:
                raise ServerFailed(f"brokers {sorted(live)} registered after {timeout_s}s, expected {sorted(ids)}")
            time.sleep(0.2)

    def wait_in_sync(self, topics: list[str], timeout_s: float = 60) -> None:
        """Until every replica of every partition of `topics` is in sync (a restarted broker caught up)."""
        deadline = time.monotonic() + timeout_s
        while True:
            meta = self.admin.list_topics(timeout=10).topics
            behind = {(t, p): (sorted(m.isrs), sorted(m.replicas)) for t in topics
                      for p, m in (meta[t].partitions.items() if t in meta else [])
                      if sorted(m.isrs) != sorted(m.replicas)}
            if not behind and all(t in meta and meta[t].partitions for t in topics):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"replicas not in sync after {timeout_s}s: (isr, replicas) {behind}")
            time.sleep(0.2)


@contextmanager
def kafka_nodes(base_dir: Path, nodes: int = 3, host: str = "127.0.0.1") -> Iterator[KafkaCluster]:
    """A `KafkaCluster` of `nodes` nodes listening on `host` (a real cluster's node address, for
    pods); every node stopped at the end."""
    run_script(REPO / "infra/kafka/kafka.sh", "fetch")
    port = free_port(2 * nodes)
    data_dir = base_dir / "kafka-cluster"
    cluster: KafkaCluster | None = None
    try:
        bootstrap = run_script(REPO / "infra/kafka/kafka.sh", "cluster-start", data_dir, str(nodes), str(port),
                               timeout=240, env={"KAFKA_HOST": host}).strip().splitlines()[-1]
        cluster = KafkaCluster(bootstrap=bootstrap, data_dir=data_dir, nodes=nodes, host=host)
        cluster.wait_for_brokers(set(range(1, nodes + 1)))
        yield cluster
    finally:
        if cluster is not None:  # no admin client reconnecting to stopped brokers (see kafka_broker)
            cluster._admin = None
            gc.collect()
        run_script(REPO / "infra/kafka/kafka.sh", "cluster-stop", data_dir, timeout=120)


@dataclass
class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler (+ kwok fake nodes)."""

    dir: Path
    kubeconfig: Path
    bin_dir: Path

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {proc.stderr}")
        return proc

    def api_client(self):  # -> kubernetes.client.ApiClient
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))


@contextmanager
def control_plane(base_dir: Path, fake_nodes: int = 2) -> Iterator[ControlPlane]:
    script = REPO / "infra/k8s/k8s.sh"
    run_script(script, "build", "control-plane", timeout=3600)
    port = free_port(1)
    d = base_dir / "k8s"
    d.mkdir(parents=True, exist_ok=True)
    try:
        run_script(script, "start", d, str(port), timeout=300)
        if fake_nodes:
            run_script(script, "kwok-start", d, str(fake_nodes), timeout=120)
        yield ControlPlane(dir=d, kubeconfig=d / "kubeconfig", bin_dir=CACHE / "k8s" / "bin")
    finally:
        run_script(script, "stop", d, timeout=120)


@dataclass(frozen=True)
class ClusterNode:
    """One real node of a `NodeCluster`, as ``node.sh start`` wrote it in ``<dir>/nodes``: its
    own kubelet and containerd (state in `dir`, processes in the cgroup root `cgroup`), its
    address on eddy0, its zone label and its pod range on bridge `bridge`."""

    index: int
    name: str
    address: str
    zone: str
    pod_cidr: str
    bridge: str
    dir: Path
    cgroup: str


@dataclass
class NodeCluster(ControlPlane):
    """A cluster whose pods really run (infra/cluster/node.sh), inside the network namespace of
    this test process (infra/cluster/netns.sh); `node_ip` is the address of node 1 and of the
    control plane, CoreDNS and kube-proxy, reachable from pods and from this process, and nowhere
    else. `nodes` lists the nodes (one, unless started with more)."""

    node_ip: str = ""
    env: dict[str, str] = field(default_factory=dict)
    nodes: tuple[ClusterNode, ...] = ()

    def node(self, name: str) -> ClusterNode:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"no node {name} in {[n.name for n in self.nodes]}")

    def kill_node(self, node: ClusterNode) -> str:
        """Make `node` fail for real, without warning (``node.sh kill-node``): its kubelet, its
        containerd, their children, its shims and every container process are SIGKILLed by PID,
        and its pod range becomes a blackhole route. The control plane, CoreDNS and kube-proxy
        (shared by the nodes) go on. Returns node.sh's line saying what it killed."""
        return run_script(REPO / "infra/cluster/node.sh", "kill-node", self.dir, node.name, timeout=120).strip()

    def restart_node(self, node: ClusterNode) -> str:
        """Bring a killed `node` back (``node.sh restart-node``), as a machine that rebooted: its
        containerd and kubelet start on their state, and it is Ready when this returns."""
        return run_script(REPO / "infra/cluster/node.sh", "restart-node", self.dir, node.name, timeout=300).strip()

    def processes_of(self, node: ClusterNode) -> dict[int, str]:
        """The live processes of `node` (PID: command line), found from /proc independently of
        node.sh: those in its cgroup root (any hierarchy: the containers) and those whose command
        line names its kubelet configuration, its containerd configuration or its containerd
        socket (the shims)."""
        marks = (f"{node.dir}/kubelet/config.yaml", f"{node.dir}/containerd/config.toml",
                 f"-address {node.dir}/containerd/containerd.sock ")
        root = f"/{node.cgroup}"
        found: dict[int, str] = {}
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                if (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                cgroups = [line.split(":", 2)[2] for line in (proc / "cgroup").read_text().splitlines()]
            except (OSError, IndexError):
                continue  # gone meanwhile
            if any(c == root or c.startswith(root + "/") for c in cgroups) or any(m in cmdline for m in marks):
                found[int(proc.name)] = cmdline.strip()
        return found


def _read_env_file(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip().strip("'\"")
    return out


def in_cluster_namespace() -> str:
    """The node address when this process runs inside infra/cluster/netns.sh; fails otherwise,
    naming the command that runs the e2e tests (their pods' addresses must stay in there)."""
    node_ip = os.environ.get("EDDY_NODE_IP")
    if not node_ip:
        raise ServerFailed("the real-pod tests run inside their own network namespace: "
                           "`make test-e2e` (infra/cluster/netns.sh .venv/bin/python -m pytest e2e)")
    return node_ip


def _read_nodes(path: Path) -> tuple[ClusterNode, ...]:
    """node.sh's ``<dir>/nodes``: index name address zone pod-cidr bridge directory cgroup."""
    nodes = []
    for line in path.read_text().splitlines():
        index, name, address, zone, pod_cidr, bridge, directory, cgroup = line.split()
        nodes.append(ClusterNode(int(index), name, address, zone, pod_cidr, bridge, Path(directory), cgroup))
    return tuple(nodes)


@contextmanager
def node_cluster(base_dir: Path, nodes: int = 1, name: str = "node") -> Iterator[NodeCluster]:
    """A cluster of `nodes` real nodes in ``<base_dir>/<name>``. One cluster at a time runs in a
    network namespace (they would share addresses and ports): node.sh refuses a second."""
    node_ip = in_cluster_namespace()
    script = REPO / "infra/cluster/node.sh"
    d = base_dir / name
    d.mkdir(parents=True, exist_ok=True)
    try:
        run_script(script, "start", d, timeout=600, env={"EDDY_NODES": str(nodes)})
        yield NodeCluster(dir=d, kubeconfig=d / "kubeconfig", bin_dir=CACHE / "k8s" / "bin", node_ip=node_ip,
                          env=_read_env_file(d / "cluster.env"), nodes=_read_nodes(d / "nodes"))
    finally:
        run_script(script, "stop", d, timeout=300)


OPERATOR_NAMESPACE = "eddy-system"


def helm(node: NodeCluster, *args: str, timeout: float = 300) -> str:
    proc = subprocess.run([str(node.bin_dir / "helm"), "--kubeconfig", str(node.kubeconfig), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise ServerFailed(f"helm {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def install_operator(node: NodeCluster, release: str = "eddy") -> None:
    """`helm install` of charts/eddy-operator, as the README says, with the image the node holds
    (imported, never pulled); fails with the operator pod's description and log. A release this
    cluster already runs (an earlier test module's) is kept as it is."""
    if release in helm(node, "list", "--namespace", OPERATOR_NAMESPACE, "--deployed", "--short").split():
        return
    try:
        helm(node, "install", release, "charts/eddy-operator", "--namespace", OPERATOR_NAMESPACE,
             "--create-namespace", "--set", "image.pullPolicy=Never", "--set", "resyncSeconds=5",
             "--wait", "--timeout", "240s", timeout=300)
    except ServerFailed as e:
        pods = node.kubectl("-n", OPERATOR_NAMESPACE, "describe", "pods", check=False).stdout
        logs = node.kubectl("-n", OPERATOR_NAMESPACE, "logs", "-l", "app.kubernetes.io/name=eddy-operator",
                            "--tail=60", check=False)
        raise ServerFailed(f"{e}\n--- pods ---\n{pods[-4000:]}\n--- logs ---\n{logs.stdout}{logs.stderr}") from None


def spark_env() -> dict[str, str]:
    """Environment for a local-cluster Spark whose Python workers use this interpreter."""
    return {
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
