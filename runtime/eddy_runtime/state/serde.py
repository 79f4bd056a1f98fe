"""Serdes at the edge of a state store: user objects in, bytes inside.

Stores, transactions and changelogs only ever see bytes; a `Serde` turns a user's key or value
into bytes and back. `StoreSpec` (store_spec.py) names one by string (``bytes``, ``string``, ``json``,
``int64``) so a spec stays a plain, picklable value that the driver can ship to executors.
The int64 encoding is Kafka's ``LongSerializer`` (8 bytes, big-endian, signed), so a Kafka
Streams or Java consumer reads Eddy's changelogs and outputs as they are (docs/DESIGN.md,
"Vocabulary").
"""

from __future__ import annotations

import json
import re
import struct
from typing import Any, Protocol

import orjson

__all__ = [
    "INT64",
    "BytesSerde",
    "Int64Serde",
    "JsonSerde",
    "Serde",
    "SerdeError",
    "StringSerde",
    "serde_for",
    "value_serde_for",
]


class SerdeError(ValueError):
    """A key or value could not be (de)serialised; the message names the serde and the value."""


class Serde(Protocol):
    name: str

    def serialize(self, obj: Any) -> bytes: ...

    def deserialize(self, data: bytes) -> Any: ...


class BytesSerde:
    """Pass-through for callers that already hold bytes."""

    name = "bytes"

    def serialize(self, obj: Any) -> bytes:
        if isinstance(obj, bytes):
            return obj
        if isinstance(obj, bytearray | memoryview):
            return bytes(obj)
        raise SerdeError(f"bytes serde expects bytes, got {type(obj).__name__}: {obj!r:.80}")

    def deserialize(self, data: bytes) -> bytes:
        return data


class StringSerde:
    """UTF-8 text."""

    name = "string"

    def serialize(self, obj: Any) -> bytes:
        if not isinstance(obj, str):
            raise SerdeError(f"string serde expects str, got {type(obj).__name__}: {obj!r:.80}")
        return obj.encode()

    def deserialize(self, data: bytes) -> str:
        return data.decode()


#: a run of digits that may be an integer beyond 64 bits
_LONG_DIGITS = re.compile(rb"[0-9]{19}")


class JsonSerde:
    """Compact JSON with sorted keys, so equal objects give equal bytes (and equal store keys)."""

    name = "json"

    def serialize(self, obj: Any) -> bytes:
        try:
            return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()
        except (TypeError, ValueError) as e:
            raise SerdeError(f"json serde cannot encode {type(obj).__name__}: {e}") from e

    def deserialize(self, data: bytes) -> Any:
        # orjson reads the same values four times as fast as json. json reads what orjson refuses
        # (NaN and Infinity, which json writes; lone surrogates) and any text with 19 digits in a
        # row, as orjson reads an integer beyond 64 bits as a float.
        if _LONG_DIGITS.search(data) is None:
            try:
                return orjson.loads(data)
            except orjson.JSONDecodeError:
                pass
        return json.loads(data)


#: orjson's options for `JsonValueSerde`: what json.dumps refuses (dataclasses, datetimes) orjson
#: refuses too, and subclasses of str, int, dict and list go to json.dumps as before
_ORJSON_WRITE = (orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
                 | orjson.OPT_PASSTHROUGH_SUBCLASS)


class JsonValueSerde(JsonSerde):
    """`JsonSerde` for a store's values, written with orjson: six times as fast as json (0.3 against
    2.0 us for q4's auction in bench/nexmark.py), the same JSON text but for the spelling of
    non-ASCII characters and of some floats (``1e16`` for ``1e+16``), which read back equal. Keys
    stay with `JsonSerde`: a key's bytes must be the ones an older version wrote. json writes
    what orjson refuses (integers beyond 64 bits, keys that are not strings, lone surrogates) and
    what orjson would change: it writes NaN and Infinity as null, so a text with a null is read
    back and kept only if it gives the same object."""

    def serialize(self, obj: Any) -> bytes:
        try:
            out = orjson.dumps(obj, option=_ORJSON_WRITE)
        except TypeError:
            return super().serialize(obj)
        if b"null" in out and orjson.loads(out) != obj:
            return super().serialize(obj)
        return out


#: Kafka's LongSerializer encoding; stores use it for their offsets and window starts too
INT64 = struct.Struct(">q")


class Int64Serde:
    """Signed 64-bit big-endian, as Kafka's LongSerializer writes it."""

    name = "int64"

    def serialize(self, obj: Any) -> bytes:
        if isinstance(obj, bool) or not isinstance(obj, int):
            raise SerdeError(f"int64 serde expects int, got {type(obj).__name__}: {obj!r:.80}")
        try:
            return INT64.pack(obj)
        except struct.error as e:
            raise SerdeError(f"int64 serde: {obj} does not fit in 64 bits") from e

    def deserialize(self, data: bytes) -> int:
        if len(data) != 8:
            raise SerdeError(f"int64 serde expects 8 bytes, got {len(data)}")
        return int(INT64.unpack(data)[0])


_SERDES: dict[str, Serde] = {
    s.name: s for s in (BytesSerde(), StringSerde(), JsonSerde(), Int64Serde())
}


_VALUE_SERDES: dict[str, Serde] = {**_SERDES, "json": JsonValueSerde()}


def value_serde_for(name: str) -> Serde:
    """The serde called `name` for a store's values, whose bytes need only read back equal
    (`JsonValueSerde` for ``json``)."""
    serde_for(name)  # an unknown name fails as it does for keys
    return _VALUE_SERDES[name]


def serde_for(name: str) -> Serde:
    """The serde called `name` (``bytes``, ``string``, ``json``, ``int64``)."""
    try:
        return _SERDES[name]
    except KeyError:
        raise SerdeError(f"unknown serde {name!r}; known: {', '.join(sorted(_SERDES))}") from None
