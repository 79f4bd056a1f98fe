"""The stateful word count run by Spark Structured Streaming, the fourth peer in bench/throughput.py.

    python bench/sss/wordcount.py --bootstrap H:P --input T --output T --checkpoint DIR
                                  --expected-records N [--mode microbatch|realtime]
                                  [--trigger-ms 100] [--cores N] [--shuffle-partitions P]
                                  [--master local-cluster[2,1,1024]] [--timeout-s 1800]

Runs with the project's pyspark (4.3) in a local Spark (``local[N]``, N = ``--cores``) and Spark's
Kafka connector 4.2.0 (``infra/spark/connector.sh jars``, handed to Spark through spark.jars).
The query: Kafka source (``--input``, from the earliest offset), value = one word (key ignored),
``groupBy(word).count()`` (the shuffle re-keys the words; ``spark.sql.shuffle.partitions`` = P,
default the input topic's partition count) in Spark's RocksDB state store provider (changelog
checkpointing on, the store's row count not tracked: the RocksDB section of Spark's guide advises
it where a store takes many updates), output mode update, Kafka sink (``--output``): key = word
(UTF-8), value = count as a 64-bit big-endian long, as the other peers write. No
``maxOffsetsPerTrigger``: a batch takes what the topic holds (one batch for a filled topic). The
checkpoint goes to DIR, which should be new per run (an old checkpoint resumes its offsets and
state).

Before the measured query, a warm-up query (the same query, micro-batch, over
``--warmup-records`` words, 200,000 by default, of a topic of its own, to its end) runs in the same
Spark session, as a user's first query would: the JVM compiles the source's, the aggregation's,
the state store's and the sink's code paths before the clock starts (Eddy's benchmark runs a
warm-up app for the same reason; bench/README.md says what it changes).

- ``--mode microbatch``: ``trigger(processingTime=<trigger-ms> ms)``; one update per word and batch.
- ``--mode realtime``: ``trigger(realTime=<trigger-ms> ms)``, Spark's real-time mode: long-running
  batches of that length (at least ``spark.sql.streaming.realTimeMode.minBatchDuration``) in which
  every record flows through at once and each count update is written as it happens. All source
  and state tasks run at the same time, so it needs input partitions + P task slots (``--cores``).

The Kafka sink is at-least-once: after a failure Spark re-runs a batch from its logged offsets and
the state checkpointed before it, and writes its updates again. In micro-batch mode a word's count
may then repeat; in real-time mode (every update written as it happens) a word's counts are
replayed from the batch's start, so a count may go down for a while. The last count of every word
is the true count either way. Without failures every update is written once.

It stops once the output topic shows N records counted (the sum over words of the last count
seen), then prints exactly one JSON line on stdout: ``{"records","seconds","records_per_s",
"p50_ms","p99_ms","output_records","batches"}``, where ``seconds`` runs from the start of the
first batch that read input (Spark's progress report) to the broker's append time of the output
record that completed the N (output topics created by the bench stamp LogAppendTime). p50/p99
are NaN: the program has no own latency figure (the bench measures latency at its consumer).
Progress on stderr. Exit codes: 0 done, 1 failure, 2 timeout. Stopping it with SIGTERM stops
Spark (its executor threads live in the program's JVM child).

``--expected-records 0`` (bench/failover.py): run until stdin closes, then print one JSON line
``{"batches", "max_batch_ms"}`` (from Spark's progress reports: batches run, the longest).
``--master local-cluster[2,1,1024]`` runs the query on two executor JVMs (Spark's standalone
worker processes; pip's pyspark is enough), which bench/failover.py kills one of.

A restart from the checkpoint (bench/upgrade.py), with ``--expected-records 0``:
``--version 2`` is the changed but compatible query: the word is ``trim``-ed before the
``groupBy`` (a change of projection with the same schema, which Spark's guide lists among the
changes a query may make between restarts from one checkpoint; the benchmark's words have no
blanks, so the counts are the same). ``--status-file PATH`` is rewritten as the program goes:
``{"phase": "session"|"query"|"stopped", "version", "batches", "last_batch_id", "first_batch"}``
(``first_batch``: the progress report of the first batch this process completed, the one that
loaded the state from the checkpoint). ``--go-file PATH``: build the Spark session and run one
small job first (the JVM, the connector's classes and the executor threads are warm), then wait
until PATH exists before starting the query: the new version is ready while the old one still runs
(two queries must never run on one checkpoint at once, so the old one is stopped first).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent.parent
CONNECTOR_SH = REPO / "infra" / "spark" / "connector.sh"
PROGRAM = "sss-wordcount"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
#: words the warm-up query counts before the measured one (--warmup-records)
WARMUP_RECORDS = 200_000

#: settings printed at the start (their defaults shape real-time mode's latency)
SHOWN_CONF = ("spark.sql.streaming.realTimeMode.minBatchDuration", "spark.shuffle.streaming.networkBufferMaxWaitTimeMs",
              "spark.shuffle.streaming.networkBufferSize", "spark.sql.streaming.stateStore.checkpointFormatVersion")
LOG4J = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.noisy.name = org.apache.spark.sql.execution.streaming
logger.noisy.level = error
"""


