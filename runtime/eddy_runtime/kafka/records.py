"""Kafka records <-> Arrow tables: reading an offset range, serdes by column, output records.

Everything the runtime reads from Kafka becomes a `pyarrow.Table` as early as possible, and
everything it writes is built column by column from one, so that per-record Python work is
limited to what confluent-kafka's API needs (one call per message in and out).

Columns of a source topic's table: ``key``, ``value`` (typed by the serdes: ``string`` and
``json`` -> string, ``bytes`` -> binary, ``int64`` -> int64), ``topic``, ``partition``,
``offset`` and ``timestamp`` (microseconds, UTC; what Spark's TimestampType maps to).

Records that cannot be deserialized become `BadRecord`s; the caller applies the app's
bad-record policy (processing/bad_records.py).
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eddy_runtime.kafka import client as kafka_client
from eddy_runtime.kafka.client import KafkaClientConfig
from eddy_runtime.kafka.partitions import InputRange, TopicPartition
from eddy_runtime.kafka.record_collector import OutputRecord

__all__ = [
    "BadRecord",
    "RangeReader",
    "RawRecords",
    "arrow_type",
    "decode_column",
    "decode_value",
    "encode_column",
    "source_schema",
    "spark_source_schema",
    "timestamps_ms",
]

_INT64 = struct.Struct(">q")
TS_TYPE = pa.timestamp("us", tz="UTC")


@dataclass
class RawRecords:
    """Messages of one topic partition, as confluent-kafka gave them, column by column."""

    topic: str
    partition: int
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    #: the position after the range: the range's end (markers and aborted records included)
    next_offset: int = 0

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True)
class BadRecord:
    """A record the runtime could not handle, with what went wrong."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    error: str
    stage: str  # "deserialize" or "process"


def arrow_type(serde: str) -> pa.DataType:
    return {"string": pa.string(), "json": pa.string(), "bytes": pa.binary(), "int64": pa.int64()}[serde]


def _spark_type(serde: str) -> str:
    return {"string": "string", "json": "string", "bytes": "binary", "int64": "bigint"}[serde]


def source_schema(key_serde: str, value_serde: str) -> pa.Schema:
    return pa.schema([
        ("key", arrow_type(key_serde)),
        ("value", arrow_type(value_serde)),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", TS_TYPE),
    ])


def spark_source_schema(key_serde: str, value_serde: str) -> str:
    """The DDL of `source_schema` for ``mapInArrow``."""
    return (f"key {_spark_type(key_serde)}, value {_spark_type(value_serde)}, topic string, partition int, "
            "offset bigint, timestamp timestamp")


# -- reading ----------------------------------------------------------------------------------


class RangeReader:
    """Reads offset ranges with one long-lived consumer (per process and bootstrap).

    ``read_committed``: under exactly-once, records of aborted transactions are never seen, and
    the range end the driver planned is a last stable offset.
    """

    def __init__(self, kafka: KafkaClientConfig | str) -> None:
        conf: dict[str, Any] = {
            "group.id": "eddy-range-reader",  # never commits; librdkafka wants a group id
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "fetch.max.bytes": 64 << 20,
            "max.partition.fetch.bytes": 16 << 20,
            "fetch.wait.max.ms": 50,
            "fetch.queue.backoff.ms": 10,  # not 1 s after a full queue: executor/input_poller.py
        }
        self._consumer = kafka_client.consumer(kafka, conf)

    def read(self, rng: InputRange, timeout_s: float = 30.0) -> RawRecords:
        """Every record of ``[start, end)`` (end: what the driver planned)."""
        from confluent_kafka import KafkaError
        from confluent_kafka import TopicPartition as KafkaTopicPartition  # with an offset; ours has none

        out = RawRecords(rng.topic, rng.partition, next_offset=rng.end)
        if rng.empty:
            return out
        c = self._consumer
        c.assign([KafkaTopicPartition(rng.topic, rng.partition, rng.start)])
        keys, values, offsets, stamps = out.keys, out.values, out.offsets, out.timestamps
        deadline = time.monotonic() + timeout_s
        end = rng.end
        last = rng.start - 1
        try:
            while last < end - 1:
                # A short wait: consume() holds out for num_messages, and when the range ends
                # with transaction markers fewer records than offsets remain.
                msgs = c.consume(num_messages=min(100_000, max(end - last, 1)), timeout=0.02)
                for m in msgs:
                    err = m.error()
                    off = m.offset()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            # What the broker has ends here: markers or aborted records were left.
                            if off is not None and off >= end:
                                last = end - 1
                            continue
                        raise RuntimeError(f"reading {rng.topic}[{rng.partition}]: {err}")
                    if off is None:  # a fetched record always has one; the client's types allow None
                        raise RuntimeError(f"reading {rng.topic}[{rng.partition}]: a record without an offset")
                    if off >= end:
                        last = end - 1
                        break
                    keys.append(m.key())
                    values.append(m.value())
                    offsets.append(off)
                    stamps.append(m.timestamp()[1])
                    last = off
                if last < end - 1 and time.monotonic() > deadline:
                    raise TimeoutError(
                        f"reading {rng.topic}[{rng.partition}] [{rng.start}, {end}) timed out at offset "
                        f"{last + 1} after {timeout_s}s"
                    )
        finally:
            c.unassign()
        return out

    def close(self) -> None:
        self._consumer.close()


