"""Session stores: (key, end, start) keys, findSessions ranges, retention by session end, stream time."""

from __future__ import annotations

import pytest

from eddy_runtime.state import SessionStore, StoreSpec, open_store
from eddy_runtime.state.segmented_store import STREAM_TIME_KEY
from eddy_runtime.state.serde import INT64
from eddy_runtime.state.session_store import session_key, split_session_key

pytestmark = pytest.mark.unit

MIN = 60_000


@pytest.fixture
def spec() -> StoreSpec:
    # a 5-minute gap, no grace: sessions are kept until their end is 5 minutes behind stream time
    return StoreSpec.session("sessions", retention_ms=5 * MIN, key_serde="string", value_serde="int64",
                             segment_interval_ms=2 * MIN)


def test_a_session_key_is_the_key_then_end_then_start_as_kafka_streams_session_key_schema() -> None:
    raw = session_key(b"alice", 10, 15)
    assert raw == b"alice" + INT64.pack(15) + INT64.pack(10)
    assert split_session_key(raw) == (b"alice", 10, 15)


def test_sessions_are_found_by_key_ending_at_or_after_and_starting_at_or_before(tmp_path, spec: StoreSpec) -> None:
    store = open_store(spec, tmp_path / "s")
    assert isinstance(store, SessionStore)
    tx = store.begin()
    tx.put("alice", 0, 10, 2)
    tx.put("alice", 100, 150, 3)
    tx.put("alice", 400, 400, 1)
    tx.put("alicex", 120, 130, 99)  # shares alice's bytes as a prefix
    tx.put("bob", 100, 100, 7)
    tx.apply(changelog_offset=4)
    # findSessions(key, earliest end, latest start), oldest end first
    assert list(store.find_sessions("alice", 10, 400)) == [((0, 10), 2), ((100, 150), 3), ((400, 400), 1)]
    assert list(store.find_sessions("alice", 11, 399)) == [((100, 150), 3)]
    assert list(store.find_sessions("alice", 151, 1_000)) == [((400, 400), 1)]
    assert list(store.find_sessions("alice", 0, 99)) == [((0, 10), 2)]
    assert store.fetch_session("alice", 100, 150) == 3 and store.fetch_session("alice", 100, 149) is None
    assert store.all_sessions() == [(("alice", 0, 10), 2), (("alice", 100, 150), 3), (("alice", 400, 400), 1),
                                    (("alicex", 120, 130), 99), (("bob", 100, 100), 7)]
    store.close()


def test_a_transaction_sees_its_own_writes_and_removals_and_logs_removals_as_tombstones(tmp_path,
                                                                                        spec: StoreSpec) -> None:
    store = open_store(spec, tmp_path / "s")
    tx = store.begin()
    tx.put("k", 0, 0, 1)
    tx.apply(changelog_offset=0)
    tx = store.begin()
    tx.put("k", 5, 5, 1)
    assert tx.find_sessions("k", 0, 5) == [((0, 0), 1), ((5, 5), 1)]
    tx.remove("k", 0, 0)
    tx.remove("k", 5, 5)
    tx.put("k", 0, 5, 2)
    assert tx.find_sessions("k", 0, 5) == [((0, 5), 2)]
    assert tx.in_store("k", 0, 0) and not tx.in_store("k", 5, 5)
    assert dict(tx.changelog_records()) == {session_key(b"k", 5, 5): None, session_key(b"k", 0, 0): None,
                                            session_key(b"k", 0, 5): INT64.pack(2)}
    tx.apply(changelog_offset=3)
    assert store.all_sessions() == [(("k", 0, 5), 2)]
    store.close()


def test_sessions_past_retention_are_hidden_refused_and_their_segments_dropped(tmp_path, spec: StoreSpec) -> None:
    store = open_store(spec, tmp_path / "s")
    tx = store.begin()
    tx.put("k", 0, MIN, 1)
    tx.put("k", 3 * MIN, 4 * MIN, 2)
    tx.observe(4 * MIN)
    tx.apply(changelog_offset=1)
    assert store.segment_count == 2
    tx = store.begin()
    tx.observe(9 * MIN)  # sessions ending before 9 - 5 = 4 minutes are expired; one ending at 4 is kept
    assert tx.find_sessions("k", 0, 10 * MIN) == [((3 * MIN, 4 * MIN), 2)]
    assert tx.put("k", 2 * MIN, 4 * MIN - 1, 3) is False
    tx.put("k", 9 * MIN, 9 * MIN, 4)
    tx.apply(changelog_offset=3)
    assert store.all_sessions() == [(("k", 3 * MIN, 4 * MIN), 2), (("k", 9 * MIN, 9 * MIN), 4)]
    assert store.segment_count == 2  # [0, 2) minutes dropped whole; [4, 6) and [8, 10) kept
    store.close()
    again = open_store(spec, tmp_path / "s")
    assert again.stream_time == 9 * MIN
    assert again.all_sessions() == [(("k", 3 * MIN, 4 * MIN), 2), (("k", 9 * MIN, 9 * MIN), 4)]
    again.close()


def test_stream_time_is_kept_with_the_sessions_across_a_restart_and_a_changelog_replay(tmp_path,
                                                                                       spec: StoreSpec) -> None:
    store = open_store(spec, tmp_path / "a")
    tx = store.begin()
    tx.put("alice", MIN, 2 * MIN, 3)
    tx.observe(2 * MIN + 500)  # the newest record went to another key's session, or was late
    records = tx.changelog_records()
    assert records[-1] == (STREAM_TIME_KEY, INT64.pack(2 * MIN + 500))
    tx.apply(changelog_offset=len(records) - 1)
    store.close()
    store = open_store(spec, tmp_path / "a")  # a restart
    assert store.stream_time == 2 * MIN + 500
    other = open_store(spec, tmp_path / "b")  # a restore elsewhere: the changelog replayed
    assert other.write(records, changelog_offset=len(records) - 1) == 1
    assert other.stream_time == 2 * MIN + 500 and other.fetch_session("alice", MIN, 2 * MIN) == 3
    tx = store.begin()
    assert not tx.dirty
    tx.observe(3 * MIN)
    assert tx.dirty and tx.changelog_records() == [(STREAM_TIME_KEY, INT64.pack(3 * MIN))]
    store.close()
    other.close()


def test_changelog_replay_does_not_resurrect_expired_sessions(tmp_path, spec: StoreSpec) -> None:
    store = open_store(spec, tmp_path / "s")
    records = [
        (session_key(b"k", 0, 0), INT64.pack(1)),
        (session_key(b"k", 20 * MIN, 20 * MIN), INT64.pack(1)),
        (session_key(b"k", MIN, MIN), INT64.pack(1)),  # arrives after stream time moved past it
        (session_key(b"k", 0, 0), None),
    ]
    store.write(records, changelog_offset=3, disable_wal=True)
    store.flush()
    assert store.all_sessions() == [(("k", 20 * MIN, 20 * MIN), 1)]
    store.close()


def test_store_spec_of_a_session_store_needs_a_retention() -> None:
    with pytest.raises(ValueError, match="retention_ms > 0"):
        StoreSpec.session("s", retention_ms=0)