def log(text: str) -> None:
    print(f"{PROGRAM}: {text}", file=sys.stderr, flush=True)


class OutputWatch:
    """Reads the output topic as it is written; knows when the sum of the last counts reaches N."""

    def __init__(self, bootstrap: str, topic: str, expected: int) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        self.expected = expected
        self.latest: dict[bytes, int] = {}
        self.total = 0
        self.records = 0
        self.done_ms: int | None = None
        self.done = threading.Event()
        self._stop = threading.Event()
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{PROGRAM}-{uuid.uuid4().hex[:8]}",
                                   "enable.auto.commit": False, "fetch.wait.max.ms": 10})
        partitions = self._consumer.list_topics(topic, timeout=30).topics[topic].partitions
        self._consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        self._thread = threading.Thread(target=self._run, daemon=True, name="output-watch")
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set() and not self.done.is_set():
                for m in self._consumer.consume(10_000, timeout=0.1):
                    if m.error() is not None:
                        log(f"output consumer: {m.error()}")
                        continue
                    key, value = m.key() or b"", m.value() or b""
                    n = int.from_bytes(value, "big", signed=True)
                    self.records += 1
                    self.total += n - self.latest.get(key, 0)
                    self.latest[key] = n
                    if self.total >= self.expected and self.done_ms is None:
                        self.done_ms = m.timestamp()[1]
                        self.done.set()
        finally:
            self._consumer.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def input_partitions(bootstrap: str, topic: str) -> int:
    from confluent_kafka.admin import AdminClient

    return len(AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30).topics[topic].partitions)


def spark_session(args: argparse.Namespace, shuffle_partitions: int) -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # loopback only
    log4j = Path(args.checkpoint) / "log4j2.properties"
    log4j.write_text(LOG4J)
    jars = subprocess.run([str(CONNECTOR_SH), "jars"], check=True, capture_output=True, text=True).stdout.strip()
    conf: dict[str, str] = {
        "spark.jars": jars,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{log4j}",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        # The guide's advice for a RocksDB store with many updates: counting the store's rows costs
        # a lookup per write, for a figure of the progress report that the benchmark does not use.
        "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows": "false",
        "spark.sql.streaming.numRecentProgressUpdates": "1000",
        "spark.driver.memory": os.environ.get("SSS_DRIVER_MEMORY", "2g"),
    }
    if args.mode == "realtime":
        # Real-time mode refuses state store checkpoint format v1 (the default for a new query).
        conf["spark.sql.streaming.stateStore.checkpointFormatVersion"] = "2"
    if args.master.startswith("local-cluster"):
        conf["spark.executor.memory"] = "1g"
        conf["spark.executor.extraJavaOptions"] = f"-Dlog4j2.configurationFile=file:{log4j}"
    builder = SparkSession.builder.master(args.master or f"local[{args.cores}]").appName(f"{PROGRAM}-{args.mode}")
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    return spark


def shown_conf(spark: Any, key: str) -> str:
    """A setting's value (SQL settings report their defaults; others only what was set)."""
    try:
        return str(spark.conf.get(key))
    except Exception:  # noqa: BLE001 - not a SQL setting and not set
        return str(spark.sparkContext.getConf().get(key, "(not set: Spark's default)"))


