"""``eddy run <streamapp.yaml>``: run a StreamApp on this machine with one command.

What it sets up when nothing is given: a one-node Kafka broker from infra/kafka/kafka.sh (data
under ``.cache/eddy-run/``, kept between runs so state survives a restart), Spark
``local-cluster`` with two executor JVMs, the input topics (fed with the example's
``sample.txt`` when there is one), then the driver with the app's settings; it prints what
starts, what restores and what runs, and the top values of the output topic as they change.
Ctrl-C stops it cleanly: the running batch finishes, stores are closed with their checkpoints,
then Spark and the broker stop.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from eddy_contract.driver_jvm import DRIVER_JAVA_OPTIONS
from eddy_contract.spec import StreamAppSpec, load_streamapp_file
from eddy_runtime.driver.loop import Driver
from eddy_runtime.driver.metrics import quantile_upper_bound
from eddy_runtime.driver.options import DriverOptions
from eddy_runtime.driver.outcomes import BatchOutcome, BatchReport, DriverError
from eddy_runtime.driver.startup import load_pipeline
from eddy_runtime.dsl.pipeline import Topology
from eddy_runtime.dsl.subtopology import SubTopology, TopicSink
from eddy_runtime.kafka import client as kafka_client
from eddy_runtime.kafka.client import KafkaClientConfig, KafkaCredentialsMissing, KafkaUnreachable
from eddy_runtime.protocol.work import ItemStatus

__all__ = ["LocalRun", "LocalRunOptions", "local_spark_session"]

REPO = Path(__file__).resolve().parents[3]
KAFKA_SH = REPO / "infra" / "kafka" / "kafka.sh"

QUIET_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


@dataclass(frozen=True)
class LocalRunOptions:
    streamapp: Path
    bootstrap_servers: str | None = None
    executors: int = 2
    kafka_port: int = 19092
    partitions: int = 4
    #: lines per second fed from the sample file after the first pass (0: feed it once)
    feed_rate: float = 20.0
    feed: bool = True
    cache_dir: Path = REPO / ".cache" / "eddy-run"
    metrics_port: int | None = None
    #: stop after this many seconds (None: until Ctrl-C)
    duration_s: float | None = None


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def local_spark_session(executors: int, app_name: str, extra_python_path: list[str], log4j: Path | None = None,
                        conf: dict[str, str] | None = None, tmp_dir: Path | None = None) -> Any:
    """A SparkSession on ``local-cluster[N,1,1024]`` whose Python workers use this interpreter.
    `tmp_dir`: the JVMs' ``java.io.tmpdir`` (default /tmp, where lz4-java leaves a copy of its
    native library for every JVM that used it)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from eddy_runtime.protocol.runner_client import PYTHON_DAEMON_CONF

    builder = (
        SparkSession.builder.master(f"local-cluster[{executors},1,1024]")
        .appName(app_name)
        .config("spark.locality.wait", "3600s")
        # The driver retries work itself (next batch, or bisection for a bad record): a failed
        # task fails its batch at once instead of three more times.
        .config("spark.task.maxFailures", "1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.executor.memory", "1g")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.executorEnv.PYTHONPATH", os.pathsep.join(extra_python_path))
    )
    jvm_opts = [f"-Dlog4j2.configurationFile=file:{log4j}"] if log4j is not None else []
    if tmp_dir is not None:
        tmp_dir.mkdir(parents=True, exist_ok=True)
        jvm_opts.append(f"-Djava.io.tmpdir={tmp_dir}")
    builder = builder.config("spark.driver.extraJavaOptions", " ".join([DRIVER_JAVA_OPTIONS, *jvm_opts]))
    if jvm_opts:
        builder = builder.config("spark.executor.extraJavaOptions", " ".join(jvm_opts))
    for k, v in {**PYTHON_DAEMON_CONF, **(conf or {})}.items():
        builder = builder.config(k, v)
    return builder.getOrCreate()


