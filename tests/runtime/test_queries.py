"""Interactive queries without Kafka or Spark: key routing (Kafka's murmur2 partitioner), the
answers one endpoint gives from the copies it holds (real RocksDB stores), and forwarding
between two endpoints served over loopback HTTP.
"""

from __future__ import annotations

import ctypes
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from eddy_contract.tasks import Role
from eddy_runtime import cli
from eddy_runtime.protocol.health import HealthAndMetricsServer
from eddy_runtime.queries.client import QueryClient, QueryFailed
from eddy_runtime.queries.routing import (
    QueryError,
    QueryRouting,
    StoreRoute,
    TaskCopies,
    kafka_partition,
    murmur2,
    parse_key,
)
from eddy_runtime.queries.server import LocalCopy, StoreQueries
from eddy_runtime.state import StoreSpec
from eddy_runtime.state.stores import open_store

pytestmark = pytest.mark.unit


def test_murmur2_is_kafkas():
    # Kafka's own UtilsTest.testMurmur2 vectors (Java ints).
    cases = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
             b"a-little-bit-longer-string": -1486304829,
             b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971, b"abc": 479470107}
    assert {k: ctypes.c_int32(murmur2(k)).value for k in cases} == cases
    assert kafka_partition(b"foobar", 4) == (-790332482 & 0x7FFFFFFF) % 4


def test_keys_are_parsed_as_the_store_types_them():
    assert parse_key("42", "int64") == 42
    assert parse_key("apple", "string") == "apple"
    assert parse_key('{"a": 1}', "json") == {"a": 1}
    with pytest.raises(QueryError, match="is not an int64") as e:
        parse_key("apple", "int64")
    assert e.value.status == 400


class Held:
    """Copies one endpoint holds: task -> (role, lag, available, store)."""

    def __init__(self, executor: str) -> None:
        self.executor = executor
        self.copies: dict[str, tuple[str, int, bool, object]] = {}

    @contextmanager
    def reading(self, task: str, store: str) -> Iterator[LocalCopy | None]:
        c = self.copies.get(task)
        yield None if c is None else LocalCopy(task, self.executor, c[0], c[1], c[2], c[3])


ROUTE = StoreRoute("counts", "key_value", 1, 2, "string")


def counts_store(path: Path, words: dict[str, int]):
    store = open_store(StoreSpec.key_value("counts", "string", "int64"), path)
    tx = store.begin()
    for w, n in words.items():
        tx.put(w, n)
    tx.apply(changelog_offset=len(words) - 1)
    return store


def routing(addresses: dict[str, str]) -> QueryRouting:
    return QueryRouting("wc", 3, {"counts": ROUTE}, {"1_0": ("a", ("b",)), "1_1": ("b", ("a",))}, addresses)


def test_a_tasks_holders_are_its_active_then_its_standbys_with_their_roles_and_addresses():
    by_copies = QueryRouting("wc", 3, {"counts": ROUTE}, {"1_0": TaskCopies("a", ("b", "c"))}, {"a": "h:1", "b": "h:2"})
    assert [(h.executor, h.role, h.address) for h in by_copies.holders("1_0")] == [
        ("a", Role.ACTIVE, "h:1"), ("b", Role.STANDBY, "h:2"), ("c", Role.STANDBY, "")]
    assert by_copies.holders("1_1") == []
    assert routing({"a": "h:1", "b": "h:2"}).holders("1_0") == by_copies.holders("1_0")[:2]  # plain pairs too
    assert by_copies.as_json()["tasks"] == {"1_0": {"active": "a", "standbys": ["b", "c"]}}


