"""The ``eddy`` command: ``eddy run <streamapp.yaml>`` (local), ``eddy driver`` (in the driver pod)
and ``eddy query APP STORE KEY`` (interactive queries, queries/client.py).

``eddy run`` sets up everything on this machine (local/run.py). ``eddy driver`` is what the
operator's driver StatefulSet runs: it reads the StreamApp manifest (``--streamapp`` or
``EDDY_STREAMAPP``), starts a SparkSession from the ``spark-defaults.conf`` the operator wrote
(``SPARK_CONF_DIR``), follows the operator's assignment ConfigMap and publishes the runtime
state; without ``EDDY_ASSIGNMENT_CONFIGMAP`` it runs the assignor itself (local mode).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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
    from eddy_runtime.driver.loop import Driver, DriverOptions, default_state_dir
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
    defaults = {"spark.locality.wait": "3600s", "spark.task.maxFailures": "1"}
    for key, value in {**defaults, **dict(spec.spark_conf)}.items():
        builder = builder.config(key, value)
    from eddy_runtime.driver.executor_set import adopt_executor_set, release_executor_set

    release_executor_set()  # Kubernetes: the executors of an earlier driver are adopted, not replaced
    spark = builder.getOrCreate()
    adopt_executor_set()
    metrics_port = args.metrics_port or int(os.environ.get("EDDY_METRICS_PORT", spec.metrics_port))
    assignment = (ChannelLocation(path=args.assignment_file) if args.assignment_file
                  else ChannelLocation.from_env("EDDY_ASSIGNMENT_CONFIGMAP"))
    runtime_state = (ChannelLocation(path=args.runtime_state_file) if args.runtime_state_file
                     else ChannelLocation.from_env("EDDY_RUNTIME_STATE_CONFIGMAP"))
    options = DriverOptions(
        state_dir=args.state_dir or os.environ.get("EDDY_STATE_DIR") or default_state_dir(),
        per_executor_state_dirs=args.per_executor_state_dirs,
        metrics_port=metrics_port,
        assignment_source=assignment,
        runtime_state_target=runtime_state,
    )
    driver = Driver(spark, spec, options)

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
    import json

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

    args = parser.parse_args(argv)
    if args.command == "query" and not args.at:
        args.at = ["127.0.0.1:9108"]
    return int(args.fn(args))


if __name__ == "__main__":
    sys.exit(main())
