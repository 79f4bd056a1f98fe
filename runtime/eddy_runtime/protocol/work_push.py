"""A new assignment generation pushed to the executors' runners over HTTP, ahead of the Spark job
that carries it (executor/continuous.py).

An app that runs continuously hands each executor its (task, role) pairs in a Spark job: the
micro-batch or, with no DataFrame steps, the sync. Under load such a job is slow to reach the
runners, and after a failover that wait is most of the outage. So when the driver
plans a new generation it also POSTs each executor's `ContinuousWork` as JSON to the endpoint
its runner already serves (metrics and interactive queries, executor/runner.py), and does not wait for the
answers. The runner's loop takes the pushed work only if it is newer than the work it runs and it
already has the app's program and settings from an earlier sync; the Spark job follows as
before (it also closes the copies the executor no longer holds). A push that fails or comes late
changes nothing.

A release (`RELEASE_PATH`) comes before a generation that takes continuous actives away from a
live executor under exactly-once: the runner stops processing them, waits for the round that
holds them to commit, and answers whether they were let go cleanly (protocol/fences.py: the driver fences
only the executors that did not), and if so the input positions each committed last, which the
driver hands to their next owners (`ContinuousWork.handed`).

A sync (`SYNC_PATH`) is how the driver of an app that runs only continuously collects what
the runners did, between the Spark jobs that carry its syncs: a Spark job per second and
executor costs the executors' and driver's JVMs CPU (bench/throughput.py), taken from the
loops' records exactly when they were due. In a steady
generation the driver POSTs each executor's `ContinuousWork` to its runner and gets back the
runner's `ItemResult`s since its last sync as JSON (`encode_results`). Whatever changes what an
executor holds or how it runs (a new generation, an executor that is new or not ready, a
failed batch), and any sync that does not answer, goes through a Spark job as before (driver/loop.py,
`Driver._sync_over_http`); what the other runners answered counts beside its results. Every
`INVENTORY_EVERY_BATCHES` syncs also ask each runner what its volume holds (the assignor's lags).

The endpoints change what an executor runs (or hand out what it did), so they take a request
only with the token the driver sent its runners in the batch settings (`BatchSettings.push_token`,
over Spark's own channel).
"""

from __future__ import annotations

import dataclasses
import enum
import hmac
import json
import logging
import threading
import time
import types
import typing
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from eddy_contract.takeover import (
    FENCE_PATH,
    RELEASE_PATH,
    TAKEOVER_PATH,
    TOKEN_HEADER,
    decode_fence,
    decode_takeover,
    encode_json,
    encode_release,
    json_object,
)
from eddy_contract.tasks import Role
from eddy_runtime.protocol.work import ContinuousWork, HandedPositions, ItemResult, Released, StateReset

__all__ = [
    "FENCE_PATH",
    "PUSH_PATH",
    "RELEASE_PATH",
    "SYNC_PATH",
    "TAKEOVER_PATH",
    "TOKEN_HEADER",
    "decode_release",
    "decode_results",
    "decode_sync",
    "decode_work",
    "encode_release",
    "encode_results",
    "encode_sync",
    "encode_work",
    "fence_endpoint",
    "push_endpoint",
    "push_work",
    "release_endpoint",
    "release_tasks",
    "sync_endpoint",
    "sync_runners",
    "takeover_endpoint",
]

log = logging.getLogger("eddy.driver")

PUSH_PATH = "/continuous-work"
SYNC_PATH = "/continuous-sync"
PUSH_TIMEOUT_S = 2.0
_MAX_BODY = 1 << 20


def encode_work(app: str, work: ContinuousWork) -> bytes:
    return encode_json(_work_fields(app, work))


def decode_work(body: bytes) -> tuple[str, ContinuousWork]:
    """(app, work) from a push; ValueError when it is not one."""
    return _work_of(json_object(body, "a push"))


def encode_sync(app: str, work: ContinuousWork, inventory: bool) -> bytes:
    """A sync: the executor's work as a push carries it, and whether to report the volume's inventory."""
    return encode_json({**_work_fields(app, work), "inventory": inventory})


