"""Restores from real changelogs: from scratch, the delta after a checkpoint, compaction, edge cases."""

from __future__ import annotations

import logging
import random
import shutil
import time

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic

from eddy_runtime.executor.commit import StateCommitter
from eddy_runtime.kafka.transactions import OutputRecord
from eddy_runtime.state import (
    ChangelogTopicMissing,
    ProcessorStateManager,
    StoreSpec,
)
from eddy_runtime.state.window_store import windowed_key
from tests.state.conftest import COUNTS, StateApp, last_value_per_key, produce, read_all

pytestmark = pytest.mark.integration

RAW = StoreSpec.key_value("counts")  # the same store, seen as bytes


def open_task(app: StateApp, task: str = "0_0", specs=(RAW,), **kw) -> StateCommitter:
    """The task opened as an active that commits on its own (`mgr.state` is its state manager)."""
    return StateCommitter.open(app.name, task, list(specs), app.state_dir, app.client, **kw)


def random_changelog(n: int, keys: int, seed: int = 1) -> list[tuple[bytes, bytes | None]]:
    rnd = random.Random(seed)
    out: list[tuple[bytes, bytes | None]] = []
    for i in range(n):
        k = b"k%06d" % rnd.randrange(keys)
        out.append((k, None if rnd.random() < 0.05 else b"v%d" % i))
    return out


def store_contents(mgr: ProcessorStateManager, store: str = "counts") -> dict[bytes, bytes]:
    return dict(mgr.store(store).iter_raw())


@pytest.mark.parametrize("state_app", ["plaintext", "sasl_ssl"], indirect=True)
def test_restore_from_scratch_rebuilds_the_store_from_the_changelog(state_app: StateApp) -> None:
    state_app.ensure_changelogs()
    records = random_changelog(30_000, keys=5_000)
    produce(state_app.bootstrap, state_app.changelog(), records, partition=0,
            transactional_id=f"{state_app.name}-writer", per_transaction=2_000)
    with open_task(state_app) as task:
        mgr = task.state
        assert not mgr.restored
        chunks = []
        deadline = time.monotonic() + 60
        while not mgr.restored:
            assert time.monotonic() < deadline, f"restore not done in 60 s: {chunks[-1:]}"
            chunks.append(mgr.restore_chunk(max_records=7_000))
        assert len(chunks) >= 4, "a restore goes in bounded chunks"
        assert chunks[0].remaining > 0 and chunks[0].rate > 0 and chunks[0].eta_s is not None
        assert chunks[-1].done and chunks[-1].remaining == 0
        assert chunks[-1].stores[0].mode == "batch"
        assert chunks[-1].restored == len(records)
        assert not mgr.store("counts").bulk_loading, "a cold store is reopened for reads once loaded"
        assert store_contents(mgr) == last_value_per_key(records)
        last_record = read_all(state_app.bootstrap, state_app.changelog())[-1]
        assert mgr.store("counts").offsets.changelog_offset == last_record[0]
        figures = mgr.figures()
        assert figures.stores[0].restored_records == len(records)


@pytest.mark.parametrize("state_app", ["plaintext", "sasl_ssl"], indirect=True)
def test_restore_from_a_checkpoint_reads_only_the_delta(state_app: StateApp) -> None:
    state_app.ensure_changelogs()
    with open_task(state_app, specs=(COUNTS,)) as task:
        mgr = task.state
        for batch in range(10):
            tx = mgr.transaction()
            counts = tx.key_value("counts")
            words = [f"w{i}" for i in range(50)]
            counts.put_many(words, [v + 1 for v in counts.get_many(words, default=0)])
            task.commit(tx, input_offsets={(state_app.input_topic, 0): batch + 1})
    checkpoint = (state_app.state_dir / state_app.name / "0_0" / ".checkpoint").read_text().split("\n")
    assert checkpoint[0] == "0" and f"{state_app.changelog()} 0 " in "\n".join(checkpoint)

    # Another writer (the task, running elsewhere while this volume was away) adds a delta.
    delta = [(b"w1", (100).to_bytes(8, "big")), (b"new", (1).to_bytes(8, "big"))]
    produce(state_app.bootstrap, state_app.changelog(), delta, transactional_id=f"{state_app.name}-0_0")
    with open_task(state_app, specs=(COUNTS,)) as task:
        mgr = task.state
        assert mgr.restore(timeout_s=30).done, "the delta is restored within 30 s"
        assert mgr.progress.restored == 2
        assert mgr.progress.stores[0].mode == "batch"
        counts = mgr.store("counts")
        assert counts.get("w1") == 100 and counts.get("new") == 1 and counts.get("w2") == 10
        assert dict(counts.offsets.input_offsets) == {(state_app.input_topic, 0): 10}


