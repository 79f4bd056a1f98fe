"""The operator's liveness: what its `/healthz` says, as a leader (kopf's endpoint plus the probe
handler in `handlers.py`) and as a standby (a small server of its own, `StandbyHealthServer`);
docs/DESIGN.md, "The operator's part": Stay available.

kopf's liveness endpoint answers as long as its event loop does, even when every handler is
stuck: the handlers run their apiserver calls in the loop's default thread pool, and a pool
whose threads all hang leaves the loop free. So the probe handler checks what would really stop
the operator: that the pool still runs work (`executor_responds`) and that the resync loop,
which visits every app every `EDDY_OPERATOR_RESYNC_SECONDS`, still completes rounds
(`resync_problem`). kopf turns a failing probe handler into an HTTP 500.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)

#: a resync round may take this long before the operator counts as wedged, however short the period
RESYNC_STALL_FLOOR_S = 120.0
EXECUTOR_TIMEOUT_S = 5.0


def resync_stall_bound(resync_seconds: float) -> float:
    """How long without a completed resync round means the operator is stuck."""
    return max(RESYNC_STALL_FLOOR_S, 4 * resync_seconds)


def resync_problem(last_round_at: float, now: float, resync_seconds: float) -> str | None:
    """None when the resync loop finished a round recently enough, else why not."""
    silent = now - last_round_at
    bound = resync_stall_bound(resync_seconds)
    if silent > bound:
        return f"no resync round completed for {silent:.0f}s (bound {bound:.0f}s)"
    return None


async def executor_responds(timeout_s: float = EXECUTOR_TIMEOUT_S) -> bool:
    """True when the event loop's default thread pool runs a no-op within `timeout_s`."""
    try:
        await asyncio.wait_for(asyncio.to_thread(time.monotonic), timeout_s)
    except TimeoutError:
        return False
    return True


class StandbyHealthServer:
    """`/healthz` of a standby replica, on the address kopf's endpoint takes once it leads.

    Healthy while the campaign loop keeps talking to the apiserver: `last_attempt_at()` (a
    monotonic time) must be within `stale_after_s`."""

    def __init__(self, url: str, last_attempt_at: Callable[[], float], stale_after_s: float) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "http" or parts.port is None:
            raise ValueError(f"--liveness: {url!r} is not an http://host:port/path URL")
        path = parts.path or "/"

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server name
                if self.path.split("?")[0] != path:
                    self.send_error(404)
                    return
                age = time.monotonic() - last_attempt_at()
                ok = age <= stale_after_s
                body = json.dumps({"role": "standby", "lastLeaseCheckSecondsAgo": round(age, 1)}).encode()
                self.send_response(200 if ok else 500)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self.server = ThreadingHTTPServer((parts.hostname or "0.0.0.0", parts.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name="standby-health", daemon=True)
        self.thread.start()
        log.info("standby liveness on %s", url)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