def decode_sync(body: bytes) -> tuple[str, tuple[ContinuousWork, bool]]:
    """(app, (work, inventory)) from a sync; ValueError when it is not one."""
    doc = json_object(body, "a sync")
    app, work = _work_of(doc)
    inventory = doc.get("inventory", False)
    if not isinstance(inventory, bool):
        raise ValueError("inventory must be true or false")
    return app, (work, inventory)


def _work_fields(app: str, work: ContinuousWork) -> dict[str, Any]:
    fields = {"app": app, "generation": work.generation, "tasks": [list(t) for t in work.tasks],
              "commitIntervalS": work.commit_interval_s, "fenceEpoch": work.fence_epoch, "runner": work.runner}
    if work.reset is not None:
        fields["reset"] = _to_json(work.reset)
    if work.handed:
        fields["handed"] = _to_json(work.handed)
    return fields


def _work_of(doc: Mapping[str, Any]) -> tuple[str, ContinuousWork]:
    """(app, work) from a push's or a sync's fields; ValueError when they are not a work's."""
    tasks: list[tuple[str, Role]] = []
    for pair in doc["tasks"]:
        task, role = pair
        if not isinstance(task, str) or role not in tuple(Role):
            raise ValueError(f"not a (task, role) pair: {pair!r}")
        tasks.append((task, Role(role)))
    generation, interval, epoch = doc["generation"], doc["commitIntervalS"], doc.get("fenceEpoch", 0)
    if not isinstance(generation, int) or not isinstance(interval, int | float) or interval <= 0:
        raise ValueError("generation must be an integer and commitIntervalS a positive number")
    if not isinstance(epoch, int) or epoch < 0:
        raise ValueError("fenceEpoch must be a non-negative integer")
    runner = doc.get("runner", "")
    if not isinstance(runner, str):
        raise ValueError("runner must be a string")
    reset = _from_json(StateReset | None, doc.get("reset"))
    handed = _from_json(HandedPositions, doc.get("handed", []))
    return str(doc["app"]), ContinuousWork(generation, tuple(tasks), float(interval), epoch, runner, reset, handed)


def decode_release(body: bytes) -> tuple[str, int, tuple[str, ...], float]:
    """(app, generation, tasks, timeout) from a release; ValueError when it is not one."""
    doc = json_object(body, "a release")
    generation, tasks, timeout = doc["generation"], doc["tasks"], doc["timeoutS"]
    if not isinstance(generation, int) or not isinstance(tasks, list) or not all(isinstance(t, str) for t in tasks):
        raise ValueError("generation must be an integer and tasks a list of task ids")
    if not isinstance(timeout, int | float) or not 0 < timeout <= 60:
        raise ValueError("timeoutS must be a number of seconds in (0, 60]")
    return str(doc["app"]), generation, tuple(tasks), float(timeout)


def encode_results(results: Sequence[ItemResult]) -> list[Any]:
    """`results` as JSON values (what a sync answers)."""
    return [_to_json(r) for r in results]


def decode_results(value: Any) -> list[ItemResult]:
    """The `ItemResult`s of a sync's answer; ValueError when it is not a list of them."""
    if not isinstance(value, list):
        raise ValueError("a sync's results are a JSON list")
    return [_from_json(ItemResult, v) for v in value]


