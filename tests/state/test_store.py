"""Key-value stores and their per-batch transactions, on real RocksDB."""

from __future__ import annotations

import random

import pytest

from eddy_runtime.kafka.partitions import TopicPartition
from eddy_runtime.state import KeyValueStore, StoreSpec, open_store
from eddy_runtime.state.store import SortedKeys, prefix_successor

pytestmark = pytest.mark.unit


@pytest.fixture
def counts(tmp_path):
    store = open_store(StoreSpec.key_value("counts", key_serde="string", value_serde="int64"), tmp_path / "counts")
    yield store
    store.close()


def test_transaction_reads_its_own_writes_before_they_are_applied(counts: KeyValueStore) -> None:
    tx = counts.begin()
    tx.put("a", 1)
    assert tx.get("a") == 1
    assert counts.get("a") is None
    tx.delete("a")
    assert tx.get("a", default=-1) == -1


def test_applied_transaction_writes_data_and_offsets_together(counts: KeyValueStore) -> None:
    tx = counts.begin()
    tx.put_many(["a", "b"], [1, 2])
    tx.apply(changelog_offset=17, input_offsets={("words", 0): 100})
    assert counts.get_many(["a", "b", "c"], default=0) == [1, 2, 0]
    assert counts.offsets.changelog_offset == 17
    assert dict(counts.offsets.input_offsets) == {("words", 0): 100}


def test_offsets_survive_reopening(tmp_path) -> None:
    spec = StoreSpec.key_value("s")
    store = open_store(spec, tmp_path / "s")
    store.write([(b"k", b"v")], changelog_offset=5, input_offsets={("in", 2): 9})
    store.close()
    again = open_store(spec, tmp_path / "s")
    try:
        assert again.offsets.changelog_offset == 5
        assert dict(again.offsets.input_offsets) == {("in", 2): 9}
        assert again.get(b"k") == b"v"
    finally:
        again.close()


def test_input_offsets_are_keyed_by_topic_partition_in_memory_and_after_reopening(tmp_path) -> None:
    spec = StoreSpec.key_value("s")
    store = open_store(spec, tmp_path / "s")
    store.write([(b"k", b"v")], input_offsets={("in", 2): 9})
    store.write([(b"k", b"w")], input_offsets={TopicPartition("in", 3): 4})
    assert store.offsets.input_offsets == {TopicPartition("in", 2): 9, TopicPartition("in", 3): 4}
    assert all(type(tp) is TopicPartition for tp in store.offsets.input_offsets)
    store.close()
    again = open_store(spec, tmp_path / "s")
    try:
        assert all(type(tp) is TopicPartition for tp in again.offsets.input_offsets)
        assert dict(again.offsets.input_offsets) == {TopicPartition("in", 2): 9, TopicPartition("in", 3): 4}
    finally:
        again.close()


def test_get_many_mixes_batch_writes_and_committed_values(counts: KeyValueStore) -> None:
    first = counts.begin()
    first.put_many(["a", "b"], [1, 2])
    first.apply(changelog_offset=0)
    tx = counts.begin()
    tx.put("b", 20)
    tx.delete("a")
    assert tx.get_many(["a", "b", "c"], default=0) == [0, 20, 0]


def test_changelog_records_hold_the_last_write_per_key(counts: KeyValueStore) -> None:
    tx = counts.begin()
    tx.put("a", 1)
    tx.put("b", 1)
    tx.put("a", 2)
    tx.delete("b")
    records = dict(tx.changelog_records())
    assert records == {b"a": (2).to_bytes(8, "big"), b"b": None}


def test_range_and_prefix_merge_batch_writes_over_committed_data(counts: KeyValueStore) -> None:
    base = counts.begin()
    base.put_many(["apple", "apricot", "banana", "cherry"], [1, 2, 3, 4])
    base.apply(changelog_offset=3)
    tx = counts.begin()
    tx.delete("apricot")
    tx.put("avocado", 5)
    tx.put("banana", 30)
    assert list(tx.prefix("a")) == [("apple", 1), ("avocado", 5)]
    assert list(tx.range("avocado", "cherry")) == [("avocado", 5), ("banana", 30)]
    assert list(counts.prefix("ap")) == [("apple", 1), ("apricot", 2)]
    assert [k for k, _ in counts.range()] == ["apple", "apricot", "banana", "cherry"]


