"""A new generation pushed to the runners ahead of its batch (eddy_runtime.driver.handoff): on
Kubernetes runners are known by their hosts, so nothing is pushed (or asked to let go) before the
driver knows the host of every executor the generation names; only the runners of live executors
the driver knows are asked to let go, the others (dead, dropped, or an earlier driver's on a pod
that is gone) are fenced (pure: no runner is reached)."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from eddy_contract.assignor import Assignment, TaskAssignment
from eddy_runtime.driver.handoff import GenerationHandoff, handed_over, runners_to_ask
from eddy_runtime.dsl.compiler import compile_topology
from eddy_runtime.dsl.pipeline import Topology
from eddy_runtime.kafka.client import KafkaClientConfig
from eddy_runtime.kafka.partitions import TopicPartition
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


def test_only_the_runners_of_live_known_executors_are_asked_to_let_go_the_others_are_fenced() -> None:
    key = HOSTS.__getitem__
    # the operator dropped executor 2 (its node died): its runner is not asked to let go
    assert runners_to_ask(key, {"2"}, ["1", "2"]) == {"10.244.0.5"}
    # the pod's JVM came back as executor 3 on the same runner: asked
    assert runners_to_ask(key, {"2"}, ["1", "2", "3"]) == {"10.244.0.5", "10.244.1.7"}
    # nothing gone: every known runner that loses an active is asked, one that the generation
    # leaves holding nothing too (executor 2 here: its last active goes elsewhere)
    assert runners_to_ask(key, set(), ["1", "2"]) == {"10.244.0.5", "10.244.1.7"}
    # an earlier driver's runner on a host no executor of this driver registered from (its pod
    # gone) is not asked
    assert "10.244.2.9" not in runners_to_ask(key, set(), ["1", "2", "3"])


def test_positions_are_handed_over_only_from_the_runner_that_held_the_task_in_the_last_generation() -> None:
    tp = TopicPartition("wc-in", 0)
    released = {"host-a": {"0_0": {tp: 10}, "0_1": {tp: 4}}, "host-b": {"0_0": {tp: 25}}}
    # 0_0 was host-b's in the last generation: host-a (an earlier driver's runner, fenced out of it
    # while no driver ran) still answers with its positions of then, which would process 10..24 again
    assert handed_over({"0_0": "host-b", "0_1": "host-a"}, released) == {"0_0": {tp: 25}, "0_1": {tp: 4}}
    assert handed_over({}, released) == {}  # before this driver's first generation: nobody's word