_readers: dict[KafkaClientConfig, RangeReader] = {}


def range_reader(kafka: KafkaClientConfig | str) -> RangeReader:
    """This process's reader for the app's Kafka (Python workers and task runners live long)."""
    key = KafkaClientConfig.of(kafka)
    reader = _readers.get(key)
    if reader is None:
        reader = _readers[key] = RangeReader(key)
    return reader


# -- deserializing ------------------------------------------------------------------------------


def decode_column(raw: Sequence[bytes | None], serde: str) -> tuple[pa.Array, dict[int, str]]:
    """Raw bytes -> an Arrow array of the serde's type; bad positions -> error (value set null)."""
    if serde == "bytes":
        return pa.array(raw, pa.binary()), {}
    if serde == "int64":
        bad = {i: f"int64 serde expects 8 bytes, got {len(b)}" for i, b in enumerate(raw)
               if b is not None and len(b) != 8}
        if not bad and None not in raw:
            return pa.array(np.frombuffer(b"".join(raw), dtype=">i8").astype(np.int64)), {}  # type: ignore[arg-type]
        return pa.array([None if (b is None or i in bad) else _INT64.unpack(b)[0] for i, b in enumerate(raw)],
                        pa.int64()), bad
    binary = pa.array(raw, pa.binary())
    try:
        strings = binary.cast(pa.string())
        bad = {}
    except pa.ArrowInvalid:
        bad = {}
        fixed: list[str | None] = []
        for i, b in enumerate(raw):
            try:
                fixed.append(None if b is None else b.decode())
            except UnicodeDecodeError as e:
                bad[i] = f"string serde: invalid UTF-8 ({e.reason} at byte {e.start})"
                fixed.append(None)
        strings = pa.array(fixed, pa.string())
    if serde == "json":
        loads = json.loads
        for i, s in enumerate(strings.to_pylist()):
            if s is None or i in bad:
                continue
            try:
                loads(s)
            except ValueError as e:
                bad[i] = f"json serde: {e}"
    elif serde != "string":
        raise ValueError(f"unknown serde {serde!r}")
    return strings, bad


def decode_value(raw: bytes, serde: str) -> Any:
    """One value as `decode_column` gives it, without an Arrow array for it: a join reads stored
    values one at a time, and an array per value cost 20-30 us (12% of the task runner in
    bench/nexmark.py's q8). None where the column has null (bad UTF-8, an int64 not of 8 bytes); a
    json value is its text, as in the column, which keeps the text of a value that does not parse
    and only reports it."""
    if serde == "bytes":
        return raw
    if serde == "int64":
        return _INT64.unpack(raw)[0] if len(raw) == 8 else None
    if serde not in ("string", "json"):
        raise ValueError(f"unknown serde {serde!r}")
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return None


