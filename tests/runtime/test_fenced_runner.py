"""A runner fenced while it is alive, given its task back later, on a real broker (finding 16 of
docs/reliability.md): runner 1 holds active 0_0 of a pass-through app; the driver's fences give
0_0 to runner 2 (runner 1 fenced: its next commit fails, and it holds the task on, unable to
commit), which processes more input and commits; then 0_0 comes back to runner 1, under a newer
fence epoch. Runner 1 must take it from the group's committed
positions, not from where it had left off: before the fix it processed runner 2's records again,
and each of them came out twice. Two real task runners and their continuous loops, in this
process; the fences as the driver keeps them (`FenceBook`)."""

from __future__ import annotations

import time

import pytest

from eddy_contract.tasks import Role
from eddy_runtime.executor.task_runner import TaskRunner
from eddy_runtime.protocol.fences import FenceBook
from eddy_runtime.protocol.work import ContinuousWork
from tests.runtime.apps import assert_each_once, feed_numbered, pass_through_app, wait_for_values

pytestmark = pytest.mark.integration

TASK = "0_0"


def _work(generation: int, epoch: int, *tasks: str) -> ContinuousWork:
    return ContinuousWork(generation, tuple((t, Role.ACTIVE) for t in tasks), 0.1, fence_epoch=epoch)


def test_a_fenced_runner_given_its_task_back_starts_from_the_committed_positions(kafka, tmp_path):
    app, source, out, subs, settings = pass_through_app(kafka, "refenced", str(tmp_path))
    book = FenceBook(kafka.bootstrap, app)
    book.start()
    runner1, runner2 = TaskRunner("1", str(tmp_path)), TaskRunner("2", str(tmp_path))
    try:
        book.before_generation(1, {TASK: "1"})
        runner1.continuous.sync(subs, settings, _work(1, 0, TASK))
        feed_numbered(kafka.bootstrap, source, 0, 10)
        wait_for_values(kafka.bootstrap, out, 10, "runner 1, generation 1")

        # Generation 2 gives the task to runner 2: runner 1 is fenced first, and no work of
        # generation 2 reaches it (its driver took its executor for dead). Its next commit fails
        # on the fence; the committer it makes then finds the newer epoch in the fence topic and
        # is not kept; it holds the task, which it opens again, reading the positions of then.
        book.before_generation(2, {TASK: "2"})
        assert book.epochs()["1"] == 2  # raised to at least the generation (protocol/fences.py)
        feed_numbered(kafka.bootstrap, source, 10, 10)
        deadline = time.monotonic() + 60
        while runner1.continuous.producer.stale_epoch != 0:
            assert time.monotonic() < deadline, "runner 1 never found itself fenced"
            time.sleep(0.2)
        runner2.continuous.sync(subs, settings, _work(2, 0, TASK))
        wait_for_values(kafka.bootstrap, out, 20, "runner 2, generation 2")
        runner2.continuous.close()
        runner2.close_all()

        # Generation 3 gives it back to runner 1.
        book.before_generation(3, {TASK: "1"})
        runner1.continuous.push(_work(3, book.epochs()["1"], TASK))
        feed_numbered(kafka.bootstrap, source, 20, 10)
        wait_for_values(kafka.bootstrap, out, 30, "runner 1, generation 3")
        assert_each_once(kafka.bootstrap, out, 30, "after the task came back")
    finally:
        for runner in (runner1, runner2):
            runner.continuous.close()
            runner.close_all()
        book.close()
