"""Throughput and end-to-end latency of one stateful word count in Eddy, Quix Streams, Kafka Streams and Spark.

The same job for each system, on the same broker and machine, in one run: every input value is
one word (key ignored), words are re-keyed through a repartition topic, counted per word in a
RocksDB store with a changelog, exactly-once, and every updated count goes to an output topic
(key = word, value = 64-bit big-endian count).

- Eddy: ``examples/wordcount/app.py`` (``build_words``: each value is one word, re-keyed by itself
  as the peers do, with Eddy's own record steps, so the continuous path) on Spark
  ``local-cluster[E,1,1024]`` (E = ``--eddy-executors``, one core each), driven by
  ``eddy_runtime.driver.loop.Driver`` in a child process of this script;
- Quix Streams (``bench/quix/wordcount.py``) in its own virtual environment, one process;
- Kafka Streams 4.x (``bench/kstreams/run.sh wordcount``), one stream thread;
- Spark Structured Streaming (``bench/sss/wordcount.py``, the project's pyspark, RocksDB state store
  provider, Kafka source and sink) as ``sss``, micro-batch mode, ``local[1]``, trigger = the commit
  interval, and as ``sss-rt``, real-time mode (``trigger(realTime=...)``, batches of
  ``--sss-rt-batch-ms``, at least 5 s), ``local[2P]`` for P partitions: its P source and P state tasks
  run at once, so it is given 2P task slots (``cores``), and the CPU it really used is measured.
  Spark's Kafka sink is at-least-once (not the exactly-once of the others): see the check below.

Phase 1, throughput: ``--records`` words drawn from a Zipf law over ``--distinct`` words fill an
input topic of ``--partitions`` partitions; up to 400,000 of them are copied once in transactions
(read_committed, offsets in each transaction) to warm the broker's JVM (`warm_broker`); each
system then counts all of it from the earliest
offset with a fresh app id. records/s = records / (first input record read -> last count update
emitted), as each program times it; per core = divided by the cores the system was given
(Kafka Streams 1 thread, Quix 1 process, Eddy E executor cores, sss 1, sss-rt 2P). The script also samples the
CPU time of each system's whole process tree (JVMs, Python workers, drivers) over that window:
"cores used" and "records per CPU-second" say what the work really cost on this shared machine.
Eddy runs a small warm-up app in the same Spark application first (executors and Python workers
are up before its clock starts, as the peers' processes are); its measured app still starts its
task runner, stores and transactional producers in its first batch, so that batch's length and
the rate after it are printed too. sss and sss-rt run a warm-up query (200,000 words of a topic of
their own, micro-batch) in the same Spark session first, so that the JVM's code paths are compiled
before the clock starts (bench/sss/wordcount.py); Kafka Streams and Quix start cold.

Phase 2, latency: each system gets a fresh input topic; once it counted a few warm-up records,
a producer sends ``--rate`` records/s for ``--settle`` (5) + ``--duration`` s, stamping each with its
send time; the latencies of the records of the first ``--settle`` seconds are not measured (every
system, Kafka Streams too, shows a second or two of slower updates when the rate starts). One
read_committed consumer (the same code for every system) records when each count update becomes
visible. An input record's latency is the time from its send to the first visible update whose
count includes it (the k-th occurrence of a word is visible once that word's count is >= k), so
systems that emit one update per key and batch (Eddy, Kafka Streams' record cache) and systems
that emit every update (Quix) are measured alike. Each program's own now-minus-timestamp figure
is printed too ("self").

Correctness: after each run the output topic is read in full (read_committed); the last count
per word must equal the count computed here from the input, and for the exactly-once systems every
update must raise its word's count. For sss, whose sink is at-least-once, an update may repeat a
count (a re-run batch writes it again) but not lower it; for sss-rt a re-run real-time batch
replays its updates, so repeats and lower counts are allowed; both are counted and printed (none
are expected in a run without failures). The script exits 1 if any system's counts are wrong or a
system failed.

    .venv/bin/python bench/throughput.py                                # all five, own broker
    .venv/bin/python bench/throughput.py --repeat 3                     # each phase 3 times; middle runs
    .venv/bin/python bench/throughput.py --systems quix,kstreams --records 500000
    .venv/bin/python bench/throughput.py --bootstrap 127.0.0.1:9092 --rate 5000 --duration 20

Without ``--bootstrap`` a broker is started with infra/kafka/kafka.sh in a temporary folder and
stopped at the end. Quix Streams is installed into ``.cache/bench/quix-venv`` on first use, Spark's
Kafka connector into ``.cache/spark-kafka`` (``infra/spark/connector.sh``).
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import functools
import gc
import json
import math
import multiprocessing
import os
import pickle
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from sss import peer as sss  # bench/sss: this script's folder is on sys.path

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("EDDY_CACHE", REPO / ".cache")) / "bench"
KAFKA_SH = REPO / "infra" / "kafka" / "kafka.sh"
KSTREAMS_SH = REPO / "bench" / "kstreams" / "run.sh"
QUIX_APP = REPO / "bench" / "quix" / "wordcount.py"
QUIX_VERSION = "3.28.1"
SYSTEMS = ("eddy", "quix", "kstreams", *sss.SYSTEMS)
#: counted before the live phase, so that a system's start-up is not measured as latency
WARMUP_WORD = b"warmup"
WARMUP_RECORDS = 5



def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (as the Kafka Streams and Quix programs compute theirs); nan if empty."""
    if not sorted_values:
        return math.nan
    return float(sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)])


# -- the workload -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """Words in produce order (as bytes) and how often each occurs."""

    words: list[bytes]
    counts: dict[bytes, int]


def zipf_words(records: int, distinct: int, exponent: float, seed: int) -> Workload:
    """`records` words over a vocabulary of `distinct` words, word i drawn with weight 1/i**exponent."""
    import numpy as np

    rng = np.random.default_rng(seed)
    weights = np.arange(1, distinct + 1, dtype=np.float64) ** -exponent
    ranks = rng.choice(distinct, size=records, p=weights / weights.sum())
    # Names that the word-count programs keep as they are (lower case, letters and digits).
    vocabulary = [f"w{i}".encode() for i in range(distinct)]
    words = [vocabulary[i] for i in ranks.tolist()]
    per_word = np.bincount(ranks, minlength=distinct)
    counts = {vocabulary[i]: int(c) for i, c in enumerate(per_word.tolist()) if c}
    return Workload(words, counts)


# -- Kafka ----------------------------------------------------------------------------------------------


