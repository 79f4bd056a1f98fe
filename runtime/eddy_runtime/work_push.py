"""A new assignment generation pushed to the executors' runners over HTTP, ahead of the Spark job
that carries it (continuous.py).

An app that runs continuously hands each executor its (task, role) pairs in a Spark job: the
micro-batch or, with no DataFrame steps, the sync. Under load such a job takes about a second to
reach the runners, and after a failover that second is most of the outage. So when the driver
plans a new generation it also POSTs each executor's `ContinuousWork` as JSON to the endpoint
its runner already serves (metrics and interactive queries, runner.py), and does not wait for the
answers. The runner's loop takes the pushed work only if it is newer than the work it runs and it
already has the app's program and settings from an earlier sync; the Spark job follows as
before (it also closes the copies the executor no longer holds). A push that fails or comes late
changes nothing.

The endpoint changes what an executor runs, so it takes a push only with the token the driver
sent its runners in the batch settings (`BatchSettings.push_token`, over Spark's own channel).
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from eddy_runtime.work import ContinuousWork, Role

__all__ = ["PUSH_PATH", "TOKEN_HEADER", "decode_work", "encode_work", "push_endpoint", "push_work"]

log = logging.getLogger("eddy.driver")

PUSH_PATH = "/continuous-work"
TOKEN_HEADER = "X-Eddy-Push-Token"
PUSH_TIMEOUT_S = 2.0
_MAX_BODY = 1 << 20


def encode_work(app: str, work: ContinuousWork) -> bytes:
    return json.dumps({"app": app, "generation": work.generation, "tasks": [list(t) for t in work.tasks],
                       "commitIntervalS": work.commit_interval_s, "fenceEpoch": work.fence_epoch},
                      separators=(",", ":")).encode()


def decode_work(body: bytes) -> tuple[str, ContinuousWork]:
    """(app, work) from a push; ValueError when it is not one."""
    doc = json.loads(body)
    if not isinstance(doc, dict):
        raise ValueError("a push is a JSON object")
    tasks: list[tuple[str, Role]] = []
    for pair in doc["tasks"]:
        task, role = pair
        if not isinstance(task, str) or role not in ("active", "standby"):
            raise ValueError(f"not a (task, role) pair: {pair!r}")
        tasks.append((task, role))
    generation, interval, epoch = doc["generation"], doc["commitIntervalS"], doc.get("fenceEpoch", 0)
    if not isinstance(generation, int) or not isinstance(interval, int | float) or interval <= 0:
        raise ValueError("generation must be an integer and commitIntervalS a positive number")
    if not isinstance(epoch, int) or epoch < 0:
        raise ValueError("fenceEpoch must be a non-negative integer")
    return str(doc["app"]), ContinuousWork(generation, tuple(tasks), float(interval), epoch)


def push_work(addresses: Mapping[str, str], work: Mapping[str, ContinuousWork], app: str, token: str,
              timeout_s: float = PUSH_TIMEOUT_S) -> list[threading.Thread]:
    """POST each executor's work to its runner (`addresses`: executor -> host:port), each on a
    thread of its own; the threads (already started) are returned, for whoever wants to wait."""

    def post(executor: str, address: str, body: bytes) -> None:
        request = urllib.request.Request(f"http://{address}{PUSH_PATH}", data=body, method="POST",
                                         headers={"Content-Type": "application/json", TOKEN_HEADER: token})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as reply:
                taken = json.loads(reply.read()).get("taken")
            log.debug("generation %d pushed to executor %s (taken: %s)", work[executor].generation, executor, taken)
        except Exception as e:  # noqa: BLE001 - the Spark job brings the same work a little later
            log.info("could not push generation %d to executor %s at %s: %s", work[executor].generation,
                     executor, address, e)

    threads = []
    for executor, w in work.items():
        address = addresses.get(executor)
        if not address:
            continue
        thread = threading.Thread(target=post, args=(executor, address, encode_work(app, w)),
                                  name=f"eddy-push-{executor}", daemon=True)
        thread.start()
        threads.append(thread)
    return threads


def push_endpoint(app_token: Callable[[], tuple[str, str] | None],
                  take: Callable[[ContinuousWork], bool]) -> Callable[..., Iterable[bytes]]:
    """The runner's WSGI app for `PUSH_PATH`. `app_token`: the (app, token) of the runner's
    current settings (None before its first sync); `take`: hands the work to the loop, True if
    it took it."""

    def wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        status, body = _answer(environ)
        data = json.dumps(body, separators=(",", ":")).encode()
        start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
        return [data]

    def _answer(environ: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if environ.get("REQUEST_METHOD") != "POST":
            return "405 Method Not Allowed", {"error": f"POST a generation's work to {PUSH_PATH}"}
        current = app_token()
        given = environ.get("HTTP_" + TOKEN_HEADER.upper().replace("-", "_"), "")
        if current is None:
            return "503 Service Unavailable", {"error": "no work from the driver yet"}
        if not current[1] or not hmac.compare_digest(given.encode(), current[1].encode()):
            return "403 Forbidden", {"error": "wrong or missing push token"}
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
            if not 0 < length <= _MAX_BODY:
                raise ValueError(f"body of {length} bytes")
            app, work = decode_work(environ["wsgi.input"].read(length))
        except (ValueError, KeyError, TypeError) as e:
            return "400 Bad Request", {"error": f"not a generation's work: {e}"}
        if app != current[0]:
            return "409 Conflict", {"error": f"this runner runs app {current[0]!r}, not {app!r}"}
        return "200 OK", {"taken": take(work)}

    return wsgi