def decode_source(raw: RawRecords, key_serde: str, value_serde: str) -> tuple[pa.Table, list[BadRecord]]:
    """A source topic's records as a table (`source_schema`), and the records that failed."""
    keys, bad_k = decode_column(raw.keys, key_serde)
    values, bad_v = decode_column(raw.values, value_serde)
    n = len(raw)
    table = pa.table(
        [
            keys,
            values,
            pa.array([raw.topic] * n, pa.string()) if n else pa.array([], pa.string()),
            pa.array(np.full(n, raw.partition, dtype=np.int32)),
            pa.array(np.asarray(raw.offsets, dtype=np.int64)),
            pa.array(np.asarray(raw.timestamps, dtype=np.int64) * 1000, pa.int64()).cast(TS_TYPE),
        ],
        schema=source_schema(key_serde, value_serde),
    )
    return _split_bad(table, raw, {**bad_k, **{i: e for i, e in bad_v.items() if i not in bad_k}})


def _split_bad(table: pa.Table, raw: RawRecords, bad: dict[int, str]) -> tuple[pa.Table, list[BadRecord]]:
    if not bad:
        return table, []
    records = [
        BadRecord(raw.topic, raw.partition, raw.offsets[i], raw.timestamps[i], raw.keys[i], raw.values[i], err,
                  "deserialize")
        for i, err in sorted(bad.items())
    ]
    keep = np.ones(len(raw), dtype=bool)
    keep[list(bad)] = False
    return table.filter(pa.array(keep)), records


def decode_repartition(raw: RawRecords, key_serde: str, combined: str | None,
                       combined_column: str | None) -> tuple[pa.Table, list[BadRecord]]:
    """A repartition topic's records: ``key``, the upstream's value columns, ``timestamp``.

    Values are JSON objects of the upstream row's columns (null when it had none besides the
    key), or the `value` column's own bytes behind a marker (`raw_values`), or, for a combined
    repartition, the per-key partial result in column ``__partial``.
    """
    keys, bad = decode_column(raw.keys, key_serde)
    ts = pa.array(np.asarray(raw.timestamps, dtype=np.int64) * 1000, pa.int64()).cast(TS_TYPE)
    cols: dict[str, Any] = {"key": keys}
    if combined == "count":
        partial, bad_v = decode_column(raw.values, "int64")
        bad.update({i: e for i, e in bad_v.items() if i not in bad})
        cols["__partial"] = partial
    elif combined is None and (value := _raw_value_column(raw.values)) is not None:
        cols["value"] = value
    else:
        rows: list[Any] = []
        loads = json.loads
        for i, v in enumerate(raw.values):
            if v is None:
                rows.append({})
                continue
            try:
                obj = loads(v) if v[:1] != RAW_TEXT else {"value": v[1:].decode()}
            except ValueError as e:  # UnicodeDecodeError is one
                bad.setdefault(i, f"repartition value is not {'UTF-8' if v[:1] == RAW_TEXT else 'JSON'}: {e}")
                obj = {}
            rows.append(obj if isinstance(obj, dict) else {"value": obj})
        if combined is not None:
            cols["__partial"] = pa.array([r.get(combined_column or "value") for r in rows])
        else:
            names = list(dict.fromkeys(k for r in rows for k in r))
            for name in names:
                if name in ("key", "timestamp"):
                    continue
                cols[name] = pa.array([r.get(name) for r in rows])
    cols["timestamp"] = ts
    cols["offset"] = pa.array(np.asarray(raw.offsets, dtype=np.int64))
    return _split_bad(pa.table(cols), raw, bad)


# -- serializing --------------------------------------------------------------------------------


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "isoformat"):
        return obj.isoformat()
    if isinstance(obj, bytes):
        return obj.decode("utf-8", "replace")
    return str(obj)


#: compact JSON with `_json_default`: one encoder for every value (``json.dumps`` with any argument
#: builds a new encoder per call, a third of the time of a 300-byte record's encoding)
_encode_json = json.JSONEncoder(default=_json_default, separators=(",", ":")).encode


def encode_column(col: pa.Array | pa.ChunkedArray, serde: str | None) -> list[bytes | None]:
    """An Arrow column -> one bytes value per row (None for nulls)."""
    if serde is None:
        return [None] * len(col)
    t = col.type
    if serde == "int64":
        if not (pa.types.is_integer(t) or pa.types.is_boolean(t)):
            col = pc.cast(col, pa.int64())
        values = col.to_pylist()
        pack = _INT64.pack
        return [None if v is None else pack(int(v)) for v in values]
    if serde in ("string", "bytes"):
        if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)):
            if serde == "bytes":
                raise TypeError(f"bytes serde needs a binary column, got {t}")
            col = pc.cast(col, pa.string())
        encoded: list[bytes | None] = pc.cast(col, pa.binary()).to_pylist()
        return encoded
    if serde == "json":
        encode = _encode_json
        return [None if v is None else encode(v).encode() for v in col.to_pylist()]
    raise ValueError(f"unknown serde {serde!r}")