def free_port() -> int:
    """A port p with p and p+1 free (kafka.sh puts the controller on p+1)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
                return port
            except OSError:
                continue
    raise RuntimeError("no two consecutive free ports")


@contextlib.contextmanager
def broker(bootstrap: str | None) -> Iterator[str]:
    if bootstrap:
        yield bootstrap
        return
    data = Path(tempfile.mkdtemp(prefix="eddy-bench-kafka-"))
    port = free_port()
    say(f"starting a Kafka broker on 127.0.0.1:{port} (data in {data})")
    subprocess.run([str(KAFKA_SH), "fetch"], check=True, stdout=subprocess.DEVNULL)
    env = {**os.environ, "KAFKA_HEAP": os.environ.get("KAFKA_HEAP", "-Xmx2g")}
    subprocess.run([str(KAFKA_SH), "start", str(data), str(port)], check=True, env=env, stdout=subprocess.DEVNULL)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        admin_client.cache_clear()  # its client would log failed reconnects once the broker is gone
        gc.collect()
        subprocess.run([str(KAFKA_SH), "stop", str(data)], stdout=subprocess.DEVNULL)
        subprocess.run(["rm", "-rf", str(data)])


@functools.cache
def admin_client(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def create_topics(bootstrap: str, names: Sequence[str], partitions: int, config: dict[str, str] | None = None) -> None:
    from confluent_kafka.admin import NewTopic

    futures = admin_client(bootstrap).create_topics([NewTopic(n, num_partitions=partitions, replication_factor=1,
                                            config=config or {}) for n in names])
    for f in futures.values():
        f.result(60)


#: input records copied by `warm_broker` before the first system is timed
BROKER_WARMUP_RECORDS = 400_000


def warm_broker(bootstrap: str, topic: str, partitions: int, records: int = BROKER_WARMUP_RECORDS) -> float:
    """Copy the first `records` of `topic` to a scratch topic the way every system works: a
    read_committed consumer, a transactional producer, one transaction with its input offsets
    per 10,000 records. The systems are timed one after the other on one broker, and the first
    one met its JVM cold (Kafka Streams counted 96k records/s when first in a run, 110k second,
    148k third). Returns the seconds the copy took."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    scratch = f"{topic}-warmup"
    create_topics(bootstrap, [scratch], partitions)
    group = f"bench-warmup-{uuid.uuid4().hex[:6]}"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": group, "linger.ms": 5})
    producer.init_transactions(30)
    started, copied = time.monotonic(), 0
    try:
        while copied < records:
            batch = consumer.consume(10_000, 5.0)
            if not batch:
                break
            producer.begin_transaction()
            for m in batch:
                if m.error() is not None:
                    raise RuntimeError(f"warming the broker: {m.error()}")
                producer.produce(scratch, m.value(), m.key(), partition=m.partition())
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(30)
            copied += len(batch)
    finally:
        consumer.close()
        producer.flush(30)
    return time.monotonic() - started


def output_topic(bootstrap: str, name: str, partitions: int) -> str:
    """Output topics stamp records with the broker's append time: the end of a throughput window."""
    create_topics(bootstrap, [name], partitions, {"message.timestamp.type": "LogAppendTime"})
    return name


def produce_all(bootstrap: str, topic: str, values: Sequence[bytes]) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                  "queue.buffering.max.messages": 1_000_000})
    for i, v in enumerate(values):
        while True:
            try:
                p.produce(topic, v)
                break
            except BufferError:
                p.poll(0.05)
        if i % 50_000 == 0:
            p.poll(0)
    if p.flush(300):
        raise RuntimeError(f"could not fill {topic}")


@dataclass
class OutputScan:
    """Everything committed to an output topic, read to its end."""

    records: int = 0
    latest: dict[bytes, int] = field(default_factory=dict)
    #: broker append time (ms) of the last record
    last_append_ms: int = 0
    #: updates whose count did not grow over the previous one of the same word (a duplicate)
    not_increasing: int = 0
    #: of those, updates whose count was lower than the previous one of the same word
    decreasing: int = 0


def read_output(bootstrap: str, topic: str, partitions: int) -> OutputScan:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-check-{uuid.uuid4().hex[:8]}",
                  "isolation.level": "read_committed", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    scan = OutputScan()
    at_end: set[int] = set()
    latest = scan.latest
    last_data = time.monotonic()
    try:
        # The program has exited: everything is committed once the markers arrived (a quiet second).
        while len(at_end) < partitions or time.monotonic() - last_data < 1.0:
            for m in c.consume(10_000, timeout=0.2):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_end.add(m.partition())
                        continue
                    raise RuntimeError(f"reading {topic}: {err}")
                at_end.discard(m.partition())
                last_data = time.monotonic()
                n = int.from_bytes(m.value(), "big", signed=True)
                key = m.key()
                if n <= latest.get(key, 0):
                    scan.not_increasing += 1
                    scan.decreasing += n < latest.get(key, 0)
                latest[key] = n
                scan.records += 1
                scan.last_append_ms = max(scan.last_append_ms, m.timestamp()[1])
    finally:
        c.close()
    return scan


def count_errors(expected: dict[bytes, int], got: dict[bytes, int]) -> list[str]:
    """Words whose last count differs from the reference (a few, for the report)."""
    wrong = [f"{w.decode()}: {got.get(w)} != {n}" for w, n in expected.items() if got.get(w) != n]
    wrong += [f"{w.decode()}: {n} (not in the input)" for w, n in got.items() if w not in expected]
    return wrong


# -- CPU of a process tree ----------------------------------------------------------------------------


