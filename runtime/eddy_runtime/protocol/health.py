"""The HTTP endpoint the driver and every executor's task runner serve (`HealthAndMetricsServer`):
Prometheus' `/metrics`, `/healthz`, the interactive queries' paths, and the runner's routes for the
driver's pushes (protocol/work_push.py).

The driver's `/healthz`, on `spec.metricsPort`, fails when the micro-batch loop has stopped making
progress, so that the kubelet restarts a wedged driver.

Progress is a batch starting or finishing (`BatchProgress`, fed by `Driver.run`). Every batch is
bounded (at most `max_batch_records` per task, restores in bounded chunks), so a loop that
neither starts nor finishes one for `stall_bound_s(trigger)` = max(120 s, 20 x triggerInterval)
is stuck; until the first batch finishes (Spark's executors starting, the first restores) the
bound is `startup_bound_s(trigger)` = max(600 s, 60 x triggerInterval). A slow batch that ends
inside the bound is healthy; so is a restore, which advances batch by batch.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

STALL_FLOOR_S = 120.0
STALL_TRIGGERS = 20
STARTUP_FLOOR_S = 600.0
STARTUP_TRIGGERS = 60


def stall_bound_s(trigger_interval_s: float) -> float:
    return max(STALL_FLOOR_S, STALL_TRIGGERS * trigger_interval_s)


def startup_bound_s(trigger_interval_s: float) -> float:
    return max(STARTUP_FLOOR_S, STARTUP_TRIGGERS * trigger_interval_s)


def stall_problem(now: float, last_progress_at: float, first_batch_done: bool, trigger_interval_s: float) -> str | None:
    """None while the loop progresses, else why the driver counts as wedged."""
    bound = stall_bound_s(trigger_interval_s) if first_batch_done else startup_bound_s(trigger_interval_s)
    silent = now - last_progress_at
    if silent <= bound:
        return None
    what = "no micro-batch started or finished" if first_batch_done else "the first micro-batch has not finished"
    return f"{what} for {silent:.0f}s (bound {bound:.0f}s)"


@dataclass
class BatchProgress:
    """When the batch loop last moved; written by the loop, read by the health endpoint."""

    trigger_interval_s: float
    clock: Callable[[], float] = time.monotonic
    last_progress_at: float = field(default=0.0)
    batches_finished: int = 0

    def __post_init__(self) -> None:
        self.last_progress_at = self.clock()

    def batch_started(self) -> None:
        self.last_progress_at = self.clock()

    def batch_finished(self) -> None:
        self.batches_finished += 1
        self.last_progress_at = self.clock()

    def problem(self) -> str | None:
        return stall_problem(self.clock(), self.last_progress_at, self.batches_finished > 0, self.trigger_interval_s)


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass


WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def _not_found(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    body = b"no metrics here\n"
    start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8"),
                                     ("Content-Length", str(len(body)))])
    return [body]

#: the paths the interactive-query app answers (queries/server.py)
QUERY_PATHS = ("/metadata", "/stores/")


class HealthAndMetricsServer:
    """`/healthz` from `progress` (always ok without one), the interactive queries' paths from
    `queries`, the paths of `routes` from their apps, everything else Prometheus' exposition of
    `registry` (None: a server of queries alone, as in tests)."""

    def __init__(self, port: int, addr: str, registry: CollectorRegistry | None, progress: BatchProgress | None,
                 queries: WsgiApp | None = None, routes: Mapping[str, WsgiApp] | None = None) -> None:
        from prometheus_client import make_wsgi_app

        metrics_app: WsgiApp = make_wsgi_app(registry) if registry is not None else _not_found

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            path = environ.get("PATH_INFO") or ""
            if path == "/healthz":
                problem = progress.problem() if progress is not None else None
                body = (problem or "ok").encode() + b"\n"
                start_response(
                    "200 OK" if problem is None else "503 Service Unavailable",
                    [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))],
                )
                return [body]
            if routes and path in routes:
                return routes[path](environ, start_response)
            if queries is not None and (path == QUERY_PATHS[0] or path.startswith(QUERY_PATHS[1])):
                return queries(environ, start_response)
            return metrics_app(environ, start_response)

        self.server = make_server(addr, port, app, server_class=_Server, handler_class=_QuietHandler)
        self.port = self.server.server_port
        self._thread = threading.Thread(target=self.server.serve_forever, name="health-metrics", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
