"""An active let go of cleanly is recycled into a standby in place (Kafka Streams recycles tasks
so): a move that swaps an active and its standby between two runners closes and reopens no store
on either (executor/task_manager.py's `release` with `recycle`, executor/tasks.py's `demote`)."""

from __future__ import annotations

import time

import pytest

from eddy_contract.tasks import Role
from eddy_runtime.dsl.subtopology import SourceSpec, StatefulSpec, SubTopology
from eddy_runtime.executor import task_manager
from eddy_runtime.executor.commit import StateCommitter
from eddy_runtime.executor.task_manager import TaskManager
from eddy_runtime.executor.tasks import StandbyTask, StreamTask, Task
from eddy_runtime.protocol.work import BatchSettings
from eddy_runtime.state.changelog import ChangelogTopicMissing
from tests.state.conftest import COUNTS, StateApp
from tests.state.test_standby import caught_up, count_batch

pytestmark = pytest.mark.integration


def a_runner(state_app: StateApp) -> tuple[BatchSettings, SubTopology, TaskManager]:
    """A runner's tasks (`TaskManager`), and the settings and counting sub-topology they run."""
    settings = BatchSettings(state_app.name, 0, 1, state_app.client, "exactly_once", "skip", None,
                             str(state_app.state_dir), False)
    sub = SubTopology(0, SourceSpec(state_app.input_topic, "string", "json"), state_app.partitions,
                      stateful=StatefulSpec("count", COUNTS, "string"))
    return settings, sub, TaskManager("1", None)


def counted_active(manager: TaskManager, settings: BatchSettings, sub: SubTopology,
                   state_app: StateApp) -> StreamTask:
    """Task 0_1 taken as an active, one batch counted and committed through it."""
    active = manager.take(settings, sub, "0_1", Role.ACTIVE)
    assert isinstance(active, StreamTask)
    count_batch(active.opened, ["x"], state_app.input_topic, 1)
    return active


def until_closed(task: Task, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not task.closed:
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_an_active_demoted_in_place_tails_from_its_stores_and_restores_only_the_delta(state_app: StateApp) -> None:
    state_app.ensure_changelogs()
    first = StateCommitter.open(state_app.name, "0_1", [COUNTS], state_app.state_dir / "a", state_app.client)
    try:
        for i in range(3):
            count_batch(first, ["x", "y"], state_app.input_topic, i + 1)
        store = first.state.store("counts")
        first.demote()
        assert first.committer is None, "a standby commits nothing"
        assert first.state.role == Role.STANDBY and not first.state.restored
        assert first.state.store("counts") is store, "the same open store, not a reopened one"
        # The next owner opens the task elsewhere (restoring the 6 changelog records) and moves on.
        with StateCommitter.open(state_app.name, "0_1", [COUNTS], state_app.state_dir / "b",
                                 state_app.client) as second:
            assert dict(second.state.store("counts").items()) == {"x": 3, "y": 3}
            count_batch(second, ["x", "z"], state_app.input_topic, 4)
        progress = caught_up(first.state, state_app, "the recycled standby")
        assert progress.restored == 2, "only what the next owner wrote (x, z), not the 6 records it held"
        assert dict(store.items()) == {"x": 4, "y": 3, "z": 1}
        first.state.promote()  # and back: a committer made again, nothing left to restore
        assert first.state.restored and first.committer is not None
        count_batch(first, ["y"], state_app.input_topic, 5)
        assert dict(store.items()) == {"x": 4, "y": 4, "z": 1}
    finally:
        first.close()


def test_a_runner_recycles_an_active_it_let_go_of_into_the_standby_it_is_given_and_closes_one_not_given(
        state_app: StateApp, monkeypatch: pytest.MonkeyPatch) -> None:
    state_app.ensure_changelogs()
    monkeypatch.setattr(task_manager, "RECYCLE_WITHIN_S", 1.0)
    settings, sub, manager = a_runner(state_app)
    try:
        active = counted_active(manager, settings, sub, state_app)
        store = active.state.store("counts")
        manager.release("0_1", "moved to runner 2", recycle=True)
        assert manager.get("0_1") is None and manager.actives() == [], "let go of: neither held nor run"
        standby = manager.take(settings, sub, "0_1", Role.STANDBY)
        assert isinstance(standby, StandbyTask) and standby.state.store("counts") is store
        assert active.closed and manager.get("0_1") is standby
        assert caught_up(standby.state, state_app).restored == 0

        # One the next generation does not give back as a standby is closed once the time is up,
        # and one let go of without `recycle` (its last round did not commit cleanly) at once.
        other = manager.take(settings, sub, "0_0", Role.ACTIVE)
        manager.release("0_0", "moved away", recycle=True)
        assert not other.closed
        until_closed(other, "a task kept for recycling was not closed when its time was up")
        again = manager.take(settings, sub, "0_0", Role.ACTIVE)
        assert again is not other and isinstance(again, StreamTask), "opened anew"
        manager.release("0_0", "its round did not commit")
        until_closed(again, "a task let go of without recycling was not closed")
    finally:
        manager.close_all()
    assert standby.closed


def test_an_active_that_cannot_be_recycled_is_closed_and_the_standby_asked_for_says_why(
        state_app: StateApp, kafka) -> None:
    """Its changelog deleted while it was kept: the demotion's plan fails, the kept active is
    closed (its directory lock released), and taking the standby raises the reason."""
    state_app.ensure_changelogs()
    settings, sub, manager = a_runner(state_app)
    try:
        active = counted_active(manager, settings, sub, state_app)
        manager.release("0_1", "moved to runner 2", recycle=True)
        kafka.admin.delete_topics([state_app.changelog()])[state_app.changelog()].result(30)
        deadline = time.monotonic() + 30
        while state_app.changelog() in kafka.admin.list_topics(timeout=10).topics:
            assert time.monotonic() < deadline, "the changelog still listed 30 s after its deletion"
            time.sleep(0.2)
        with pytest.raises(ChangelogTopicMissing, match=state_app.changelog()):
            manager.take(settings, sub, "0_1", Role.STANDBY)
        assert active.closed and manager.get("0_1") is None
    finally:
        manager.close_all()