class ProcessTreeCpu:
    """Samples the CPU seconds used so far by a process and all its descendants (a background thread)."""

    def __init__(self, pid: int, interval_s: float = 0.2, role: Callable[[str], str] | None = None) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.samples: list[tuple[float, float]] = []  # (wall clock, CPU seconds)
        #: `role` names a process by its command line: the CPU seconds of each role, per sample
        self.role = role
        self.role_samples: list[tuple[float, dict[str, float]]] = []
        self._tick = os.sysconf("SC_CLK_TCK")
        #: for `role`: pid -> (parent, role, CPU ticks of it and its waited-for children) when last seen;
        #: each role's ticks of processes that ended; each process's ticks of ended children counted apart
        self._seen: dict[int, tuple[int, str, int]] = {}
        self._ended: dict[str, int] = {}
        self._reaped: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="cpu-sampler")

    def start(self) -> ProcessTreeCpu:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            by_role: dict[str, float] = {}
            cpu = self.read(by_role)
            if cpu is not None:
                now = time.time()
                self.samples.append((now, cpu))
                if self.role is not None:
                    self.role_samples.append((now, by_role))
            self._stop.wait(self.interval_s)

    def _role_of(self, pid: int) -> str:
        """Read each time: a process forked by another has its parent's command line until it execs.
        One that has none (it ended and waits to be reaped) keeps the role it was last seen with."""
        assert self.role is not None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            cmdline = ""
        if not cmdline and pid in self._seen:
            return self._seen[pid][1]
        return self.role(cmdline)

    def read(self, by_role: dict[str, float] | None = None) -> float | None:
        """The tree's CPU seconds so far; with `role`, also each role's, into `by_role`.

        A process that ended keeps what it was last seen to have used under its own role: the
        kernel adds an ended child's time to its parent's (cutime), which would move all of it, at
        the moment it is reaped, to the parent's role (the warm-up app's task runner, reaped by
        the Spark Python worker that started it, showed as 1-2 CPU-seconds of "workers" in the
        measured app's window). Children that ended between two samples count under their parent.
        """
        children: dict[int, list[int]] = {}
        ticks: dict[int, int] = {}
        parent: dict[int, int] = {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            # Fields after "(comm)": state ppid ... utime(14) stime(15) cutime(16) cstime(17).
            rest = stat[stat.rfind(")") + 2:].split()
            pid = int(entry.name)
            parent[pid] = int(rest[1])
            children.setdefault(parent[pid], []).append(pid)
            # cutime/cstime hold the children that ended (and were waited for); live ones count themselves.
            ticks[pid] = int(rest[11]) + int(rest[12]) + int(rest[13]) + int(rest[14])
        if self.pid not in ticks:
            return None
        total, todo, tree = 0, [self.pid], []
        while todo:
            pid = todo.pop()
            total += ticks.get(pid, 0)
            tree.append(pid)
            todo.extend(children.get(pid, ()))
        if self.role is not None and by_role is not None:
            self._roles(tree, ticks, parent, by_role)
        return total / self._tick

    def _roles(self, tree: list[int], ticks: dict[int, int], parent: dict[int, int],
               by_role: dict[str, float]) -> None:
        for pid in [p for p in self._seen if p not in ticks]:  # ended since the last sample
            ppid, role, last = self._seen.pop(pid)
            self._ended[role] = self._ended.get(role, 0) + last - self._reaped.pop(pid, 0)
            self._reaped[ppid] = self._reaped.get(ppid, 0) + last
        counted = dict(self._ended)
        for pid in tree:
            role = self._role_of(pid)
            self._seen[pid] = (parent[pid], role, ticks[pid])
            counted[role] = counted.get(role, 0) + ticks[pid] - self._reaped.get(pid, 0)
        for role, n in counted.items():
            by_role[role] = n / self._tick

    def roles_between(self, start: float, end: float) -> dict[str, float]:
        """Each role's CPU seconds between two wall-clock times (the samples nearest inside)."""
        inside = [(t, r) for t, r in self.role_samples if start <= t <= end]
        if len(inside) < 2:
            return {}
        (_, first), (_, last) = inside[0], inside[-1]
        return {role: last.get(role, 0.0) - first.get(role, 0.0) for role in sorted(set(first) | set(last))}

    def between(self, start: float, end: float) -> float:
        """CPU seconds used between two wall-clock times (interpolated between samples)."""
        return self._at(end) - self._at(start)

    def _at(self, t: float) -> float:
        s = self.samples
        if not s:
            return math.nan
        i = bisect.bisect_left(s, (t, -1.0))
        if i == 0:
            return s[0][1]
        if i == len(s):
            return s[-1][1]
        (t0, c0), (t1, c1) = s[i - 1], s[i]
        return c0 + (c1 - c0) * (t - t0) / (t1 - t0)


# -- the systems ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    bootstrap: str
    partitions: int
    commit_interval_ms: int
    eddy_executors: int
    eddy_max_batch_records: int
    eddy_sync_s: float
    timeout_s: float
    sss_rt_batch_ms: int
    work_dir: Path
    quix_python: Path | None


def cores_given(system: str, settings: Settings) -> int:
    if system in sss.SYSTEMS:
        return sss.cores(system, settings.partitions)
    return settings.eddy_executors if system == "eddy" else 1


def command(system: str, settings: Settings, input_topic: str, output: str, app_id: str, expected: int) -> list[str]:
    state_dir = settings.work_dir / "state" / app_id
    common = ["--bootstrap", settings.bootstrap, "--input", input_topic, "--output", output, "--app-id", app_id,
              "--expected-records", str(expected), "--state-dir", str(state_dir),
              "--timeout-s", str(int(settings.timeout_s))]
    if system == "kstreams":
        return [str(KSTREAMS_SH), "wordcount", *common, "--threads", "1",
                "--config", f"commit.interval.ms={settings.commit_interval_ms}"]
    if system == "quix":
        assert settings.quix_python is not None
        return [str(settings.quix_python), str(QUIX_APP), *common,
                "--commit-interval-s", str(settings.commit_interval_ms / 1000)]
    if system in sss.SYSTEMS:
        return sss.command(system, bootstrap=settings.bootstrap, input_topic=input_topic, output=output,
                           state_dir=state_dir, expected=expected, timeout_s=settings.timeout_s,
                           partitions=settings.partitions, commit_interval_ms=settings.commit_interval_ms,
                           realtime_batch_ms=settings.sss_rt_batch_ms)
    if system == "eddy":
        return [sys.executable, str(Path(__file__).resolve()), "_eddy", *common,
                "--trigger-ms", str(settings.commit_interval_ms), "--executors", str(settings.eddy_executors),
                "--max-batch-records", str(settings.eddy_max_batch_records), "--sync-s", str(settings.eddy_sync_s)]
    raise ValueError(system)


class SystemRun:
    """One run of a system's word-count program: the child process, its CPU sampler and its result line."""

    def __init__(self, system: str, settings: Settings, input_topic: str, output: str, expected: int,
                 phase: str) -> None:
        self.system = system
        self.app_id = f"bench-{system}-{phase}-{uuid.uuid4().hex[:8]}"
        self.log = settings.work_dir / f"{self.app_id}.log"
        self.timeout_s = settings.timeout_s
        argv = command(system, settings, input_topic, output, self.app_id, expected)
        with self.log.open("w") as err:
            self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True, cwd=REPO,
                                         start_new_session=True)
        self.cpu = ProcessTreeCpu(self.proc.pid).start()
        self.load_start = loadavg()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def wait(self) -> dict[str, Any]:
        """The program's JSON line, or {"error": ...}."""
        try:
            out, _ = self.proc.communicate(timeout=self.timeout_s + 120)
        except subprocess.TimeoutExpired:
            self.kill()
            out = ""
        self.cpu.stop()
        self.load_end = loadavg()
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        result: dict[str, Any] = json.loads(lines[-1]) if lines else {}
        if self.proc.returncode != 0 or "records" not in result:
            result.setdefault("error", f"exit code {self.proc.returncode}")
            result["log_tail"] = self.log_tail()
        return result

    def kill(self) -> None:
        # Its own session: the JVMs and Python workers it started go with it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, 15)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, 9)


