"""The fences of the runners' transactions (protocol/fences.py) on a real broker: a runner that loses an
active is fenced before the generation goes out, its open transaction is aborted at once, a
runner holding stale work makes no committer, and a driver that starts fences the runners of an
earlier one."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from eddy_runtime.executor.continuous import ContinuousLoop
from eddy_runtime.executor.task_runner import TaskRunner
from eddy_runtime.kafka.transactional_ids import runner_transactional_id
from eddy_runtime.kafka.transactions import CommitPart, OutputRecord, TaskCommitter, TaskFenced
from eddy_runtime.protocol.fences import FenceBook, fence_topic, read_epochs
from eddy_runtime.protocol.work import BatchSettings, ContinuousWork

pytestmark = pytest.mark.integration


def committer(bootstrap: str, app: str, executor: str) -> TaskCommitter:
    return TaskCommitter(app, runner_transactional_id(executor), bootstrap, "exactly_once")


def started_book(kafka) -> tuple[str, str, FenceBook]:
    """A new app's fence topic and output topic, and its driver's fences, started."""
    app = kafka.unique_name("fences")
    kafka.create_topic(fence_topic(app), partitions=1, config={"cleanup.policy": "compact"})
    out = kafka.create_topic(f"{app}-out", partitions=1)
    book = FenceBook(kafka.bootstrap, app)
    book.start()
    return app, out, book


def commit_one(c: TaskCommitter, topic: str, value: bytes) -> None:
    c.commit_parts([CommitPart(None, [OutputRecord(topic, b"k", value, partition=0)], {})])


def test_a_runner_losing_an_active_is_fenced_first_and_its_open_transaction_aborted_at_once(kafka):
    app, out, book = started_book(kafka)
    book.before_generation(1, {"0_0": "1", "0_1": "2"})
    assert book.epochs() == {"1": 0, "2": 0}
    assert read_epochs(kafka.bootstrap, fence_topic(app)) == {"1": 0, "2": 0}
    runner1 = committer(kafka.bootstrap, app, "1")
    commit_one(runner1, out, b"gen1")

    # Generation 2 moves 0_0 from executor 1 to 2: executor 1 is fenced before anyone hears of it.
    book.before_generation(2, {"0_0": "2", "0_1": "2"})
    assert book.epochs() == {"1": 2, "2": 0}  # raised to the generation, which a driverless fence writes too
    assert read_epochs(kafka.bootstrap, fence_topic(app)) == {"1": 2, "2": 0}
    with pytest.raises(TaskFenced):
        commit_one(runner1, out, b"zombie")
    assert not runner1.usable
    book.before_generation(2, {"0_0": "2", "0_1": "2"})  # once per generation
    assert book.epochs()["1"] == 2

    # Executor 2 dies with a transaction open; generation 3 gives its tasks to 1. A record
    # committed after that transaction is readable (read_committed) at once, not after the
    # transaction's timeout.
    zombie = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": f"{app}-runner-2",
                       "transaction.timeout.ms": 60_000})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(out, b"open", b"k", partition=0)
    zombie.flush(30)
    later = Producer({"bootstrap.servers": kafka.bootstrap})
    later.produce(out, b"after", b"k", partition=0)
    later.flush(30)
    started = time.monotonic()
    book.before_generation(3, {"0_0": "1", "0_1": "1"})
    reader = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"{app}-check",
                       "isolation.level": "read_committed", "enable.auto.commit": False})
    reader.assign([TopicPartition(out, 0, 0)])
    seen: list[bytes] = []
    try:
        while b"after" not in seen and time.monotonic() - started < 20:
            m = reader.poll(0.2)
            if m is not None and m.error() is None:
                seen.append(m.value())
    finally:
        reader.close()
    assert seen == [b"gen1", b"after"]  # neither the fenced commit nor the aborted record
    assert time.monotonic() - started < 20
    runner1.close()
    book.close()
    del zombie, later  # a producer is closed when dropped


def test_stale_work_makes_no_committer_and_fresh_work_does(kafka, tmp_path):
    app = kafka.unique_name("fences")
    kafka.create_topic(fence_topic(app), partitions=1, config={"cleanup.policy": "compact"})
    book = FenceBook(kafka.bootstrap, app)
    book.start()
    book.before_generation(1, {"0_0": "1"})
    book.before_generation(2, {"0_0": "2"})  # executor 1 fenced: its epoch is 2 now
    settings = BatchSettings(app, 0, 1, kafka.bootstrap, "exactly_once", "skip", None, str(tmp_path), True)
    loop = ContinuousLoop(TaskRunner("1", str(tmp_path)))
    try:
        # Executor 1 still holds generation 1 (epoch 0): a committer made now would escape the
        # fence, so none is kept.
        loop.producer.make(ContinuousWork(1, (("0_0", "active"),), 0.1, fence_epoch=0), settings)
        assert loop.producer.committer is None
        assert loop.producer.stale_epoch == 0
        loop.producer.make(ContinuousWork(2, (), 0.1, fence_epoch=2), settings)
        assert loop.producer.committer is not None and loop.producer.epoch == 2
    finally:
        loop.close()
        book.close()


def test_a_new_driver_lets_the_runners_of_an_earlier_one_go_on_and_fences_those_that_do_not_let_go(kafka):
    app = kafka.unique_name("fences")
    out = kafka.create_topic(f"{app}-out", partitions=1)
    kafka.create_topic(fence_topic(app), partitions=1, config={"cleanup.policy": "compact"})
    first = FenceBook(kafka.bootstrap, app)
    first.start()
    first.before_generation(1, {"0_0": "1", "1_0": "2"})
    runners = [committer(kafka.bootstrap, app, e) for e in ("1", "2")]
    for r in runners:
        commit_one(r, out, b"ok")
    first.close()

    second = FenceBook(kafka.bootstrap, app)
    second.start()
    assert second.epochs() == {"1": 0, "2": 0}
    for r in runners:  # a driver restart alone stops no runner
        commit_one(r, out, b"still processing")
    asked: dict[str, list[str]] = {}

    def release(losing):
        asked.update({e: list(tasks) for e, tasks in losing.items()})
        return {"1"}  # runner 2 does not answer

    # Its first generation keeps 0_0 on runner 1 and gives 1_0 to runner 3: each runner of the
    # earlier driver may hold anything, so each is asked to let go of what goes elsewhere.
    second.before_generation(7, {"0_0": "1", "1_0": "3"}, release)
    assert asked == {"1": ["1_0"], "2": ["0_0", "1_0"]}
    assert second.epochs() == {"1": 0, "2": 7, "3": 0}
    commit_one(runners[0], out, b"goes on without a pause")
    with pytest.raises(TaskFenced):
        commit_one(runners[1], out, b"zombie")
    for r in runners:
        r.close()
    # After the first generation, only the runners that lose a task are asked.
    asked.clear()
    second.before_generation(8, {"0_0": "1", "1_0": "3"}, release)
    assert asked == {}
    second.close()


def test_a_runner_that_lets_its_tasks_go_keeps_its_transactions_and_one_that_does_not_is_fenced(kafka):
    app, out, book = started_book(kafka)
    book.before_generation(1, {"0_0": "1", "0_1": "2", "0_2": "2"})
    runner1, runner2 = committer(kafka.bootstrap, app, "1"), committer(kafka.bootstrap, app, "2")
    for r in (runner1, runner2):
        commit_one(r, out, b"gen1")
    asked: list[dict[str, list[str]]] = []

    def release(losing):
        asked.append({e: list(tasks) for e, tasks in losing.items()})
        return {"1"}  # executor 2 did not answer

    book.before_generation(2, {"0_0": "3", "0_1": "3", "0_2": "3"}, release)
    assert asked == [{"1": ["0_0"], "2": ["0_1", "0_2"]}]
    assert book.epochs() == {"1": 0, "2": 2, "3": 0}
    assert read_epochs(kafka.bootstrap, fence_topic(app)) == {"1": 0, "2": 2, "3": 0}
    commit_one(runner1, out, b"released")  # let go cleanly: its producer goes on (other tasks)
    with pytest.raises(TaskFenced):
        commit_one(runner2, out, b"zombie")
    book.before_generation(3, {"0_0": "3", "0_1": "3", "0_2": "3"}, release)
    assert len(asked) == 1  # nobody lost anything
    runner1.close()
    runner2.close()
    book.close()
