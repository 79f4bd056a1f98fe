"""The commit protocol and the guards around a task: topics, locks, zombies, crashes between phases."""

from __future__ import annotations

import struct
import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from eddy_runtime.executor.commit import StateCommitter
from eddy_runtime.kafka import transactions
from eddy_runtime.kafka.transactional_ids import runner_transactional_id
from eddy_runtime.kafka.transactions import (
    CommitFailed,
    CommitPart,
    OutputRecord,
    PlannedPositions,
    TaskCommitter,
    TaskFenced,
)
from eddy_runtime.state import (
    ChangelogTopicMismatch,
    ChangelogTopicSpec,
    ProcessorStateManager,
    TaskDirectoryLocked,
    ensure_changelog_topics,
)
from tests.state.conftest import COUNTS, StateApp, read_all
from tests.state.test_task_directory import hold_lock_in_child

pytestmark = pytest.mark.integration


def open_active(app: StateApp, **kw) -> StateCommitter:
    return StateCommitter.open(app.name, "0_0", [COUNTS], app.state_dir, app.bootstrap, **kw)


def increment(mgr: ProcessorStateManager, key: str):
    tx = mgr.transaction()
    counts = tx.key_value("counts")
    counts.put(key, counts.get(key, 0) + 1)
    return tx


def committed(app: StateApp, partition: int = 0) -> int:
    c = Consumer({"bootstrap.servers": app.bootstrap, "group.id": app.name})
    (tp,) = c.committed([TopicPartition(app.input_topic, partition)], timeout=10)
    c.close()
    return tp.offset


def test_wrong_changelog_topic_is_rejected(state_app: StateApp, kafka) -> None:
    wrong_partitions = kafka.create_topic(f"{state_app.name}-a-changelog", partitions=3,
                                          config={"cleanup.policy": "compact"})
    wrong_policy = kafka.create_topic(f"{state_app.name}-b-changelog", partitions=2)
    with pytest.raises(ChangelogTopicMismatch) as err:
        ensure_changelog_topics(kafka.admin, [ChangelogTopicSpec(wrong_partitions, 2),
                                              ChangelogTopicSpec(wrong_policy, 2)])
    message = str(err.value)
    assert f"{wrong_partitions!r} has 3 partitions, the app needs 2" in message
    assert f"{wrong_policy!r} has cleanup.policy=delete, the app needs cleanup.policy=compact" in message


def test_changelog_topics_are_created_compacted_with_the_input_partition_count(state_app: StateApp, kafka) -> None:
    topic = state_app.changelog()
    assert ensure_changelog_topics(kafka.admin, [ChangelogTopicSpec(topic, 2)]) == {topic: True}
    assert ensure_changelog_topics(kafka.admin, [ChangelogTopicSpec(topic, 2)]) == {topic: False}
    assert len(kafka.admin.list_topics(topic, timeout=10).topics[topic].partitions) == 2


def test_lock_held_by_another_process_is_rejected(state_app: StateApp) -> None:
    state_app.ensure_changelogs()
    child = hold_lock_in_child(state_app.state_dir, state_app.name, "0_0")
    try:
        with pytest.raises(TaskDirectoryLocked, match=f"pid {child.pid}"):
            open_active(state_app)
    finally:
        child.kill()
        child.wait(10)
    with open_active(state_app) as task:
        assert task.state.restored


def test_exactly_once_commit_carries_outputs_changelog_and_input_offsets(state_app: StateApp, kafka) -> None:
    state_app.ensure_changelogs()
    out = kafka.new_topic(f"{state_app.name}-out", partitions=2)
    with open_active(state_app) as task:
        mgr = task.state
        tx = increment(mgr, "k")
        result = task.commit(tx, outputs=[OutputRecord(out, b"k", struct.pack(">q", 1), partition=0)],
                            input_offsets={(state_app.input_topic, 0): 42})
        assert result.changelog_records == 1 and result.outputs == 1
        assert mgr.store("counts").offsets.changelog_offset == result.changelog_offsets["counts"]
        assert dict(mgr.store("counts").offsets.input_offsets) == {(state_app.input_topic, 0): 42}
        assert mgr.figures().commit_latencies_s
        assert task.committed_offsets([(state_app.input_topic, 0), (state_app.input_topic, 1)]) == {
            (state_app.input_topic, 0): 42, (state_app.input_topic, 1): 0}
    assert committed(state_app) == 42
    assert [(k, v) for _, k, v in read_all(state_app.bootstrap, out)] == [(b"k", struct.pack(">q", 1))]
    assert [(k, v) for _, k, v in read_all(state_app.bootstrap, state_app.changelog())] == [
        (b"k", struct.pack(">q", 1))
    ]


