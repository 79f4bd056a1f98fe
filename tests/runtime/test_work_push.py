"""A new generation pushed to a runner's endpoint (protocol/work_push.py), over loopback HTTP: the loop
takes it only with the driver's token, for its own app, when it is newer than what it runs and
after a first sync; a push that is refused changes nothing. A release answers only once no step
or round of the released tasks is under way, and says whether they ended cleanly. A sync over
HTTP hands back the runner's results as JSON (and, when asked, what its volume holds), per runner
that answered."""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry

from eddy_contract.channel import ExecutorLoad
from eddy_contract.spec import BadRecordPolicy, ProcessingGuarantee
from eddy_contract.tasks import Role
from eddy_runtime.driver.executor_load import ExecutorLoads
from eddy_runtime.executor.continuous import ContinuousLoop
from eddy_runtime.executor.task_runner import TaskRunner
from eddy_runtime.kafka.client import KafkaClientConfig
from eddy_runtime.kafka.partitions import TopicPartition
from eddy_runtime.protocol.health import HealthAndMetricsServer
from eddy_runtime.protocol.runner_client import OUTLIVES_EXECUTOR_ENV
from eddy_runtime.protocol.work import (
    BadRecordInfo,
    BatchSettings,
    ContinuousWork,
    ItemResult,
    ItemStatus,
    Released,
    SlotWork,
)
from eddy_runtime.protocol.work_push import (
    PUSH_PATH,
    RELEASE_PATH,
    SYNC_PATH,
    TOKEN_HEADER,
    decode_release,
    decode_results,
    decode_sync,
    decode_work,
    encode_release,
    encode_results,
    encode_sync,
    encode_work,
    push_endpoint,
    push_work,
    release_endpoint,
    release_tasks,
    sync_endpoint,
    sync_runners,
)
from eddy_runtime.state import StoreFigures, TaskDirectory, TaskFigures

pytestmark = pytest.mark.unit

SETTINGS = BatchSettings(app="wc", batch_id=1, generation=3, kafka=KafkaClientConfig.of("127.0.0.1:9"),
                         guarantee=ProcessingGuarantee.AT_LEAST_ONCE, bad_record_policy=BadRecordPolicy.FAIL,
                         dead_letter_topic=None, state_dir="/nonexistent", per_executor_state_dirs=False,
                         push_token="s3cret")


@pytest.fixture
def served(tmp_path) -> Iterator[tuple[ContinuousLoop, str]]:
    runner = TaskRunner("1", str(tmp_path))
    loop = runner.continuous
    server = HealthAndMetricsServer(0, "127.0.0.1", CollectorRegistry(), None,
                                    routes={PUSH_PATH: push_endpoint(loop.app_token, loop.push),
                                            RELEASE_PATH: release_endpoint(loop.app_token, loop.release),
                                            SYNC_PATH: sync_endpoint(loop.app_token, runner.collect)})
    runner.query_address = f"127.0.0.1:{server.port}"
    try:
        yield loop, f"127.0.0.1:{server.port}"
    finally:
        server.close()
        loop.close()