# -- phase 1: throughput ---------------------------------------------------------------------------------


@dataclass
class Throughput:
    system: str
    cores: int
    records: int = 0
    seconds: float = math.nan
    cpu_s: float = math.nan
    load: tuple[float, float] = (math.nan, math.nan)
    output_records: int = 0
    #: updates that repeated or lowered their word's count (allowed for at-least-once sinks only)
    repeated: int = 0
    decreasing: int = 0
    wrong: list[str] = field(default_factory=list)
    error: str | None = None
    #: Eddy only: its first batch (which also starts its task runners) and its rate after it
    first_batch_s: float = math.nan
    first_batch_records: int = 0
    after_first_batch: float = math.nan

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds else math.nan

    @property
    def per_core(self) -> float:
        return self.records_per_s / self.cores

    @property
    def per_cpu_s(self) -> float:
        return self.records / self.cpu_s if self.cpu_s else math.nan


def run_throughput(system: str, settings: Settings, input_topic: str, workload: Workload) -> Throughput:
    result = Throughput(system, cores_given(system, settings))
    out = output_topic(settings.bootstrap, f"bench-{system}-tp-out-{uuid.uuid4().hex[:6]}", settings.partitions)
    run = SystemRun(system, settings, input_topic, out, len(workload.words), "tp")
    say(f"{system}: counting {len(workload.words)} records (app {run.app_id}, log {run.log})")
    line = run.wait()
    result.load = (run.load_start, run.load_end)
    if "error" in line:
        result.error = f"{line['error']}\n{line.get('log_tail', '')}"
        say(f"{system}: failed: {result.error}")
        return result
    result.records, result.seconds = int(line["records"]), float(line["seconds"])
    if "first_batch_s" in line:
        result.first_batch_s, result.first_batch_records = line["first_batch_s"], line["first_batch_records"]
        result.after_first_batch = line["records_per_s_after_first_batch"]
    scan = read_output(settings.bootstrap, out, settings.partitions)
    result.output_records = scan.records
    end = scan.last_append_ms / 1000
    result.cpu_s = run.cpu.between(end - result.seconds, end)
    result.wrong = count_errors(workload.counts, scan.latest)
    result.repeated, result.decreasing = scan.not_increasing - scan.decreasing, scan.decreasing
    repeats_ok, decreases_ok = sss.allowed_reemissions(system)
    if (result.repeated and not repeats_ok) or (result.decreasing and not decreases_ok):
        result.wrong.append(f"{result.repeated} updates repeated and {result.decreasing} lowered their word's count")
    say(f"{system}: {result.records} records in {result.seconds:.1f} s = {result.records_per_s:,.0f}/s, "
        f"{result.cpu_s:.1f} CPU s, {scan.records} output records, counts "
        + ("exact" if not result.wrong else f"WRONG ({len(result.wrong)}: {result.wrong[:3]})"))
    return result


# -- phase 2: latency ----------------------------------------------------------------------------------------


def observe(bootstrap: str, topic: str, partitions: int, warm: Any, stop: Any, result_path: str) -> None:
    """Child process: read count updates as soon as they are committed, note when each became visible.

    Runs until `stop` is set and every partition was read to its end after that; writes
    [(word, count, visible at ms)] to `result_path`. `warm` follows the warm-up word's count.
    """
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-observe-{uuid.uuid4().hex[:8]}",
                  "isolation.level": "read_committed", "enable.auto.commit": False,
                  "enable.partition.eof": True, "fetch.wait.max.ms": 5})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    seen: list[tuple[bytes, int, float]] = []
    at_end: set[int] = set()
    stopping_since: float | None = None
    last_message = 0.0
    try:
        while True:
            m = c.poll(0.05)
            now = time.time() * 1000
            if stopping_since is None and stop.is_set():
                stopping_since = now
            if m is None:
                # The program exited before `stop` was set, so its last transaction is committed;
                # a quiet second after every partition's end covers the commit markers' arrival.
                if stopping_since is not None and (
                        (len(at_end) == partitions and now - max(last_message, stopping_since) > 1000)
                        or now - stopping_since > 60_000):
                    break
                continue
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
                    continue
                raise RuntimeError(f"reading {topic}: {err}")
            at_end.discard(m.partition())
            last_message = now
            count = int.from_bytes(m.value(), "big", signed=True)
            seen.append((m.key(), count, now))
            if m.key() == WARMUP_WORD:
                warm.value = max(warm.value, count)
    finally:
        c.close()
        with open(result_path, "wb") as f:
            pickle.dump(seen, f)


def start_observer(bootstrap: str, output: str, partitions: int, seen_path: Path) -> tuple[Any, Any, Any]:
    """(probe count, stop event, process): `observe` in a child process of its own."""
    ctx = multiprocessing.get_context("spawn")
    probe_count, stop = ctx.Value("q", 0), ctx.Event()
    observer = ctx.Process(target=observe, args=(bootstrap, output, partitions, probe_count, stop, str(seen_path)),
                           daemon=True)
    observer.start()
    return probe_count, stop, observer


def input_latencies(sent: Sequence[tuple[bytes, int]], seen: Sequence[tuple[bytes, int, float]],
                    from_ms: float = -math.inf) -> tuple[list[float], int]:
    """Per input record: first time an update of its word counted it, minus its send time (ms).

    `sent` is (word, send ms) in produce order, `seen` (word, count, visible ms) in the order the
    consumer saw them. The k-th occurrence of a word is counted once an update shows count >= k.
    Returns the sorted latencies of the records sent at `from_ms` or later, and how many of those
    were never seen counted.
    """
    occurrences: dict[bytes, list[int]] = {}
    for word, ts in sent:
        occurrences.setdefault(word, []).append(ts)
    shown: dict[bytes, int] = {}
    latencies: list[float] = []
    for word, count, at in seen:
        times = occurrences.get(word)
        if times is None:
            continue
        before = shown.get(word, 0)
        upto = min(count, len(times))
        if upto > before:
            latencies.extend(at - times[k] for k in range(before, upto) if times[k] >= from_ms)
            shown[word] = upto
    latencies.sort()
    return latencies, sum(1 for _, ts in sent if ts >= from_ms) - len(latencies)


@dataclass
class Latency:
    system: str
    rate: float = 0.0
    records: int = 0
    p50_ms: float = math.nan
    p99_ms: float = math.nan
    max_ms: float = math.nan
    self_p50_ms: float = math.nan
    self_p99_ms: float = math.nan
    #: CPU cores the system used while the producer sent at the rate
    cores_used: float = math.nan
    load: tuple[float, float] = (math.nan, math.nan)
    wrong: list[str] = field(default_factory=list)
    error: str | None = None


