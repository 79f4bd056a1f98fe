"""Nexmark on Eddy, Kafka Streams, Flink and Spark Structured Streaming: throughput, CPU, latency and
memory per query, every output checked.

The events are Beam's Nexmark generator's (bench/nexmark/run.sh: persons, auctions and bids in
Beam's proportions, JSON, one topic per kind, keyed by id); the queries are q0, q1, q2, q3, q4,
q5, q7 and q8 as bench/nexmark/nexmark_reference.py defines them:

- Eddy: examples/nexmark/app.py, one app per query (``build(queries=q)``), exactly-once, 100 ms
  trigger, on Spark ``local-cluster[E,1,1024]`` (E = ``--eddy-executors``), the driver in a child
  process of this script (``_eddy``);
- Kafka Streams 4.x: bench/kstreams' NexmarkBench, one stream thread, exactly_once_v2,
  commit.interval.ms 100, topology optimization on;
- Flink 2.x: bench/flink's program (``bench/flink/run.sh nexmark``), a local mini-cluster with
  parallelism 1, exactly-once checkpoints every 100 ms and a transactional Kafka sink;
- Spark Structured Streaming: bench/sss/nexmark.py, ``local[1]``, 100 ms trigger, RocksDB state
  with changelog checkpointing; its Kafka sink is at-least-once (Spark has no transactional one).

Every system gets one core (one stream thread, one task slot, ``local[1]``; Eddy ``--eddy-executors``).
bench/README.md says what each is given and why.

Phase 1, throughput: ``--events`` events are generated once into topics of ``--partitions``
partitions (and to a file, from which the reference computes every query's output). For each
query and system, a fresh app reads them from the earliest offset. The clock starts when the app
is running (Kafka Streams: the state change to RUNNING; Eddy: its measured app starts, after a
warm-up app over ``--warmup-events`` events of their own in the same Spark application, so that
executors and Python workers are up, as a JVM is, and after its own task runners started: an
app's runner is a process per executor that lives as long as the executor) and stops when the
app's consumer group has committed the end of every input topic and of every other topic it
commits reading (repartition topics) and the output topic has stopped growing (polled every 0.2
s; the output's last growth is the end). events/s = generated events / that time (every
query is charged for every event, as Nexmark reports rates, though q0-q2, q5 and q7 read only the
bids); per core = divided by the cores given (Eddy E, Kafka Streams 1); per CPU-second = divided
by the CPU seconds the system's whole process tree used in that window; peak RSS = the largest
sum of the resident memory of that process tree, sampled every 0.2 s over the whole run
(start-up included). Each output is then read in full (read_committed) and compared with the
reference; a wrong output is reported as wrong and its figures are not used.

Phase 2, latency: each query and system gets fresh input topics, the app is started and, once
running, the generator sends ``--rate`` events/s for ``--duration`` s, each stamped with its send
time (Nexmark's event time = wall clock). One read_committed consumer records when each output
record becomes visible; latency = that time minus the output record's timestamp, which both
systems carry from the newest input record it came from (the bid itself, the later of a join's
two records, a window's newest bid). Records of the first ``--settle`` s are not measured.

    .venv/bin/python bench/nexmark.py                                  # every query, both systems
    .venv/bin/python bench/nexmark.py --queries q1,q5 --events 200000 --repeat 3
    .venv/bin/python bench/nexmark.py --chart docs/nexmark.png

Without ``--bootstrap`` a broker is started (infra/kafka/kafka.sh) and stopped at the end. Exits 1
if any output was wrong or a system failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from throughput import ProcessTreeCpu, admin_client, broker, create_topics, fmt, percentile, say

REPO = Path(__file__).resolve().parent.parent
GENERATOR = REPO / "bench" / "nexmark" / "run.sh"
KSTREAMS_SH = REPO / "bench" / "kstreams" / "run.sh"
FLINK_SH = REPO / "bench" / "flink" / "run.sh"
SSS_NEXMARK = REPO / "bench" / "sss" / "nexmark.py"
sys.path.insert(0, str(REPO / "bench" / "nexmark"))
import nexmark_reference as reference  # noqa: E402 - bench/nexmark is not a package

QUERIES = ("q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8")
NAMES = {"eddy": "Eddy", "kstreams": "Kafka Streams", "flink": "Flink", "sss": "Spark Structured Streaming"}
SYSTEMS = ("eddy", "kstreams", "flink", "sss")
#: the output's Kafka header carrying the newest input's timestamp (ms, decimal), for a system whose
#: Kafka sink cannot set the record timestamp (Spark's): the latency phase reads it before the timestamp
TS_HEADER = "ts"
KINDS = ("person", "auction", "bid")
#: events per second of event time in the throughput phase: one event per millisecond, so that no
#: two events share a timestamp (at Beam's default 10,000/s, ten do, and which of a person and its
#: auction of the same millisecond a stream-table join takes first would be up to each system)
EVENT_RATE = 1_000
#: how long a started task runner is given for its warm-up before Eddy's clock starts
RUNNER_WARM_UP_S = 2.0
#: q8's join grace when the events span less (examples/nexmark/streamapp.yaml's `join_grace`)
DEFAULT_JOIN_GRACE_MS = 300_000


# -- events and topics ----------------------------------------------------------------------------


def generate(bootstrap: str, prefix: str, events: int, partitions: int, jsonl: Path | None = None,
             rate: int = 10_000, paced: bool = False) -> dict[str, Any]:
    cmd = [str(GENERATOR), "generate", "--bootstrap", bootstrap, "--prefix", prefix, "--events", str(events),
           "--rate", str(rate), "--partitions", str(partitions), "--paced", str(paced).lower()]
    if jsonl is not None:
        cmd += ["--jsonl", str(jsonl)]
    done = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def app_topics(system: str, query: str, out_prefix: str) -> list[str]:
    """Topics an app writes and reads back, made before it starts (Eddy's q3 and q8)."""
    if system != "eddy":
        return []
    sys.path.insert(0, str(REPO))
    from examples.nexmark.app import internal_topics

    return internal_topics(query, out_prefix)


def read_records(bootstrap: str, topic: str, partitions: int) -> list[tuple[bytes | None, bytes]]:
    """Every committed record of `topic`, read to its end."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"nexmark-check-{uuid.uuid4().hex[:8]}",
                  "isolation.level": "read_committed", "enable.auto.commit": False, "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: list[tuple[bytes | None, bytes]] = []
    at_end: set[int] = set()
    last = time.monotonic()
    try:
        while len(at_end) < partitions or time.monotonic() - last < 1.0:
            for m in c.consume(10_000, timeout=0.2):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_end.add(m.partition())
                        continue
                    if err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                        return out
                    raise RuntimeError(f"reading {topic}: {err}")
                at_end.discard(m.partition())
                last = time.monotonic()
                if m.value() is not None:
                    out.append((m.key(), m.value()))
    finally:
        c.close()
    return out


def end_offsets(bootstrap: str, topics: Sequence[str]) -> dict[tuple[str, int], int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "nexmark-offsets"})
    try:
        md = c.list_topics(timeout=10).topics
        out = {}
        for t in topics:
            if t not in md:
                continue
            for p in md[t].partitions:
                out[(t, p)] = c.get_watermark_offsets(TopicPartition(t, p), timeout=10)[1]
        return out
    finally:
        c.close()


def committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    futures = admin_client(bootstrap).list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    result = next(iter(futures.values())).result(30)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions if tp.offset >= 0}


# -- the systems --------------------------------------------------------------------------------------


class TreeMemory:
    """The largest summed resident memory of a process and its descendants (a background thread)."""

    def __init__(self, pid: int, interval_s: float = 0.2) -> None:
        self.pid, self.interval_s, self.peak_bytes = pid, interval_s, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="rss-sampler")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        page = os.sysconf("SC_PAGE_SIZE")
        while not self._stop.is_set():
            children: dict[int, list[int]] = {}
            rss: dict[int, int] = {}
            for entry in os.scandir("/proc"):
                if not entry.name.isdigit():
                    continue
                try:
                    stat = Path(entry.path, "stat").read_text()
                except OSError:
                    continue
                rest = stat[stat.rfind(")") + 2:].split()
                children.setdefault(int(rest[1]), []).append(int(entry.name))
                rss[int(entry.name)] = int(rest[21]) * page
            total, todo = 0, [self.pid]
            while todo:
                p = todo.pop()
                total += rss.get(p, 0)
                todo.extend(children.get(p, ()))
            self.peak_bytes = max(self.peak_bytes, total)
            self._stop.wait(self.interval_s)


@dataclass
class Settings:
    bootstrap: str
    partitions: int
    eddy_executors: int
    warmup_events: int
    timeout_s: float
    work_dir: Path
    #: q8's join grace (Eddy, Kafka Streams): it must cover the events' span of event time, since
    #: both read a backlog whose persons run ahead of its auctions (Flink's interval join waits
    #: for the watermark of both inputs instead)
    join_grace_ms: int = DEFAULT_JOIN_GRACE_MS


class Run:
    """One system running one query as a child process, until `stop()` closes its stdin."""

    def __init__(self, system: str, query: str, prefix: str, out_prefix: str, settings: Settings) -> None:
        self.system, self.query, self.out_prefix = system, query, out_prefix
        self.app_id = out_prefix
        state = settings.work_dir / "state" / out_prefix
        log = settings.work_dir / f"{out_prefix}.log"
        if system == "kstreams":
            cmd = [str(KSTREAMS_SH), "build"]
            build = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout.strip().splitlines()[-1]
            java_opts = os.environ.get("KSTREAMS_JAVA_OPTS", "-Xmx2g").split()
            cmd = ["java", *java_opts, "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                   "-Dorg.slf4j.simpleLogger.logFile=System.err",
                   "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.streams.processor.internals.StateDirectory=error",
                   "-cp", f"{build}/eddy-kstreams-bench.jar:{build}/lib/*", "dev.eddy.bench.kstreams.NexmarkBench",
                   "--bootstrap", settings.bootstrap, "--prefix", prefix, "--output-prefix", out_prefix,
                   "--query", query, "--app-id", self.app_id, "--state-dir", str(state),
                   "--join-grace-ms", str(settings.join_grace_ms)]
        elif system in ("flink", "sss"):
            cmd = [str(FLINK_SH), "nexmark"] if system == "flink" else [sys.executable, str(SSS_NEXMARK)]
            cmd += ["--bootstrap", settings.bootstrap, "--prefix", prefix, "--output-prefix", out_prefix,
                    "--query", query, "--app-id", self.app_id, "--state-dir", str(state)]
        else:
            cmd = [sys.executable, str(Path(__file__).resolve()), "_eddy", "--bootstrap", settings.bootstrap,
                   "--prefix", prefix, "--output-prefix", out_prefix, "--query", query, "--state-dir", str(state),
                   "--executors", str(settings.eddy_executors), "--warmup-events", str(settings.warmup_events),
                   "--partitions", str(settings.partitions), "--join-grace-ms", str(settings.join_grace_ms)]
        self.log_path = log
        self._log = open(log, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, cwd=REPO)
        self.cpu = ProcessTreeCpu(self.proc.pid, role=eddy_role if system == "eddy" else None).start()
        self.memory = TreeMemory(self.proc.pid)
        self.running_at = math.nan
        self._running = threading.Event()
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._log.write(line)
            self._log.flush()
            if not self._running.is_set() and ("-> RUNNING" in line or "eddy-nexmark: RUNNING" in line):
                self.running_at = time.time()
                self._running.set()

    def wait_running(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self._running.wait(0.5):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{self.system} {self.query} did not start; see {self.log_path}:\n"
                                   + "".join(self.log_path.read_text().splitlines(True)[-20:]))

    def stop(self) -> None:
        with contextlib.suppress(BrokenPipeError, OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.cpu.stop()
        self.memory.stop()
        self._log.close()


def wait_processed(bootstrap: str, run: Run, inputs: Sequence[str], output: str, timeout_s: float) -> float:
    """The wall time the app finished its input: its group committed the end of every input
    partition and of every other topic it commits reading (Eddy's and Kafka Streams' repartition
    topics: a later step may still be working when the inputs are done), and the output stopped
    growing (its last growth)."""
    ends = end_offsets(bootstrap, inputs)
    deadline = time.monotonic() + timeout_s
    last_out, last_growth = -1, time.time()
    caught_up_at = math.nan
    while time.monotonic() < deadline:
        if run.proc.poll() is not None:
            raise RuntimeError(f"{run.system} {run.query} exited; see {run.log_path}")
        now = time.time()
        done = committed(bootstrap, run.app_id)
        internal = sorted({t for t, _ in done} - set(inputs) - {output})
        now_ends = end_offsets(bootstrap, [output, *internal])  # one consumer for both
        out = sum(end for (t, _), end in now_ends.items() if t == output)
        if out != last_out:
            last_out, last_growth = out, now
        # A repartition topic is written in transactions: its end may be the commit marker after
        # the last record, which a group that read that record need not have committed past.
        if (all(done.get(tp, 0) >= end for tp, end in ends.items())
                and all(done.get(tp, 0) >= end - 1 for tp, end in now_ends.items() if tp[0] != output)):
            if math.isnan(caught_up_at):
                caught_up_at = now
            if now - last_growth >= 1.0 and now - caught_up_at >= 1.0:
                return max(caught_up_at, last_growth)
        time.sleep(0.2)
    raise RuntimeError(f"{run.system} {run.query}: input not processed after {timeout_s} s; see {run.log_path}")


def query_inputs(query: str, prefix: str) -> list[str]:
    if query in ("q3", "q8"):
        return [f"{prefix}-person", f"{prefix}-auction"]
    if query == "q4":
        return [f"{prefix}-auction", f"{prefix}-bid"]
    return [f"{prefix}-bid"]


@dataclass
class Throughput:
    system: str
    query: str
    events: int = 0
    seconds: float = math.nan
    cpu_s: float = math.nan
    #: Eddy's CPU seconds by process (`eddy_role`)
    cpu_roles: dict[str, float] = field(default_factory=dict)
    cores: int = 1
    peak_rss_mb: float = math.nan
    output_records: int = 0
    wrong: list[str] = field(default_factory=list)
    error: str = ""

    @property
    def per_s(self) -> float:
        return self.events / self.seconds if self.seconds else math.nan

    @property
    def per_core(self) -> float:
        return self.per_s / self.cores

    @property
    def per_cpu_s(self) -> float:
        return self.events / self.cpu_s if self.cpu_s else math.nan

    @property
    def ok(self) -> bool:
        return not self.wrong and not self.error


def run_throughput(system: str, query: str, prefix: str, events: int, want: reference.Expected,
                   settings: Settings) -> Throughput:
    out_prefix = f"nx-{system}-{query}-{uuid.uuid4().hex[:6]}"
    result = Throughput(system, query, events, cores=settings.eddy_executors if system == "eddy" else 1)
    output = f"{out_prefix}-{query}"
    create_topics(settings.bootstrap, [output, *app_topics(system, query, out_prefix)], settings.partitions)
    run = Run(system, query, prefix, out_prefix, settings)
    try:
        run.wait_running(600)
        end = wait_processed(settings.bootstrap, run, query_inputs(query, prefix), output, settings.timeout_s)
        result.seconds = end - run.running_at
        result.cpu_s = run.cpu.between(run.running_at, end)
        result.cpu_roles = run.cpu.roles_between(run.running_at, end)
    except RuntimeError as e:
        result.error = str(e)
    finally:
        run.stop()
    result.peak_rss_mb = run.memory.peak_bytes / 2**20
    if not result.error:
        records = read_records(settings.bootstrap, output, settings.partitions)
        result.output_records = len(records)
        result.wrong = reference.errors(query, want, records)
    say(f"{system} {query}: " + (f"FAILED {result.error}" if result.error else
        f"{'WRONG ' if result.wrong else ''}{fmt(result.per_s)} events/s, {fmt(result.per_cpu_s)} per CPU-s "
        f"({result.seconds:.1f} s, {result.cpu_s:.1f} CPU s), peak RSS {result.peak_rss_mb:.0f} MB, "
        f"{result.output_records} output records" + (f": {result.wrong}" if result.wrong else "")
        + ("; CPU s by process: " + ", ".join(f"{r} {c:.2f}" for r, c in result.cpu_roles.items())
           if result.cpu_roles else "")))
    return result


def eddy_role(cmdline: str) -> str:
    """Which of Eddy's processes a command line is (the CPU breakdown of a run)."""
    if "eddy_runtime.executor.runner" in cmdline:
        return "task runner"
    if "ExecutorBackend" in cmdline:
        return "executor JVM"
    if "pyspark.daemon" in cmdline or "pyspark.worker" in cmdline:
        return "Spark's Python workers"
    if "java" in cmdline.split(" ", 1)[0]:
        return "driver JVM"
    if "_eddy" in cmdline:
        return "driver Python"
    return "other"


@dataclass
class Latency:
    system: str
    query: str
    samples: int = 0
    p50_ms: float = math.nan
    p99_ms: float = math.nan
    error: str = ""


def run_latency(system: str, query: str, rate: int, duration_s: float, settle_s: float,
                settings: Settings) -> Latency:
    from confluent_kafka import Consumer

    tag = uuid.uuid4().hex[:6]
    prefix, out_prefix = f"nxl-in-{tag}", f"nxl-{system}-{query}-{tag}"
    output = f"{out_prefix}-{query}"
    create_topics(settings.bootstrap, [f"{prefix}-{k}" for k in KINDS], settings.partitions)
    create_topics(settings.bootstrap, [output, *app_topics(system, query, out_prefix)], settings.partitions)
    result = Latency(system, query)
    run = Run(system, query, prefix, out_prefix, settings)
    seen: list[tuple[float, int]] = []
    stop = threading.Event()

    def observe() -> None:
        c = Consumer({"bootstrap.servers": settings.bootstrap, "group.id": f"nexmark-lat-{tag}",
                      "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                      "enable.auto.commit": False, "fetch.wait.max.ms": 10})
        c.subscribe([output])
        try:
            while not stop.is_set():
                for m in c.consume(10_000, timeout=0.1):
                    if m.error() is None:
                        seen.append((time.time(), record_time_ms(m)))
        finally:
            c.close()

    observer = threading.Thread(target=observe, daemon=True)
    started_ms = 0
    try:
        run.wait_running(600)
        observer.start()
        time.sleep(2.0)
        started_ms = int(time.time() * 1000)
        generate(settings.bootstrap, prefix, int(rate * (settle_s + duration_s)), settings.partitions,
                 rate=rate, paced=True)
        wait_processed(settings.bootstrap, run, query_inputs(query, prefix), output, 120)
    except RuntimeError as e:
        result.error = str(e)
    finally:
        stop.set()
        run.stop()
    if observer.ident is not None:
        observer.join(10)
    cutoff = started_ms + settle_s * 1000 if not result.error else math.inf
    lat = sorted((seen_at * 1000 - ts) for seen_at, ts in seen if ts >= cutoff)
    result.samples = len(lat)
    result.p50_ms, result.p99_ms = percentile(lat, 0.50), percentile(lat, 0.99)
    say(f"{system} {query} latency at {rate} events/s: " + (f"FAILED {result.error}" if result.error else
        f"p50 {result.p50_ms:.0f} ms, p99 {result.p99_ms:.0f} ms over {result.samples} output records"))
    return result


def record_time_ms(message: Any) -> int:
    """The newest input's timestamp an output record carries: its `TS_HEADER` if it has one, else
    its Kafka timestamp."""
    for key, value in message.headers() or ():
        if key == TS_HEADER and value:
            return int(value)
    return int(message.timestamp()[1])


# -- Eddy's child process -------------------------------------------------------------------------------


def eddy_program(argv: Sequence[str]) -> int:
    """Run examples/nexmark's query as an app until stdin is closed, after a warm-up app over
    events of its own in the same Spark application; "eddy-nexmark: RUNNING" on stderr when the
    measured app starts."""
    ap = argparse.ArgumentParser(prog="nexmark.py _eddy")
    for name in ("--bootstrap", "--prefix", "--output-prefix", "--query", "--state-dir"):
        ap.add_argument(name, required=True)
    ap.add_argument("--executors", type=int, default=1)
    ap.add_argument("--warmup-events", type=int, default=20_000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--trigger-ms", type=int, default=100)
    ap.add_argument("--join-grace-ms", type=int, default=DEFAULT_JOIN_GRACE_MS)
    args = ap.parse_args(argv)

    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    sys.path.insert(0, str(REPO))
    import yaml

    from eddy_contract.spec import StreamAppSpec
    from eddy_runtime.driver.loop import Driver
    from eddy_runtime.driver.options import DriverOptions
    from eddy_runtime.local.run import QUIET_LOG4J, local_spark_session
    from eddy_runtime.protocol.placement import wait_for_executors
    from examples.nexmark.app import internal_topics

    state = Path(args.state_dir)
    state.mkdir(parents=True, exist_ok=True)
    log4j = state / "log4j2.properties"
    log4j.write_text(QUIET_LOG4J)
    closed = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.read()
        closed.set()

    threading.Thread(target=watch_stdin, daemon=True).start()

    def spec_for(app: str, prefix: str) -> Any:
        body = yaml.safe_load((REPO / "examples" / "nexmark" / "streamapp.yaml").read_text())
        body["metadata"]["name"] = app
        body["spec"]["kafka"]["bootstrapServers"] = args.bootstrap
        body["spec"]["pipeline"]["args"].update(queries=args.query, prefix=prefix, output_prefix=app,
                                                join_grace=f"{args.join_grace_ms}ms")
        body["spec"]["triggerInterval"] = f"{args.trigger_ms}ms"
        body["spec"]["executors"].update(replicas=args.executors, cores=1)
        body["spec"]["state"] = {"standbyReplicas": 0}
        return StreamAppSpec.from_manifest(body)

    def driver(app: str, prefix: str) -> Driver:
        return Driver(spark, spec_for(app, prefix), DriverOptions(state_dir=str(state / app),
                                                                  per_executor_state_dirs=True))

    spark = local_spark_session(args.executors, args.output_prefix, [str(REPO)], log4j)
    spark.sparkContext.setLogLevel("ERROR")
    try:
        wait_for_executors(spark.sparkContext, args.executors, timeout=180)
        if args.warmup_events:
            warm = f"{args.output_prefix}-warm"
            generate(args.bootstrap, f"{warm}-in", args.warmup_events, args.partitions, rate=EVENT_RATE)
            if internal_topics(args.query, warm):
                create_topics(args.bootstrap, internal_topics(args.query, warm), args.partitions)
            idle = [0]
            warm_driver = driver(warm, f"{warm}-in")

            def warmed(report: Any) -> bool:
                busy = report.records_in or sum(warm_driver.last_lag.values())
                idle[0] = 0 if busy else idle[0] + 1
                return idle[0] >= 2 or closed.is_set()

            t0 = time.monotonic()
            warm_driver.run(until=warmed)
            print(f"eddy-nexmark: warm-up app done in {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)
        measured = driver(args.output_prefix, args.prefix)
        start_runners(spark, state / args.output_prefix)
        print(f"eddy-nexmark: RUNNING at {time.time():.3f}", file=sys.stderr, flush=True)
        measured.run(until=lambda report: closed.is_set())
    finally:
        spark.stop()
    return 0


def start_runners(spark: Any, state_dir: Path) -> None:
    """Start the measured app's task runner on every executor before its clock starts, as Kafka
    Streams' JVM is up before its RUNNING: a runner lives as long as its executor, and its start
    (the interpreter, pyarrow, the Kafka client, RocksDB: 0.5 CPU-seconds) is not a cost per
    event. Its tasks still open inside the measured window."""
    from eddy_runtime.protocol.placement import PinnedSlots, current_executor_id, live_executors
    from eddy_runtime.protocol.runner_client import RunnerClient
    from eddy_runtime.protocol.runner_messages import Ping
    from eddy_runtime.protocol.work import executor_state_dir

    def ping(slot: int) -> Iterator[str]:
        me = current_executor_id() or ""
        runner = RunnerClient(executor_state_dir(str(state_dir), me, per_executor=True), me)
        yield str(runner.call(Ping(), timeout_s=60))

    started = PinnedSlots(spark.sparkContext, live_executors(spark.sparkContext)).run(ping)
    time.sleep(RUNNER_WARM_UP_S)  # its warm-up thread loads pyarrow's lazy modules (executor/runner.py)
    print(f"eddy-nexmark: task runners up: {started}", file=sys.stderr, flush=True)


# -- report ------------------------------------------------------------------------------------------------


def middle(runs: list[Any], key: Any) -> Any:
    ok = sorted((r for r in runs if not math.isnan(key(r))), key=key)
    return ok[len(ok) // 2] if ok else runs[0]


def chart(path: Path, thr: dict[tuple[str, str], Throughput], lat: dict[tuple[str, str], Latency],
          queries: Sequence[str], systems: Sequence[str], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / len(systems)
    for i, s in enumerate(systems):
        xs = [j + i * width for j in range(len(queries))]
        a.bar(xs, [thr[(s, q)].per_cpu_s if (s, q) in thr and thr[(s, q)].ok else 0 for q in queries], width,
              label=NAMES[s])
        b.bar(xs, [lat[(s, q)].p99_ms if (s, q) in lat and not lat[(s, q)].error else 0 for q in queries], width,
              label=NAMES[s])
    for ax, label in ((a, "events per CPU-second (higher is better)"), (b, "p99 latency, ms (lower is better)")):
        ax.set_xticks([j + width * (len(systems) - 1) / 2 for j in range(len(queries))], list(queries))
        ax.set_title(label, fontsize=10)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.25)  # room above the bars for the legend
        ax.legend(fontsize=7, loc="upper left", ncols=2)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "_eddy":
        return eddy_program(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bootstrap")
    ap.add_argument("--events", type=int, default=500_000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--queries", default=",".join(QUERIES))
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--eddy-executors", type=int, default=1)
    ap.add_argument("--warmup-events", type=int, default=20_000)
    ap.add_argument("--rate", type=int, default=1_000, help="events/s of the latency phase")
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--settle", type=float, default=5.0)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--latency-repeat", type=int, help="latency runs per query and system (default: --repeat); "
                    "the latency phase of the first ones of the repeats")
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--timeout-s", type=float, default=900)
    ap.add_argument("--chart", type=Path, help="write the chart (PNG) here")
    ap.add_argument("--json", type=Path, help="write every run's figures here")
    args = ap.parse_args(argv)
    queries = [q for q in args.queries.split(",") if q]
    latency_runs = 0 if args.skip_latency else min(args.repeat, args.latency_repeat if args.latency_repeat is not None
                                                   else args.repeat)
    systems = [s for s in args.systems.split(",") if s]
    work = Path(tempfile.mkdtemp(prefix="eddy-nexmark-"))
    say(f"machine: {os.cpu_count()} CPUs; work dir {work}")
    thr_runs: dict[tuple[str, str], list[Throughput]] = {}
    lat_runs: dict[tuple[str, str], list[Latency]] = {}
    with broker(args.bootstrap) as bootstrap:
        settings = Settings(bootstrap, args.partitions, args.eddy_executors, args.warmup_events, args.timeout_s, work)
        prefix = f"nx-in-{uuid.uuid4().hex[:6]}"
        events_file = work / "events.jsonl"
        gen = generate(bootstrap, prefix, args.events, args.partitions, events_file, rate=EVENT_RATE)
        say(f"generated {gen}")
        settings.join_grace_ms = max(DEFAULT_JOIN_GRACE_MS, gen["last_timestamp"] - gen["first_timestamp"] + 10_000)
        want = reference.expected(reference.read_events(str(events_file)))
        events_file.unlink()
        say("reference: " + ", ".join(f"{q} {want.size(q)}" for q in queries))
        pairs = [(s, q) for q in queries for s in systems]
        for r in range(args.repeat):
            for s, q in pairs:
                thr_runs.setdefault((s, q), []).append(run_throughput(s, q, prefix, args.events, want, settings))
            if r < latency_runs:
                for s, q in pairs:
                    lat_runs.setdefault((s, q), []).append(
                        run_latency(s, q, args.rate, args.duration, args.settle, settings))
            say(f"repeat {r + 1} of {args.repeat} done")
    thr = {k: middle(v, lambda t: t.per_cpu_s if t.ok else math.nan) for k, v in thr_runs.items()}
    lat = {k: middle(v, lambda x: x.p99_ms) for k, v in lat_runs.items()}
    print(f"\nNexmark, {args.events:,} events ({args.partitions} partitions), exactly-once, commit/trigger 100 ms; "
          f"latency at {args.rate} events/s for {args.duration:g} s; middle of {args.repeat} run(s) by "
          f"events per CPU-second / of {latency_runs} by p99\n")
    print("| query | system | events/s | per core | per CPU-s | p50 ms | p99 ms | peak RSS MB | output |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for q in queries:
        for s in systems:
            t, la = thr.get((s, q)), lat.get((s, q))
            verdict = "-" if t is None else ("failed" if t.error else "WRONG" if t.wrong else "checked")
            print(f"| {q} | {s} | {fmt(t.per_s) if t and t.ok else '-'} | {fmt(t.per_core) if t and t.ok else '-'} | "
                  f"{fmt(t.per_cpu_s) if t and t.ok else '-'} | {fmt(la.p50_ms) if la else '-'} | "
                  f"{fmt(la.p99_ms) if la else '-'} | {fmt(t.peak_rss_mb) if t else '-'} | {verdict} |")
    print("\nEvery run:")
    for (s, q), runs in thr_runs.items():
        print(f"  {q} {s}: events/CPU-s " + " / ".join(fmt(t.per_cpu_s) if t.ok else "x" for t in runs)
              + "; events/s " + " / ".join(fmt(t.per_s) if t.ok else "x" for t in runs)
              + "; peak RSS MB " + " / ".join(fmt(t.peak_rss_mb) for t in runs)
              + ("; p50/p99 ms " + " / ".join(f"{fmt(x.p50_ms)}/{fmt(x.p99_ms)}" for x in lat_runs[(s, q)])
                 if (s, q) in lat_runs else ""))
    for peer in (s for s in systems if s != "eddy"):
        if "eddy" not in systems:
            break
        print(f"\nEddy / {NAMES[peer]}:")
        for q in queries:
            e, k = thr.get(("eddy", q)), thr.get((peer, q))
            le, lk = lat.get(("eddy", q)), lat.get((peer, q))
            if e and k and e.ok and k.ok:
                line = f"  {q}: events per CPU-second {e.per_cpu_s / k.per_cpu_s:.2f}x"
                if le and lk:
                    line += f", p99 {le.p99_ms:.0f} vs {lk.p99_ms:.0f} ms"
                print(line)
    if args.chart:
        chart(args.chart, thr, lat, queries, systems,
              f"Nexmark on this machine ({os.cpu_count()} CPUs): {args.events:,} events; p99 at {args.rate} events/s")
        say(f"chart written to {args.chart}")
    if args.json:
        args.json.write_text(json.dumps({"throughput": {f"{s}/{q}": [asdict(t) for t in v]
                                                        for (s, q), v in thr_runs.items()},
                                         "latency": {f"{s}/{q}": [asdict(x) for x in v]
                                                     for (s, q), v in lat_runs.items()}}, indent=1, default=str))
    bad = [f"{t.system} {t.query}" for v in thr_runs.values() for t in v if not t.ok]
    if bad:
        say(f"wrong or failed: {', '.join(bad)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