def post(address: str, body: bytes, token: str | None = "s3cret", method: str = "POST",
         path: str = PUSH_PATH) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json", **({TOKEN_HEADER: token} if token is not None else {})}
    request = urllib.request.Request(f"http://{address}{path}", data=body if method == "POST" else None,
                                     method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def work(generation: int, *tasks: tuple[str, Role]) -> ContinuousWork:
    return ContinuousWork(generation, tuple(tasks), 0.1)


def test_work_round_trips_as_json_and_anything_else_is_refused():
    w = work(7, ("1_0", Role.ACTIVE), ("1_1", Role.STANDBY))
    assert decode_work(encode_work("wc", w)) == ("wc", w)
    handed = replace(w, handed={"1_0": {TopicPartition("wc-words-repartition", 0): 41}})
    assert decode_work(encode_work("wc", handed)) == ("wc", handed)
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
    assert post(address, encode_work("wc", work(3, ("1_0", Role.ACTIVE))))[1] == {"taken": False}  # not newer

    assert post(address, newer) == (200, {"taken": True})
    assert post(address, newer) == (200, {"taken": False})
    # The sync of the same generation that follows still hands over what the loop did.
    assert loop.sync({}, SETTINGS, work(4)) == []


def test_a_runner_with_nothing_to_run_still_reports_its_endpoint(tmp_path):
    # a newcomer's first sync has nothing to hand back; the driver pushes its first tasks to the
    # endpoint it reports, ahead of the job that brings them
    runner = TaskRunner("1", str(tmp_path))
    assert runner.run({}, SETTINGS, SlotWork("1", ()), None) == []  # no endpoint served: nothing to say
    runner.query_address = "127.0.0.1:4040"
    [result] = runner.run({}, SETTINGS, SlotWork("1", ()), None)
    assert (result.executor, result.query_address, result.task, result.records_in) == ("1", "127.0.0.1:4040", "", 0)


def test_the_driver_side_pushes_each_executor_its_own_work_and_skips_those_without_an_address(served):
    loop, address = served
    loop.sync({}, SETTINGS, work(3))
    threads = push_work({"1": address, "2": ""}, {"1": work(5), "2": work(5), "3": work(5)}, "wc", "s3cret")
    assert len(threads) == 1
    for t in threads:
        t.join(5)
    assert loop.push(work(5)) is False  # the push already took generation 5
    assert loop.push(work(6)) is True


def test_a_release_round_trips_as_json_and_anything_else_is_refused(served):
    loop, address = served
    assert decode_release(encode_release("wc", 7, ["1_0", "0_2"], 2.0)) == ("wc", 7, ("1_0", "0_2"), 2.0)
    for bad in (b"[]", b'{"app":"wc","generation":7,"tasks":"1_0","timeoutS":2}',
                b'{"app":"wc","generation":7,"tasks":["1_0"],"timeoutS":0}',
                b'{"app":"wc","generation":7.5,"tasks":["1_0"],"timeoutS":2}'):
        with pytest.raises((ValueError, KeyError, TypeError)):
            decode_release(bad)
    body = encode_release("wc", 4, ["1_0"], 1.0)
    assert post(address, body, path=RELEASE_PATH)[0] == 503  # no sync yet
    loop.sync({}, SETTINGS, work(3))
    assert post(address, body, token="guess", path=RELEASE_PATH)[0] == 403
    assert post(address, encode_release("other-app", 4, ["1_0"], 1.0), path=RELEASE_PATH)[0] == 409
    assert post(address, b"{}", path=RELEASE_PATH)[0] == 400
    # nothing of it under way, and it held no task: no positions to hand over
    assert post(address, body, path=RELEASE_PATH) == (200, {"released": True, "positions": []})


def test_a_release_waits_for_the_round_holding_the_task_and_says_whether_it_committed(served):
    loop, address = served
    loop.sync({}, SETTINGS, work(3))
    old = work(3, ("1_0", Role.ACTIVE), ("1_1", Role.ACTIVE))
    answers: list[dict[str, object]] = []

    def release_in_background(timeout_s: float) -> threading.Thread:
        thread = threading.Thread(target=lambda: answers.append(
            release_tasks({"1": address}, {"1": ["1_0"]}, "wc", "s3cret", 4, timeout_s)))
        thread.start()
        return thread

    with loop._committing_tasks(old, ["1_0", "1_1"], Role.ACTIVE) as committing:
        assert committing.allowed == ["1_0", "1_1"]
        assert release_tasks({"1": address}, {"1": ["1_0"]}, "wc", "s3cret", 4, 0.3) == {}  # still committing
        waiting = release_in_background(5.0)
        time.sleep(0.3)
        assert not answers  # it waits for the round
        committing.clean = True
    waiting.join(5)
    assert answers == [{"1": {}}]  # released cleanly; it never opened 1_0, so no positions

    # Released for generation 4: work older than that may not run 1_0 any more; 1_1 and newer work may.
    with loop._committing_tasks(old, ["1_0", "1_1"], Role.ACTIVE) as committing:
        assert committing.allowed == ["1_1"]
        committing.clean = True
    loop.sync({}, SETTINGS, work(5))  # (no tasks: the loop's thread does not start)
    with loop._committing_tasks(work(5, ("1_0", Role.ACTIVE)), ["1_0"], Role.ACTIVE) as committing:
        assert committing.allowed == ["1_0"]
        committing.clean = False  # a round that did not commit cleanly: a release of it is refused
    assert loop.release(6, ["1_0"], 1.0).clean  # a new release forgets the earlier outcome
    loop.sync({}, SETTINGS, work(7))
    with loop._committing_tasks(work(7, ("1_0", Role.ACTIVE)), ["1_0"], Role.ACTIVE) as committing:
        waiting = release_in_background(5.0)
        time.sleep(0.2)
    waiting.join(5)
    assert answers[-1] == {}  # the round holding it did not commit cleanly: fence it


def test_the_driver_side_takes_the_positions_handed_over_for_the_tasks_it_asked_for(tmp_path):
    # what a runner answers (ContinuousLoop.release), served over HTTP as the runner serves it
    tp = TopicPartition("wc-in", 0)

    def release(generation: int, tasks: tuple[str, ...], timeout_s: float) -> Released:
        return Released(True, {"0_0": {tp: 120}, "0_9": {tp: 7}})  # 0_9: not asked for

    def unclean(generation: int, tasks: tuple[str, ...], timeout_s: float) -> Released:
        return Released(False, {"0_0": {tp: 120}})

    servers = [HealthAndMetricsServer(0, "127.0.0.1", CollectorRegistry(), None,
                                      routes={RELEASE_PATH: release_endpoint(lambda: ("wc", "s3cret"), answer)})
               for answer in (release, unclean)]
    try:
        addresses = {"1": f"127.0.0.1:{servers[0].port}", "2": f"127.0.0.1:{servers[1].port}"}
        asked = {"1": ["0_0", "0_1"], "2": ["0_2"]}
        assert release_tasks(addresses, asked, "wc", "s3cret", 4, 2.0) == {"1": {"0_0": {tp: 120}}}
    finally:
        for server in servers:
            server.close()


def test_item_results_round_trip_as_json_and_anything_else_is_refused():
    store = StoreFigures("counts", "wc-counts-changelog", 2, 41, 7, 120.5, 0, None, 3, 4096, 12)
    results = [
        ItemResult("1_2", "1", Role.ACTIVE, ItemStatus.PROCESSED, records_in=50, records_out=9,
                   committed={TopicPartition("wc-repartition", 2): 1234}, skipped=1,
                   bad_records=(BadRecordInfo("wc-words", 2, 17, "not UTF-8"),), latency_counts=(3, 0, 1),
                   latency_sum_s=0.25, duration_s=0.031, busy_s=0.027, message="",
                   figures=TaskFigures("wc", "1_2", Role.ACTIVE, False, (store,), (0.004, 0.012), 2),
                   query_address="127.0.0.1:4040"),
        ItemResult("1_3", "1", Role.STANDBY, ItemStatus.STANDBY, restored=8, restore_remaining=2),
    ]
    assert decode_results(json.loads(json.dumps(encode_results(results)))) == results
    good = encode_results(results[1:])[0]
    for bad in ({}, [{**good, "role": "leader"}], [{**good, "records_in": "8"}], [{**good, "records_in": True}],
                [{**good, "committed": {"t": 1}}], [{**good, "latency_counts": 3}], [{**good, "status": None}]):
        with pytest.raises((ValueError, KeyError, TypeError)):
            decode_results(bad)


def test_a_sync_over_http_takes_a_newer_generation_and_hands_back_the_runner_results(served):
    loop, address = served
    body = encode_work("wc", work(3))
    assert post(address, body, path=SYNC_PATH)[0] == 503  # no Spark sync yet: the driver runs a job
    loop.sync({}, SETTINGS, work(3))
    assert post(address, body, token="guess", path=SYNC_PATH)[0] == 403
    assert post(address, encode_work("other-app", work(3)), path=SYNC_PATH)[0] == 409
    # Nothing done yet: the runner still says where it serves (the driver pushes and syncs there).
    answers = sync_runners({"1": address}, {"1": work(3)}, "wc", "s3cret")
    assert answers is not None and [(r.executor, r.query_address) for r in answers["1"]] == [("1", address)]
    assert sync_runners({"1": address}, {"1": work(4)}, "wc", "s3cret") is not None
    assert loop.push(work(4)) is False  # the sync took generation 4, as a push does
    # One executor without an address: nobody is asked (the driver runs a Spark job). One that does
    # not answer: the others' answers still come back, as they are handed over (the driver counts
    # them beside its Spark job's).
    assert sync_runners({"1": address}, {"1": work(4), "2": work(4)}, "wc", "s3cret") == {}
    partial = sync_runners({"1": address, "2": "127.0.0.1:9"}, {"1": work(4), "2": work(4)}, "wc", "s3cret")
    assert partial.keys() == {"1"} and [r.query_address for r in partial["1"]] == [address]
    assert sync_runners({"1": address}, {"1": work(4)}, "wc", "guess") == {}


def test_a_runner_still_going_by_its_earlier_executor_id_answers_for_the_executor_synced(served, tmp_path):
    # After a driver restart the pod's runner goes by its earlier executor's id ("1") until a Spark
    # task of its new JVM reaches it; the new driver knows the pod as executor "2" (and may have
    # given "1" to the other pod): what its volume holds is executor 2's.
    loop, address = served
    volume = tmp_path / "volume"
    (TaskDirectory(volume, "wc", "1_2").store_path("counts")).mkdir(parents=True)
    loop.sync({}, replace(SETTINGS, state_dir=str(volume)), work(3))
    answers = sync_runners({"2": address}, {"2": work(4)}, "wc", "s3cret", inventory=True)
    assert {r.executor for r in answers["2"]} == {"2"}
    assert [t.task_id for r in answers["2"] if r.inventory is not None for t in r.inventory] == ["1_2"]


def test_what_a_runner_did_before_it_took_a_new_executor_id_is_handed_over_under_the_new_one(
        served, monkeypatch):
    # A driver restart: rounds under the earlier JVM's id ("1") recorded their results; the new
    # JVM's first task says this runner is executor "2". The driver learns each executor's runner
    # address from the results it gets: under "1" it would push executor 1's work here.
    monkeypatch.setenv(OUTLIVES_EXECUTOR_ENV, "1")
    loop, address = served
    loop.sync({}, SETTINGS, work(3))
    loop.assignment.add_results(work(3), [ItemResult("0_1", "1", Role.ACTIVE, ItemStatus.PROCESSED, records_in=5,
                                                     busy_s=0.5)])
    runner = loop.runner
    assert isinstance(runner, TaskRunner)
    runner.adopt_executor("2")
    (result,) = runner.collect(work(3))
    assert (result.task, result.executor, result.query_address) == ("0_1", "2", address)
    # and so is its load: the new driver counts it for executor 2, the pod this runner serves
    loads = ExecutorLoads()
    loads.record([result], live={"1", "2"})
    assert loads.of(["1", "2"]) == {"1": ExecutorLoad(), "2": ExecutorLoad(records=5, busy_s=0.5)}


def test_a_sync_over_http_reports_the_volume_inventory_when_asked(served, tmp_path):
    loop, address = served
    volume = tmp_path / "volume"
    (TaskDirectory(volume, "wc", "1_2").store_path("counts")).mkdir(parents=True)
    (volume / "other-app" / "0_0").mkdir(parents=True)
    held = TaskDirectory(volume, "wc", "1_2").lock()  # the inventory says who holds it
    try:
        loop.sync({}, replace(SETTINGS, state_dir=str(volume)), work(3))
        plain = sync_runners({"1": address}, {"1": work(3)}, "wc", "s3cret")["1"]
        assert [r.inventory for r in plain] == [None]
        asked = sync_runners({"1": address}, {"1": work(3)}, "wc", "s3cret", inventory=True)["1"]
    finally:
        held.release()
    inventories = [r.inventory for r in asked if r.inventory is not None]
    assert len(inventories) == 1 and [t.task_id for t in inventories[0]] == ["1_2"]
    (task,) = inventories[0]
    assert [s.name for s in task.stores] == ["counts"] and task.locked_by is not None
    assert task.locked_by.pid == os.getpid()
    body = json.loads(encode_sync("wc", work(3), True))
    for bad in ({**body, "inventory": "yes"}, {**body, "inventory": 1}):
        with pytest.raises(ValueError):
            decode_sync(json.dumps(bad).encode())
    assert decode_sync(encode_work("wc", work(3)))[1] == (work(3), False)  # a push's body: no inventory