def warm_up(producer: Any, topic: str, warm: Any, alive: Callable[[], bool], deadline: float) -> None:
    """One warm-up record at a time, each counted (`warm`, the observer's count of it) before the
    next: the app's start-up, assignment and first batch are behind it."""
    for i in range(1, WARMUP_RECORDS + 1):
        producer.produce(topic, WARMUP_WORD)
        producer.flush(10)
        while warm.value < i:
            if not alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the warm-up record {i} was not counted")
            time.sleep(0.05)


def run_latency(system: str, settings: Settings, words: Sequence[bytes], rate: float, settle_s: float = 0.0
                ) -> Latency:
    """Send `words` at `rate`; the latencies of those sent in the first `settle_s` seconds are not
    measured (their counts are checked)."""
    from confluent_kafka import Producer

    result = Latency(system, rate=rate)
    tag = uuid.uuid4().hex[:6]
    input_topic = f"bench-{system}-lat-in-{tag}"
    create_topics(settings.bootstrap, [input_topic], settings.partitions)
    out = output_topic(settings.bootstrap, f"bench-{system}-lat-out-{tag}", settings.partitions)
    ctx = multiprocessing.get_context("spawn")
    warm, stop = ctx.Value("q", 0), ctx.Event()
    seen_path = settings.work_dir / f"seen-{system}-{tag}.pickle"
    observer = ctx.Process(target=observe, args=(settings.bootstrap, out, settings.partitions, warm, stop,
                                                  str(seen_path)), daemon=True)
    observer.start()
    run = SystemRun(system, settings, input_topic, out, WARMUP_RECORDS + len(words), "lat")
    say(f"{system}: latency at {rate:g} records/s for {len(words) / rate - settle_s:.0f} s after {settle_s:g} s "
        f"at that rate (app {run.app_id}, log {run.log})")
    producer = Producer({"bootstrap.servers": settings.bootstrap, "linger.ms": 1})
    sent: list[tuple[bytes, int]] = []
    try:
        warm_up(producer, input_topic, warm, run.alive, time.monotonic() + settings.timeout_s)
        say(f"{system}: warm-up counted; producing")
        # Paced: every millisecond or so, send what is due by now; each record's timestamp is its send time.
        start = time.time()
        i = 0
        while i < len(words):
            due = min(len(words), int((time.time() - start) * rate) + 1)
            while i < due:
                now_ms = int(time.time() * 1000)
                producer.produce(input_topic, words[i], timestamp=now_ms)
                sent.append((words[i], now_ms))
                i += 1
            producer.poll(0)
            time.sleep(0.001)
        end = time.time()
        producer.flush(30)
        result.cores_used = run.cpu.between(start, end) / (end - start)
        line = run.wait()
    except Exception as e:  # noqa: BLE001 - one system's failure is reported in its row
        run.kill()
        line = {"error": str(e), "log_tail": run.log_tail()}
    finally:
        stop.set()
        observer.join(120)
    result.load = (run.load_start, loadavg())
    if "error" in line:
        result.error = f"{line['error']}\n{line.get('log_tail', '')}"
        say(f"{system}: failed: {result.error}")
        return result
    result.self_p50_ms, result.self_p99_ms = float(line.get("p50_ms", -1)), float(line.get("p99_ms", -1))
    with seen_path.open("rb") as f:
        seen: list[tuple[bytes, int, float]] = pickle.load(f)
    with (settings.work_dir / f"sent-{system}-{tag}.pickle").open("wb") as f:  # for a closer look (--keep)
        pickle.dump(sent, f)
    latencies, missing = input_latencies(sent, seen, from_ms=start * 1000 + settle_s * 1000)
    result.records = len(latencies)
    result.p50_ms, result.p99_ms = percentile(latencies, 0.50), percentile(latencies, 0.99)
    result.max_ms = latencies[-1] if latencies else math.nan
    expected: dict[bytes, int] = {WARMUP_WORD: WARMUP_RECORDS}
    for w in words:
        expected[w] = expected.get(w, 0) + 1
    latest: dict[bytes, int] = {}
    for word, count, _ in seen:
        latest[word] = count
    result.wrong = count_errors(expected, latest)
    if missing:
        result.wrong.append(f"{missing} input records never seen counted")
    say(f"{system}: p50 {result.p50_ms:.0f} ms, p99 {result.p99_ms:.0f} ms over {result.records} records, "
        f"{result.cores_used:.2f} cores used, counts " + ("exact" if not result.wrong else "WRONG"))
    return result


# -- Eddy's program (a child process of this script) ------------------------------------------------------------


@dataclass
class EddyFigures:
    """What one run of Eddy's word count measured (see `eddy_program`)."""

    read: int = 0
    first_input: float = math.nan
    done_at: float = math.nan
    first_batch_end: float = math.nan
    first_batch_records: int = 0
    histogram: list[int] = field(default_factory=list)
    lag: dict[str, int] = field(default_factory=dict)