def _to_json(value: Any) -> Any:
    """A dataclass, mapping or sequence of them (down to str, int, float, bool, None) as JSON
    values: a dataclass as an object of its fields, a mapping as a list of [key, value] pairs
    (its keys may be tuples), a tuple as a list."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return [[_to_json(k), _to_json(v)] for k, v in value.items()]
    if isinstance(value, tuple | list):
        return [_to_json(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.value
    if value is None or isinstance(value, str | int | float):
        return value
    raise TypeError(f"cannot send a {type(value).__name__} in a sync")


def _from_json(tp: Any, value: Any) -> Any:
    """The value of type `tp` that `_to_json` made `value` of; ValueError when it is not one."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        kinds = [a for a in args if a is not type(None)]
        if len(kinds) != 1:
            raise ValueError(f"cannot read a {tp}")
        return _from_json(kinds[0], value)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(value, dict):
            raise ValueError(f"a {tp.__name__} is a JSON object")
        hints = typing.get_type_hints(tp)
        known = {f.name for f in dataclasses.fields(tp) if f.init}
        return tp(**{k: _from_json(hints[k], v) for k, v in value.items() if k in known})
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(value)  # ValueError when it is none of the members
    if isinstance(tp, type) and issubclass(tp, tuple) and hasattr(tp, "_fields"):  # a NamedTuple
        if not isinstance(value, list) or len(value) != len(tp._fields):
            raise ValueError(f"a {tp.__name__} is a JSON list of {len(tp._fields)} items")
        hints = typing.get_type_hints(tp)
        return tp(*(_from_json(hints[name], v) for name, v in zip(tp._fields, value, strict=True)))
    if origin is typing.Literal:
        if value not in args:
            raise ValueError(f"{value!r} is none of {args}")
        return value
    if origin in (tuple, Mapping, dict) and not isinstance(value, list):
        raise ValueError(f"a {tp} is a JSON list")
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_from_json(args[0], v) for v in value)
        if len(args) != len(value):
            raise ValueError(f"a {tp} has {len(args)} items, not {len(value)}")
        return tuple(_from_json(a, v) for a, v in zip(args, value, strict=True))
    if origin in (Mapping, dict):
        return {_from_json(args[0], k): _from_json(args[1], v) for k, v in value}
    if tp is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if tp in (str, int, bool) and type(value) is tp:
        return value
    raise ValueError(f"{value!r} is not a {tp}")


def _post(address: str, path: str, body: bytes, token: str, timeout_s: float) -> dict[str, Any]:
    request = urllib.request.Request(f"http://{address}{path}", data=body, method="POST",
                                     headers={"Content-Type": "application/json", TOKEN_HEADER: token})
    with urllib.request.urlopen(request, timeout=timeout_s) as reply:
        answer = json.loads(reply.read())
    return answer if isinstance(answer, dict) else {}


def push_work(addresses: Mapping[str, str], work: Mapping[str, ContinuousWork], app: str, token: str,
              timeout_s: float = PUSH_TIMEOUT_S) -> list[threading.Thread]:
    """POST each executor's work to its runner (`addresses`: executor -> host:port), each on a
    thread of its own; the threads (already started) are returned, for whoever wants to wait."""

    def post(executor: str, address: str, body: bytes) -> None:
        try:
            taken = _post(address, PUSH_PATH, body, token, timeout_s).get("taken")
            log.debug("generation %d pushed to executor %s (taken: %s)", work[executor].generation, executor, taken)
        except Exception as e:  # noqa: BLE001 - the Spark job brings the same work a little later
            log.info("could not push generation %d to executor %s at %s: %s", work[executor].generation,
                     executor, address, e)

    return _post_each(addresses, {e: encode_work(app, w) for e, w in work.items()}, "eddy-push", post)


def release_tasks(addresses: Mapping[str, str], releases: Mapping[str, Sequence[str]], app: str, token: str,
                  generation: int, timeout_s: float) -> dict[str, HandedPositions]:
    """Ask each executor of `releases` (executor -> the continuous actives it loses in
    `generation`) to let its tasks go, all at once; the executors that answered, within
    `timeout_s`, that they did so cleanly, each with the input positions its tasks committed last
    (handed to their next owners: `ContinuousWork.handed`). One without an address, one that does
    not answer in time and one that could not are left out (the caller fences them)."""
    released: dict[str, HandedPositions] = {}
    lock = threading.Lock()

    def post(executor: str, address: str, body: bytes) -> None:
        try:
            answer = _post(address, RELEASE_PATH, body, token, timeout_s + 1.0)
        except Exception as e:  # noqa: BLE001 - the caller fences it instead
            log.info("executor %s did not release its tasks for generation %d: %s", executor, generation, e)
            return
        if answer.get("released") is True:
            try:  # positions of tasks it was asked for only; an older runner hands none
                handed = {t: p for t, p in _from_json(HandedPositions, answer.get("positions", [])).items()
                          if t in releases[executor]}
            except ValueError as e:
                log.warning("executor %s released its tasks for generation %d, but handed no positions: %s",
                            executor, generation, e)
                handed = {}
            with lock:
                released[executor] = handed
        else:
            log.info("executor %s could not release %s cleanly for generation %d", executor,
                     sorted(releases[executor]), generation)

    _join_all(_post_each(addresses, {e: encode_release(app, generation, tasks, timeout_s)
                                     for e, tasks in releases.items()}, "eddy-release", post), timeout_s + 2.0)
    with lock:
        return dict(released)


