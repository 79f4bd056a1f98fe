"""A new generation pushed to a runner's endpoint (work_push.py), over loopback HTTP: the loop
takes it only with the driver's token, for its own app, when it is newer than what it runs and
after a first sync; a push that is refused changes nothing."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from eddy_runtime.continuous import ContinuousLoop
from eddy_runtime.health import HealthAndMetricsServer
from eddy_runtime.kafka_client import KafkaClientConfig
from eddy_runtime.task_runner import TaskRunner
from eddy_runtime.work import BatchSettings, ContinuousWork
from eddy_runtime.work_push import PUSH_PATH, TOKEN_HEADER, decode_work, encode_work, push_endpoint, push_work

pytestmark = pytest.mark.unit

SETTINGS = BatchSettings(app="wc", batch_id=1, generation=3, kafka=KafkaClientConfig.of("127.0.0.1:9"),
                         guarantee="exactly_once", bad_record_policy="fail", dead_letter_topic=None,
                         state_dir="/nonexistent", per_executor_state_dirs=False, push_token="s3cret")


@pytest.fixture
def served(tmp_path) -> Iterator[tuple[ContinuousLoop, str]]:
    loop = TaskRunner("1", str(tmp_path)).continuous
    server = HealthAndMetricsServer(0, "127.0.0.1", CollectorRegistry(), None,
                                    routes={PUSH_PATH: push_endpoint(loop.app_token, loop.push)})
    try:
        yield loop, f"127.0.0.1:{server.port}"
    finally:
        server.close()
        loop.close()


def post(address: str, body: bytes, token: str | None = "s3cret", method: str = "POST") -> tuple[int, dict]:
    headers = {"Content-Type": "application/json", **({TOKEN_HEADER: token} if token is not None else {})}
    request = urllib.request.Request(f"http://{address}{PUSH_PATH}", data=body if method == "POST" else None,
                                     method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def work(generation: int, *tasks: tuple[str, str]) -> ContinuousWork:
    return ContinuousWork(generation, tuple(tasks), 0.1)  # type: ignore[arg-type]


def test_work_round_trips_as_json_and_anything_else_is_refused():
    w = work(7, ("1_0", "active"), ("1_1", "standby"))
    assert decode_work(encode_work("wc", w)) == ("wc", w)
    for bad in (b"[]", b'{"app":"wc","generation":"7","tasks":[],"commitIntervalS":0.1}',
                b'{"app":"wc","generation":7,"tasks":[["1_0","leader"]],"commitIntervalS":0.1}',
                b'{"app":"wc","generation":7,"tasks":[],"commitIntervalS":0}'):
        with pytest.raises((ValueError, KeyError, TypeError)):
            decode_work(bad)


def test_a_runner_takes_a_newer_generation_only_with_the_token_after_its_first_sync(served):
    loop, address = served
    newer = encode_work("wc", work(4))
    assert post(address, newer)[0] == 503  # no sync yet: nothing to run the work with
    loop.sync({}, SETTINGS, work(3))  # no tasks: the loop's thread does not start
    assert loop.app_token() == ("wc", "s3cret")

    assert post(address, newer, token=None)[0] == 403
    assert post(address, newer, token="guess")[0] == 403
    assert post(address, b"", method="GET")[0] == 405
    assert post(address, b"{not json")[0] == 400
    assert post(address, encode_work("other-app", work(4)))[0] == 409
    assert post(address, encode_work("wc", work(3, ("1_0", "active"))))[1] == {"taken": False}  # not newer

    assert post(address, newer) == (200, {"taken": True})
    assert post(address, newer) == (200, {"taken": False})
    # The sync of the same generation that follows still hands over what the loop did.
    assert loop.sync({}, SETTINGS, work(4)) == []


def test_the_driver_side_pushes_each_executor_its_own_work_and_skips_those_without_an_address(served):
    loop, address = served
    loop.sync({}, SETTINGS, work(3))
    threads = push_work({"1": address, "2": ""}, {"1": work(5), "2": work(5), "3": work(5)}, "wc", "s3cret")
    assert len(threads) == 1
    for t in threads:
        t.join(5)
    assert loop.push(work(5)) is False  # the push already took generation 5
    assert loop.push(work(6)) is True