def eddy_word_count(spark: Any, args: argparse.Namespace, app_id: str, input_topic: str, output: str,
                    expected: int) -> EddyFigures:
    """Run Eddy's word-count example as app `app_id` until `expected` input records were counted."""
    from eddy_contract.spec import StreamAppSpec
    from eddy_runtime.driver.loop import Driver
    from eddy_runtime.driver.options import DriverOptions
    from eddy_runtime.driver.outcomes import BatchReport
    from eddy_runtime.protocol.work import LATENCY_BUCKETS_S

    spec = StreamAppSpec.from_manifest({
        "apiVersion": "eddy.dev/v1alpha1", "kind": "StreamApp", "metadata": {"name": app_id},
        "spec": {
            "image": "eddy:bench",
            "pipeline": {"module": "examples.wordcount.app", "function": "build_words",
                         "args": {"input_topic": input_topic, "output_topic": output}},
            "kafka": {"bootstrapServers": args.bootstrap},
            "processingGuarantee": "exactly_once",
            "triggerInterval": f"{args.trigger_ms}ms",
            "executors": {"replicas": args.executors, "cores": 1},
            "state": {"standbyReplicas": 0},
        },
    })
    driver = Driver(spark, spec, DriverOptions(state_dir=str(Path(args.state_dir) / "stores"),
                                               per_executor_state_dirs=True, max_batch_records=args.max_batch_records,
                                               sync_interval_s=args.sync_s))
    compiled = driver.prepare()
    stateful = set(compiled.stateful_tasks())
    # Input records are counted where they are read: the repartition topic carries partial counts
    # per word and batch (Eddy combines before the shuffle), not one record per word.
    sources = {t for s in compiled.subtopologies if s.source.topic == input_topic for t in s.task_ids}
    fig = EddyFigures(histogram=[0] * (len(LATENCY_BUCKETS_S) + 1))
    previous_end = [0.0]
    deadline = time.monotonic() + args.timeout_s

    def until(report: BatchReport) -> bool:
        now = time.monotonic()
        fig.lag = dict(driver.last_lag)
        # One line per batch in the program's log: where Eddy's time goes.
        how = ", over HTTP" if report.over_http else ""
        print(f"eddy: {app_id} batch {report.batch_id} {report.outcome} in {report.duration_s:.2f} s (plan "
              f"{report.plan_s:.2f} s{how}): {report.records_in} in, {report.records_out} out, lag "
              f"{sum(fig.lag.values())}" + (f": {report.error}" if report.error else ""), file=sys.stderr, flush=True)
        # Every task's lag was 0 when this batch was planned: all records were read before, and
        # their counts committed (the repartition topic's lag is in it too) before this batch began.
        # On the continuous path a batch is a sync, which reports what the loop did since the last
        # one: the clock starts at the end of the last sync that reported no input (or the start of
        # the first batch, which hands out the tasks; a round under way at that sync may have read
        # its records a little earlier) and stops at the start of the sync that saw no lag left.
        if fig.read >= expected and not any(fig.lag.values()):
            fig.done_at = now - report.duration_s
            return True
        first_batch = math.isnan(fig.first_input) and report.records_in > 0
        if first_batch:
            fig.first_input = previous_end[0] or now - report.duration_s
        for r in report.results:
            if r.role == "active" and r.status == "processed":
                if r.task in sources:
                    fig.read += r.records_in
                if r.task in stateful:
                    for i, c in enumerate(r.latency_counts):
                        fig.histogram[i] += c
        if first_batch:
            fig.first_batch_end, fig.first_batch_records = now, fig.read
        previous_end[0] = now
        return now > deadline

    driver.run(until=until)
    return fig