def sync_runners(addresses: Mapping[str, str], work: Mapping[str, ContinuousWork], app: str, token: str,
                 inventory: bool = False, timeout_s: float = PUSH_TIMEOUT_S) -> dict[str, list[ItemResult]]:
    """Sync each executor of `work` over HTTP, all at once: per executor that answered within
    `timeout_s`, what its runner did since its last sync (`inventory`: and what its volume holds,
    as one more result, `work.volume_inventory`). A runner that answered has handed that
    over: the caller accounts for it even when it syncs the others through a Spark job."""
    answers: dict[str, list[ItemResult]] = {}
    lock = threading.Lock()

    def post(executor: str, address: str, body: bytes) -> None:
        try:
            results = decode_results(_post(address, SYNC_PATH, body, token, timeout_s).get("results"))
        except Exception as e:  # noqa: BLE001 - the caller syncs through Spark instead
            log.info("executor %s did not answer a sync over HTTP at %s: %s", executor, address, e)
            return
        # The runner at `address` is `executor`'s, whatever id it gives: after a driver restart it
        # goes by its earlier executor's id until a Spark task of its new JVM reaches it
        # (`TaskHost.adopt_executor`), and that id may now be another pod's: its volume's
        # inventory would be taken for that pod's, and the assignor would move tasks on it.
        results = [r if r.executor == executor else dataclasses.replace(r, executor=executor) for r in results]
        with lock:
            answers[executor] = results

    if any(not addresses.get(e) for e in work):
        return {}
    _join_all(_post_each(addresses, {e: encode_sync(app, w, inventory) for e, w in work.items()}, "eddy-sync", post),
              timeout_s + 1.0)
    with lock:
        return dict(answers)


def _join_all(threads: Sequence[threading.Thread], seconds: float) -> None:
    """Wait for `threads`, at most `seconds` in all."""
    deadline = time.monotonic() + seconds
    for thread in threads:
        thread.join(max(deadline - time.monotonic(), 0.0))


def _post_each(addresses: Mapping[str, str], bodies: Mapping[str, bytes], name: str,
               post: Callable[[str, str, bytes], None]) -> list[threading.Thread]:
    """`post(executor, address, body)` for each executor of `bodies` with an address, each on a
    thread of its own (started, and returned)."""
    threads = []
    for executor, body in bodies.items():
        address = addresses.get(executor)
        if not address:
            continue
        thread = threading.Thread(target=post, args=(executor, address, body), name=f"{name}-{executor}", daemon=True)
        thread.start()
        threads.append(thread)
    return threads


def push_endpoint(app_token: Callable[[], tuple[str, str] | None],
                  take: Callable[[ContinuousWork], bool]) -> Callable[..., Iterable[bytes]]:
    """The runner's WSGI app for `PUSH_PATH`. `app_token`: the (app, token) of the runner's
    current settings (None before its first sync); `take`: hands the work to the loop, True if
    it took it."""
    return _endpoint(app_token, PUSH_PATH, "a generation's work", decode_work, lambda work: {"taken": take(work)})