def start_query(spark: Any, args: argparse.Namespace, input_topic: str | None = None, output: str | None = None,
                checkpoint: Path | None = None, name: str | None = None) -> Any:
    """The query over `input_topic` (default --input) to `output` (default --output), checkpointed in
    `checkpoint` (default <--checkpoint>/query)."""
    from pyspark.sql import functions as F

    word = F.col("value").cast("string")
    if args.version == 2:
        word = F.trim(word)  # the new version's changed step: same schema, before the aggregation
    words = (spark.readStream.format("kafka")
             .option("kafka.bootstrap.servers", args.bootstrap)
             .option("subscribe", input_topic or args.input)
             .option("startingOffsets", "earliest")
             .load()
             .select(word.alias("word")))
    counts = words.groupBy("word").count()
    # 64-bit big-endian count: 16 hex digits (counts are positive), decoded to 8 bytes.
    out = counts.select(F.encode(F.col("word"), "UTF-8").alias("key"),
                        F.unhex(F.lpad(F.hex(F.col("count")), 16, "0")).alias("value"))
    writer = (out.writeStream.format("kafka")
              .option("kafka.bootstrap.servers", args.bootstrap)
              .option("topic", output or args.output)
              .option("checkpointLocation", str(checkpoint or Path(args.checkpoint) / "query"))
              .outputMode("update")
              .queryName(name or f"{PROGRAM}-{args.mode}"))
    interval = f"{args.trigger_ms} milliseconds"
    writer = writer.trigger(realTime=interval) if args.mode == "realtime" else writer.trigger(processingTime=interval)
    return writer.start()


def warm_up(spark: Any, args: argparse.Namespace, partitions: int) -> float:
    """Run the same query to its end over --warmup-records words of a topic of its own (its own
    checkpoint and output), then stop it: the JVM's code paths (the Kafka source and sink, the
    aggregation, the state store provider) are compiled before the measured query starts, as
    Eddy's warm-up app and a user's first query give them. Returns the seconds it took."""
    import random

    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    started = time.monotonic()
    topic = f"{args.output}-warmup-in"
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    for f in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1),
                                  NewTopic(f"{topic}-out", num_partitions=partitions, replication_factor=1)]).values():
        f.result(60)
    rnd = random.Random(1)  # over as many words as the benchmark's input: inserts and updates both warm
    producer = Producer({"bootstrap.servers": args.bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 1_000_000})
    for _ in range(args.warmup_records):
        producer.produce(topic, f"w{rnd.randrange(50_000)}".encode())
    if producer.flush(120):
        raise RuntimeError(f"could not fill {topic}")
    # micro-batch in both modes: a real-time batch would run its full length for these few words
    micro = argparse.Namespace(**{**vars(args), "mode": "microbatch", "trigger_ms": 100})
    query = start_query(spark, micro, topic, f"{topic}-out", Path(args.checkpoint) / "warmup", f"{PROGRAM}-warmup")
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    return time.monotonic() - started


def first_input_ms(query: Any) -> float:
    """Start (epoch ms) of the first batch that read input, from the query's progress reports; nan if none."""
    starts = [p["timestamp"] for p in query.recentProgress if p.get("numInputRows", 0) > 0]
    if not starts:
        return math.nan
    t = datetime.datetime.fromisoformat(min(starts).replace("Z", "+00:00"))
    return t.timestamp() * 1000


class Status:
    """The --status-file: rewritten whole (a rename) at each change, so a reader never sees half of it."""

    def __init__(self, path: str | None, version: int) -> None:
        self.path = Path(path) if path else None
        self.doc: dict[str, Any] = {"phase": "session", "version": version, "batches": 0, "last_batch_id": -1,
                                    "first_batch": None}

    def update(self, **fields: Any) -> None:
        self.doc.update(fields)
        if self.path is not None:
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text(json.dumps(self.doc, default=str))  # a progress report holds UUIDs
            tmp.replace(self.path)