def test_a_crash_between_kafka_commit_and_store_write_is_repaired_by_the_next_open(state_app: StateApp) -> None:
    state_app.ensure_changelogs()
    with open_active(state_app) as task:
        mgr = task.state
        task.commit(increment(mgr, "k"), input_offsets={(state_app.input_topic, 0): 1})
        tx = increment(mgr, "k")
        task.commit_to_kafka(tx, input_offsets={(state_app.input_topic, 0): 2})
        # ... the process dies here: the store never sees the second batch.
        assert mgr.store("counts").get("k") == 1
    with open_active(state_app) as task:
        mgr = task.state
        mgr.restore(timeout_s=30)
        assert mgr.store("counts").get("k") == 2
        assert dict(mgr.store("counts").offsets.input_offsets) == {(state_app.input_topic, 0): 2}
    assert committed(state_app) == 2


def test_a_zombie_of_the_task_is_fenced(state_app: StateApp, tmp_path) -> None:
    state_app.ensure_changelogs()
    zombie = open_active(state_app)
    zombie.commit(increment(zombie.state, "k"))
    # The task moved: a new instance on another volume (the zombie still runs, e.g. a partition).
    with StateCommitter.open(state_app.name, "0_0", [COUNTS], tmp_path / "other", state_app.bootstrap) as new:
        new.state.restore(timeout_s=30)
        with pytest.raises(TaskFenced):
            zombie.commit(increment(zombie.state, "k"))
        assert zombie.state.store("counts").get("k") == 1, "a fenced batch never reaches the store"
        new.commit(increment(new.state, "k"))
        assert new.state.store("counts").get("k") == 2
    zombie.close()


def test_an_aborted_batch_leaves_the_store_untouched(state_app: StateApp) -> None:
    state_app.ensure_changelogs()
    # Give up on the unknown topic after 1 s instead of librdkafka's 30 s default.
    with open_active(state_app, producer_overrides={"topic.metadata.propagation.max.ms": 1000}) as task:
        mgr = task.state
        task.commit(increment(mgr, "k"))
        tx = increment(mgr, "k")
        with pytest.raises(CommitFailed, match="no-such-topic") as err:
            task.commit(tx, outputs=[OutputRecord(f"{state_app.name}-no-such-topic", b"k", b"v")])
        assert err.value.aborted
        assert mgr.store("counts").get("k") == 1
        task.commit(increment(mgr, "k"))
        assert mgr.store("counts").get("k") == 2
    assert [v for _, _, v in read_all(state_app.bootstrap, state_app.changelog())] == [
        struct.pack(">q", 1), struct.pack(">q", 2)
    ]


def test_at_least_once_commit_flushes_commits_offsets_then_writes_the_store(state_app: StateApp) -> None:
    state_app.ensure_changelogs()
    with open_active(state_app, guarantee="at_least_once") as task:
        mgr = task.state
        for i in range(3):
            task.commit(increment(mgr, "k"), input_offsets={(state_app.input_topic, 0): i + 1})
        assert mgr.store("counts").get("k") == 3
    assert committed(state_app) == 3
    assert len(read_all(state_app.bootstrap, state_app.changelog())) == 3


def test_a_kafka_call_that_ignores_its_timeout_makes_the_committer_unusable(kafka) -> None:
    """librdkafka's send_offsets_to_transaction can hang past its timeout when the group
    coordinator's broker goes away; the committer gives up on it and the task is reopened."""
    committer = TaskCommitter("bounded", "0_0", kafka.bootstrap, "at_least_once", timeout_s=0.5)
    try:
        started = time.monotonic()
        with pytest.raises(TaskFenced, match="hung past its 0.5s timeout"):
            committer._bounded_started("send_offsets_to_transaction", lambda: time.sleep(8), 0.5)()
        assert time.monotonic() - started < 7
        with pytest.raises(TaskFenced, match="committer is unusable"):
            committer.commit_to_kafka(None, [], {})
    finally:
        committer.close()


def test_a_committer_of_a_task_on_its_runners_transactions_reads_positions_and_fences_nothing(kafka) -> None:
    """On the continuous path under exactly-once a task commits through its runner's transactions;
    opening it must not fence anything (that costs an init_transactions on the broker per task
    moved), and its own committer must never commit."""
    app = kafka.unique_name("readonly")
    out = kafka.create_topic(f"{app}-out", partitions=1)
    owner = TaskCommitter(app, "0_0", kafka.bootstrap, "exactly_once")
    reader = TaskCommitter(app, "0_0", kafka.bootstrap, "exactly_once", fence=False)
    try:
        owner.commit_to_kafka(None, [OutputRecord(out, b"k", b"v", partition=0)], {(out, 0): 1})
        assert owner.usable  # the read-only committer with the same transactional.id fenced nothing
        assert reader.committed_offsets([(out, 0)]) == {(out, 0): 1}
        with pytest.raises(CommitFailed, match="only reads positions"):
            reader.commit_to_kafka(None, [], {(out, 0): 2})
        assert reader.committed_offsets([(out, 0)]) == {(out, 0): 1}
    finally:
        owner.close()
        reader.close()


