"""The interactive-query client, what users and ``eddy query`` (cli.py) ask with: it asks an app's
query endpoints (queries/server.py: the driver's, any executor runner's, or a Service in front
of them) for a store's committed values.

    client = QueryClient(["127.0.0.1:9090"])
    reply = client.get("counts", "apple", max_lag=100)   # served by an active, or a standby <= 100 behind
    reply.value, reply.role, reply.served_by, reply.lag

Each endpoint routes to the executor holding the key's task; the client tries its endpoints in
order and moves to the next when one is unreachable or cannot serve (HTTP 502, 503: no copy to
serve, or a proxy in front of it), so that a query keeps being answered while an executor fails
over.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["KeyReply", "QueryClient", "QueryFailed"]


class QueryFailed(Exception):
    """No endpoint could answer: `status` is the last HTTP status (0: none reachable)."""

    def __init__(self, status: int, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.details = details or {}


@dataclass(frozen=True)
class KeyReply:
    """One key's value and who served it: the executor, its role (active/standby) and its lag."""

    store: str
    task: str
    served_by: str
    role: str
    lag: int
    key: Any
    found: bool
    value: Any


class QueryClient:
    def __init__(self, endpoints: Sequence[str], timeout_s: float = 5.0) -> None:
        if not endpoints:
            raise ValueError("give at least one query endpoint (host:port)")
        self.endpoints = [e.removeprefix("http://").rstrip("/") for e in endpoints]
        self.timeout_s = timeout_s

    def metadata(self) -> dict[str, Any]:
        """The app's queryable stores, its tasks' holders and their endpoints."""
        return self._ask("/metadata", {})

    def get(self, store: str, key: Any, *, max_lag: int | None = None) -> KeyReply:
        """A key's committed value (`found` False when absent). `max_lag`: a standby this many
        changelog records behind may answer (None: only the running active)."""
        body = self._ask(f"/stores/{store}/keys/{_text(key)}", {"max_lag": max_lag})
        return KeyReply(body["store"], body["task"], body["served_by"], body["role"], body["lag"], body["key"],
                        body["found"], body["value"])

    def windows(self, store: str, key: Any, time_from: int = 0, time_to: int = 2**63 - 1, *,
                max_lag: int | None = None) -> dict[str, Any]:
        """A window store's windows of `key` starting in [time_from, time_to]: ``body["windows"]``
        lists ``{"start", "end", "value"}``."""
        return self._ask(f"/stores/{store}/windows/{_text(key)}",
                         {"from": time_from, "to": time_to, "max_lag": max_lag})

    def sessions(self, store: str, key: Any, earliest_end: int = 0, latest_start: int = 2**63 - 1, *,
                 max_lag: int | None = None) -> dict[str, Any]:
        """A session store's sessions of `key` that end at or after `earliest_end` and start at or
        before `latest_start`: ``body["sessions"]`` lists ``{"start", "end", "value"}``."""
        return self._ask(f"/stores/{store}/sessions/{_text(key)}",
                         {"from": earliest_end, "to": latest_start, "max_lag": max_lag})

    def range(self, store: str, lo: Any = None, hi: Any = None, *, max_lag: int | None = None,
              limit: int | None = None) -> list[tuple[Any, Any]]:
        """Every (key, value) with lo <= key <= hi, over all partitions."""
        return _entries(self._ask(f"/stores/{store}/range", {"from": None if lo is None else _text(lo),
                                                             "to": None if hi is None else _text(hi),
                                                             "max_lag": max_lag, "limit": limit}))

    def prefix(self, store: str, prefix: str, *, max_lag: int | None = None,
               limit: int | None = None) -> list[tuple[Any, Any]]:
        return _entries(self._ask(f"/stores/{store}/prefix/{prefix}", {"max_lag": max_lag, "limit": limit}))

    def all(self, store: str, *, max_lag: int | None = None, limit: int | None = None) -> list[tuple[Any, Any]]:
        return _entries(self._ask(f"/stores/{store}/all", {"max_lag": max_lag, "limit": limit}))

    def _ask(self, path: str, params: dict[str, Any]) -> dict[str, Any]:
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        quoted = urllib.parse.quote(path)
        last = QueryFailed(0, "no endpoint answered")
        for endpoint in self.endpoints:
            url = f"http://{endpoint}{quoted}" + (f"?{query}" if query else "")
            try:
                with urllib.request.urlopen(url, timeout=self.timeout_s) as response:
                    body: dict[str, Any] = json.loads(response.read())
                    return body
            except urllib.error.HTTPError as e:
                try:
                    details = json.loads(e.read())
                except ValueError:
                    details = {"error": f"HTTP {e.code}"}
                last = QueryFailed(e.code, f"{endpoint}: {details.get('error', e.code)}", details)
                if e.code not in (502, 503):  # the query itself is wrong: no other endpoint answers better
                    raise last from None
            except OSError as e:
                last = QueryFailed(0, f"{endpoint}: unreachable ({e})")
        raise last


def _text(key: Any) -> str:
    return key if isinstance(key, str) else json.dumps(key)


def _entries(body: dict[str, Any]) -> list[tuple[Any, Any]]:
    return [(e["key"], e["value"]) for p in body["partitions"] for e in p["entries"]]