def test_a_periodic_checkpoint_is_written_off_the_commit_and_never_after_a_later_one(state_app: StateApp) -> None:
    state_app.ensure_changelogs()
    path = state_app.state_dir / state_app.name / "0_0" / ".checkpoint"
    with open_task(state_app, specs=(COUNTS,), checkpoint_interval_s=0.0) as task:
        mgr = task.state
        for batch in range(5):
            tx = mgr.transaction()
            tx.key_value("counts").put_many(["w"], [batch])
            task.commit(tx, input_offsets={(state_app.input_topic, 0): batch + 1})
            # each commit hands one to the checkpoint writer (unless the last is still being written)
            mgr._checkpoints.wait()
            assert f"{state_app.input_topic} 0 {batch}" in path.read_text()
        tx = mgr.transaction()
        tx.key_value("counts").put_many(["w"], [5])
        task.commit(tx, input_offsets={(state_app.input_topic, 0): 6})
    # close writes the last one after whatever the writer had under way
    assert f"{state_app.input_topic} 0 5" in path.read_text()
    assert f"{state_app.changelog()} 0 " in path.read_text()


def test_reopening_a_caught_up_task_restores_nothing(state_app: StateApp) -> None:
    state_app.ensure_changelogs()
    with open_task(state_app, specs=(COUNTS,)) as task:
        mgr = task.state
        tx = mgr.transaction()
        tx.key_value("counts").put("a", 1)
        task.commit(tx)
    with open_task(state_app, specs=(COUNTS,)) as task:
        mgr = task.state
        assert mgr.restored, "only the commit marker follows the store's offset"
        assert mgr.progress.restored == 0


def test_compacted_changelog_is_restored_exactly(state_app: StateApp, kafka) -> None:
    state_app.ensure_changelogs(**{"segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
                                   "delete.retention.ms": "0", "min.compaction.lag.ms": "0"})
    records = random_changelog(20_000, keys=500, seed=7)
    for i in range(0, len(records), 2_000):
        produce(state_app.bootstrap, state_app.changelog(), records[i:i + 2_000],
                transactional_id=f"{state_app.name}-w", per_transaction=500)
        time.sleep(0.15)  # roll segments so the cleaner has closed ones to compact
    deadline = time.monotonic() + 90
    rolls: list[tuple[bytes, bytes | None]] = []
    while True:
        on_log = read_all(state_app.bootstrap, state_app.changelog())
        if len(on_log) < len(records) // 4:
            break
        assert time.monotonic() < deadline, f"no compaction: {len(on_log)} of {len(records)} records left"
        rolls.append((b"roll", b"x"))
        produce(state_app.bootstrap, state_app.changelog(), rolls[-1:])
        time.sleep(1)
    offsets = [o for o, _, _ in on_log]
    assert any(b - a > 1 for a, b in zip(offsets, offsets[1:], strict=False)), "offsets must have gaps"
    expected = last_value_per_key([*records, *rolls])
    with open_task(state_app) as task:
        mgr = task.state
        assert mgr.restore(timeout_s=60).done, "the compacted changelog is restored within 60 s"
        assert store_contents(mgr) == expected


