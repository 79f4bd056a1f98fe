"""The executor pod's preStop hook (the operator's pod template): before the container is told to
stop (the pod deleted by a rolling upgrade, evicted, drained), wait until its task runner holds no
active task, for at most ``--timeout`` seconds.

A pod that is going away is no live executor for the operator, which publishes a generation that
moves its actives to caught-up copies elsewhere at once; the driver asks this runner to let them
go, and it does so after committing what it processed (a cooperative hand-over, no fence, no
record processed twice). Only then does the container stop, so the new owners start from a clean
commit instead of waiting for a dead runner's transaction to be fenced. A runner that holds
nothing, or none at all (an app of micro-batches, a runner not started), stops at once, and so does
one already fenced out (its actives have a newer owner, which waits for nothing of it: before, such
a pod held its container for the whole timeout); one that still holds actives after the timeout
(no operator running, no other executor) stops anyway.

    python -m eddy_runtime.executor.handover [--port N] [--timeout S]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import urllib.error
import urllib.request

from eddy_runtime.executor.runner import HOLDING_PATH

__all__ = ["held_actives", "main"]


def held_actives(port: int, timeout_s: float = 2.0) -> list[str] | None:
    """The actives the runner on this pod holds (None if it does not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{HOLDING_PATH}", timeout=timeout_s) as reply:
            body: bytes = reply.read()
    except (OSError, urllib.error.URLError):
        return None
    return body.decode().split()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--port", type=int, default=int(os.environ.get("EDDY_METRICS_PORT") or 9108))
    ap.add_argument("--timeout", type=float, default=20.0)
    args = ap.parse_args(argv)
    started = time.monotonic()
    held = held_actives(args.port)
    first = held
    while held and time.monotonic() - started < args.timeout:
        time.sleep(0.2)
        held = held_actives(args.port)
    took = time.monotonic() - started
    if not first:
        print("handover: the runner holds no active task", file=sys.stderr)
    elif held:
        print(f"handover: {held} still held after {took:.1f}s; stopping anyway", file=sys.stderr)
    else:
        print(f"handover: {first} handed over in {took:.1f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