class LocalRun:
    """One ``eddy run``: broker, Spark, topics, feeder, driver, output watcher."""

    def __init__(self, options: LocalRunOptions, out: TextIO = sys.stdout) -> None:
        self.options = options
        self.out = out
        self._stop = threading.Event()
        self._started_broker: Path | None = None
        self._driver: Driver | None = None
        self._threads: list[threading.Thread] = []
        self._last_generation = 0
        self._last_print = 0.0
        #: the end-to-end latency histogram's counts at the last progress line
        self._latency_printed: tuple[int, ...] = ()
        self._lock = threading.Lock()

    def say(self, text: str) -> None:
        with self._lock:
            print(f"[{time.strftime('%H:%M:%S')}] {text}", file=self.out, flush=True)

    # -- parts ------------------------------------------------------------------------------------

    def start_broker(self, spec: StreamAppSpec) -> str:
        if self.options.bootstrap_servers:
            self.say(f"using Kafka at {self.options.bootstrap_servers}")
            return self.options.bootstrap_servers
        protocol = spec.kafka.security.protocol.value
        if protocol != "PLAINTEXT":
            raise DriverError(f"spec.kafka.security.protocol is {protocol}: give --bootstrap-servers of that Kafka "
                              "(the broker eddy run starts itself speaks PLAINTEXT only)")
        port = self.options.kafka_port
        data = self.options.cache_dir / "kafka"
        if _port_open(port):
            self.say(f"a Kafka broker already listens on 127.0.0.1:{port}; using it")
            return f"127.0.0.1:{port}"
        self.say(f"starting a local Kafka broker on 127.0.0.1:{port} (data in {data}; first run fetches its jars)")
        data.mkdir(parents=True, exist_ok=True)
        subprocess.run([str(KAFKA_SH), "fetch"], check=True, cwd=REPO, stdout=subprocess.DEVNULL)
        subprocess.run([str(KAFKA_SH), "start", str(data), str(port)], check=True, cwd=REPO,
                       stdout=subprocess.DEVNULL)
        self._started_broker = data
        self.say("Kafka is ready")
        return f"127.0.0.1:{port}"

    def stop_broker(self) -> None:
        if self._started_broker is not None:
            self.say("stopping the Kafka broker")
            subprocess.run([str(KAFKA_SH), "stop", str(self._started_broker)], cwd=REPO, stdout=subprocess.DEVNULL)
            self._started_broker = None

    def start_spark(self, spec: StreamAppSpec, python_path: list[str]) -> Any:
        n = self.options.executors
        self.say(f"starting Spark local-cluster with {n} executors (one core, 1 GiB each)")
        log4j = self.options.cache_dir / "log4j2.properties"
        log4j.parent.mkdir(parents=True, exist_ok=True)
        log4j.write_text(QUIET_LOG4J)
        spark = local_spark_session(n, f"eddy-{spec.name}", python_path, log4j, dict(spec.spark_conf),
                                    tmp_dir=self.options.cache_dir / "jvm-tmp")
        spark.sparkContext.setLogLevel("ERROR")
        from eddy_runtime.protocol.placement import wait_for_executors

        executors = wait_for_executors(spark.sparkContext, n, timeout=180)
        self.say(f"Spark is ready: executors {', '.join(e.id for e in executors)}")
        return spark

    def ensure_input_topics(self, kafka: KafkaClientConfig, topology: Topology) -> list[str]:
        from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]  # re-exported without __all__

        admin = kafka_client.admin(kafka)
        existing = admin.list_topics(timeout=30).topics
        topics = [s.topic for s in topology.sources]
        new = [t for t in topics if t not in existing]
        if new:
            for topic, fut in admin.create_topics(
                [NewTopic(t, self.options.partitions, 1) for t in new]
            ).items():
                fut.result(30)
                self.say(f"created input topic {topic} ({self.options.partitions} partitions)")
        return topics

    def feed(self, kafka: KafkaClientConfig, topic: str, sample: Path) -> None:
        """Produce the sample's lines once, then keep producing them at the feed rate."""
        lines = [ln.strip() for ln in sample.read_text().splitlines() if ln.strip()]
        producer = kafka_client.producer(kafka, {"linger.ms": 20})
        for line in lines:
            producer.produce(topic, line.encode())
        producer.flush(30)
        self.say(f"fed {len(lines)} lines of {sample.name} into {topic}")
        rate = self.options.feed_rate
        if rate <= 0:
            return
        self.say(f"feeding {rate:g} more lines per second (Ctrl-C stops)")
        i = 0
        while not self._stop.wait(1.0 / rate):
            producer.produce(topic, lines[i % len(lines)].encode())
            producer.poll(0)
            i += 1
        producer.flush(10)

    def watch_output(self, kafka: KafkaClientConfig, topic: str, key_serde: str, value_serde: str) -> None:
        """Print the top values of the output topic whenever they change (at most once a second)."""
        from eddy_runtime.kafka.records import decode_column

        consumer = kafka_client.consumer(kafka, {"group.id": f"eddy-run-watch-{os.getpid()}",
                                                 "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                                                 "enable.auto.commit": False})
        consumer.subscribe([topic])
        latest: dict[Any, Any] = {}
        shown: list[tuple[Any, Any]] = []
        last = 0.0
        try:
            while not self._stop.is_set():
                msgs = consumer.consume(10_000, timeout=0.5)
                good = [m for m in msgs if m.error() is None]
                if good:
                    keys, _ = decode_column([m.key() for m in good], key_serde)
                    values, _ = decode_column([m.value() for m in good], value_serde)
                    latest.update(zip(keys.to_pylist(), values.to_pylist(), strict=True))
                if time.monotonic() - last < 1.0 or not latest:
                    continue
                top = _top(latest, 10)
                if top != shown:
                    shown = top
                    last = time.monotonic()
                    cells = "  ".join(f"{k} {v}" for k, v in top)
                    self.say(f"top of {topic} ({len(latest)} keys): {cells}")
        finally:
            consumer.close()

    # -- progress -----------------------------------------------------------------------------------

    def on_batch(self, report: BatchReport) -> None:
        d = self._driver
        assert d is not None and d.assignment is not None
        if report.generation != self._last_generation:
            self._last_generation = report.generation
            self.say(f"assignment {report.generation}: " + _describe_assignment(d))
        for executor in report.lost_executors:
            cancelled = f"batch {report.batch_id} cancelled; " if report.outcome == BatchOutcome.CANCELLED else ""
            self.say(f"executor {executor} died: {cancelled}standbys take over")
        if report.outcome == BatchOutcome.FAILED and report.error:
            self.say(f"batch {report.batch_id} failed: {report.error[:300]}")
        for r in report.by_status(ItemStatus.RESTORING):
            self.say(f"restoring task {r.task} on executor {r.executor}: {r.restored} records restored, "
                     f"{r.restore_remaining} to go")
        for r in report.results:
            for b in r.bad_records:
                self.say(f"bad record {b} ({'dead-lettered' if r.dead_lettered else 'skipped'})")
        now = time.monotonic()
        if report.records_in or now - self._last_print > 10:
            self._last_print = now
            lag = sum(d.last_lag.values())
            latency = recent_latency(self._latency_printed, counts := d.metrics.latency.snapshot())
            self._latency_printed = counts
            if d.compiled is not None and len(d.continuous_subtopologies) == len(d.compiled.subtopologies):
                what = f"sync {report.batch_id} (continuous)"  # no batches: what the runners did since
            else:
                what = f"batch {report.batch_id}: {report.duration_s:.2f} s,"
            self.say(f"{what} {report.records_in} records in, {report.records_out} out, lag {lag}{latency}")

    # -- the run --------------------------------------------------------------------------------------

    def run(self) -> int:
        opts = self.options
        spec = load_streamapp_file(opts.streamapp)
        app_dir = opts.streamapp.resolve().parent
        python_path = [str(Path.cwd()), str(REPO)]
        sys.path[:0] = [p for p in python_path if p not in sys.path]
        self.say(f"app {spec.name}: pipeline {spec.pipeline.module}.{spec.pipeline.function}, "
                 f"{spec.processing_guarantee.value}, standbys {spec.state.standby_replicas}, "
                 f"bad records: {spec.bad_record_policy.value}")
        spark = None
        handlers = self._install_signal_handlers()
        try:
            spec = spec.with_bootstrap_servers(self.start_broker(spec))
            # Credentials come from this process's environment (EDDY_KAFKA_SASL_USERNAME...); the
            # local-cluster executors Spark starts below inherit it.
            kafka = KafkaClientConfig.from_spec(spec)
            try:
                kafka_client.check_connection(kafka)
            except (KafkaUnreachable, KafkaCredentialsMissing) as e:
                raise DriverError(str(e)) from e
            self.say(f"Kafka: {kafka.describe()}")
            topology, module = load_pipeline(spec)
            topics = self.ensure_input_topics(kafka, topology)
            spark = self.start_spark(spec, python_path)
            # SparkContext replaces the SIGINT handler with one that cancels every job and raises
            # KeyboardInterrupt mid-batch; ours lets the running batch finish and commit.
            self._install_signal_handlers()
            state_dir = opts.cache_dir / "state"
            options = DriverOptions(state_dir=str(state_dir), per_executor_state_dirs=True,
                                    metrics_port=opts.metrics_port, metrics_addr="127.0.0.1")
            driver = Driver(spark, spec, options, topology=topology, pipeline_module=module)
            self._driver = driver
            compiled = driver.prepare()
            for s in compiled.subtopologies:
                self.say(subtopology_line(s))
            self.say(f"state stores under {state_dir}; metrics: "
                     + (f"http://127.0.0.1:{opts.metrics_port}/metrics" if opts.metrics_port else "off"))
            sample = app_dir / "sample.txt"
            if opts.feed and sample.is_file() and topics:
                self._thread(self.feed, kafka, topics[0], sample)
            sink = next((k for s in compiled.subtopologies for k in s.sinks
                         if isinstance(k, TopicSink) and k.topic in compiled.output_topics), None)
            if sink is not None:
                self._thread(self.watch_output, kafka, sink.topic, sink.key_serde or "bytes",
                             sink.value_serde or "bytes")
            if opts.duration_s is not None:
                timer = threading.Timer(opts.duration_s, self.stop)
                timer.daemon = True
                timer.start()
            self.say("running (Ctrl-C stops)")
            driver.run(on_batch=self.on_batch)
            self.say("stopped: stores closed and checkpointed")
            return 0
        finally:
            self._stop.set()
            for t in self._threads:
                t.join(timeout=15)
            if spark is not None:
                with contextlib.suppress(Exception):
                    spark.stop()
            self.stop_broker()
            for sig, handler in handlers.items():
                signal.signal(sig, handler)

    def stop(self) -> None:
        self._stop.set()
        if self._driver is not None:
            self._driver.request_stop()

    def _thread(self, fn: Callable[..., None], *args: Any) -> None:
        t = threading.Thread(target=_logged(fn), args=args, daemon=True, name=fn.__name__)
        t.start()
        self._threads.append(t)

    def _install_signal_handlers(self) -> dict[int, Any]:
        previous: dict[int, Any] = {}
        presses = [0]

        def handle(signum: int, _frame: Any) -> None:
            presses[0] += 1
            if presses[0] > 1:
                self.say("stopping now")
                os._exit(130)
            self.say("stopping: finishing the running batch (Ctrl-C again to quit at once)")
            self.stop()

        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, handle)
        return previous


def recent_latency(before: Sequence[int], now: Sequence[int]) -> str:
    """The end-to-end latency of the records counted between two snapshots of the driver's
    histogram, for a progress line (the upper bounds of the buckets p50 and p99 fall in); "" if
    none was counted."""
    recent = [b - a for a, b in zip(before, now, strict=True)] if before else list(now)
    p50, p99 = quantile_upper_bound(recent, 0.5), quantile_upper_bound(recent, 0.99)
    if p50 is None or p99 is None:
        return ""
    return f", end-to-end latency since the last line p50 <= {p50 * 1000:g} ms, p99 <= {p99 * 1000:g} ms"


def subtopology_line(s: SubTopology) -> str:
    """A sub-topology as `eddy run` shows it at start: its source, every step in the order records
    meet them (DataFrame steps, record steps, the stateful step, the record steps over its results),
    its sinks and its task count."""
    chain = [getattr(f, "__name__", "step") for f in s.steps] + [r.label for r in s.record_steps]
    if s.stateful is not None:
        store = s.stateful.store or (s.table.store if s.table else None)
        chain.append(s.stateful.kind + (f" (store {store.name})" if store else ""))
    chain += [r.label for r in s.post_steps]
    sinks = ", ".join(getattr(k, "topic", "?") for k in s.sinks)
    return (f"sub-topology {s.id}: {' -> '.join([' + '.join(s.source.topics), *chain, sinks or '(no sink)'])}"
            f"  [{s.partitions} tasks]")


def _logged(fn: Callable[..., None]) -> Callable[..., None]:
    def run(*args: Any) -> None:
        try:
            fn(*args)
        except Exception:  # noqa: BLE001 - a helper thread must not die silently
            logging.getLogger("eddy.run").exception("%s failed", fn.__name__)

    return run


def _top(latest: dict[Any, Any], n: int) -> list[tuple[Any, Any]]:
    numeric = all(isinstance(v, int | float) for v in latest.values())
    if numeric:
        return sorted(latest.items(), key=lambda kv: (-kv[1], str(kv[0])))[:n]
    return list(latest.items())[-n:]


def _describe_assignment(driver: Driver) -> str:
    assert driver.assignment is not None and driver.compiled is not None
    stateful = set(driver.compiled.stateful_tasks())
    by_executor: dict[str, tuple[list[str], list[str]]] = {}
    for task, a in sorted(driver.assignment.tasks.items()):
        by_executor.setdefault(a.active, ([], []))[0].append(task)
        for e in (*a.standbys, *a.warmups) if task in stateful else ():
            by_executor.setdefault(e, ([], []))[1].append(task)
    parts = []
    for e in sorted(by_executor):
        active, standby = by_executor[e]
        parts.append(f"executor {e} runs {' '.join(active) or '-'}" + (f" (standby {' '.join(standby)})" if standby
                                                                       else ""))
    return "; ".join(parts)