def test_scans_see_the_writes_made_between_them(counts: KeyValueStore) -> None:
    # A processor that scans a prefix per record (examples/nexmark's q4) interleaves writes and
    # scans in one batch: every scan must see every write before it, over the committed data.
    # Enough keys that the keys written since the last sort outgrow RESORT_AFTER, and are sorted in.
    rng = random.Random(7)
    keys = [f"{a}{i:03d}" for a in "abc" for i in range(150)]
    base = counts.begin()
    base.put_many(keys[::2], list(range(len(keys[::2]))))
    base.apply(changelog_offset=0)
    model = dict(zip(keys[::2], range(len(keys[::2])), strict=True))
    tx = counts.begin()
    for step in range(3000):
        op, key = rng.choice(("put", "delete", "many", "prefix", "range")), rng.choice(keys)
        if op == "put":
            tx.put(key, step)
            model[key] = step
        elif op == "delete":
            tx.delete(key)
            model.pop(key, None)
        elif op == "many":
            chosen = rng.sample(keys, 3)
            tx.put_many(chosen, [step] * 3)
            model.update(dict.fromkeys(chosen, step))
        elif op == "prefix":
            assert list(tx.prefix(key[0])) == sorted((k, v) for k, v in model.items() if k.startswith(key[0]))
        else:
            end = rng.choice(keys)
            assert list(tx.range(key, end)) == sorted((k, v) for k, v in model.items() if key <= k < end)
    tx.apply(changelog_offset=1)
    assert list(counts.range()) == sorted(model.items())


def test_prefix_successor_handles_ff_bytes() -> None:
    assert prefix_successor(b"ab") == b"ac"
    assert prefix_successor(b"a\xff") == b"b"
    assert prefix_successor(b"\xff\xff") is None


def test_a_transaction_cannot_be_applied_twice(counts: KeyValueStore) -> None:
    tx = counts.begin()
    tx.put("a", 1)
    tx.apply(changelog_offset=0)
    with pytest.raises(RuntimeError, match="already applied"):
        tx.put("a", 2)


def test_writes_without_wal_are_flushed_before_a_logged_write(tmp_path) -> None:
    store = open_store(StoreSpec.key_value("s"), tmp_path / "s")
    store.write([(b"a", b"1")], changelog_offset=0, disable_wal=True)
    assert store._unflushed_without_wal
    store.write([(b"b", b"2")], changelog_offset=1)
    assert not store._unflushed_without_wal
    store.close()


def test_size_estimate_grows_with_data(tmp_path) -> None:
    store = open_store(StoreSpec.key_value("s"), tmp_path / "s")
    try:
        empty = store.size()
        store.write(((b"%08d" % i, b"x" * 100) for i in range(20_000)), changelog_offset=0)
        store.flush()
        size = store.size()
        assert size.bytes > empty.bytes
        assert size.keys > 10_000
        assert not store.is_empty()
    finally:
        store.close()


def test_store_spec_rejects_bad_names_and_window_settings() -> None:
    with pytest.raises(ValueError, match="folder name"):
        StoreSpec.key_value("a/b")
    with pytest.raises(ValueError, match="retention"):
        StoreSpec.window("w", window_size_ms=1000, retention_ms=10)


def test_sorted_keys_give_every_range_in_order_while_keys_come_and_chunks_split() -> None:
    rng = random.Random(11)
    pool = [bytes([rng.randrange(256) for _ in range(rng.randrange(1, 4))]) for _ in range(2000)]
    first = set(pool[:50])
    keys, model = SortedKeys(first, half=4), set(first)
    for key in pool[50:]:
        if key not in model:
            keys.add(key)
            model.add(key)
        if rng.random() < 0.1:
            start, end = rng.choice([None, *pool]), rng.choice([None, *pool])
            want = sorted(k for k in model if (start is None or k >= start) and (end is None or k < end))
            assert keys.between(start, end) == want
    assert keys.between(None, None) == sorted(model)
    empty = SortedKeys([], half=2)
    assert empty.between(None, None) == []
    empty.add(b"x")
    assert empty.between(b"a", b"y") == [b"x"] and empty.between(b"y", None) == []
