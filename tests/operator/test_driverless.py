"""A failover carried out by the operator while no driver runs (eddy_operator.driverless), on a real
broker, against two real task runners and the endpoints they serve over loopback HTTP.

Runner 1 holds active 0_0 of a pass-through app under exactly-once; runner 2 holds nothing. The
driver is gone. Runner 1 is then lost to the operator (its endpoint no longer reached) but goes on
running: a zombie that would commit if nothing stopped it. The operator's `carry_out` asks runner 2
to fence runner 1 for generation 2 and hands 0_0 to runner 2. Every input record must come out
once: runner 1 commits nothing more, runner 2 goes on from the committed positions. Then a new
driver starts: it must know runner 1's raised epoch (`FenceBook` reads the topic again before its
first generation), and give 0_0 back to runner 1 with an epoch runner 1 can commit under.

The pure parts (`driver_away`, `plan`) are unit tests below."""

from __future__ import annotations

import asyncio
import functools
import time

import pytest
from prometheus_client import CollectorRegistry

from eddy_contract.assignor import Assignment, TaskAssignment
from eddy_contract.tasks import Role
from eddy_operator.driverless import Handover, carry_out, driver_away, plan
from eddy_operator.pods import PodInfo
from eddy_runtime.executor.takeover import fence, take_over
from eddy_runtime.executor.task_runner import TaskRunner
from eddy_runtime.protocol.fences import FenceBook, fence_topic, read_epochs
from eddy_runtime.protocol.health import HealthAndMetricsServer
from eddy_runtime.protocol.work import ContinuousWork
from eddy_runtime.protocol.work_push import (
    FENCE_PATH,
    PUSH_PATH,
    RELEASE_PATH,
    TAKEOVER_PATH,
    fence_endpoint,
    push_endpoint,
    release_endpoint,
    takeover_endpoint,
)
from tests.runtime.apps import assert_each_once, feed_numbered, pass_through_app, wait_for_values

TASK = "0_0"
TOKEN = "s3cret"


def _serve(runner: TaskRunner) -> HealthAndMetricsServer:
    loop = runner.continuous
    return HealthAndMetricsServer(0, "127.0.0.1", CollectorRegistry(), None, routes={
        PUSH_PATH: push_endpoint(loop.app_token, loop.push),
        RELEASE_PATH: release_endpoint(loop.app_token, loop.release),
        FENCE_PATH: fence_endpoint(loop.app_token, functools.partial(fence, loop)),
        TAKEOVER_PATH: takeover_endpoint(loop.app_token, functools.partial(take_over, loop))})


