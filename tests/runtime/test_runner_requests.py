"""The requests a task runner serves (protocol/runner_messages.py, executor/runner.py): a run
without a program the runner has not cached is answered `NeedProgram`, and `RunnerClient.run`
then sends it once; the other requests get their own replies; anything else is refused. Over the
runner's real socket, in this process."""

from __future__ import annotations

import os
import pickle
import threading
from collections.abc import Iterator

import pytest

from eddy_contract.spec import BadRecordPolicy, ProcessingGuarantee
from eddy_contract.tasks import Role
from eddy_runtime.executor.runner import RequestDispatch, serve
from eddy_runtime.executor.task_runner import TaskRunner
from eddy_runtime.kafka.client import KafkaClientConfig
from eddy_runtime.protocol.runner_client import RunnerClient, runner_address
from eddy_runtime.protocol.runner_messages import (
    Close,
    Done,
    NeedProgram,
    Ping,
    Pong,
    Program,
    RunWork,
    Shutdown,
    StashRead,
)
from eddy_runtime.protocol.work import BatchSettings, ItemResult, ItemStatus, SlotWork

pytestmark = pytest.mark.unit

SETTINGS = BatchSettings(app="wc", batch_id=1, generation=3, kafka=KafkaClientConfig.of("127.0.0.1:9"),
                         guarantee=ProcessingGuarantee.AT_LEAST_ONCE, bad_record_policy=BadRecordPolicy.FAIL,
                         dead_letter_topic=None, state_dir="/nonexistent", per_executor_state_dirs=False)
#: an executor slot with nothing to do
IDLE = SlotWork("1", ())
#: a program of no sub-topologies
EMPTY_PROGRAM = Program("p1", pickle.dumps([]))


@pytest.fixture
def dispatch(tmp_path) -> Iterator[RequestDispatch]:
    runner = TaskRunner("1", str(tmp_path))
    try:
        yield RequestDispatch(runner)
    finally:
        runner.close_all()
        runner.continuous.close()


def test_a_runner_asks_for_a_program_it_has_not_cached(dispatch) -> None:
    assert dispatch.answer(RunWork("p1", None, SETTINGS, IDLE, None)) == NeedProgram("p1")


def test_a_program_sent_once_serves_the_runs_that_follow_without_it(dispatch) -> None:
    assert dispatch.answer(RunWork("p1", EMPTY_PROGRAM.sub_topologies, SETTINGS, IDLE, None)) == []
    assert dispatch.answer(RunWork("p1", None, SETTINGS, IDLE, None)) == []
    assert dispatch.answer(RunWork("p2", None, SETTINGS, IDLE, None)) == NeedProgram("p2")


def test_stash_close_and_ping_each_get_their_reply(dispatch) -> None:
    assert dispatch.answer(StashRead(1, "0_0", (), 5)) == Done()
    assert dispatch.answer(Close()) == Done()
    assert dispatch.answer(Ping()) == Pong("1", os.getpid())
    assert str(Done()) == "ok"  # what the driver logs of a runner it shut down


def test_a_request_of_no_known_kind_is_refused(dispatch) -> None:
    with pytest.raises(ValueError, match="unknown request"):
        dispatch.answer(("run", "p1", None, SETTINGS, IDLE, None))  # type: ignore[arg-type]


def test_a_slot_s_data_is_a_table_a_batch_output_or_nothing(dispatch) -> None:
    with pytest.raises(TypeError, match="not a str"):
        dispatch.answer(RunWork("p1", EMPTY_PROGRAM.sub_topologies, SETTINGS, IDLE, "rows"))


def test_the_client_sends_the_program_when_the_runner_asks_and_only_then(tmp_path) -> None:
    state_dir = str(tmp_path / "executor-1")
    server = threading.Thread(target=serve, args=(runner_address(state_dir), "1", state_dir, None), daemon=True)
    server.start()
    client = RunnerClient(state_dir, "1")
    try:
        for _ in range(200):  # the runner's socket is up once it answers
            try:
                assert client.call(Ping(), timeout_s=5, start=False) == Pong("1", os.getpid())
                break
            except (ConnectionRefusedError, FileNotFoundError):
                server.join(0.05)
        first = client.run(EMPTY_PROGRAM, SETTINGS, IDLE, None)
        # The runner now has p1: a program that would not even unpickle is never sent again.
        second = client.run(Program("p1", b"not a pickle"), SETTINGS, IDLE, None)
    finally:
        assert str(client.call(Shutdown(), timeout_s=60, start=False)) == "ok"
        server.join(30)
    assert not server.is_alive()
    for results in (first, second):
        # An idle slot's reply is one result that says where the runner serves queries.
        assert [(r.executor, r.role, r.status) for r in results] == [("1", Role.ACTIVE, ItemStatus.PROCESSED)]
        assert isinstance(results[0], ItemResult) and results[0].query_address.startswith("127.0.0.1:")