def eddy_program(argv: Sequence[str]) -> int:
    """Run Eddy's word count until N records were counted; print one JSON line like the peers'.

    Before the measured app, a warm-up app (its own topics, a few thousand words) runs in the same
    Spark application, so that Spark's executors, their Python workers and the JVMs' code paths
    are started, as the peers' processes are before their first record; the measured app still
    starts its own task runners, stores and transactional producers in its first batch.

    seconds: from the end of the last batch (on the continuous path: sync) that reported no input
    to the start of the first one that found every record read and counted (outputs committed);
    with 1 s syncs that may count up to a second more than the work took. The first batch's length
    and the rate after it are printed too. p50/p99: upper bounds of the histogram buckets of the runtime's own
    end-to-end latency (now - input timestamp at the count).
    """
    ap = argparse.ArgumentParser(prog="throughput.py _eddy")
    for name in ("--bootstrap", "--input", "--output", "--app-id", "--state-dir"):
        ap.add_argument(name, required=True)
    ap.add_argument("--expected-records", type=int, required=True)
    ap.add_argument("--executors", type=int, default=1)
    ap.add_argument("--trigger-ms", type=int, default=100)
    ap.add_argument("--max-batch-records", type=int, default=200_000)
    ap.add_argument("--sync-s", type=float, default=1.0)
    ap.add_argument("--warmup-records", type=int, default=5_000)
    ap.add_argument("--timeout-s", type=float, default=1800)
    args = ap.parse_args(argv)

    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    sys.path.insert(0, str(REPO))
    from eddy_runtime.local.run import QUIET_LOG4J, local_spark_session
    from eddy_runtime.protocol.placement import wait_for_executors
    from eddy_runtime.protocol.work import LATENCY_BUCKETS_S

    state_dir = Path(args.state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    log4j = state_dir / "log4j2.properties"
    log4j.write_text(QUIET_LOG4J)
    spark = local_spark_session(args.executors, args.app_id, [str(REPO)], log4j)
    spark.sparkContext.setLogLevel("ERROR")
    try:
        wait_for_executors(spark.sparkContext, args.executors, timeout=180)
        if args.warmup_records:
            warm_app = f"{args.app_id}-warmup"
            partitions = len(admin_client(args.bootstrap).list_topics(args.input, timeout=30).topics[args.input]
                             .partitions)
            create_topics(args.bootstrap, [f"{warm_app}-in"], partitions)
            produce_all(args.bootstrap, f"{warm_app}-in", zipf_words(args.warmup_records, 1000, 1.0, 1).words)
            t0 = time.monotonic()
            eddy_word_count(spark, args, warm_app, f"{warm_app}-in", f"{warm_app}-out", args.warmup_records)
            print(f"eddy: warm-up app done in {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)
        fig = eddy_word_count(spark, args, args.app_id, args.input, args.output, args.expected_records)
    finally:
        spark.stop()
    if math.isnan(fig.done_at):
        print(json.dumps({"error": f"read {fig.read} of {args.expected_records} records; lag {fig.lag}"}),
              flush=True)
        return 2
    seconds = fig.done_at - fig.first_input

    def bucket(q: float) -> float:
        total, acc = sum(fig.histogram), 0
        for i, c in enumerate(fig.histogram):
            acc += c
            if total and acc >= q * total:
                return LATENCY_BUCKETS_S[i] * 1000 if i < len(LATENCY_BUCKETS_S) else math.inf
        return -1.0

    after = fig.done_at - fig.first_batch_end
    print(json.dumps({"records": fig.read, "seconds": seconds, "records_per_s": fig.read / seconds,
                      "p50_ms": bucket(0.50), "p99_ms": bucket(0.99), "output_records": -1,
                      "first_batch_s": fig.first_batch_end - fig.first_input,
                      "first_batch_records": fig.first_batch_records,
                      "records_per_s_after_first_batch": (fig.read - fig.first_batch_records) / after if after > 0
                      else math.nan}), flush=True)
    return 0


# -- set-up and report -------------------------------------------------------------------------------------------


def quix_python() -> Path:
    """The interpreter of Quix Streams' own virtual environment, made on first use."""
    venv = CACHE / "quix-venv"
    python = venv / "bin" / "python"
    stamp = venv / f"quixstreams-{QUIX_VERSION}.ok"
    if not stamp.exists():
        say(f"installing Quix Streams {QUIX_VERSION} into {venv}")
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", f"quixstreams=={QUIX_VERSION}"], check=True)
        stamp.touch()
    return python


def fmt(x: float, spec: str = ",.0f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def report(throughputs: dict[str, Throughput], latencies: dict[str, Latency], settings: Settings,
           args: argparse.Namespace) -> str:
    rows = [("", "cores", "records/s", "per core", "CPU cores used", "records/CPU-s", "p50 ms", "p99 ms",
             "self p50/p99 ms", "cores @rate", "counts")]
    for system in args.systems:
        t, lat = throughputs.get(system), latencies.get(system)
        ok = all(x is None or (x.error is None and not x.wrong) for x in (t, lat))
        rows.append((
            system,
            str(cores_given(system, settings)),
            fmt(t.records_per_s) if t else "-",
            fmt(t.per_core) if t else "-",
            fmt(t.cpu_s / t.seconds, ".2f") if t and t.seconds else "-",
            fmt(t.per_cpu_s) if t else "-",
            fmt(lat.p50_ms) if lat else "-",
            fmt(lat.p99_ms) if lat else "-",
            f"{fmt(lat.self_p50_ms)}/{fmt(lat.self_p99_ms)}" if lat else "-",
            fmt(lat.cores_used, ".2f") if lat else "-",
            "exact" if ok else "WRONG/FAILED",
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
             for r in rows]
    eddy = throughputs.get("eddy")
    eddy_lat = latencies.get("eddy")
    if eddy and eddy.records:
        lines.append(f"eddy's first batch (starts its task runners, opens stores; {eddy.first_batch_records} records) "
                     f"took {eddy.first_batch_s:.1f} s; after it: {fmt(eddy.after_first_batch)} records/s "
                     f"({fmt(eddy.after_first_batch / eddy.cores)} per core)")
    for peer in (s for s in args.systems if s != "eddy"):
        other, other_lat = throughputs.get(peer), latencies.get(peer)
        parts = []
        if eddy and other and eddy.records and other.records:
            ratio = eddy.per_core / other.per_core
            steady = eddy.after_first_batch / eddy.cores / other.per_core
            parts.append(f"per core: {ratio:.2f}x; after eddy's first batch: {steady:.2f}x; "
                         f"per CPU-second: {eddy.per_cpu_s / other.per_cpu_s:.2f}x")
        if eddy_lat and other_lat and eddy_lat.records and other_lat.records:
            parts.append(f"p50 latency: {eddy_lat.p50_ms / other_lat.p50_ms:.2f}x, p99: "
                         f"{eddy_lat.p99_ms / other_lat.p99_ms:.2f}x (below 1: eddy faster)")
        if parts:
            lines.append(f"eddy / {peer} " + "; ".join(parts))
    lines += targets(throughputs, latencies)
    for system in sss.SYSTEMS:
        t = throughputs.get(system)
        if t and t.records:
            lines.append(f"{system}: {t.output_records} output records, {t.repeated} repeated and {t.decreasing} "
                         "lowered a word's count")
    if any(s in sss.SYSTEMS for s in args.systems):
        lines.append(sss.AT_LEAST_ONCE_NOTE)
    if eddy:
        lines.append("note: Eddy combines before the shuffle (its repartition topic carries partial counts per word "
                     "and batch); Kafka Streams and Quix repartition every word"
                     + ("; Spark's micro-batch aggregation also counts partially before its shuffle"
                        if "sss" in args.systems else ""))
    load = [f"{s} {t.load[0]:.1f}->{t.load[1]:.1f}" for s, t in throughputs.items()]
    load += [f"{s} (latency) {x.load[0]:.1f}->{x.load[1]:.1f}" for s, x in latencies.items()]
    lines.append(f"load average (1 min) during the runs: {', '.join(load)}")
    lines.append(f"{args.records} records, {args.distinct} distinct words (Zipf {args.zipf}), {args.partitions} "
                 f"partitions, exactly-once (sss: at-least-once sink), commit interval / trigger "
                 f"{args.commit_interval_ms} ms; latency at "
                 f"{args.rate:g} records/s for {args.duration:g} s; {os.cpu_count()} CPUs on this machine")
    return "\n".join(lines)


_Run = TypeVar("_Run", "Throughput", "Latency")


def middle(runs: list[_Run], key: Callable[[_Run], float]) -> _Run:
    """The middle one of a system's runs of a phase by `key` (the lower middle of an even count),
    or its first failed or wrong run if there is one: a failure is never hidden by the others."""
    bad = [r for r in runs if r.error or r.wrong]
    if bad:
        return bad[0]
    return sorted(runs, key=key)[(len(runs) - 1) // 2]


def spread(throughput_runs: dict[str, list[Throughput]], latency_runs: dict[str, list[Latency]]) -> str:
    """Every run's figures per system, in the order they ran (the table above gives the middle ones)."""
    lines = []
    for system, runs in throughput_runs.items():
        if runs:
            lines.append(f"{system} runs, records/s per core: {' / '.join(fmt(t.per_core) for t in runs)}; "
                         f"records/CPU-s: {' / '.join(fmt(t.per_cpu_s) for t in runs)}")
    for system, lats in latency_runs.items():
        if lats:
            lines.append(f"{system} runs, p50/p99 ms: {' / '.join(f'{fmt(x.p50_ms)}/{fmt(x.p99_ms)}' for x in lats)}; "
                         f"cores at the rate: {' / '.join(fmt(x.cores_used, '.2f') for x in lats)}")
    return "\n".join(lines)


def _throughput_json(t: Throughput) -> dict[str, Any]:
    return {**vars(t), "records_per_s": t.records_per_s, "per_core": t.per_core, "per_cpu_s": t.per_cpu_s}


def _json_safe(value: Any) -> Any:
    """NaN (a figure that was not measured) becomes null: JSON has no NaN."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def finish(work_dir: Path, keep: bool, failed: Sequence[str]) -> int:
    """A benchmark's exit: its work folder kept (asked for, or something failed) or removed; exit code
    1 if any of `failed` (runs that failed or counted wrong)."""
    if keep or failed:
        say(f"logs and state kept in {work_dir}")
    else:
        subprocess.run(["rm", "-rf", str(work_dir)])
    if failed:
        say(f"FAILED or wrong counts: {', '.join(failed)}")
        return 1
    return 0


def targets(throughputs: dict[str, Throughput], latencies: dict[str, Latency]) -> list[str]:
    """Eddy's targets against the peers measured in this run: throughput per core at or above
    Kafka Streams', records per CPU-second at or above Spark's micro-batch mode, p99 at or below
    the best p99 of Kafka Streams and Spark's real-time mode, cores used at the rate at or below
    Kafka Streams'."""
    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    out = []
    eddy, ks, micro = throughputs.get("eddy"), throughputs.get("kstreams"), throughputs.get("sss")
    if eddy and eddy.records and ks and ks.records:
        out.append(f"target per core >= kstreams: {verdict(eddy.per_core >= ks.per_core)} "
                   f"({fmt(eddy.per_core)} vs {fmt(ks.per_core)})")
    if eddy and eddy.records and micro and micro.records:
        out.append(f"target records/CPU-s >= sss: {verdict(eddy.per_cpu_s >= micro.per_cpu_s)} "
                   f"({fmt(eddy.per_cpu_s)} vs {fmt(micro.per_cpu_s)})")
    lat = latencies.get("eddy")
    peers = {s: x for s in ("kstreams", "sss-rt") if (x := latencies.get(s)) is not None and x.records}
    if lat and lat.records and peers:
        best = min(peers, key=lambda s: peers[s].p99_ms)
        out.append(f"target p99 <= best of {', '.join(peers)}: {verdict(lat.p99_ms <= peers[best].p99_ms)} "
                   f"({fmt(lat.p99_ms)} ms vs {best} {fmt(peers[best].p99_ms)} ms)")
    ks_lat = latencies.get("kstreams")
    if lat and lat.records and ks_lat and ks_lat.records:
        out.append(f"target cores at the rate <= kstreams: {verdict(lat.cores_used <= ks_lat.cores_used)} "
                   f"({lat.cores_used:.2f} vs {ks_lat.cores_used:.2f})")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_eddy"]:
        return eddy_program(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", help="an existing broker; default: start one with infra/kafka/kafka.sh")
    ap.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated subset of {','.join(SYSTEMS)}")
    ap.add_argument("--records", type=int, default=2_000_000, help="input records for the throughput phase")
    ap.add_argument("--distinct", type=int, default=50_000, help="distinct words")
    ap.add_argument("--zipf", type=float, default=1.0, help="Zipf exponent of the word frequencies")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rate", type=float, default=5000, help="records/s of the live producer in the latency phase")
    ap.add_argument("--duration", type=float, default=20, help="seconds of the latency phase (0: skip it)")
    ap.add_argument("--settle", type=float, default=5,
                    help="seconds at the rate before the measured latency phase (counted and checked, not measured)")
    ap.add_argument("--commit-interval-ms", type=int, default=100,
                    help="Kafka Streams' commit.interval.ms, Quix's commit_interval, Eddy's triggerInterval, "
                    "sss's processingTime trigger")
    ap.add_argument("--sss-rt-batch-ms", type=int, default=sss.MIN_REALTIME_BATCH_MS,
                    help="sss-rt's real-time batch duration (at least 5000: Spark's minimum)")
    ap.add_argument("--eddy-executors", type=int, default=1, help="Spark executors (one core each) for Eddy")
    ap.add_argument("--eddy-max-batch-records", type=int, default=200_000, help="Eddy's records per task and batch")
    ap.add_argument("--eddy-sync-s", type=float, default=1.0,
                    help="how often Eddy's driver syncs with its executors (DriverOptions.sync_interval_s)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds a system may take for one phase")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs of each phase per system, interleaved (eddy, kstreams, ..., eddy, ...); the report "
                    "gives each system's middle run: by records/s per core, and by p99 latency")
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (logs, state)")
    args = ap.parse_args(argv)
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = set(args.systems) - set(SYSTEMS)
    if unknown:
        ap.error(f"unknown systems: {', '.join(sorted(unknown))}")
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")

    say(f"machine: {os.cpu_count()} CPUs, {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    py = quix_python() if "quix" in args.systems else None
    if "kstreams" in args.systems:
        subprocess.run([str(KSTREAMS_SH), "build"], check=True, stdout=subprocess.DEVNULL)
    if any(s in sss.SYSTEMS for s in args.systems):
        subprocess.run([str(sss.CONNECTOR_SH), "fetch"], check=True, stdout=subprocess.DEVNULL)
    say(f"drawing {args.records} words over {args.distinct} distinct ones")
    workload = zipf_words(args.records, args.distinct, args.zipf, args.seed)
    live = workload.words[: int(args.rate * (args.settle + args.duration))] if args.duration > 0 else []
    CACHE.mkdir(parents=True, exist_ok=True)
    work_dir = Path(tempfile.mkdtemp(prefix="throughput-", dir=CACHE))
    throughput_runs: dict[str, list[Throughput]] = {s: [] for s in args.systems}
    latency_runs: dict[str, list[Latency]] = {s: [] for s in args.systems}
    with broker(args.bootstrap) as bootstrap:
        settings = Settings(bootstrap, args.partitions, args.commit_interval_ms, args.eddy_executors,
                            args.eddy_max_batch_records, args.eddy_sync_s, args.timeout, args.sss_rt_batch_ms,
                            work_dir, py)
        if not args.skip_throughput:
            input_topic = f"bench-words-{uuid.uuid4().hex[:6]}"
            create_topics(bootstrap, [input_topic], args.partitions)
            t0 = time.monotonic()
            produce_all(bootstrap, input_topic, workload.words)
            say(f"filled {input_topic} with {args.records} records in {time.monotonic() - t0:.1f} s")
            warmup = min(args.records, BROKER_WARMUP_RECORDS)
            took = warm_broker(bootstrap, input_topic, args.partitions, warmup)
            say(f"warmed the broker: {warmup} records copied in transactions in {took:.1f} s")
            for _ in range(args.repeat):
                for system in args.systems:
                    throughput_runs[system].append(run_throughput(system, settings, input_topic, workload))
        if live:
            for _ in range(args.repeat):
                for system in args.systems:
                    latency_runs[system].append(run_latency(system, settings, live, args.rate, args.settle))
    throughputs = {s: middle(runs, lambda t: t.per_core) for s, runs in throughput_runs.items() if runs}
    latencies = {s: middle(runs, lambda x: x.p99_ms) for s, runs in latency_runs.items() if runs}
    table = report(throughputs, latencies, settings, args)
    if args.repeat > 1:
        table += "\n" + spread(throughput_runs, latency_runs)
    print(table, flush=True)
    say(f"machine after the runs: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    if args.json:
        Path(args.json).write_text(json.dumps(_json_safe({
            "throughput": {s: _throughput_json(t) for s, t in throughputs.items()},
            "latency": {s: vars(x) for s, x in latencies.items()},
            "runs": {"throughput": {s: [_throughput_json(t) for t in runs] for s, runs in throughput_runs.items()},
                     "latency": {s: [vars(x) for x in runs] for s, runs in latency_runs.items()}},
            "settings": vars(args),
        }), indent=2, default=str))
    failed = [s for s, t in throughputs.items() if t.error or t.wrong]
    failed += [s for s, x in latencies.items() if x.error or x.wrong]
    return finish(work_dir, args.keep, sorted(set(failed)))


if __name__ == "__main__":
    sys.exit(main())
