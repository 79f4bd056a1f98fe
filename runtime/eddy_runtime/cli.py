"""The ``eddy`` command: ``eddy run <streamapp.yaml>`` (local), ``eddy driver`` (in the driver pod),
``eddy query APP STORE KEY`` (interactive queries, queries/client.py), and the upgrade gate's dry
run: ``eddy describe <streamapp.yaml>`` (the topology a manifest's pipeline compiles to) and
``eddy diff <streamapp.yaml>`` (what applying it would change, and whether the gate would let it
through; docs/operations.md, "Upgrading an app").

``eddy run`` sets up everything on this machine (local/run.py). ``eddy driver`` is what the
operator's driver StatefulSet runs: it reads the StreamApp manifest (``--streamapp`` or
``EDDY_STREAMAPP``), starts a SparkSession from the ``spark-defaults.conf`` the operator wrote
(``SPARK_CONF_DIR``), follows the operator's assignment ConfigMap and publishes the runtime
state; without ``EDDY_ASSIGNMENT_CONFIGMAP`` it runs the assignor itself (local mode).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eddy_contract.topology import TOPOLOGY_KEY, TopologyDescription

__all__ = ["main"]


def _run(args: argparse.Namespace) -> int:
    from eddy_runtime.local.run import LocalRun, LocalRunOptions

    options = LocalRunOptions(
        streamapp=Path(args.streamapp),
        bootstrap_servers=args.bootstrap_servers,
        executors=args.executors,
        kafka_port=args.kafka_port,
        partitions=args.partitions,
        feed=not args.no_feed,
        feed_rate=args.feed_rate,
        metrics_port=args.metrics_port,
        duration_s=args.duration,
    )
    logging.basicConfig(level=logging.WARNING, format="[%(asctime)s] %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    from eddy_runtime.driver.outcomes import DriverError

    try:
        return LocalRun(options).run()
    except DriverError as e:
        print(f"eddy: the app stopped: {e}", file=sys.stderr)
        return 1


def _driver(args: argparse.Namespace) -> int:
    from eddy_contract.spec import load_streamapp_file
    from eddy_runtime.driver.channel_io import ChannelLocation
    from eddy_runtime.driver.loop import Driver
    from eddy_runtime.driver.options import DriverOptions, default_state_dir
    from eddy_runtime.driver.outcomes import DriverError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # py4j logs every callback connection it closes at INFO: a line a second, nothing to act on.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    path = args.streamapp or os.environ.get("EDDY_STREAMAPP")
    if not path:
        print("eddy driver: give --streamapp or set EDDY_STREAMAPP", file=sys.stderr)
        return 2
    spec = load_streamapp_file(path)
    if args.bootstrap_servers:
        spec = spec.with_bootstrap_servers(args.bootstrap_servers)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(spec.name)
    if args.master:
        builder = builder.master(args.master)
    from eddy_runtime.driver.class_sharing import class_sharing_conf
    from eddy_runtime.protocol.runner_client import PYTHON_DAEMON_CONF

    defaults = {"spark.locality.wait": "3600s", "spark.task.maxFailures": "1", **PYTHON_DAEMON_CONF,
                **class_sharing_conf(spec.spark_conf)}
    for key, value in {**defaults, **dict(spec.spark_conf)}.items():
        builder = builder.config(key, value)
    from eddy_runtime.driver.executor_set import adopt_executor_set, release_executor_set
    from eddy_runtime.driver.startup import load_pipeline
    from eddy_runtime.driver.upgrade_gate import gate_new_version

    metrics_port = args.metrics_port or int(os.environ.get("EDDY_METRICS_PORT", spec.metrics_port))
    assignment = (ChannelLocation(path=args.assignment_file) if args.assignment_file
                  else ChannelLocation.from_env("EDDY_ASSIGNMENT_CONFIGMAP"))
    runtime_state = (ChannelLocation(path=args.runtime_state_file) if args.runtime_state_file
                     else ChannelLocation.from_env("EDDY_RUNTIME_STATE_CONFIGMAP"))
    topology, module = load_pipeline(spec)
    try:
        # before anything of the running version is touched: its runners go on if this is refused;
        # a state reset it allows is carried out by the driver before its first generation
        # (operator mode: the runners outlive the driver)
        upgrade = gate_new_version(spec, topology, runtime_state, runners_outlive=assignment is not None)
    except DriverError as e:
        logging.getLogger("eddy.driver").error("the app stopped: %s", e)
        return 3
    released = release_executor_set()  # Kubernetes: the executors of an earlier driver are adopted, not replaced
    spark = builder.getOrCreate()
    adopt_executor_set(released)
    options = DriverOptions(
        state_dir=args.state_dir or os.environ.get("EDDY_STATE_DIR") or default_state_dir(),
        per_executor_state_dirs=args.per_executor_state_dirs,
        metrics_port=metrics_port,
        assignment_source=assignment,
        runtime_state_target=runtime_state,
    )
    driver = Driver(spark, spec, options, topology, module, upgrade=upgrade)

    def stop(signum: int, _frame: Any) -> None:
        logging.getLogger("eddy.driver").info("signal %d: stopping after the running batch", signum)
        driver.request_stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        driver.run()
    except DriverError as e:
        logging.getLogger("eddy.driver").error("the app stopped: %s", e)
        return 1
    finally:
        spark.stop()
    return 0


def _query(args: argparse.Namespace) -> int:
    from eddy_runtime.queries.client import QueryClient, QueryFailed

    client = QueryClient(args.at)
    try:
        served = client.metadata()
        if served.get("app") != args.app:
            print(f"eddy query: {', '.join(args.at)} serves app {served.get('app')!r}, not {args.app!r}",
                  file=sys.stderr)
            return 2
        if args.prefix is not None:
            out: object = client.prefix(args.store, args.prefix, max_lag=args.max_lag)
        elif args.key is None:
            out = client.all(args.store, max_lag=args.max_lag)
        elif args.windows:
            out = client.windows(args.store, args.key, args.time_from, args.time_to, max_lag=args.max_lag)
        elif args.sessions:
            out = client.sessions(args.store, args.key, args.time_from, args.time_to, max_lag=args.max_lag)
        else:
            reply = client.get(args.store, args.key, max_lag=args.max_lag)
            out = {"key": reply.key, "found": reply.found, "value": reply.value, "task": reply.task,
                   "served_by": reply.served_by, "role": reply.role, "lag": reply.lag}
    except QueryFailed as e:
        print(f"eddy query: {e}", file=sys.stderr)
        return 1
    print(json.dumps(out, indent=1))
    return 0


class _UsageError(Exception):
    """A dry run that cannot be made as asked; the message says what to give."""


def _streamapp_manifest(path: str) -> dict[str, Any]:
    """The first StreamApp document of a YAML file."""
    import yaml

    from eddy_contract.spec import KIND

    for doc in yaml.safe_load_all(Path(path).read_text()):
        if isinstance(doc, dict) and doc.get("kind") == KIND:
            return doc
    raise _UsageError(f"no document of kind {KIND} in {path}")


def _partitions_given(values: Sequence[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for value in values:
        topic, _, count = value.rpartition("=")
        if not topic or not count.isdigit() or int(count) < 1:
            raise _UsageError(f"--partitions takes TOPIC=N (N at least 1), got {value!r}")
        out[topic] = int(count)
    return out


def _describe_manifest(manifest: dict[str, Any], partitions: dict[str, int]) -> TopologyDescription:
    """Compile the manifest's pipeline (imported from the current folder or the installed
    packages) against the given partition counts, without Kafka."""
    from eddy_contract.spec import StreamAppSpec
    from eddy_runtime.driver.startup import load_pipeline, source_topics
    from eddy_runtime.dsl.compiler import compile_topology
    from eddy_runtime.dsl.describe import describe

    spec = StreamAppSpec.from_manifest(manifest)
    topology, _ = load_pipeline(spec, [str(Path.cwd())])
    unknown = [t for t in source_topics(topology) if t not in partitions]
    if unknown:
        raise _UsageError("the partition counts of " + ", ".join(repr(t) for t in unknown) + " are unknown: give "
                          + " ".join(f"--partitions {t}=N" for t in unknown))
    return describe(compile_topology(topology, spec.application_id, partitions))


def _running_partitions(running: TopologyDescription) -> dict[str, int]:
    """The user topics the running version reads, with its partition counts (a joined table's
    topic has its stream's)."""
    internal = {t.name for t in running.repartition_topics}
    return {t: s.partitions for s in running.subtopologies for t in s.source_topics if t not in internal}


def _running_from_cluster(namespace: str, name: str) -> tuple[dict[str, Any], TopologyDescription]:
    """The live StreamApp and the topology its driver published in the runtime-state ConfigMap."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from eddy_contract.channel import runtime_state_configmap_name
    from eddy_contract.kube import api_client
    from eddy_contract.spec import GROUP, PLURAL, VERSION

    api = api_client()
    configmap = runtime_state_configmap_name(name)
    try:
        live: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name)
        data = client.CoreV1Api(api).read_namespaced_config_map(configmap, namespace).data or {}
    except ApiException as e:
        raise _UsageError(f"reading StreamApp {namespace}/{name} and ConfigMap {configmap}: {e.status} {e.reason}"
                          ) from e
    if TOPOLOGY_KEY not in data:
        raise _UsageError(f"ConfigMap {namespace}/{configmap} holds no {TOPOLOGY_KEY}: the app's driver has not "
                          "published its topology yet")
    return live, TopologyDescription.from_json(data[TOPOLOGY_KEY])


def _describe(args: argparse.Namespace) -> int:
    try:
        description = _describe_manifest(_streamapp_manifest(args.streamapp), _partitions_given(args.partitions))
    except _UsageError as e:
        print(f"eddy describe: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(description.to_json())
    return 0


def _diff(args: argparse.Namespace) -> int:
    """Exit 0 when the gate would apply the manifest, 1 when it would refuse it, 2 when the
    comparison cannot be made."""
    from eddy_contract.spec import StreamAppSpec
    from eddy_contract.topology import TopologyFormatError
    from eddy_contract.topology_compare import compare
    from eddy_contract.upgrade import ChangeEffect, classify_spec_change, decide

    try:
        manifest = _streamapp_manifest(args.streamapp)
        spec = StreamAppSpec.from_manifest(manifest)
        running_manifest: dict[str, Any] | None = None
        if args.namespace:
            running_manifest, running = _running_from_cluster(args.namespace, spec.name)
        else:
            running = TopologyDescription.from_json(Path(args.running).read_text())
            if args.running_manifest:
                running_manifest = _streamapp_manifest(args.running_manifest)
        proposed = _describe_manifest(manifest, {**_running_partitions(running), **_partitions_given(args.partitions)})
    except (_UsageError, TopologyFormatError, OSError) as e:
        print(f"eddy diff: {e}", file=sys.stderr)
        return 2
    spec_change = classify_spec_change(running_manifest, manifest) if running_manifest is not None else None
    differences = compare(running, proposed)
    decision = decide(differences, spec.upgrade.mode, proposed, spec.upgrade.reset_offsets)
    if args.json:
        out: dict[str, Any] = {
            "specChanges": None if spec_change is None else [
                {"field": c.field, "old": c.old, "new": c.new, "effect": str(c.effect)} for c in spec_change.changes],
            "differences": [{"kind": str(d.kind), "subject": d.subject, "breaking": d.breaking,
                             "message": d.message, "subtopology": d.subtopology} for d in differences],
            "decision": {"mode": str(decision.mode), "allowed": decision.allowed, "message": decision.message,
                         "resetSubtopologies": list(decision.reset_subtopologies),
                         "resetStores": list(decision.reset_stores),
                         "inputPositions": {t: str(p) for t, p in decision.input_positions.items()},
                         "reasons": list(decision.reasons), "notes": list(decision.notes)},
        }
        print(json.dumps(out, indent=2, sort_keys=True))
        return 0 if decision.allowed else 1
    print("spec:")
    if spec_change is None:
        print("  not compared (give --running-manifest, or --namespace)")
    elif not spec_change.changes:
        print("  unchanged")
    for c in spec_change.changes if spec_change is not None else ():
        print(f"  {'in place' if c.effect is ChangeEffect.IN_PLACE else 'new pods'}  {c.field}: "
              f"{json.dumps(c.old)} -> {json.dumps(c.new)}")
    if spec_change is not None and spec_change.changes and not spec_change.needs_new_pods:
        print("  (applied in place: no pod restarts)")
    print(f"topology (upgrade mode {decision.mode}):")
    if not differences:
        print("  unchanged")
    for d in differences:
        print(f"  {'breaking' if d.breaking else 'note    '}  {d.message}")
    print(f"verdict: {'would be applied' if decision.allowed else 'would be refused'}: {decision.message}")
    if decision.reset_stores:
        print(f"  stores started over: {', '.join(decision.reset_stores)}")
    for topic, where in decision.input_positions.items():
        print(f"  input positions of {topic!r} move to the {where}")
    for note in decision.notes:
        if note not in {d.message for d in differences}:
            print(f"  {note}")
    return 0 if decision.allowed else 1


def main(argv: Sequence[str] | None = None) -> int:
    warnings.filterwarnings("ignore", category=FutureWarning, module="pyspark")
    parser = argparse.ArgumentParser(prog="eddy", description="Stateful PySpark stream apps with Kafka Streams-style "
                                                              "state")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a StreamApp on this machine (local Kafka and Spark unless given)")
    run.add_argument("streamapp", help="the StreamApp manifest, e.g. examples/wordcount/streamapp.yaml")
    run.add_argument("--bootstrap-servers", help="use this Kafka instead of starting a local broker")
    run.add_argument("--executors", type=int, default=2, help="Spark executors (default 2)")
    run.add_argument("--kafka-port", type=int, default=19092, help="port of the local broker (default 19092)")
    run.add_argument("--partitions", type=int, default=4, help="partitions of input topics it creates (default 4)")
    run.add_argument("--no-feed", action="store_true", help="do not feed the example's sample.txt")
    run.add_argument("--feed-rate", type=float, default=20.0,
                     help="lines per second fed after the first pass over sample.txt (0: once)")
    run.add_argument("--metrics-port", type=int, help="serve the driver's metrics on this port")
    run.add_argument("--duration", type=float, help="stop after this many seconds")
    run.set_defaults(fn=_run)

    drv = sub.add_parser("driver", help="run the Spark driver of a StreamApp (what the operator's driver pod runs)")
    drv.add_argument("--streamapp", help="the StreamApp manifest (default: $EDDY_STREAMAPP)")
    drv.add_argument("--bootstrap-servers", help="override spec.kafka.bootstrapServers")
    drv.add_argument("--master", help="Spark master (default: from spark-defaults.conf)")
    drv.add_argument("--state-dir", help="state volume root on the executors (default: $EDDY_STATE_DIR)")
    drv.add_argument("--per-executor-state-dirs", action="store_true",
                     help="executors share a disk: one state folder per executor (local clusters)")
    drv.add_argument("--metrics-port", type=int, help="default: $EDDY_METRICS_PORT or spec.metricsPort")
    drv.add_argument("--assignment-file", help="read the assignment from this file instead of the ConfigMap")
    drv.add_argument("--runtime-state-file", help="write the runtime state to this file instead of the ConfigMap")
    drv.set_defaults(fn=_driver)

    query = sub.add_parser("query", help="read a store of a running app (interactive queries)")
    query.add_argument("app", help="the StreamApp's name")
    query.add_argument("store", help="the store, e.g. counts")
    query.add_argument("key", nargs="?", help="the key (without it: every entry, see --prefix)")
    query.add_argument("--at", action="append", metavar="HOST:PORT",
                       help="a query endpoint: the driver's or an executor's metrics port; repeat to "
                            "fall back (default 127.0.0.1:9108, e.g. a port-forward of the <app>-driver Service)")
    query.add_argument("--max-lag", type=int, help="a standby this many changelog records behind may answer")
    query.add_argument("--prefix", help="entries whose (string) key starts with this")
    kind = query.add_mutually_exclusive_group()
    kind.add_argument("--windows", action="store_true", help="a window store: the key's windows")
    kind.add_argument("--sessions", action="store_true",
                      help="a session store: the key's sessions (as Kafka Streams' findSessions)")
    query.add_argument("--from", dest="time_from", type=int, default=0,
                       help="--windows: windows starting at or after (ms); --sessions: sessions ending at or after")
    query.add_argument("--to", dest="time_to", type=int, default=2**63 - 1,
                       help="--windows: windows starting at or before (ms); --sessions: sessions starting at or "
                            "before")
    query.set_defaults(fn=_query)

    desc = sub.add_parser("describe", help="print the topology a StreamApp's pipeline compiles to, as JSON "
                                           "(sub-topologies, stores, topics; nothing is run)")
    desc.add_argument("streamapp", help="the StreamApp manifest; its pipeline module is imported from here")
    desc.add_argument("--partitions", action="append", default=[], metavar="TOPIC=N",
                      help="the partition count of a topic the pipeline reads; repeat for each")
    desc.set_defaults(fn=_describe)

    diff = sub.add_parser("diff", help="what applying a StreamApp would change, and whether the upgrade gate would "
                                       "let it through (a dry run: nothing is applied); exit 0 applied, 1 refused")
    diff.add_argument("streamapp", help="the StreamApp manifest to apply")
    running = diff.add_mutually_exclusive_group(required=True)
    running.add_argument("--running", metavar="FILE",
                         help="the running topology, as `eddy describe` prints it or the driver publishes it")
    running.add_argument("--namespace", help="read the live StreamApp and its published topology from the cluster "
                                             "($KUBECONFIG)")
    diff.add_argument("--running-manifest", metavar="FILE", help="with --running: the running StreamApp, for the "
                                                                 "spec's changes")
    diff.add_argument("--partitions", action="append", default=[], metavar="TOPIC=N",
                      help="a topic's partition count, when not the running version's; repeat for each")
    diff.add_argument("--json", action="store_true", help="print the comparison as JSON")
    diff.set_defaults(fn=_diff)

    args = parser.parse_args(argv)
    if args.command == "query" and not args.at:
        args.at = ["127.0.0.1:9108"]
    return int(args.fn(args))


if __name__ == "__main__":
    sys.exit(main())