def until_stdin_closes(spark: Any, args: argparse.Namespace) -> int:
    """bench/failover.py's and bench/upgrade.py's mode: run the query until stdin closes (after
    --go-file exists, if given); stop it with query.stop(); one JSON line at the end."""
    status = Status(args.status_file, args.version)
    closed = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), closed.set()), daemon=True).start()
    if args.go_file:
        spark.range(1000).selectExpr("sum(id)").collect()  # the JVM's code paths and executor threads
        status.update(phase="ready")
        log(f"session ready; waiting for {args.go_file}")
        while not Path(args.go_file).exists():
            if closed.wait(0.01):
                spark.stop()
                print(json.dumps({"batches": 0, "max_batch_ms": 0}), flush=True)
                return 0
    query = start_query(spark, args)
    status.update(phase="query", query_started_ms=time.time() * 1000)
    log(f"query started (version {args.version}, {args.mode}, trigger {args.trigger_ms} ms, "
        f"{args.master or f'local[{args.cores}]'}, {args.shuffle_partitions} state partitions)")
    progress: list[Any] = []
    try:
        while not closed.wait(0.05):
            if query.exception() is not None:
                print(json.dumps({"error": f"query failed: {query.exception()}"}), flush=True)
                return 1
            last = query.lastProgress
            if last is not None and last["batchId"] != status.doc["last_batch_id"]:
                first = status.doc["first_batch"] or {**last, "seen_ms": time.time() * 1000}
                status.update(batches=status.doc["batches"] + 1, last_batch_id=last["batchId"], first_batch=first)
        progress = list(query.recentProgress)
    finally:
        query.stop()
        status.update(phase="stopped", stopped_ms=time.time() * 1000)
        spark.stop()
    durations = [p.get("durationMs", {}).get("triggerExecution", 0) for p in progress]
    print(json.dumps({"batches": len(progress), "max_batch_ms": max(durations, default=0)}), flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--checkpoint", required=True, help="a new folder per run")
    ap.add_argument("--expected-records", type=int, required=True)
    ap.add_argument("--mode", choices=("microbatch", "realtime"), default="microbatch")
    ap.add_argument("--trigger-ms", type=int, default=100,
                    help="processingTime interval (microbatch) or real-time batch duration (realtime)")
    ap.add_argument("--cores", type=int, default=1, help="local[N]")
    ap.add_argument("--master", default="", help="default local[--cores]; e.g. local-cluster[2,1,1024]")
    ap.add_argument("--shuffle-partitions", type=int, default=0, help="default: the input's partition count")
    ap.add_argument("--timeout-s", type=float, default=1800)
    ap.add_argument("--warmup-records", type=int, default=WARMUP_RECORDS,
                    help="words counted by a warm-up query before the measured one (0: none)")
    ap.add_argument("--version", type=int, choices=(1, 2), default=1, help="2: the changed, compatible query")
    ap.add_argument("--status-file", help="with --expected-records 0: where the program says how far it is")
    ap.add_argument("--go-file", help="with --expected-records 0: start the query once this file exists")
    args = ap.parse_args()

    Path(args.checkpoint).mkdir(parents=True, exist_ok=True)
    shuffle = args.shuffle_partitions or input_partitions(args.bootstrap, args.input)
    watch = OutputWatch(args.bootstrap, args.output, args.expected_records)
    spark = spark_session(args, shuffle)
    if args.expected_records == 0:
        return until_stdin_closes(spark, args)
    query = None
    try:
        if args.warmup_records:
            took = warm_up(spark, args, input_partitions(args.bootstrap, args.input))
            log(f"warm-up query: {args.warmup_records} records in {took:.1f} s")
        query = start_query(spark, args)
        log(f"query started ({args.mode}, trigger {args.trigger_ms} ms, local[{args.cores}], {shuffle} state "
            "partitions)")
        for key in SHOWN_CONF:
            log(f"{key} = {shown_conf(spark, key)}")
        deadline = time.monotonic() + args.timeout_s
        last_report = time.monotonic()
        while not watch.done.wait(0.2):
            if query.exception() is not None:
                raise RuntimeError(f"query failed: {query.exception()}")
            if time.monotonic() > deadline:
                print(json.dumps({"error": f"timeout: counted {watch.total} of {args.expected_records}"}),
                      flush=True)
                return 2
            if time.monotonic() - last_report > 10:
                last_report = time.monotonic()
                log(f"counted {watch.total} of {args.expected_records} ({watch.records} output records)")
        # A real-time batch reports its progress when it ends: wait for the report of the first one.
        start_ms = first_input_ms(query)
        report_deadline = time.monotonic() + 2 * args.trigger_ms / 1000 + 60
        while math.isnan(start_ms) and time.monotonic() < report_deadline and query.exception() is None:
            time.sleep(0.2)
            start_ms = first_input_ms(query)
        batches = len(query.recentProgress)
    except Exception as e:  # noqa: BLE001 - reported as the program's failure line
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)
        return 1
    finally:
        watch.stop()
        if query is not None:
            query.stop()
        spark.stop()
    assert watch.done_ms is not None
    seconds = (watch.done_ms - start_ms) / 1000
    log(f"counted {watch.total} records in {seconds:.2f} s ({batches} progress reports)")
    print(json.dumps({"records": watch.total, "seconds": seconds, "records_per_s": watch.total / seconds,
                      "p50_ms": math.nan, "p99_ms": math.nan, "output_records": watch.records,
                      "batches": batches}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