@pytest.mark.integration
def test_the_operator_fails_a_zombie_runner_s_task_over_with_no_driver_and_nothing_twice(kafka, tmp_path):
    app, source, out, subs, settings = pass_through_app(kafka, "driverless", str(tmp_path), push_token=TOKEN)
    driver, again = FenceBook(kafka.bootstrap, app), FenceBook(kafka.bootstrap, app)
    driver.start()
    runner1, runner2 = TaskRunner("1", str(tmp_path)), TaskRunner("2", str(tmp_path))
    server2 = _serve(runner2)
    address2 = f"127.0.0.1:{server2.port}"
    try:
        driver.before_generation(1, {TASK: "1"})
        runner1.continuous.sync(subs, settings, ContinuousWork(1, ((TASK, Role.ACTIVE),), 0.1, 0, "1"))
        runner2.continuous.sync(subs, settings, ContinuousWork(1, (), 0.1, 0, "2"))
        feed_numbered(kafka.bootstrap, source, 0, 10)
        wait_for_values(kafka.bootstrap, out, 10, "runner 1, generation 1")
        assert runner1.actives_to_hand_over() == [TASK]  # a stopping pod would wait for its hand-over
        driver.close()  # the driver is gone; runner 1 goes on, and is lost to the operator
        again.start()  # a new driver starts, and reads the epochs

        handover = Handover(2, releases={address2: ()}, lost=("1",), copies={address2: ((TASK, "active"),)})
        outcome = asyncio.run(carry_out(handover, app, TOKEN, 3.0))
        assert outcome.failed is None, outcome.describe()
        assert outcome.fenced == ("1",) and outcome.taken == (address2,), outcome.describe()
        assert read_epochs(kafka.bootstrap, fence_topic(app))["1"] == 2  # raised to the generation
        current = runner2.continuous.assignment.current()
        assert current is not None and current.work.generation == 2
        assert current.work.tasks == ((TASK, Role.ACTIVE),) and current.work.runner == "2"

        feed_numbered(kafka.bootstrap, source, 10, 10)
        wait_for_values(kafka.bootstrap, out, 20, "runner 2, generation 2 from the operator")
        deadline = time.monotonic() + 60
        while runner1.continuous.producer.stale_epoch != 0:
            assert time.monotonic() < deadline, "runner 1 never found itself fenced"
            time.sleep(0.2)
        # the zombie still holds the task, but has nothing left to hand over: its pod stops at once
        assert runner1.tasks.actives() == [TASK] and runner1.actives_to_hand_over() == []

        # The new driver, which read the epochs before the operator's fence, gives the task back to
        # runner 1 (which lets go of nothing, and is not fenced again): with the epoch the topic
        # has now, or runner 1 would find its work stale and commit nothing for good.
        runner2.continuous.close()
        runner2.close_all()
        again.before_generation(3, {TASK: "1"})
        epoch = again.epochs()["1"]
        assert epoch == 2
        runner1.continuous.push(ContinuousWork(3, ((TASK, Role.ACTIVE),), 0.1, epoch, "1"))
        feed_numbered(kafka.bootstrap, source, 20, 10)
        wait_for_values(kafka.bootstrap, out, 30, "runner 1, generation 3 from a new driver")
        assert runner1.actives_to_hand_over() == [TASK]  # newer work, committed: its own again
        assert_each_once(kafka.bootstrap, out, 30, "across the failover without a driver")
    finally:
        server2.close()
        for runner in (runner1, runner2):
            runner.continuous.close()
            runner.close_all()
        driver.close()
        again.close()


def _pod(name: str, role: str = "driver", **kw: object) -> PodInfo:
    fields: dict[str, object] = {"exec_id": None, "node": "n1", "phase": "Running", "ready": True,
                                 "deleting": False, "reason": None, "zone_label": None, "running": True,
                                 "ip": "10.0.0.9"}
    fields.update(kw)
    return PodInfo(name, role, **fields)  # type: ignore[arg-type]


@pytest.mark.unit
def test_the_driver_is_away_without_a_pod_a_running_container_an_answer_or_readiness():
    assert driver_away([], {}) == "no driver pod"
    assert driver_away([_pod("a-driver-0", deleting=True)], {}) == "no driver pod"
    assert "not running" in (driver_away([_pod("a-driver-0", running=False)], {}) or "")
    assert "not answered for 4s" in (driver_away([_pod("a-driver-0")], {"a-driver-0": 4.2}) or "")
    assert driver_away([_pod("a-driver-0", ready=False)], {}) is None  # starting: it reads the fences itself
    assert driver_away([_pod("a-driver-0"), _pod("a-exec-1", role="executor")], {"a-exec-1": 5.0}) is None


@pytest.mark.unit
def test_the_plan_fences_the_runners_gone_asks_the_others_to_let_go_and_hands_each_its_copies():
    new = Assignment(7, {"0_0": TaskAssignment("2", ("3",), ()), "0_1": TaskAssignment("3", (), ("2",)),
                         "1_0": TaskAssignment("2", (), ())})
    hosts = {"2": "10.0.0.2", "3": "10.0.0.3"}
    # executor 1's pod (10.0.0.1) is gone; executor 4 was executor 3's pod under an earlier id
    handover = plan(new, hosts, {"10.0.0.1", "10.0.0.2", "10.0.0.3"}, 8090)
    assert handover is not None
    assert handover.generation == 7
    assert handover.lost == ("10.0.0.1",)
    assert handover.releases == {"10.0.0.2:8090": ("0_1",), "10.0.0.3:8090": ("0_0", "1_0")}
    assert handover.copies == {"10.0.0.2:8090": (("0_0", "active"), ("0_1", "standby"), ("1_0", "active")),
                               "10.0.0.3:8090": (("0_0", "standby"), ("0_1", "active"))}
    assert plan(new, {"2": "10.0.0.2"}, set(), 8090) is None  # executor 3's runner cannot be reached
