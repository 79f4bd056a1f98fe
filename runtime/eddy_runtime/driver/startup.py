"""What the driver does once, before its first batch: load the user's pipeline, compile it against
the input topics, reject DataFrame steps that shuffle, create the app's topics and pickle the
program the task runners run (docs/DESIGN.md, "Topics" and "Placement facts").
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from eddy_contract.spec import StreamAppSpec
from eddy_runtime.driver.app_topics import ensure_app_topics
from eddy_runtime.driver.outcomes import DriverError
from eddy_runtime.dsl.compiler import compile_topology
from eddy_runtime.dsl.graph import Join, Node, StreamJoin, TableJoin, TableSource
from eddy_runtime.dsl.pipeline import PipelineError, Topology
from eddy_runtime.dsl.subtopology import CompiledApp
from eddy_runtime.kafka import client as kafka_client
from eddy_runtime.kafka.client import KafkaClientConfig, KafkaCredentialsMissing, KafkaUnreachable
from eddy_runtime.kafka.records import spark_source_schema
from eddy_runtime.kafka.topics import TopicError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["PreparedApp", "check_dataframe_steps", "compile_app", "load_pipeline", "prepare_app", "ship_by_value",
           "source_topics"]

log = logging.getLogger("eddy.driver")


@dataclass(frozen=True)
class PreparedApp:
    """The compiled app and the program its task runners run."""

    compiled: CompiledApp
    #: the sub-topologies as executors need them, pickled once; runners cache it by `program_id`
    program: bytes
    program_id: str


def load_pipeline(spec: StreamAppSpec, search_path: Sequence[str] = ()) -> tuple[Topology, ModuleType]:
    """Import the user's module and call its build function on a fresh `Topology`."""
    for p in search_path:
        if p not in sys.path:
            sys.path.insert(0, p)
    module = importlib.import_module(spec.pipeline.module)
    build = getattr(module, spec.pipeline.function, None)
    if not callable(build):
        raise PipelineError(f"{spec.pipeline.module}.{spec.pipeline.function} is not a function")
    topology = Topology()
    result = build(topology, **dict(spec.pipeline.args))
    if isinstance(result, Topology):
        topology = result
    return topology, module


def ship_by_value(module: ModuleType) -> None:
    """The user's functions travel by value: executors need not import the module."""
    from pyspark import cloudpickle

    with contextlib.suppress(ValueError):
        cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]  # pyspark's vendored copy


def source_topics(topology: Topology) -> list[str]:
    """The topics the pipeline reads: its streams, then the tables it joins."""
    out: list[str] = [s.topic for s in topology.sources]
    seen: set[int] = set()
    for sink in topology.sinks:
        n: Node | None = sink
        while n is not None and id(n) not in seen:
            seen.add(id(n))
            if isinstance(n, Join) and n.table.topic not in out:
                out.append(n.table.topic)
            if isinstance(n, TableJoin | StreamJoin) and n.other.topic not in out:
                out.append(n.other.topic)
            if isinstance(n, TableSource) and n.topic not in out:  # the left table of a table-table join
                out.append(n.topic)
            n = n.parent
    return out


def check_dataframe_steps(spark: SparkSession, compiled: CompiledApp) -> None:
    """Reject DataFrame steps that shuffle: they would move records off their task's executor."""
    sc = spark.sparkContext
    for sub in compiled.subtopologies:
        if not sub.steps:
            continue
        base = spark.createDataFrame(sc.parallelize([(0,)], 1), "slot int")
        df = base.mapInArrow(lambda it: it, spark_source_schema(sub.source.key_serde, sub.source.value_serde))
        for step in sub.steps:
            df = step(df)
            if df is None or not hasattr(df, "_jdf"):
                raise PipelineError(f"a transform step of sub-topology {sub.id} did not return a DataFrame")
        plan = df._jdf.queryExecution().executedPlan().toString()
        reasons = [line.strip() for line in plan.splitlines()
                   if ("Exchange" in line and "BroadcastExchange" not in line) or "Coalesce" in line]
        if reasons:
            raise PipelineError(
                f"a transform step of sub-topology {sub.id} (reading {sub.source.topic}) shuffles or merges "
                f"partitions ({reasons[0][:120]}): a task's records must stay on its executor. Re-key with "
                "group_by(...) instead of groupBy/join/orderBy/repartition/distinct in transform()"
            )


def compile_app(admin_client: Callable[[], Any], kafka: KafkaClientConfig, topology: Topology,
                spec: StreamAppSpec) -> CompiledApp:
    """The pipeline compiled against its input topics' partitions (no Spark needed).

    `admin_client` is called only once the connection check passed: making the client is where
    missing credentials would otherwise surface, unnamed as the app's error."""
    sources = source_topics(topology)
    try:
        # A wrong password or CA fails here, naming the reason, instead of timing out later.
        kafka_client.check_connection(kafka)
    except (KafkaUnreachable, KafkaCredentialsMissing) as e:
        raise DriverError(str(e)) from e
    meta = admin_client().list_topics(timeout=30).topics
    partitions = {t: len(meta[t].partitions) for t in sources if t in meta and meta[t].error is None}
    missing = [t for t in sources if t not in partitions]
    if missing:
        raise DriverError(f"input topics do not exist: {missing} (create them, or check spec.kafka)")
    return compile_topology(topology, spec.application_id, partitions)


def prepare_app(spark: SparkSession, admin_client: Callable[[], Any], kafka: KafkaClientConfig, topology: Topology,
                spec: StreamAppSpec, *, create_output_topics: bool) -> PreparedApp:
    """Compile the pipeline against the topics (`compile_app`) and create the topics the app needs."""
    from pyspark import cloudpickle

    app = spec.application_id
    compiled = compile_app(admin_client, kafka, topology, spec)
    admin = admin_client()
    check_dataframe_steps(spark, compiled)
    try:
        ensure_app_topics(admin, compiled, spec, create_outputs=create_output_topics)
    except TopicError as e:
        raise DriverError(str(e)) from e
    program: bytes = cloudpickle.dumps(  # type: ignore[no-untyped-call]  # pyspark's vendored copy
        [s.for_executor() for s in compiled.subtopologies])
    subs = ", ".join(
        f"{s.id}: {s.source.topic} -> {len(s.steps)} step(s)"
        + (f" -> {s.stateful.kind}" if s.stateful else "")
        + f" -> {', '.join(getattr(k, 'topic', '?') for k in s.sinks)} ({s.partitions} tasks)"
        for s in compiled.subtopologies
    )
    log.info("app %s: sub-topologies %s", app, subs)
    return PreparedApp(compiled, program, hashlib.sha256(program).hexdigest()[:20])