def release_endpoint(app_token: Callable[[], tuple[str, str] | None],
                     release: Callable[[int, tuple[str, ...], float], Released]) -> Callable[..., Iterable[bytes]]:
    """The runner's WSGI app for `RELEASE_PATH`; `release(generation, tasks, timeout)`: whether
    the loop let the tasks go cleanly, and if so the positions they committed last
    (`ContinuousLoop.release`), which the answer hands over."""

    def decode(body: bytes) -> tuple[str, tuple[int, tuple[str, ...], float]]:
        app, generation, tasks, timeout = decode_release(body)
        return app, (generation, tasks, timeout)

    def answer(asked: tuple[int, tuple[str, ...], float]) -> dict[str, Any]:
        released = release(*asked)
        return {"released": released.clean, "positions": _to_json(released.positions if released.clean else {})}

    return _endpoint(app_token, RELEASE_PATH, "a release", decode, answer)


def sync_endpoint(app_token: Callable[[], tuple[str, str] | None],
                  collect: Callable[[ContinuousWork, bool], list[ItemResult]]) -> Callable[..., Iterable[bytes]]:
    """The runner's WSGI app for `SYNC_PATH`; `collect(work, inventory)`: takes the work if newer
    (as a push does) and hands back what the loop did since the last sync, and if asked the
    volume's inventory (`TaskRunner.collect`)."""
    return _endpoint(app_token, SYNC_PATH, "a sync", decode_sync,
                     lambda asked: {"results": encode_results(collect(*asked))})


def fence_endpoint(app_token: Callable[[], tuple[str, str] | None],
                   fence: Callable[[int, tuple[str, ...], float], Mapping[str, int]]) -> Callable[..., Iterable[bytes]]:
    """The runner's WSGI app for `FENCE_PATH` (the operator's, while no driver runs: eddy_contract.takeover);
    `fence(generation, runners, timeout)`: the epochs raised (`executor/takeover.py`'s `fence`). Answers
    whether every runner was fenced, and why not."""

    def act(asked: tuple[int, tuple[str, ...], float]) -> dict[str, Any]:
        try:
            return {"fenced": True, "raised": dict(fence(*asked))}
        except Exception as e:  # noqa: BLE001 - the operator asks another runner, or leaves it to the driver
            log.warning("fencing %s for generation %d failed: %s", asked[1], asked[0], e)
            return {"fenced": False, "error": str(e)}

    return _endpoint(app_token, FENCE_PATH, "a fence", decode_fence, act)


def takeover_endpoint(app_token: Callable[[], tuple[str, str] | None],
                      take: Callable[[int, tuple[tuple[str, Role], ...]], bool]) -> Callable[..., Iterable[bytes]]:
    """The runner's WSGI app for `TAKEOVER_PATH` (the operator's, while no driver runs);
    `take(generation, tasks)`: True if the loop took the generation (`executor/takeover.py`'s `take_over`)."""

    def act(asked: tuple[int, tuple[tuple[str, str], ...]]) -> dict[str, Any]:
        generation, pairs = asked
        return {"taken": take(generation, tuple((task, Role(role)) for task, role in pairs))}

    return _endpoint(app_token, TAKEOVER_PATH, "a takeover", decode_takeover, act)


_T = TypeVar("_T")


def _endpoint(app_token: Callable[[], tuple[str, str] | None], path: str, what: str,
              decode: Callable[[bytes], tuple[str, _T]],
              act: Callable[[_T], dict[str, Any]]) -> Callable[..., Iterable[bytes]]:
    """A WSGI app that takes a POSTed JSON body with the push token of the runner's current
    settings, decodes it into (app, request) and hands the request of the runner's own app to `act`."""

    def wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        status, body = _checked(environ)
        data = encode_json(body)
        start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
        return [data]

    def _checked(environ: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if environ.get("REQUEST_METHOD") != "POST":
            return "405 Method Not Allowed", {"error": f"POST {what} to {path}"}
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
            app, request = decode(environ["wsgi.input"].read(length))
        except (ValueError, KeyError, TypeError) as e:
            return "400 Bad Request", {"error": f"not {what}: {e}"}
        if app != current[0]:
            return "409 Conflict", {"error": f"this runner runs app {current[0]!r}, not {app!r}"}
        return "200 OK", act(request)

    return wsgi
