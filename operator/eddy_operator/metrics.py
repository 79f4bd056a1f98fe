"""The operator's Prometheus metrics, served on `/metrics` (prometheus-client); docs/DESIGN.md,
"The operator's part": Report, and docs/metrics.md for every series.

Names follow `eddy_operator_<what>_<unit>`; per-app series carry `namespace` and `app` labels.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from eddy_contract.histograms import DURATION_BUCKETS_S
from eddy_operator.pods import LossReason

log = logging.getLogger(__name__)

RECONCILES = Counter("eddy_operator_reconciles_total", "StreamApp reconciles, by result (success|error)", ["result"])
RECONCILE_ERRORS = Counter("eddy_operator_reconcile_errors_total", "StreamApp reconciles that failed")
RECONCILE_DURATION = Histogram(
    "eddy_operator_reconcile_duration_seconds",
    "Time to reconcile one StreamApp into its objects",
    buckets=DURATION_BUCKETS_S,
)
ASSIGNMENT_GENERATION = Gauge(
    "eddy_operator_assignment_generation", "Generation of the last published assignment", ["namespace", "app"]
)
ASSIGNMENTS_PUBLISHED = Counter(
    "eddy_operator_assignments_published_total", "Assignments published to the driver", ["namespace", "app"]
)
FAILOVERS = Counter(
    "eddy_operator_failovers_total", "Executors lost whose active tasks moved to standbys", ["namespace", "app"]
)
DRIVERLESS_HANDOVERS = Counter(
    "eddy_operator_handovers_without_driver_total",
    "Generations the operator handed to the task runners itself while no driver ran",
    ["namespace", "app"],
)
EXECUTOR_LOSSES = Counter(
    "eddy_operator_executor_losses_total",
    "Executors of the published assignment lost, by why (reason), whether they held actives or not",
    ["namespace", "app", "reason"],
)


def loss_label(reason: LossReason) -> str:
    """The `reason` label of eddy_operator_executor_losses_total: the reason's name (no blanks)."""
    return reason.name.lower()


FAILOVER_DURATION = Histogram(
    "eddy_operator_failover_duration_seconds",
    "From the executor pod event to the new assignment being published",
    ["namespace", "app"],
    buckets=DURATION_BUCKETS_S,
)
PODS_OFF_LOST_NODES = Counter(
    "eddy_operator_pods_off_lost_nodes_total",
    "Pods deleted from nodes down longer than spec.state.nodeLossTimeout, or unschedulable as long because their "
    "volume lives only on a node gone, down or drained (their node-local claims released)",
    ["namespace", "app"],
)
AUTOSCALER_DECISIONS = Counter(
    "eddy_operator_autoscaler_decisions_total",
    "Executor count changes the autoscaler made (direction: out or in)",
    ["namespace", "app", "direction"],
)
AUTOSCALER_RECOMMENDED = Gauge(
    "eddy_operator_autoscaler_recommended_executors",
    "Executors the autoscaler's model recommends now (before the stabilization windows and the step)",
    ["namespace", "app"],
)
PODS_DRAINED = Counter(
    "eddy_operator_pods_drained_total",
    "Executor pods deleted off nodes being drained, once every active they had was on a caught-up copy",
    ["namespace", "app"],
)
PODS_REPLACED = Counter(
    "eddy_operator_pods_replaced_total",
    "Executor pods at an old pod template deleted by a rolling upgrade, once every active they had was on a "
    "caught-up copy",
    ["namespace", "app"],
)
TASKS = Gauge("eddy_operator_tasks", "Tasks by state (running|restoring|standby|warmup)", ["namespace", "app", "state"])
EXECUTORS = Gauge("eddy_operator_executors", "Executors by state (desired|ready)", ["namespace", "app", "state"])


def set_app_gauges(namespace: str, app: str, status: dict[str, Any]) -> None:
    tasks = status.get("tasks", {})
    for state in ("running", "restoring", "standby", "warmup"):
        TASKS.labels(namespace, app, state).set(tasks.get(state, 0))
    executors = status.get("executors", {})
    for state in ("desired", "ready"):
        EXECUTORS.labels(namespace, app, state).set(executors.get(state, 0))
    if "assignmentGeneration" in status:
        ASSIGNMENT_GENERATION.labels(namespace, app).set(status["assignmentGeneration"])


def forget_app(namespace: str, app: str) -> None:
    """Drop a deleted app's series, so dashboards do not show ghosts."""
    for gauge, states in ((TASKS, ("running", "restoring", "standby", "warmup")), (EXECUTORS, ("desired", "ready"))):
        for state in states:
            with contextlib.suppress(KeyError):
                gauge.remove(namespace, app, state)
    for metric in (ASSIGNMENT_GENERATION, ASSIGNMENTS_PUBLISHED, FAILOVERS, FAILOVER_DURATION, PODS_OFF_LOST_NODES,
                   PODS_DRAINED, PODS_REPLACED, AUTOSCALER_RECOMMENDED, DRIVERLESS_HANDOVERS):
        with contextlib.suppress(KeyError):
            metric.remove(namespace, app)
    for direction in ("out", "in"):
        with contextlib.suppress(KeyError):
            AUTOSCALER_DECISIONS.remove(namespace, app, direction)
    for reason in LossReason:
        with contextlib.suppress(KeyError):
            EXECUTOR_LOSSES.remove(namespace, app, loss_label(reason))


LEADER = Gauge("eddy_operator_leader", "1 while this replica holds the leader Lease and handles StreamApps")
_server: Any = None


def serve(address: str, port: int) -> Any:
    """Start the /metrics HTTP server once per process (`main` starts it before the leader
    election, so that a standby answers scrapes too); returns the server."""
    global _server
    if _server is None:
        _server, _thread = start_http_server(port, addr=address)
        log.info("metrics on http://%s:%d/metrics", address, _server.server_port)
    return _server


def shutdown() -> None:
    global _server
    if _server is not None:
        _server.shutdown()
        _server.server_close()
        _server = None
