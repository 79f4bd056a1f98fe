"""The task runner process: the one process per executor (and state directory) that owns its
tasks' stores, serving the typed requests of `protocol/runner_messages.py` that
`protocol.runner_client.RunnerClient` sends, with an `executor.task_runner.TaskRunner`.

Why a process of its own (docs/DESIGN.md has the measurements): opening an exactly-once task's
state manager per batch (``init_transactions``, changelog offsets, RocksDB) costs far more than a
commit on an open one; and handles cached in Spark's Python workers do not work, because a
DataFrame task runs a Python step on each side of the user's steps, in two workers at once, and
either may serve a task next batch, finding the task's lock held by the other. One long-lived
process per executor keeps stores, producers (transactions initialised once) and consumers open
across batches, and nothing else ever opens the executor's stores.

Who calls it: `RunnerClient` in Spark tasks (driver/executor_steps.py's partition functions),
which starts the runner on first use (detached, in its own session) and reconnects if it died;
and the driver's `Shutdown` when it stops (driver/spark_plan.py). The runner exits when its
executor JVM does (it polls the pid), closing its stores cleanly, or on `Shutdown`; on Kubernetes
(`runner_outlives_executor`) it outlives both the JVM and the driver, processing its continuous
tasks, and exits on SIGTERM (docker/entrypoint.sh sends it when the pod stops). Beside the
socket it serves, over HTTP, the executor's metrics, interactive queries and the driver's pushes
(`_serve_endpoint`).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import logging
import os
import pickle
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import Any

import pyarrow as pa

from eddy_runtime.dsl.subtopology import SubTopology
from eddy_runtime.executor.driver_watch import alive
from eddy_runtime.executor.metrics import ExecutorMetrics
from eddy_runtime.executor.python_daemon import without_pyspark_zip
from eddy_runtime.executor.takeover import fence, take_over
from eddy_runtime.executor.task_runner import TaskRunner
from eddy_runtime.processing.batch import BatchOutput
from eddy_runtime.protocol.health import HealthAndMetricsServer
from eddy_runtime.protocol.runner_client import PICKLE_PROTOCOL, RUNNER_MODULE, runner_outlives_executor
from eddy_runtime.protocol.runner_messages import (
    Close,
    Done,
    NeedProgram,
    Ping,
    Pong,
    RunnerRequest,
    RunReply,
    RunWork,
    Shutdown,
    StashRead,
)
from eddy_runtime.protocol.work_push import (
    FENCE_PATH,
    PUSH_PATH,
    RELEASE_PATH,
    SYNC_PATH,
    TAKEOVER_PATH,
    fence_endpoint,
    push_endpoint,
    release_endpoint,
    sync_endpoint,
    takeover_endpoint,
)
from eddy_runtime.queries.server import StoreQueries

__all__ = ["HOLDING_PATH", "METRICS_ADDRESS_FILE", "READY_PATH", "RequestDispatch", "main", "serve"]

log = logging.getLogger("eddy.runner")


class RequestDispatch:
    """Answers each request but `Shutdown` (which `serve` handles: it stops the process) with
    the runner's `TaskRunner`, and caches the programs `RunWork` requests bring."""

    def __init__(self, runner: TaskRunner) -> None:
        self._runner = runner
        #: program id -> its sub-topologies by id
        self._programs: dict[str, dict[int, SubTopology]] = {}

    def answer(self, request: RunnerRequest[object]) -> object:
        """The reply to `request` (the type it names); raises what serving it raised."""
        match request:
            case RunWork():
                return self._run(request)
            case StashRead():
                self._runner.stash_read(request.batch_id, request.task, request.bad_records, request.records_read)
                return Done()
            case Close():
                self._runner.close_all()
                return Done()
            case Ping():
                return Pong(self._runner.executor_id, os.getpid())
        raise ValueError(f"unknown request {request!r}")

    def _run(self, request: RunWork) -> RunReply:
        if request.program is not None:
            self._programs[request.program_id] = {s.id: s for s in pickle.loads(request.program)}
        elif request.program_id not in self._programs:
            return NeedProgram(request.program_id)
        data = request.data
        if not (data is None or isinstance(data, pa.Table | BatchOutput)):
            raise TypeError(f"a slot's data is a table, a batch's output or None, not a {type(data).__name__}")
        return self._runner.run(self._programs[request.program_id], request.settings, request.slot, data)


