"""Standbys tail the changelog, report their lag, and take over with zero or a small restore."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaPartition

from eddy_runtime.executor.commit import StateCommitter
from eddy_runtime.state import ProcessorStateManager
from eddy_runtime.state.standby import FLUSH_EARLY_BYTES
from tests.state.conftest import COUNTS, StateApp, produce

pytestmark = pytest.mark.integration


def count_batch(task: StateCommitter, words: list[str], input_topic: str, position: int) -> None:
    tx = task.state.transaction()
    counts = tx.key_value("counts")
    uniq = sorted(set(words))
    counts.put_many(uniq, [c + words.count(w) for c, w in zip(counts.get_many(uniq, default=0), uniq, strict=True)])
    task.commit(tx, input_offsets={(input_topic, 1): position})


def chunks_until_done(chunk: Callable[[], Any], done: Callable[[Any], bool], what: str,
                      timeout_s: float = 60.0) -> Any:
    """Call `chunk()` until `done(progress)`; returns the last progress (its `restored` counts
    since the copy opened or was promoted), fails past the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        progress = chunk()
        if done(progress):
            return progress
        assert time.monotonic() < deadline, f"{what}: not done after {timeout_s}s (last: {progress})"


def caught_up(standby: ProcessorStateManager, app: StateApp, what: str = "standby catching up") -> Any:
    """Tail until the standby has no lag and read all its changelogs hold: a tail's end is the
    last stable offset, which stands before a transaction whose commit has returned until the
    broker has written its markers (the standby is caught up with it then, not with the write)."""
    written = Consumer({"bootstrap.servers": app.bootstrap, "group.id": f"{app.name}-probe"})

    def done(progress: Any) -> bool:
        return not progress.remaining and all(
            s.position >= written.get_watermark_offsets(KafkaPartition(s.topic, s.partition), timeout=10,
                                                        cached=False)[1] for s in progress.stores)

    try:
        return chunks_until_done(standby.standby_chunk, done, what)
    finally:
        written.close()


def open_pair(app: StateApp) -> tuple[StateCommitter, StateCommitter]:
    """The active on one 'volume' and a standby of the same task on another (each makes its
    committer once it is active)."""
    active = StateCommitter.open(app.name, "0_1", [COUNTS], app.state_dir / "a", app.bootstrap)
    standby = StateCommitter.open(app.name, "0_1", [COUNTS], app.state_dir / "b", app.bootstrap,
                                  role="standby")
    return active, standby


def test_standby_tails_the_changelog_and_reports_its_lag(state_app: StateApp) -> None:
    state_app.ensure_changelogs()
    active, standby_copy = open_pair(state_app)
    standby = standby_copy.state
    with active, standby_copy:
        for i in range(5):
            count_batch(active, ["a", "b", "a"], state_app.input_topic, i + 1)
        assert standby.standby_chunk(max_records=1, max_seconds=2).remaining > 0
        assert standby.standby_lag > 0
        assert caught_up(standby, state_app).remaining == 0
        assert standby.standby_lag == 0
        assert dict(standby.store("counts").items()) == {"a": 10, "b": 5}
        assert standby.figures().stores[0].standby_lag == 0
        with pytest.raises(RuntimeError, match="not restored"):
            standby.transaction()


def test_standby_promotion_with_zero_lag_restores_nothing(state_app: StateApp) -> None:
    state_app.ensure_changelogs()
    active, standby_copy = open_pair(state_app)
    standby = standby_copy.state
    with standby_copy:
        with active:
            for i in range(3):
                count_batch(active, ["x", "y"], state_app.input_topic, i + 1)
        caught_up(standby, state_app)
        applied_as_standby = standby.figures().stores[0].restored_records
        progress = standby.promote()
        assert standby.restored, "a caught-up standby is active at once"
        assert progress.restored == 0
        # the standby read past the commit marker after its last record: nothing left to read
        assert [s.mode for s in progress.stores] == ["none"], progress
        assert standby.figures().stores[0].restored_records == applied_as_standby
        count_batch(standby_copy, ["x"], state_app.input_topic, 4)
        assert dict(standby.store("counts").items()) == {"x": 4, "y": 3}


def test_standby_promotion_with_some_lag_restores_only_the_delta(state_app: StateApp) -> None:
    state_app.ensure_changelogs()
    active, standby_copy = open_pair(state_app)
    standby = standby_copy.state
    with standby_copy:
        with active:
            count_batch(active, [f"w{i}" for i in range(100)], state_app.input_topic, 1)
            caught_up(standby, state_app)
            # The active moves on while the standby's executor is busy elsewhere.
            count_batch(active, ["w1", "w2", "late"], state_app.input_topic, 2)
        progress = standby.promote()
        if not standby.restored:
            progress = chunks_until_done(standby.restore_chunk, lambda _: standby.restored, "the promoted standby")
        assert progress.restored == 3, "only the three records the standby had not applied"
        counts = standby.store("counts")
        assert (counts.get("w1"), counts.get("w2"), counts.get("late"), counts.get("w3")) == (2, 2, 1, 1)


def test_standby_survives_a_restart_and_continues_from_its_offset(state_app: StateApp) -> None:
    state_app.ensure_changelogs()
    active, standby_copy = open_pair(state_app)
    standby = standby_copy.state
    with active:
        count_batch(active, ["a"], state_app.input_topic, 1)
        with standby_copy:
            caught_up(standby, state_app)
        count_batch(active, ["a", "b"], state_app.input_topic, 2)
    with ProcessorStateManager.open(state_app.name, "0_1", [COUNTS], state_app.state_dir / "b",
                                    state_app.bootstrap, role="standby") as again:
        progress = caught_up(again, state_app, "the restarted standby")
        assert progress.restored == 2, "only the second batch's two changelog records (a, b)"
        assert dict(again.store("counts").items()) == {"a": 2, "b": 1}
        assert again.progress.stores[0].start_offset > 0


def test_a_standby_made_from_scratch_writes_its_memtables_out_once_caught_up_not_when_promoted(
        state_app: StateApp) -> None:
    """A copy made from scratch catches up with the WAL off; its memtables (tens of MB at 2.5M
    keys) were flushed by the promotion, which a failover waits for (2.8 s on a loaded bench
    machine). Once caught up they are written out in RocksDB's threads instead."""
    state_app.ensure_changelogs()
    records = [(b"w%07d" % i, (i % 97).to_bytes(8, "big")) for i in range(150_000)]
    produce(state_app.bootstrap, state_app.changelog(), records, partition=1)
    with ProcessorStateManager.open(state_app.name, "0_1", [COUNTS], state_app.state_dir / "b",
                                    state_app.bootstrap, role="standby") as standby:
        caught_up(standby, state_app, "the standby made from scratch")
        counts = standby.store("counts")

        def active_memtable() -> int:
            return counts.db.property_int_value("rocksdb.cur-size-active-mem-table") or 0

        def written_out() -> int:
            return counts.db.property_int_value("rocksdb.num-immutable-mem-table") or 0

        deadline = time.monotonic() + 10
        while written_out() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert active_memtable() <= FLUSH_EARLY_BYTES and not written_out()
        standby.promote()
        assert standby.restored
        assert counts.get("w0149999") == 149_999 % 97
        assert sum(1 for _ in counts.items()) == 150_000
