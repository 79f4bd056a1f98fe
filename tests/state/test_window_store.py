"""Window stores: windowed keys, retention, segments dropped whole."""

from __future__ import annotations

import pytest

from eddy_runtime.state import StoreSpec, open_store
from eddy_runtime.state.window_store import WindowStore, split_windowed_key, windowed_key

pytestmark = pytest.mark.unit

MIN = 60_000


@pytest.fixture
def spec() -> StoreSpec:
    return StoreSpec.window("clicks", window_size_ms=MIN, retention_ms=10 * MIN, key_serde="string",
                            value_serde="int64", segment_interval_ms=5 * MIN)


def test_windows_are_fetched_by_key_and_time_range(tmp_path, spec: StoreSpec) -> None:
    store = open_store(spec, tmp_path / "w")
    assert isinstance(store, WindowStore)
    tx = store.begin()
    for minute in range(5):
        tx.put("alice", minute * MIN, minute)
    tx.put("alicex", 2 * MIN, 99)  # shares alice's bytes as a prefix
    tx.put("bob", 2 * MIN, 7)
    assert tx.fetch("alice", 2 * MIN) == 2
    tx.apply(changelog_offset=6)
    assert store.fetch("alice", 3 * MIN) == 3
    assert list(store.fetch_range("alice", MIN, 3 * MIN)) == [(MIN, 1), (2 * MIN, 2), (3 * MIN, 3)]
    assert sorted(store.fetch_all(2 * MIN, 2 * MIN)) == [(("alice", 2 * MIN), 2), (("alicex", 2 * MIN), 99),
                                                         (("bob", 2 * MIN), 7)]
    store.close()


def test_expired_windows_are_hidden_refused_and_their_segments_dropped(tmp_path, spec: StoreSpec) -> None:
    store = open_store(spec, tmp_path / "w")
    tx = store.begin()
    tx.put("k", 0, 1)
    tx.put("k", 6 * MIN, 2)
    tx.apply(changelog_offset=1)
    assert store.segment_count == 2
    tx = store.begin()
    tx.put("k", 30 * MIN, 3)  # stream time 30 min: windows <= 20 min are expired
    assert tx.fetch("k", 6 * MIN) is None
    assert tx.put("k", 12 * MIN, 4) is False
    tx.apply(changelog_offset=2)
    assert store.fetch("k", 0) is None
    assert list(store.fetch_range("k", 0, 40 * MIN)) == [(30 * MIN, 3)]
    assert store.segment_count == 1
    store.close()
    again = open_store(spec, tmp_path / "w")
    assert again.stream_time == 30 * MIN
    assert list(again.fetch_range("k", 0, 40 * MIN)) == [(30 * MIN, 3)]
    again.close()


def test_window_transaction_merges_its_writes_into_range_fetches(tmp_path, spec: StoreSpec) -> None:
    store = open_store(spec, tmp_path / "w")
    tx = store.begin()
    tx.put("k", MIN, 1)
    tx.put("k", 2 * MIN, 2)
    tx.apply(changelog_offset=0)
    tx = store.begin()
    tx.delete("k", MIN)
    tx.put("k", 3 * MIN, 3)
    tx.put("kk", 4 * MIN, 4)  # another key, whose bytes start with this one's
    assert list(tx.fetch_range("k", 0, 10 * MIN)) == [(2 * MIN, 2), (3 * MIN, 3)]
    assert list(tx.fetch_range("kk", 0, 10 * MIN)) == [(4 * MIN, 4)]
    records = dict(tx.changelog_records())
    assert records[windowed_key(b"k", MIN)] is None
    assert split_windowed_key(windowed_key(b"k", 3 * MIN)) == (b"k", 3 * MIN)
    store.close()


def test_changelog_replay_does_not_resurrect_expired_windows(tmp_path, spec: StoreSpec) -> None:
    store = open_store(spec, tmp_path / "w")
    records = [
        (windowed_key(b"k", 0), b"\x00" * 8),
        (windowed_key(b"k", 30 * MIN), b"\x00" * 8),
        (windowed_key(b"k", MIN), b"\x00" * 8),  # arrives after stream time moved past it
    ]
    store.write(records, changelog_offset=2, disable_wal=True)
    store.flush()
    assert [ws for ws, _ in store.fetch_range(b"k".decode(), 0, 40 * MIN)] == [30 * MIN]
    store.close()


def test_stream_time_is_kept_with_the_windows_across_a_restart_and_a_restore(tmp_path, spec: StoreSpec) -> None:
    from eddy_runtime.state.serde import INT64
    from eddy_runtime.state.window_store import STREAM_TIME_KEY

    store = open_store(spec, tmp_path / "a")
    assert isinstance(store, WindowStore)
    tx = store.begin()
    tx.put("alice", 2 * MIN, 1)
    tx.observe(7 * MIN + 123)  # the newest record the task saw opened no window in this store
    records = tx.changelog_records()
    assert records[-1] == (STREAM_TIME_KEY, INT64.pack(7 * MIN + 123))
    tx.apply(changelog_offset=len(records) - 1)
    assert store.stream_time == 7 * MIN + 123
    store.close()
    store = open_store(spec, tmp_path / "a")  # a restart
    assert store.stream_time == 7 * MIN + 123
    other = open_store(spec, tmp_path / "b")  # a restore elsewhere: the changelog replayed
    assert other.write(records, changelog_offset=len(records) - 1) == 1
    assert other.stream_time == 7 * MIN + 123 and other.fetch("alice", 2 * MIN) == 1
    tx = store.begin()
    assert not tx.dirty
    tx.observe(9 * MIN)  # a batch of late records only still moves stream time, and logs it
    assert tx.dirty and tx.changelog_records() == [(STREAM_TIME_KEY, INT64.pack(9 * MIN))]
    store.close()
    other.close()
