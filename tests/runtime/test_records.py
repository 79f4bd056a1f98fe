"""Kafka records <-> Arrow columns: serdes, bad records, repartition values (pure)."""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest

from eddy_runtime.kafka.partitions import TopicPartition
from eddy_runtime.kafka.records import (
    RAW_TEXT,
    RawRecords,
    decode_column,
    decode_repartition,
    decode_source,
    decode_value,
    encode_column,
    raw_values,
)

pytestmark = pytest.mark.unit


def test_strings_decode_in_one_go_and_invalid_utf8_is_a_bad_record_not_an_error():
    values, bad = decode_column([b"ok", b"\xff\xfe", None, b"fine"], "string")
    assert values.to_pylist() == ["ok", None, None, "fine"]
    assert list(bad) == [1] and "invalid UTF-8" in bad[1]


def test_int64_values_must_be_eight_bytes():
    values, bad = decode_column([struct.pack(">q", -5), b"\x01", struct.pack(">q", 7)], "int64")
    assert values.to_pylist() == [-5, None, 7]
    assert "8 bytes" in bad[1]


def test_json_values_are_checked_but_kept_as_text():
    values, bad = decode_column([b'{"a": 1}', b"{nope"], "json")
    assert values.to_pylist()[0] == '{"a": 1}'
    assert list(bad) == [1]


@pytest.mark.parametrize("serde, raws", [
    ("string", [b"ok", b"\xff\xfe", b"", "caf\u00e9".encode()]),
    ("json", [b'{"a": 1}', b"{nope", b"3", b"\xff", b'"text"', b""]),
    ("int64", [struct.pack(">q", -5), b"\x01", b""]),
    ("bytes", [b"\x00\xff", b""]),
])
def test_one_value_decodes_as_a_column_of_it_does(serde: str, raws: list[bytes]) -> None:
    for raw in raws:
        assert decode_value(raw, serde) == decode_column([raw], serde)[0].to_pylist()[0], raw


def test_a_source_table_leaves_bad_records_out_and_names_their_offsets():
    raw = RawRecords("t", 3, keys=[b"k1", b"k2", b"k3"], values=[b"a", b"\xff", b"c"], offsets=[10, 11, 12],
                     timestamps=[1_000, 2_000, 3_000])
    table, bad = decode_source(raw, "string", "string")
    assert table.column("offset").to_pylist() == [10, 12]
    assert table.column("partition").to_pylist() == [3, 3]
    assert [(b.offset, b.key, b.value, b.stage) for b in bad] == [(11, b"k2", b"\xff", "deserialize")]


def test_raw_records_name_their_topic_partition():
    assert RawRecords("t", 3).topic_partition == TopicPartition("t", 3)


def test_repartition_rows_come_back_as_columns():
    raw = RawRecords("r", 0, keys=[b"x", b"y"], values=[b'{"n": 1, "s": "a"}', None], offsets=[0, 1],
                     timestamps=[5, 6])
    table, bad = decode_repartition(raw, "string", None, None)
    assert not bad
    assert table.column("key").to_pylist() == ["x", "y"]
    assert table.column("n").to_pylist() == [1, None]


def test_columns_encode_with_kafkas_serializers():
    assert encode_column(pa.array([1, None]), "int64") == [struct.pack(">q", 1), None]
    assert encode_column(pa.array(["é"]), "string") == ["é".encode()]
    assert encode_column(pa.array([3]), "string") == [b"3"]
    assert encode_column(pa.array([{"a": 1}]), "json") == [b'{"a":1}']


def test_a_lone_text_value_crosses_a_repartition_as_its_own_bytes():
    texts = ['{"auction": 7, "price": 12}', 'quotes " and \\ and é', ""]
    values = raw_values(pa.array(texts))
    assert values == [RAW_TEXT + t.encode() for t in texts]
    raw = RawRecords("r", 0, keys=[b"a", b"b", b"c"], values=values, offsets=[0, 1, 2], timestamps=[1, 2, 3])
    table, bad = decode_repartition(raw, "string", None, None)
    assert not bad
    assert table.column("value").to_pylist() == texts
    assert table.column("value").type == pa.string()


def test_other_values_cross_a_repartition_as_json_rows():
    assert raw_values(pa.array(["a", None])) is None  # a null value: a JSON row says so
    assert raw_values(pa.array([1, 2])) is None
    assert raw_values(pa.array([b"\x00"], pa.binary())) is None


def test_json_rows_and_raw_values_read_together_and_bad_text_is_a_bad_record():
    # as while an app upgrades: records of the version before (JSON rows) and of the new one
    raw = RawRecords("r", 0, keys=[b"a", b"b", b"c"], values=[b'{"value": "old"}', RAW_TEXT + b"new",
                                                               RAW_TEXT + b"\xff"], offsets=[0, 1, 2],
                     timestamps=[1, 2, 3])
    table, bad = decode_repartition(raw, "string", None, None)
    assert table.column("value").to_pylist() == ["old", "new"]
    assert [(b.offset, b.value) for b in bad] == [(2, RAW_TEXT + b"\xff")]
    alone = RawRecords("r", 0, keys=[b"a", b"b"], values=[RAW_TEXT + b"ok", RAW_TEXT + b"\xff"], offsets=[0, 1],
                       timestamps=[1, 2])
    table, bad = decode_repartition(alone, "string", None, None)
    assert table.column("value").to_pylist() == ["ok"]
    assert [b.offset for b in bad] == [1]
