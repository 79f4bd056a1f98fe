"""How a Python worker knows its executor's id, including under Spark's statefulset allocator, and
the check every piece of work makes with it (pure)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from eddy_runtime.protocol import placement
from eddy_runtime.protocol.placement import (
    GENERATED_ID,
    ExecutorRef,
    MisplacedTask,
    current_executor_id,
    ensure_on_executor,
    executor_hosts,
)

pytestmark = pytest.mark.unit


@pytest.fixture
def executor_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    placement._launch_executor_id.cache_clear()
    yield monkeypatch
    placement._launch_executor_id.cache_clear()


def test_hosts_map_names_only_hosts_with_a_single_executor():
    executors = [ExecutorRef("3", "10.244.0.7"), ExecutorRef("5", "10.244.0.9"),
                 ExecutorRef("0", "127.0.0.1"), ExecutorRef("1", "127.0.0.1")]
    assert executor_hosts(executors) == {"10.244.0.7": "3", "10.244.0.9": "5"}


def test_an_executor_launched_with_its_id_keeps_it_whatever_the_map_says(executor_env):
    executor_env.setenv("SPARK_EXECUTOR_ID", "4")
    executor_env.setenv("SPARK_EXECUTOR_POD_IP", "10.244.0.7")
    assert current_executor_id({"10.244.0.7": "9"}) == "4"


def test_a_statefulset_executor_is_named_by_the_driver_map_of_its_pod_address(executor_env):
    executor_env.setenv("SPARK_EXECUTOR_ID", GENERATED_ID)
    executor_env.setenv("SPARK_EXECUTOR_POD_IP", "10.244.0.9")
    assert current_executor_id({"10.244.0.7": "3", "10.244.0.9": "5"}) == "5"
    # Without the map (or before the driver knows the pod) the id is unknown, never "EXECID".
    assert current_executor_id() is None
    assert current_executor_id({"10.244.0.7": "3"}) is None


def test_work_that_reached_another_executor_is_refused_naming_both(executor_env):
    executor_env.setenv("SPARK_EXECUTOR_ID", "4")
    ensure_on_executor("4", "task 0_1")
    with pytest.raises(MisplacedTask, match="task 0_1 was planned for executor 3 but runs on executor 4"):
        ensure_on_executor("3", "task 0_1")


def test_only_a_process_that_may_trust_its_caller_accepts_work_when_its_executor_is_unknown(executor_env):
    executor_env.setenv("SPARK_EXECUTOR_ID", GENERATED_ID)
    executor_env.delenv("SPARK_EXECUTOR_POD_IP", raising=False)
    with pytest.raises(MisplacedTask, match="runs on executor None"):
        ensure_on_executor("3", "task 0_1")
    ensure_on_executor("3", "task 0_1", unknown_ok=True)
