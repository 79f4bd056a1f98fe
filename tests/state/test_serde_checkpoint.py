"""Serdes and the .checkpoint file format."""

from __future__ import annotations

import dataclasses
import datetime
import math
import struct

import pytest

from eddy_runtime.kafka.partitions import TopicPartition
from eddy_runtime.state.checkpoint import CheckpointError, OffsetCheckpoint
from eddy_runtime.state.serde import SerdeError, serde_for, value_serde_for

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("name", "value"),
    [("bytes", b"\x00\xffabc"), ("string", "grüße"), ("json", {"b": [1, 2], "a": None}), ("int64", -(2**63))],
)
def test_serdes_round_trip(name: str, value: object) -> None:
    serde = serde_for(name)
    assert serde.deserialize(serde.serialize(value)) == value


@pytest.mark.parametrize("value", [2**70, -(2**63) - 1, 10**19, float("inf"), "\ud800", "id 12345678901234567890",
                                   {"x": [0.1, 1e300, -0.0, "é"]}])
def test_json_serde_reads_back_what_it_wrote_however_it_reads(value: object) -> None:
    json = serde_for("json")
    back = json.deserialize(json.serialize(value))
    assert back == value and type(back) is type(value)


@pytest.mark.parametrize("value", [2**70, 10**19, 2**64 - 1, "\ud800", {"x": [0.1, 1e300, -0.0, "é", None]}, (1, None),
                                   {1: "a"}, {"a": True, "b": None, "c": 1e16}, [None]])
def test_json_value_serde_reads_back_what_it_wrote(value: object) -> None:
    values = value_serde_for("json")
    back = values.deserialize(values.serialize(value))
    assert back == (list(value) if isinstance(value, tuple) else {"1": "a"} if value == {1: "a"} else value)


@pytest.mark.parametrize("value", [float("nan"), {"x": float("inf")}, [None, -math.inf]])
def test_json_value_serde_writes_what_orjson_would_write_as_null_with_json(value: object) -> None:
    written = value_serde_for("json").serialize(value)
    assert written == serde_for("json").serialize(value) and (b"NaN" in written or b"Infinity" in written)


@dataclasses.dataclass
class _Point:
    x: int


@pytest.mark.parametrize("value", [_Point(1), datetime.date(2026, 12, 1), {1, 2}, b"raw"])
def test_json_value_serde_refuses_what_the_json_serde_refuses(value: object) -> None:
    with pytest.raises(SerdeError, match="json serde"):
        value_serde_for("json").serialize(value)


def test_json_keys_keep_the_bytes_older_versions_wrote() -> None:
    assert serde_for("json").serialize({"é": 1.5, "a": [1e16]}) == b'{"a":[1e+16],"\\u00e9":1.5}'
    assert value_serde_for("json").deserialize(value_serde_for("json").serialize({"é": 1})) == {"é": 1}
    assert value_serde_for("int64") is serde_for("int64")


def test_int64_serde_writes_kafka_long_bytes() -> None:
    assert serde_for("int64").serialize(5) == struct.pack(">q", 5)


def test_json_serde_gives_equal_bytes_for_equal_objects() -> None:
    json = serde_for("json")
    assert json.serialize({"a": 1, "b": 2}) == json.serialize({"b": 2, "a": 1})


@pytest.mark.parametrize(("name", "value"), [("int64", "1"), ("int64", True), ("string", b"x"), ("bytes", "x"),
                                             ("int64", 2**64)])
def test_serdes_reject_wrong_types_with_a_clear_error(name: str, value: object) -> None:
    with pytest.raises(SerdeError, match=name):
        serde_for(name).serialize(value)


def test_unknown_serde_names_the_known_ones() -> None:
    with pytest.raises(SerdeError, match="int64"):
        serde_for("avro")


def test_checkpoint_file_uses_kafka_streams_text_format(tmp_path) -> None:
    cp = OffsetCheckpoint(tmp_path / ".checkpoint")
    cp.write({("app-counts-changelog", 3): 41, ("app-sums-changelog", 3): 7})
    assert (tmp_path / ".checkpoint").read_text() == (
        "0\n2\napp-counts-changelog 3 41\napp-sums-changelog 3 7\n"
    )
    assert cp.read() == {("app-counts-changelog", 3): 41, ("app-sums-changelog", 3): 7}


def test_checkpoint_write_replaces_atomically_and_leaves_no_temp_file(tmp_path) -> None:
    cp = OffsetCheckpoint(tmp_path / ".checkpoint")
    cp.write({("t", 0): 1})
    cp.write({("t", 0): 2})
    assert cp.read() == {("t", 0): 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == [".checkpoint"]


def test_missing_checkpoint_reads_as_no_offsets(tmp_path) -> None:
    assert OffsetCheckpoint(tmp_path / ".checkpoint").read() == {}


@pytest.mark.parametrize("text", ["0\n", "1\n0\n", "0\n2\nt 0 1\n", "0\n1\nt x 1\n", "0\n1\nt 0\n"])
def test_corrupt_checkpoint_is_reported_with_the_file_name(tmp_path, text: str) -> None:
    path = tmp_path / ".checkpoint"
    path.write_text(text)
    with pytest.raises(CheckpointError, match=".checkpoint"):
        OffsetCheckpoint(path).read()


def test_checkpoint_of_stores_holds_the_last_input_record_they_reflect(tmp_path) -> None:
    cp = OffsetCheckpoint(tmp_path / ".checkpoint")
    # Two stores of a task: positions are next offsets to process; 0 means nothing processed.
    cp.write_store_offsets({("app-a-changelog", 3): 41}, [{("in", 3): 10, ("other", 3): 0}, {("in", 3): 12}])
    assert cp.read() == {("app-a-changelog", 3): 41, ("in", 3): 11}


def test_checkpoint_offsets_are_keyed_by_topic_partition_whichever_key_they_were_written_with(tmp_path) -> None:
    cp = OffsetCheckpoint(tmp_path / ".checkpoint")
    cp.write_store_offsets({TopicPartition("app-a-changelog", 3): 41}, [{("in", 3): 10}])
    offsets = cp.read()
    assert offsets == {TopicPartition("app-a-changelog", 3): 41, TopicPartition("in", 3): 9}
    assert all(type(tp) is TopicPartition for tp in offsets)
    assert {tp.topic for tp in offsets} == {"app-a-changelog", "in"}
