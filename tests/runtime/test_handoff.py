"""A new generation pushed to the runners ahead of its batch (eddy_runtime.driver.handoff): on
Kubernetes runners are known by their hosts, so nothing is pushed (or asked to let go) before the
driver knows the host of every executor the generation names; the runners of executors that died
or that the operator dropped are fenced, not asked (pure: no runner is reached)."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from eddy_contract.assignor import Assignment, TaskAssignment
from eddy_runtime.driver.handoff import GenerationHandoff, lost_runners
from eddy_runtime.dsl.compiler import compile_topology
from eddy_runtime.dsl.pipeline import Topology
from eddy_runtime.kafka.client import KafkaClientConfig
from eddy_runtime.protocol.placement import ExecutorRef

pytestmark = pytest.mark.unit


def handoff(per_executor_state_dirs: bool) -> GenerationHandoff:
    t = Topology()
    t.stream("lines").group_by("word", name="words").count(name="counts").to("counts-out")
    compiled = compile_topology(t, "wc", {"lines": 2})
    h = GenerationHandoff("wc", KafkaClientConfig("127.0.0.1:9"), 0.1, set,
                          per_executor_state_dirs=per_executor_state_dirs, runner_port=9108)
    h.start(compiled, frozenset(s.id for s in compiled.subtopologies), exactly_once=False)
    return h


ASSIGNMENT = Assignment(4, MappingProxyType({
    "0_0": TaskAssignment("1"), "0_1": TaskAssignment("2"),
    "1_0": TaskAssignment("1", ("2",)), "1_1": TaskAssignment("2", ("1",)),
}))


def test_no_generation_is_pushed_before_the_hosts_of_its_executors_are_known() -> None:
    h = handoff(per_executor_state_dirs=False)
    h.know_executors([ExecutorRef("1", "10.244.0.5")])
    h.push(ASSIGNMENT, {"1", "2"})
    assert h.pushed is None  # executor 2's runner cannot be told from an earlier driver's yet
    h.know_executors([ExecutorRef("1", "10.244.0.5"), ExecutorRef("2", "10.244.0.6")])
    h.push(ASSIGNMENT, {"1", "2"})
    assert h.pushed is ASSIGNMENT
    assert h.runner_key("2") == "10.244.0.6"


def test_where_runners_are_known_by_executor_id_nothing_waits_for_hosts() -> None:
    h = handoff(per_executor_state_dirs=True)
    h.push(ASSIGNMENT, {"1", "2"})
    assert h.pushed is ASSIGNMENT
    assert h.runner_key("2") == "2"


HOSTS = {"1": "10.244.0.5", "2": "10.244.1.7", "3": "10.244.1.7"}  # 3: pod 2's next JVM


def test_a_dropped_executors_runner_is_fenced_unless_a_named_executor_shares_it() -> None:
    key = HOSTS.__getitem__
    # the operator dropped executor 2 (its node died): its runner is not asked to let go
    assert lost_runners(key, {"2"}, ["1"]) == {"10.244.1.7"}
    # the pod's JVM came back as executor 3 on the same runner, which the generation names: asked
    assert lost_runners(key, {"2"}, ["1", "3"]) == set()
    # nothing gone: every runner that loses an active is asked
    assert lost_runners(key, set(), ["1", "2"]) == set()
    # an executor both named and gone (the driver saw it die before the operator did) is gone
    assert lost_runners(key, {"2"}, ["1", "2"]) == {"10.244.1.7"}
