"""The interactive-query HTTP server: the stores' committed contents, read-only, as JSON.

Each executor's runner serves it beside its metrics (executor/runner.py), answering from the task
copies it holds (`LocalStores`: its `TaskRunner`); the driver serves the same paths on its metrics
port (driver/loop.py) and holds no stores. An endpoint answers a key it holds from its own copy
and forwards any other to the holders the driver's `QueryRouting` names (queries/routing.py; one
hop: a forwarded request is answered locally or refused), so a client (queries/client.py) may ask
any endpoint, or one Service in front of them.

Paths (GET; ``max_lag``: also accept a standby this many changelog records behind, KIP-535's
stale-store reads; without it only a running, restored active answers):

- ``/metadata``: the app's queryable stores, its tasks' holders and their endpoints
- ``/stores/<store>/keys/<key>``: one key's value
- ``/stores/<store>/windows/<key>?from=MS&to=MS``: a window store's windows of a key that start
  in ``[from, to]``
- ``/stores/<store>/sessions/<key>?from=MS&to=MS``: a session store's sessions of a key that end
  at or after ``from`` and start at or before ``to`` (Kafka Streams' ``findSessions``)
- ``/stores/<store>/range?from=K&to=K``, ``/stores/<store>/prefix/<prefix>``,
  ``/stores/<store>/all``: scans over every partition (``limit`` entries per partition, 1000 by
  default)

Replies name the store, the task, the serving executor, its role and its lag. A value is always a
committed one: stores are written only after Kafka has their batch (executor/commit.py). A key
nobody holds answers 503 with where it was asked; a restoring active is "not available".
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from eddy_contract.tasks import Role
from eddy_runtime.queries.routing import QueryError, QueryRouting, StoreRoute, encode_key, json_value, parse_key
from eddy_runtime.state import serde_for
from eddy_runtime.state.store import prefix_successor

__all__ = ["FORWARDED_HEADER", "LocalCopy", "LocalStores", "StoreQueries"]

log = logging.getLogger("eddy.queries")

#: marks a request one endpoint forwarded to another: answered locally, never forwarded again
FORWARDED_HEADER = "X-Eddy-Forwarded"
DEFAULT_LIMIT = 1000
FORWARD_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class LocalCopy:
    """A task copy this runner holds, as a query sees it."""

    task: str
    executor: str
    role: str
    #: changelog records the copy is behind (0 for a running active)
    lag: int
    #: False for an active still restoring: its stores are not complete yet
    available: bool
    store: Any


class LocalStores(Protocol):
    """What holds the stores (the runner's `TaskRunner`): a copy of a task's store, held open
    (not closed meanwhile) while the query reads it; None when not held here."""

    def reading(self, task: str, store: str) -> AbstractContextManager[LocalCopy | None]: ...


def _int_param(params: Mapping[str, str], name: str, default: int | None = None) -> int | None:
    text = params.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise QueryError(400, f"parameter {name}={text!r} is not an integer") from None
    if value < 0 and name in ("max_lag", "limit"):
        raise QueryError(400, f"parameter {name} must be >= 0")
    return value


class StoreQueries:
    """Answers the query paths: from `local` copies, else by forwarding to the key's holders."""

    def __init__(self, routing: Callable[[], QueryRouting | None], local: LocalStores | None = None,
                 self_address: Callable[[], str] = lambda: "") -> None:
        self._routing = routing
        self._local = local
        self._self_address = self_address

    # -- WSGI ---------------------------------------------------------------------------------

    def wsgi(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        # WSGI hands the decoded path over as latin-1 text: back to the UTF-8 the client quoted.
        path = environ.get("PATH_INFO", "").encode("latin-1").decode("utf-8", "replace")
        params = dict(urllib.parse.parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True))
        forwarded = bool(environ.get("HTTP_" + FORWARDED_HEADER.upper().replace("-", "_")))
        if environ.get("REQUEST_METHOD", "GET") != "GET":
            status, body = 405, {"error": "interactive queries are read-only: GET only"}
        else:
            status, body = self.answer(path, params, forwarded)
        data = json.dumps(body, separators=(",", ":")).encode()
        start_response(f"{status} {_REASONS.get(status, 'Error')}",
                       [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
        return [data]

    def answer(self, path: str, params: Mapping[str, str], forwarded: bool = False) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON body) for a query path."""
        try:
            return 200, self._answer(path, params, forwarded)
        except QueryError as e:
            return e.status, {"error": str(e), **e.details}

    def _answer(self, path: str, params: Mapping[str, str], forwarded: bool) -> dict[str, Any]:
        routing = self._routing()
        if routing is None:
            raise QueryError(503, "no routing yet: the app has not run its first batch")
        parts = path.strip("/").split("/")
        if parts == ["metadata"]:
            return routing.as_json()
        if len(parts) < 3 or parts[0] != "stores":
            raise QueryError(404, f"no such query path {path!r}: /metadata, /stores/<store>/keys/<key>, "
                                  "/stores/<store>/windows/<key>, /stores/<store>/sessions/<key>, "
                                  "/stores/<store>/range, /stores/<store>/prefix/<prefix>, /stores/<store>/all")
        route = routing.route(parts[1])
        what, rest = parts[2], "/".join(parts[3:])
        max_lag = _int_param(params, "max_lag")
        if what in ("keys", "windows", "sessions") and rest:
            fetch = {"key_value": "keys", "window": "windows", "session": "sessions"}[route.kind]
            if what != fetch:
                raise QueryError(400, f"store {route.store} is a {route.kind} store: use /{fetch}/<key>")
            key = parse_key(rest, route.key_serde)
            if what == "keys":
                def read(copy: LocalCopy) -> dict[str, Any]:
                    return {"key": key, **_get(route, copy.store, key)}
            else:
                t_from, t_to = _time_bounds(params)
                fetched = _windows if what == "windows" else _sessions

                def read(copy: LocalCopy) -> dict[str, Any]:
                    return {"key": key, what: fetched(copy.store, key, t_from, t_to)}
            return self._on_task(routing, route, route.task_for(key), max_lag, forwarded, path, params, read)
        if what in ("range", "prefix", "all") and (what == "prefix") == bool(rest):
            return self._scan(routing, route, what, rest, max_lag, forwarded, path, params)
        raise QueryError(404, f"no such query path {path!r} for store {route.store}")

    # -- one task ------------------------------------------------------------------------------

    def _on_task(self, routing: QueryRouting, route: StoreRoute, task: str, max_lag: int | None, forwarded: bool,
                 path: str, params: Mapping[str, str], read: Callable[[LocalCopy], dict[str, Any]]
                 ) -> dict[str, Any]:
        tried: list[str] = []
        if self._local is not None:
            with self._local.reading(task, route.store) as copy:
                if copy is not None:
                    why = _unfit(copy, max_lag)
                    if why is None:
                        try:
                            return {"store": route.store, "task": task, "served_by": copy.executor,
                                    "role": copy.role, "lag": copy.lag, **read(copy)}
                        except QueryError:
                            raise
                        except Exception as e:  # noqa: BLE001 - e.g. a store being wiped for a restore
                            log.warning("query of %s on task %s failed: %s", route.store, task, e)
                            why = f"reading failed: {type(e).__name__}: {e}"
                    tried.append(f"executor {copy.executor}: {why}")
        me = self._self_address()
        if not forwarded:
            for holder in routing.holders(task):
                if holder.address == me or (holder.role == Role.STANDBY and max_lag is None):
                    continue
                if not holder.address:
                    tried.append(f"executor {holder.executor} ({holder.role}): its endpoint is not known yet")
                    continue
                status, body = _forward(holder.address, path, params)
                if status == 200:
                    return body
                tried.append(f"executor {holder.executor} ({holder.role}) at {holder.address}: "
                             f"{body.get('error', status)}")
        ask = [h.address for h in routing.holders(task) if h.address and h.address != me
               and (h.role == Role.ACTIVE or max_lag is not None)]
        lag_text = "an active" if max_lag is None else f"a copy at most {max_lag} records behind"
        raise QueryError(503, f"task {task} of store {route.store} is not available here from {lag_text}"
                              + (f" ({'; '.join(tried)})" if tried else ""), task=task, ask=ask)

    def _scan(self, routing: QueryRouting, route: StoreRoute, what: str, prefix: str, max_lag: int | None,
              forwarded: bool, path: str, params: Mapping[str, str]) -> dict[str, Any]:
        limit = _int_param(params, "limit", DEFAULT_LIMIT)
        assert limit is not None
        lo, hi = params.get("from"), params.get("to")
        bounds = (None if lo is None else parse_key(lo, route.key_serde),
                  None if hi is None else parse_key(hi, route.key_serde))

        def read(copy: LocalCopy) -> dict[str, Any]:
            entries = _scan_store(route, copy.store, what, prefix, bounds)
            out: list[dict[str, Any]] = []
            for k, v in entries:
                if len(out) >= limit:
                    return {"entries": out, "truncated": True}
                out.append({"key": k, "value": v})
            return {"entries": out, "truncated": False}

        task = params.get("task")
        if task is not None:  # one partition of a scan another endpoint gathers
            return self._on_task(routing, route, task, max_lag, forwarded, path, params, read)
        partitions = []
        for t in route.tasks:
            partitions.append(self._on_task(routing, route, t, max_lag, False, path, {**params, "task": t}, read))
        return {"store": route.store, "partitions": partitions}


def _unfit(copy: LocalCopy, max_lag: int | None) -> str | None:
    """Why this copy may not answer (None: it may)."""
    if copy.role == Role.ACTIVE:
        return None if copy.available else f"the active is restoring ({copy.lag} records to go)"
    if max_lag is None:
        return "a standby, and the query allows no lag (give max_lag)"
    return None if copy.lag <= max_lag else f"a standby {copy.lag} records behind (max_lag {max_lag})"


def _get(route: StoreRoute, store: Any, key: Any) -> dict[str, Any]:
    if route.raw_keys:
        raw = store.get_raw(encode_key(key, route.key_serde))
        return {"found": raw is not None, "value": None if raw is None else _decode(route, raw)}
    missing = object()
    value = store.get(key, missing)
    return {"found": value is not missing, "value": None if value is missing else json_value(value)}


def _decode(route: StoreRoute, raw: bytes) -> Any:
    return json_value(raw if route.value_serde in ("raw", "bytes") else serde_for(route.value_serde).deserialize(raw))


def _time_bounds(params: Mapping[str, str]) -> tuple[int, int]:
    t_from, t_to = _int_param(params, "from", 0), _int_param(params, "to", 2**63 - 1)
    assert t_from is not None and t_to is not None
    return t_from, t_to


def _windows(store: Any, key: Any, t_from: int, t_to: int) -> list[dict[str, Any]]:
    """The key's windows starting in [t_from, t_to]."""
    size = store.spec.window_size_ms
    return [{"start": start, "end": start + size, "value": json_value(v)}
            for start, v in store.fetch_range(key, t_from, t_to)]


def _sessions(store: Any, key: Any, t_from: int, t_to: int) -> list[dict[str, Any]]:
    """The key's sessions ending at or after t_from and starting at or before t_to."""
    return [{"start": start, "end": end, "value": json_value(v)}
            for (start, end), v in store.find_sessions(key, t_from, t_to)]


def _scan_store(route: StoreRoute, store: Any, what: str, prefix: str,
                bounds: tuple[Any, Any]) -> Iterator[tuple[Any, Any]]:
    if route.kind != "key_value":
        raise QueryError(400, f"store {route.store} is a {route.kind} store: fetch a key's {route.kind}s with "
                              f"/{route.kind}s/<key>")
    if route.raw_keys:
        key_serde = serde_for(route.key_serde if route.key_serde != "bytes" else "string")
        if what == "prefix":
            start: bytes | None = encode_key(prefix, "string")
            end = prefix_successor(encode_key(prefix, "string"))
        else:
            start = None if bounds[0] is None else encode_key(bounds[0], route.key_serde)
            end = None if bounds[1] is None else encode_key(bounds[1], route.key_serde) + b"\0"
        for k, v in store.iter_raw(start, end):
            yield key_serde.deserialize(k), _decode(route, v)
        return
    if what == "prefix":
        if route.key_serde not in ("string", "bytes"):
            raise QueryError(400, f"store {route.store} has {route.key_serde} keys: prefix scans need string keys")
        rows: Iterable[tuple[Any, Any]] = store.prefix(prefix)
    elif what == "all":
        rows = store.items()
    else:
        rows = _inclusive(store, bounds)
    for k, v in rows:
        yield json_value(k), json_value(v)


def _inclusive(store: Any, bounds: tuple[Any, Any]) -> Iterator[tuple[Any, Any]]:
    """Keys in [from, to] (both ends included, as Kafka Streams' `range`), in serialized-key order."""
    lo, hi = bounds
    ser = serde_for(store.spec.key_serde).serialize
    de_key, de_value = serde_for(store.spec.key_serde).deserialize, serde_for(store.spec.value_serde).deserialize
    for k, v in store.iter_raw(None if lo is None else ser(lo), None if hi is None else ser(hi) + b"\0"):
        yield de_key(k), de_value(v)


def _forward(address: str, path: str, params: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
    query = urllib.parse.urlencode(params)
    url = f"http://{address}{urllib.parse.quote(path)}" + (f"?{query}" if query else "")
    request = urllib.request.Request(url, headers={FORWARDED_HEADER: "1"})
    try:
        with urllib.request.urlopen(request, timeout=FORWARD_TIMEOUT_S) as response:
            return int(response.status), json.loads(response.read())
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read())
        except ValueError:
            return e.code, {"error": f"HTTP {e.code}"}
    except (OSError, ValueError) as e:
        return 502, {"error": f"unreachable: {e}"}


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 502: "Bad Gateway",
            503: "Service Unavailable"}