def test_an_active_restores_what_a_transaction_still_completing_wrote(state_app: StateApp) -> None:
    """A task taken over right after its last owner's commit: the commit has returned, but the
    broker writes its markers after that, so for a moment the changelog's last stable offset is
    still before the transaction. The new owner restores to what was written, waiting for the
    transaction to complete, not to the stable offset (its committed input positions, read next,
    already count the transaction)."""
    from confluent_kafka import Producer

    state_app.ensure_changelogs()
    first = [(b"k%03d" % i, b"first-%d" % i) for i in range(50)]
    produce(state_app.bootstrap, state_app.changelog(), first, partition=0,
            transactional_id=f"{state_app.name}-writer", per_transaction=50)
    last = [(b"k%03d" % i, b"last-%d" % i) for i in range(25, 75)]
    owner = Producer({"bootstrap.servers": state_app.bootstrap, "transactional.id": f"{state_app.name}-owner",
                      "enable.idempotence": True})
    owner.init_transactions(30)
    owner.begin_transaction()
    for k, v in last:
        owner.produce(state_app.changelog(), v, k, partition=0)
    assert owner.flush(30) == 0
    with open_task(state_app) as task:
        mgr = task.state
        mgr.restore_chunk(max_seconds=1.0)
        assert not mgr.restored, "restored to the stable offset, before the transaction's records"
        owner.commit_transaction(30)
        deadline = time.monotonic() + 30
        while not mgr.restored:
            assert time.monotonic() < deadline, "the restore did not finish once the transaction completed"
            mgr.restore_chunk(max_seconds=0.5)
        assert store_contents(mgr) == last_value_per_key(first + last)


def test_empty_changelog_restores_nothing_and_is_done_at_once(state_app: StateApp) -> None:
    state_app.ensure_changelogs()
    with open_task(state_app) as task:
        mgr = task.state
        assert mgr.restored
        assert mgr.progress.stores[0].mode == "none"


def test_store_ahead_of_a_recreated_changelog_is_wiped_and_restored(state_app: StateApp, kafka, caplog) -> None:
    state_app.ensure_changelogs()
    produce(state_app.bootstrap, state_app.changelog(), random_changelog(500, 100))
    with open_task(state_app) as task:
        mgr = task.state
        assert mgr.restore(timeout_s=30).done, "the first restore finishes within 30 s"
    kafka.admin.delete_topics([state_app.changelog()])[state_app.changelog()].result(30)
    _wait_until_gone(kafka, state_app.changelog())
    with pytest.raises(ChangelogTopicMissing, match=state_app.changelog()):
        open_task(state_app)
    state_app.ensure_changelogs()
    fresh = [(b"only", b"1")]
    produce(state_app.bootstrap, state_app.changelog(), fresh)
    with caplog.at_level(logging.WARNING), open_task(state_app) as task:
        mgr = task.state
        assert mgr.restore(timeout_s=30).done, "the restore from scratch finishes within 30 s"
        assert store_contents(mgr) == {b"only": b"1"}
    assert "beyond the changelog's end" in caplog.text


def test_store_behind_the_changelog_start_is_wiped_and_restored(state_app: StateApp, kafka, caplog) -> None:
    # Records only disappear from a changelog's start where deletion is allowed too (window
    # stores' compact,delete changelogs); the broker refuses DeleteRecords on compact-only topics.
    kafka.create_topic(state_app.changelog(), partitions=2, config={"cleanup.policy": "compact,delete"})
    produce(state_app.bootstrap, state_app.changelog(), [(b"a", b"1"), (b"b", b"1")])
    with open_task(state_app) as task:
        mgr = task.state
        assert mgr.restore(timeout_s=30).done, "the first restore finishes within 30 s"
        assert mgr.store("counts").offsets.changelog_offset == 1
    produce(state_app.bootstrap, state_app.changelog(), [(b"c", b"1"), (b"d", b"1"), (b"e", b"1")])
    futures = kafka.admin.delete_records([TopicPartition(state_app.changelog(), 0, 4)])
    for f in futures.values():
        f.result(30)
    with caplog.at_level(logging.WARNING), open_task(state_app) as task:
        mgr = task.state
        assert mgr.restore(timeout_s=30).done, "the restore from scratch finishes within 30 s"
        assert store_contents(mgr) == {b"e": b"1"}
    assert "below the changelog's start" in caplog.text