def test_an_endpoint_answers_its_actives_and_its_standbys_only_within_max_lag(tmp_path):
    words = {f"w{i}": i for i in range(40)}
    by_task = {t: {w: n for w, n in words.items() if ROUTE.task_for(w) == t} for t in ROUTE.tasks}
    assert all(by_task.values())  # both partitions have words
    held = Held("a")
    held.copies["1_0"] = ("active", 0, True, counts_store(tmp_path / "a0", by_task["1_0"]))
    held.copies["1_1"] = ("standby", 7, True, counts_store(tmp_path / "a1", by_task["1_1"]))
    queries = StoreQueries(lambda: routing({}), held)
    active_word, standby_word = next(iter(by_task["1_0"])), next(iter(by_task["1_1"]))

    status, body = queries.answer(f"/stores/counts/keys/{active_word}", {})
    assert status == 200 and body["value"] == words[active_word] and body["found"]
    assert (body["role"], body["lag"], body["served_by"], body["task"]) == ("active", 0, "a", "1_0")
    assert queries.answer("/stores/counts/keys/nope-not-there", {"max_lag": "10"})[1]["found"] is False

    status, body = queries.answer(f"/stores/counts/keys/{standby_word}", {})
    assert status == 503 and "allows no lag" in body["error"] and body["task"] == "1_1"
    status, body = queries.answer(f"/stores/counts/keys/{standby_word}", {"max_lag": "6"})
    assert status == 503 and "7 records behind" in body["error"]
    status, body = queries.answer(f"/stores/counts/keys/{standby_word}", {"max_lag": "7"})
    assert status == 200 and (body["role"], body["lag"], body["value"]) == ("standby", 7, words[standby_word])

    held.copies["1_0"] = ("active", 120, False, held.copies["1_0"][3])
    status, body = queries.answer(f"/stores/counts/keys/{active_word}", {"max_lag": "1000"})
    assert status == 503 and "restoring (120 records to go)" in body["error"]

    status, body = queries.answer("/stores/counts/all", {"max_lag": "7", "limit": "3"})
    assert status == 503  # 1_0's only copy here restores, and its other holder is unknown
    held.copies["1_0"] = ("active", 0, True, held.copies["1_0"][3])
    status, body = queries.answer("/stores/counts/all", {"max_lag": "7"})
    assert status == 200
    assert {e["key"]: e["value"] for p in body["partitions"] for e in p["entries"]} == words
    status, body = queries.answer("/stores/counts/range", {"from": "w1", "to": "w12"})
    assert status == 503  # the standby's partition needs max_lag
    status, body = queries.answer("/stores/counts/range", {"from": "w1", "to": "w12", "max_lag": "9"})
    assert sorted(e["key"] for p in body["partitions"] for e in p["entries"]) == ["w1", "w10", "w11", "w12"]
    status, body = queries.answer("/stores/counts/prefix/w3", {"max_lag": "9"})
    assert sorted(e["key"] for p in body["partitions"] for e in p["entries"]) == ["w3"] + [f"w3{i}" for i in range(10)]

    assert queries.answer("/stores/nope/keys/x", {})[0] == 404
    assert "its stores: counts" in queries.answer("/stores/nope/keys/x", {})[1]["error"]
    assert queries.answer("/stores/counts/windows/x", {})[0] == 400
    assert queries.answer("/bogus", {})[0] == 404
    assert queries.answer("/metadata", {})[1]["stores"]["counts"]["partitions"] == 2


def test_endpoints_forward_to_the_holder_and_the_client_falls_back(tmp_path):
    words = {f"w{i}": i * 3 for i in range(30)}
    a, b = Held("a"), Held("b")
    a.copies["1_0"] = ("active", 0, True, counts_store(tmp_path / "a0", {w: n for w, n in words.items()
                                                                          if ROUTE.task_for(w) == "1_0"}))
    b.copies["1_1"] = ("active", 0, True, counts_store(tmp_path / "b1", {w: n for w, n in words.items()
                                                                          if ROUTE.task_for(w) == "1_1"}))
    addresses: dict[str, str] = {}
    servers = []
    for name, held in (("a", a), ("b", b)):
        q = StoreQueries(lambda: routing(addresses), held, lambda name=name: addresses.get(name, ""))
        server = HealthAndMetricsServer(0, "127.0.0.1", None, None, q.wsgi)
        servers.append(server)
        addresses[name] = f"127.0.0.1:{server.port}"
    driver = StoreQueries(lambda: routing(addresses))  # holds nothing: routes everything
    driver_server = HealthAndMetricsServer(0, "127.0.0.1", None, None, driver.wsgi)
    servers.append(driver_server)
    try:
        via_a = QueryClient([addresses["a"]])
        assert {w: via_a.get("counts", w).value for w in words} == words
        assert {via_a.get("counts", w).served_by for w in words} == {"a", "b"}
        assert dict(QueryClient([f"127.0.0.1:{driver_server.port}"]).all("counts")) == words
        with pytest.raises(QueryFailed) as e:
            via_a.get("nope", "w1")
        assert e.value.status == 404
        # An endpoint that is gone: the client moves on to the next one.
        dead = f"127.0.0.1:{servers[0].port}"
        servers[0].close()
        fallback = QueryClient([dead, f"127.0.0.1:{driver_server.port}"])
        w1 = next(w for w in words if ROUTE.task_for(w) == "1_1")
        assert fallback.get("counts", w1).value == words[w1]
        w0 = next(w for w in words if ROUTE.task_for(w) == "1_0")
        # 1_0's only holder is gone (its standby "b" is not asked without max_lag).
        with pytest.raises(QueryFailed) as e:
            fallback.get("counts", w0)
        assert e.value.status == 503 and e.value.details["task"] == "1_0"
    finally:
        for s in servers[1:]:
            s.close()


