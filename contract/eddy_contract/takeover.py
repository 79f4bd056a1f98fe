"""What the operator asks of the executors' task runners while no driver runs: a failover carried
out without one (docs/DESIGN.md, "A failover without a driver"; operator/eddy_operator/driverless.py
asks, runtime/eddy_runtime/protocol/work_push.py serves).

The driver hands each generation to the runners. While there is none (its pod deleted or
restarting, its node lost), the operator does it for a generation that fails a lost executor's
actives over, in the driver's order:

1. `RELEASE_PATH` (the driver's own request): each live runner that loses a continuous active in
   the generation lets it go, or is fenced in step 2;
2. `FENCE_PATH`: one live runner fences the lost runners for the generation (their fence epochs
   raised to at least it, their transactional ids fenced); a live runner that did not let go is
   not fenced: the generation waits;
3. `TAKEOVER_PATH`: each live runner takes the generation's (task, role) pairs of its executor,
   under its own runner key, fence epoch and commit interval.

Every request carries the app's push token (`TOKEN_HEADER`, the `<app>-push-token` Secret's) and
is JSON. Pure encode/decode functions only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["FENCE_PATH", "RELEASE_PATH", "TAKEOVER_PATH", "TOKEN_HEADER", "decode_fence", "decode_takeover",
           "encode_fence", "encode_json", "encode_release", "encode_takeover", "json_object"]

RELEASE_PATH = "/continuous-release"
FENCE_PATH = "/continuous-fence"
TAKEOVER_PATH = "/continuous-takeover"
TOKEN_HEADER = "X-Eddy-Push-Token"
ROLES = ("active", "standby")


def encode_json(doc: Mapping[str, Any]) -> bytes:
    """A request's or answer's body: compact JSON (the runners' endpoints use it too)."""
    return json.dumps(doc, separators=(",", ":")).encode()


def json_object(body: bytes, what: str) -> dict[str, Any]:
    """A body that must be a JSON object (`what` names it in the error); ValueError otherwise."""
    doc = json.loads(body)
    if not isinstance(doc, dict):
        raise ValueError(f"{what} is a JSON object")
    return doc


def _generation(doc: Mapping[str, Any]) -> int:
    generation = doc["generation"]
    if not isinstance(generation, int) or isinstance(generation, bool) or generation < 0:
        raise ValueError("generation must be a non-negative integer")
    return generation


def encode_release(app: str, generation: int, tasks: Sequence[str], timeout_s: float) -> bytes:
    """A release, as the driver asks it (runtime's `work_push.decode_release` reads it)."""
    return encode_json({"app": app, "generation": generation, "tasks": list(tasks), "timeoutS": timeout_s})


def encode_fence(app: str, generation: int, runners: Sequence[str], timeout_s: float) -> bytes:
    return encode_json({"app": app, "generation": generation, "runners": sorted(runners), "timeoutS": timeout_s})


def decode_fence(body: bytes) -> tuple[str, tuple[int, tuple[str, ...], float]]:
    """(app, (generation, runner keys, timeout)); ValueError when it is not a fence."""
    doc = json_object(body, "a fence")
    runners, timeout = doc["runners"], doc["timeoutS"]
    if not isinstance(runners, list) or not runners or not all(isinstance(r, str) and r for r in runners):
        raise ValueError("runners must be a non-empty list of runner keys")
    if not isinstance(timeout, int | float) or not 0 < timeout <= 60:
        raise ValueError("timeoutS must be a number of seconds in (0, 60]")
    return str(doc["app"]), (_generation(doc), tuple(runners), float(timeout))


def encode_takeover(app: str, generation: int, tasks: Sequence[tuple[str, str]]) -> bytes:
    return encode_json({"app": app, "generation": generation, "tasks": [list(t) for t in tasks]})


def decode_takeover(body: bytes) -> tuple[str, tuple[int, tuple[tuple[str, str], ...]]]:
    """(app, (generation, (task, role) pairs)); ValueError when it is not a takeover."""
    doc = json_object(body, "a takeover")
    pairs = doc["tasks"]
    if not isinstance(pairs, list):
        raise ValueError("tasks must be a list of [task, role] pairs")
    tasks = []
    for pair in pairs:
        if (not isinstance(pair, list) or len(pair) != 2 or not isinstance(pair[0], str)
                or pair[1] not in ROLES):
            raise ValueError(f"not a [task, role] pair: {pair!r}")
        tasks.append((pair[0], pair[1]))
    return str(doc["app"]), (_generation(doc), tuple(tasks))