def test_window_store_is_restored_from_its_changelog(state_app: StateApp) -> None:
    spec = StoreSpec.window("clicks", window_size_ms=1_000, retention_ms=60_000, key_serde="string",
                            value_serde="int64")
    state_app.ensure_changelogs([spec])
    with open_task(state_app, specs=(spec,)) as task:
        mgr = task.state
        tx = mgr.transaction()
        w = tx.window("clicks")
        for t in range(0, 10_000, 1_000):
            w.put("alice", t, t // 1_000)
        task.commit(tx, outputs=[OutputRecord(state_app.input_topic, b"x", b"y", partition=1)])
    shutil.rmtree(state_app.state_dir)
    with open_task(state_app, specs=(spec,)) as task:
        mgr = task.state
        assert mgr.restore(timeout_s=30).done, "the window store is restored within 30 s"
        assert list(mgr.store("clicks").fetch_range("alice", 2_000, 4_000)) == [(2_000, 2), (3_000, 3), (4_000, 4)]
        assert mgr.store("clicks").get_raw(b"alice", 9_000) == (9).to_bytes(8, "big")
    assert windowed_key(b"alice", 0) in {k for _, k, _ in read_all(state_app.bootstrap, state_app.changelog("clicks"))}


def _wait_until_gone(kafka, topic: str) -> None:
    deadline = time.monotonic() + 30
    while topic in kafka.admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"{topic} still listed 30 s after its deletion"
        time.sleep(0.2)
    # The broker may still refuse to recreate a topic that is being deleted.
    while True:
        try:
            kafka.admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
            kafka.admin.delete_topics([topic])[topic].result(10)
            break
        except Exception as e:  # noqa: BLE001
            assert time.monotonic() < deadline, f"{topic} cannot be recreated 30 s after its deletion: {e}"
            time.sleep(0.5)
    while topic in kafka.admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"{topic} (recreated as a probe) still listed after 30 s"
        time.sleep(0.2)


def test_session_store_is_restored_from_its_changelog_with_its_stream_time(state_app: StateApp) -> None:
    spec = StoreSpec.session("visits", retention_ms=60_000, key_serde="string", value_serde="int64")
    state_app.ensure_changelogs([spec])
    with open_task(state_app, specs=(spec,)) as task:
        mgr = task.state
        tx = mgr.transaction()
        s = tx.session("visits")
        s.put("alice", 0, 0, 1)
        s.put("alice", 5_000, 5_000, 1)
        task.commit(tx, outputs=[OutputRecord(state_app.input_topic, b"x", b"y", partition=1)])
        tx = mgr.transaction()
        s = tx.session("visits")  # a record at 2 s merges alice's two sessions
        s.remove("alice", 0, 0)
        s.remove("alice", 5_000, 5_000)
        s.put("alice", 0, 5_000, 3)
        s.put("bob", 7_000, 9_000, 2)
        s.observe(9_500)  # the newest record was late, or another store's: stream time still moves
        task.commit(tx, outputs=[OutputRecord(state_app.input_topic, b"x", b"y", partition=1)])
    with open_task(state_app, specs=(spec,)) as task:  # a restart: the store as it was
        mgr = task.state
        assert mgr.store("visits").stream_time == 9_500
    shutil.rmtree(state_app.state_dir)
    with open_task(state_app, specs=(spec,)) as task:  # a restore elsewhere: the changelog replayed
        mgr = task.state
        assert mgr.restore(timeout_s=30).done, "the session store is restored within 30 s"
        store = mgr.store("visits")
        assert store.all_sessions() == [(("alice", 0, 5_000), 3), (("bob", 7_000, 9_000), 2)]
        assert store.stream_time == 9_500
        assert mgr.transaction().session("visits").stream_time == 9_500