#: the first byte of a repartition value that is its row's text `value` column itself
#: (`raw_values`); a JSON document never starts with it
RAW_TEXT = b"\x00"


def raw_values(column: pa.Array | pa.ChunkedArray) -> list[bytes | None] | None:
    """A repartition's values when a row's only column besides its key is a text `value`
    without nulls: its UTF-8 bytes behind `RAW_TEXT`, as Kafka Streams writes a repartition value
    with its serde, instead of a JSON object with one string in it (encoded with every quote
    escaped, and decoded back, on every hop). None otherwise (the rows go as JSON objects)."""
    if column.null_count or not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        return None
    binary = column.cast(pa.binary())
    prefixed = pc.binary_join_element_wise(pa.scalar(RAW_TEXT, pa.binary()), binary, pa.scalar(b"", pa.binary()))
    return prefixed.to_pylist()  # type: ignore[no-any-return]


def _raw_value_column(values: Sequence[bytes | None]) -> pa.Array | None:
    """The `value` column of repartition records that are all valid `raw_values`, in one go.
    None otherwise: JSON rows, a mix of both (as while an app upgrades), or bad UTF-8 go the
    record-by-record way, which reads both and makes a bad record of what it cannot read."""
    binary = pa.array(values, pa.binary())
    if not len(binary) or binary.null_count:
        return None
    if not pc.all(pc.equal(pc.binary_slice(binary, 0, 1), pa.scalar(RAW_TEXT, pa.binary()))).as_py():
        return None
    try:
        return pc.binary_slice(binary, 1).cast(pa.string())
    except pa.ArrowInvalid:
        return None


def encode_rows(table: pa.Table, columns: Sequence[str]) -> list[bytes | None]:
    """Rows of `columns` as JSON objects; None for a row set when `columns` is empty."""
    if not columns:
        return [None] * table.num_rows
    encode = _encode_json
    return [encode(r).encode() for r in table.select(list(columns)).to_pylist()]


def timestamps_ms(table: pa.Table) -> np.ndarray | None:
    """The ``timestamp`` column in epoch milliseconds (None when the table has none)."""
    if "timestamp" not in table.column_names:
        return None
    col = table.column("timestamp")
    t = col.type
    now_ms = int(time.time() * 1000)
    if pa.types.is_timestamp(t):
        per_ms = {"s": 0.001, "ms": 1, "us": 1000, "ns": 1_000_000}[t.unit]
        raw: np.ndarray = pc.fill_null(pc.cast(col, pa.int64()), int(now_ms * per_ms)).to_numpy(zero_copy_only=False)
        return raw.astype(np.int64) if per_ms == 1 else (raw / per_ms).astype(np.int64)
    if pa.types.is_integer(t):  # epoch milliseconds
        ms: np.ndarray = pc.fill_null(pc.cast(col, pa.int64()), now_ms).to_numpy(zero_copy_only=False)
        return ms.astype(np.int64)
    return None


def output_records(topic: str, keys: list[bytes | None], values: list[bytes | None],
                   stamps: np.ndarray | None) -> list[OutputRecord]:
    """One `OutputRecord` to `topic` per key, value and timestamp (ms; None: the producer's clock)."""
    if len(keys) != len(values) or (stamps is not None and len(stamps) != len(keys)):
        raise ValueError(f"{len(keys)} keys, {len(values)} values, {None if stamps is None else len(stamps)} stamps")
    # tuple.__new__ over zipped fields: no Python frame per record (the named tuple's own __new__
    # is one), on a path that every output record of every batch takes
    fields = zip(repeat(topic), keys, values, repeat(None), repeat(None),
                 repeat(None) if stamps is None else stamps.tolist())
    return list(map(tuple.__new__, repeat(OutputRecord), fields))