def test_a_round_sends_its_planned_positions_first_and_puts_back_those_of_a_part_left_out(kafka) -> None:
    """A runner's round sends every task's input positions before it processes them
    (`PlannedPositions`); a task left out of the round (a bad record under `fail`) must keep the
    position it started at, and a round whose processing raises commits nothing."""
    app = kafka.unique_name("planned")
    inp = kafka.create_topic(f"{app}-in", partitions=3)
    out = kafka.create_topic(f"{app}-out", partitions=1)
    runner = TaskCommitter(app, runner_transactional_id("1"), kafka.bootstrap, "exactly_once")
    a, b, c = (inp, 0), (inp, 1), (inp, 2)
    try:
        runner.commit_parts([CommitPart(None, [], {a: 5, b: 7})])
        assert runner.committed_offsets([a, b, c]) == {a: 5, b: 7, c: 0}

        def only_a():  # b's part is left out; a commits further than planned; c was not planned
            yield CommitPart(None, [OutputRecord(out, b"k", b"a", partition=0)], {a: 11, c: 3})

        commits = runner.commit_parts(only_a(), planned=PlannedPositions({a: 10, b: 20}, {a: 5, b: 7}))
        assert len(commits) == 1
        assert runner.committed_offsets([a, b, c]) == {a: 11, b: 7, c: 3}

        def failing():
            yield CommitPart(None, [OutputRecord(out, b"k", b"lost", partition=0)], {a: 12})
            raise RuntimeError("processing failed")

        with pytest.raises(RuntimeError, match="processing failed"):
            runner.commit_parts(failing(), planned=PlannedPositions({a: 12, b: 8}, {a: 11, b: 7}))
        assert runner.committed_offsets([a, b, c]) == {a: 11, b: 7, c: 3}

        def nothing():
            yield from ()

        assert runner.commit_parts(nothing(), planned=PlannedPositions({b: 9}, {b: 7})) == []
        assert runner.committed_offsets([a, b, c]) == {a: 11, b: 7, c: 3}
        assert runner.usable
        runner.commit_parts([CommitPart(None, [OutputRecord(out, b"k", b"after", partition=0)], {b: 8})])
        assert runner.committed_offsets([a, b, c]) == {a: 11, b: 8, c: 3}
    finally:
        runner.close()
    assert [v for _, _, v in read_all(kafka.bootstrap, out)] == [b"a", b"after"]


@pytest.mark.parametrize("times_out", ["the offsets", "every call"])
def test_a_kafka_error_before_the_commit_aborts_the_transaction_rather_than_leaving_it_open(
        kafka, monkeypatch, times_out: str) -> None:
    """A send_offsets_to_transaction that fails (here: timed out, as against a group coordinator
    whose broker was SIGKILLed, bench/chaos.py) comes before commit_transaction: the transaction
    did not commit, and must be aborted, or the producer replaced if even the abort fails. Reported
    as "commit outcome unknown" and left open, it held the changelogs' last stable offset, and the
    task never committed again.

    A timeout of 0 makes a call give up before any broker can answer, so it times out for real, on
    a real broker (1 ms was not enough: on a fast machine the coordinators answered within it)."""
    app = kafka.unique_name("abort-early")
    inp = kafka.create_topic(f"{app}-in", partitions=1)
    runner = TaskCommitter(app, runner_transactional_id("1"), kafka.bootstrap, "exactly_once")
    try:
        timeout = runner._timeout
        if times_out == "the offsets":
            monkeypatch.setattr(transactions, "SEND_OFFSETS_TIMEOUT_S", 0.0)
        else:
            runner._timeout = 0.0  # the abort too
        with pytest.raises(CommitFailed) as failed:
            runner.commit_parts([CommitPart(None, [], {(inp, 0): 1})])
        monkeypatch.undo()
        if times_out == "every call" and isinstance(failed.value, TaskFenced):
            pass  # the abort timed out too: the producer is replaced (the task reopened)
        else:
            # aborted: the same producer commits the next round. With every call at 0 s this is the
            # outcome too when the offsets' request had not left the client before it gave up (a
            # loaded machine): the coordinator held nothing of the transaction, the abort was local
            assert failed.value.aborted and not isinstance(failed.value, TaskFenced), failed.value
            runner._timeout = timeout
            runner.commit_parts([CommitPart(None, [], {(inp, 0): 2})])
            assert runner.committed_offsets([(inp, 0)]) == {(inp, 0): 2}
    finally:
        runner.close()
    # the transactional id is usable again at once: nothing is left open for the next owner
    again = TaskCommitter(app, runner_transactional_id("1"), kafka.bootstrap, "exactly_once", timeout_s=30)
    try:
        again.commit_parts([CommitPart(None, [], {(inp, 0): 9})])
        assert again.committed_offsets([(inp, 0)]) == {(inp, 0): 9}
    finally:
        again.close()