def test_a_window_store_answers_a_keys_windows_in_a_time_range(tmp_path):
    store = open_store(StoreSpec.window("per-minute", 60_000, 600_000, "string", "int64"), tmp_path / "w")
    tx = store.begin()
    for start, n in ((0, 3), (60_000, 5), (120_000, 7)):
        tx.put("alice", start, n)
    tx.put("bob", 60_000, 1)
    tx.apply(changelog_offset=3)
    route = StoreRoute("per-minute", "window", 0, 1, "string")
    held = Held("a")
    held.copies["0_0"] = ("active", 0, True, store)
    queries = StoreQueries(lambda: QueryRouting("w", 1, {"per-minute": route}, {"0_0": ("a", ())}, {}), held)
    status, body = queries.answer("/stores/per-minute/windows/alice", {"from": "60000", "to": "120000"})
    assert status == 200
    assert body["windows"] == [{"start": 60_000, "end": 120_000, "value": 5},
                               {"start": 120_000, "end": 180_000, "value": 7}]
    assert queries.answer("/stores/per-minute/windows/carol", {})[1]["windows"] == []
    status, body = queries.answer("/stores/per-minute/keys/alice", {})
    assert status == 400 and "window store" in body["error"]


def test_a_session_store_answers_a_keys_sessions_as_find_sessions_does(tmp_path, capsys):
    store = open_store(StoreSpec.session("visits", 3_600_000, "string", "int64"), tmp_path / "s")
    tx = store.begin()
    tx.put("alice", 0, 10, 2)
    tx.put("alice", 100, 150, 3)
    tx.put("alice", 400, 400, 1)
    tx.put("bob", 100, 100, 7)
    tx.apply(changelog_offset=3)
    route = StoreRoute("visits", "session", 0, 1, "string")
    held = Held("a")
    held.copies["0_0"] = ("active", 0, True, store)
    queries = StoreQueries(lambda: QueryRouting("c", 1, {"visits": route}, {"0_0": ("a", ())}, {}), held)
    status, body = queries.answer("/stores/visits/sessions/alice", {"from": "20", "to": "400"})
    body_sessions = [{"start": 100, "end": 150, "value": 3}, {"start": 400, "end": 400, "value": 1}]
    assert status == 200 and body["sessions"] == body_sessions
    assert len(queries.answer("/stores/visits/sessions/alice", {})[1]["sessions"]) == 3
    status, body = queries.answer("/stores/visits/windows/alice", {})
    assert status == 400 and "use /sessions/<key>" in body["error"]

    # The same through `eddy query --sessions`, served over loopback.
    server = HealthAndMetricsServer(0, "127.0.0.1", None, None, queries.wsgi)
    try:
        at = ("--at", f"127.0.0.1:{server.port}")
        assert cli.main(["query", "c", "visits", "alice", "--sessions", "--from", "20", "--to", "400", *at]) == 0
        assert json.loads(capsys.readouterr().out)["sessions"] == body_sessions
        assert cli.main(["query", "c", "visits", "alice", "--windows", *at]) == 1
        assert "use /sessions/<key>" in capsys.readouterr().err
    finally:
        server.close()
