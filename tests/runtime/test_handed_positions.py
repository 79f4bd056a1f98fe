"""Positions handed over with a released task, on a real broker (protocol/work.py's
`ContinuousWork.handed`): a runner that lets go of an active cleanly answers with the input
positions it committed last, which are the group's committed offsets; the next owner takes the
positions handed to it instead of reading the group's (they hold until it first runs the task),
and a task it opens again later in the same generation, after a round that did not commit,
reads the group's. To show which positions the new owner took, it is handed a later position
than the group holds: the records in between are skipped, and none is processed twice. Two real
task runners and their continuous loops, in this process; the fences as the driver keeps them."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaPartition

from eddy_contract.tasks import Role
from eddy_runtime.executor.task_runner import TaskRunner
from eddy_runtime.kafka.partitions import TopicPartition
from eddy_runtime.protocol.fences import FenceBook
from eddy_runtime.protocol.work import ContinuousWork
from tests.runtime.apps import feed_numbered, pass_through_app, values_of, wait_for_values

pytestmark = pytest.mark.integration

TASK = "0_0"


def _committed(bootstrap: str, group: str, tp: TopicPartition) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed"})
    try:
        [found] = consumer.committed([KafkaPartition(tp.topic, tp.partition)], timeout=30)
        return int(found.offset)
    finally:
        consumer.close()


def test_a_released_task_hands_its_positions_to_its_next_owner_which_takes_them_once(kafka, tmp_path):
    app, source, out, subs, settings = pass_through_app(kafka, "handed", str(tmp_path))
    tp = TopicPartition(source, 0)
    book = FenceBook(kafka.bootstrap, app)
    book.start()
    runner1, runner2 = TaskRunner("1", str(tmp_path)), TaskRunner("2", str(tmp_path))
    try:
        book.before_generation(1, {TASK: "1"})
        runner1.continuous.sync(subs, settings, ContinuousWork(1, ((TASK, Role.ACTIVE),), 0.1))
        feed_numbered(kafka.bootstrap, source, 0, 10)
        wait_for_values(kafka.bootstrap, out, 10, "runner 1, generation 1")

        # Generation 2 moves the task to runner 2: runner 1 lets it go, with what it committed.
        released = runner1.continuous.release(2, [TASK], 5.0)
        assert released.clean
        assert released.positions == {TASK: {tp: 10}}
        assert _committed(kafka.bootstrap, app, tp) == 10
        book.before_generation(2, {TASK: "2"}, release=lambda losing: set(losing))
        assert "1" not in book.epochs() or book.epochs()["1"] == 0  # let go: not fenced

        # Handed position 15, where the group holds 10: v10..v14 are never processed.
        feed_numbered(kafka.bootstrap, source, 10, 10)
        runner2.continuous.sync(subs, settings, ContinuousWork(2, ((TASK, Role.ACTIVE),), 0.1,
                                                               handed={TASK: {tp: 15}}))
        wait_for_values(kafka.bootstrap, out, 15, "runner 2 from the handed position")
        assert _committed(kafka.bootstrap, app, tp) == 20

        # A round that did not commit makes the loop read the task's positions again: from the
        # group now (20), not the handed ones (15), which would process v15..v19 twice.
        runner2.forget_positions(TASK)
        feed_numbered(kafka.bootstrap, source, 20, 5)
        wait_for_values(kafka.bootstrap, out, 20, "runner 2 after its positions were read again")
        values = sorted(values_of(kafka.bootstrap, out))
        assert values == sorted(f"v{i}".encode() for i in [*range(10), *range(15, 25)])
    finally:
        for runner in (runner1, runner2):
            runner.continuous.close()
            runner.close_all()
        book.close()