def serve(address: str, executor_id: str, state_dir: str, executor_pid: int | None) -> None:
    """Serve requests until the executor JVM dies or a shutdown request comes."""
    try:
        listener = Listener(address, family="AF_UNIX")
    except OSError as e:  # another runner serves this state directory already
        log.info("runner for %s already running (%s); exiting", state_dir, e)
        return
    runner = TaskRunner(executor_id, state_dir, ExecutorMetrics())
    dispatch = RequestDispatch(runner)
    threading.Thread(target=_warm_up, name="eddy-warm", daemon=True).start()
    endpoint = _serve_endpoint(state_dir, runner)
    stop = threading.Event()
    log.info("runner pid %d for executor %s serving %s (executor pid %s)", os.getpid(), executor_id, state_dir,
             executor_pid)

    def watch_executor() -> None:
        while not stop.wait(0.2):
            if executor_pid is not None and not alive(executor_pid):
                log.warning("executor %s (pid %d) is gone; closing tasks and exiting", executor_id, executor_pid)
                stop.set()
        # Wake the accept loop.
        with contextlib.suppress(OSError):
            Client(address, family="AF_UNIX").close()

    if threading.current_thread() is threading.main_thread():
        def terminated(signum: int, _frame: object) -> None:
            log.info("signal %d: closing tasks and exiting", signum)
            stop.set()

        signal.signal(signal.SIGTERM, terminated)

    def connection(conn: Connection) -> None:
        with conn:
            while not stop.is_set():
                try:
                    request = pickle.loads(conn.recv_bytes())
                except (EOFError, OSError):
                    return
                if isinstance(request, Shutdown) and runner_outlives_executor():
                    # a driver that stops (a restart, an upgrade): the runner goes on with its tasks
                    log.info("the driver stops; this runner goes on until its pod stops")
                    conn.send_bytes(pickle.dumps(Done()))
                    continue
                if isinstance(request, Shutdown):
                    runner.close_all()
                    stop.set()
                    conn.send_bytes(pickle.dumps(Done()))
                    with contextlib.suppress(OSError):  # wake the accept loop
                        Client(address, family="AF_UNIX").close()
                    return
                kind = type(request).__name__
                reply: object
                try:
                    reply = dispatch.answer(request)
                except Exception as e:  # noqa: BLE001 - the client turns it into a failed item
                    log.exception("request %s failed", kind)
                    reply = RuntimeError(f"runner request {kind} failed: {type(e).__name__}: {e}")
                try:
                    conn.send_bytes(pickle.dumps(reply, protocol=PICKLE_PROTOCOL))
                except OSError:
                    return

    threading.Thread(target=watch_executor, daemon=True).start()
    with listener:
        while not stop.is_set():
            try:
                conn = listener.accept()
            except OSError:
                continue
            if stop.is_set():
                conn.close()
                break
            threading.Thread(target=connection, args=(conn,), daemon=True).start()
    runner.close_all()
    if endpoint is not None:
        endpoint.close()
    log.info("runner for executor %s stopped", executor_id)


def _warm_up() -> None:
    _load_lazy_modules()
    _freeze_startup_objects()


def _freeze_startup_objects() -> None:
    """Put what the runner has loaded by now (pyarrow, pandas, the Kafka client, Eddy's modules)
    out of the cyclic garbage collector's walks (`gc.freeze`). A full collection walks every
    object it tracks and no thread of the runner runs meanwhile, which showed as spikes of the
    latency's p99 (bench/throughput.py; docs/DESIGN.md has the figures). Frozen objects are
    still freed when their last reference goes; only a cycle among them that was already
    garbage stays (once, at start)."""
    gc.freeze()
    log.debug("froze %d objects loaded at start", gc.get_freeze_count())


def _load_lazy_modules() -> None:
    """Load now what the processing path would load on first use: pyarrow imports pandas on its
    first conversion of a Python list and its query engine on its first group_by. In the
    failover benchmark (bench/failover.py) that was most of a newcomer's first round, and the
    tasks just moved to it waited."""
    try:
        import pyarrow as pa

        pa.array([b""], pa.binary())
        pa.table({"k": pa.array([0])}).group_by("k", use_threads=False).aggregate([("k", "count")])
    except Exception:  # noqa: BLE001 - only a warm-up: the first batch loads them instead
        log.debug("loading pyarrow's lazy modules failed", exc_info=True)


#: in the runner's state directory: ``host:port`` its metrics are served on
METRICS_ADDRESS_FILE = "eddy-runner-metrics"


def _serve_endpoint(state_dir: str, runner: TaskRunner) -> HealthAndMetricsServer | None:
    """The executor's metrics, interactive queries (queries/server.py) and the driver's pushes of new
    generations and releases (protocol/work_push.py), served over HTTP. On a
    Kubernetes pod: on the pod's metrics port (``EDDY_METRICS_PORT``, set by the executor pod
    template) and its IP. Elsewhere (local-cluster, where several executors share one host and the
    driver serves that port): on 127.0.0.1, with a port the kernel picks. Either way the address
    goes to `METRICS_ADDRESS_FILE`, the log, and (for query routing) the runner's results."""
    port = os.environ.get("EDDY_METRICS_PORT")
    pod_ip = os.environ.get("SPARK_EXECUTOR_POD_IP")
    on_pod = bool(port and pod_ip)
    addr = "0.0.0.0" if on_pod else "127.0.0.1"
    assert runner.metrics is not None
    queries = StoreQueries(lambda: runner.routing, runner, lambda: runner.query_address)
    try:
        server = HealthAndMetricsServer(int(port) if on_pod and port else 0, addr, runner.metrics.registry, None,
                                        queries.wsgi,
                                        {PUSH_PATH: push_endpoint(runner.continuous.app_token, runner.continuous.push),
                                         RELEASE_PATH: release_endpoint(runner.continuous.app_token,
                                                                        runner.continuous.release),
                                         SYNC_PATH: sync_endpoint(runner.continuous.app_token, runner.collect),
                                         FENCE_PATH: fence_endpoint(runner.continuous.app_token,
                                                                    functools.partial(fence, runner.continuous)),
                                         TAKEOVER_PATH: takeover_endpoint(
                                             runner.continuous.app_token,
                                             functools.partial(take_over, runner.continuous)),
                                         READY_PATH: _readiness(runner),
                                         HOLDING_PATH: _holding(runner)})
    except (OSError, ValueError) as e:
        log.warning("cannot serve executor metrics and queries on %s:%s: %s", addr, port, e)
        return None
    runner.query_address = f"{pod_ip if on_pod else addr}:{server.port}"
    target = Path(state_dir) / METRICS_ADDRESS_FILE
    with contextlib.suppress(OSError):
        Path(state_dir).mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".tmp")
        tmp.write_text(f"{addr}:{server.port}\n")
        tmp.replace(target)
    log.info("executor metrics on http://%s:%d/metrics, interactive queries on http://%s/stores/",
             addr, server.port, runner.query_address)
    return server


#: the executor pod's readiness probe (the operator's pod template): 200 once the runner is warm
READY_PATH = "/ready"
#: the actives the runner holds (executor/handover.py, the executor pod's preStop hook)
HOLDING_PATH = "/holding"


def _readiness(runner: TaskRunner) -> Callable[..., Iterable[bytes]]:
    """`READY_PATH`: 200 once `TaskRunner.warm`, 503 with the reason before."""
    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        problem = runner.warm()
        body = (problem or "warm").encode() + b"\n"
        start_response("200 OK" if problem is None else "503 Service Unavailable",
                       [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))])
        return [body]
    return app


def _holding(runner: TaskRunner) -> Callable[..., Iterable[bytes]]:
    """`HOLDING_PATH`: the actives this runner holds and may still hand over, one per line
    (executor/handover.py waits for none before the pod stops; a fenced-out runner has none)."""
    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        body = "".join(f"{t}\n" for t in runner.actives_to_hand_over()).encode()
        start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))])
        return [body]
    return app


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=f"python -m {RUNNER_MODULE}", description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--executor-id", required=True)
    parser.add_argument("--address", required=True, help="abstract socket name (without the leading NUL)")
    parser.add_argument("--executor-pid", type=int)
    args = parser.parse_args(argv)
    # The program's functions come pickled by pyspark's cloudpickle, whose loading imports pyspark:
    # from its bytecode, not compiled anew from the pyspark.zip of the worker's path
    sys.path[:] = without_pyspark_zip(sys.path)
    logging.basicConfig(level=logging.INFO,
                        format=f"%(asctime)s %(levelname)s [runner {args.executor_id} {socket.gethostname()}] "
                               "%(name)s: %(message)s")
    serve("\0" + args.address, args.executor_id, args.state_dir, args.executor_pid)


if __name__ == "__main__":
    main()
