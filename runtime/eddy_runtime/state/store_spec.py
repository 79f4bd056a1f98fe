"""What a state store is and where it stands: `StoreSpec`, `StoreOffsets`, `StoreSize`.

Plain values: the driver builds `StoreSpec`s (dsl/compiler.py) and ships them to executors, where
`stores.open_store` opens the store a spec names; `StoreOffsets` is what a store's metadata says
it holds (rocksdb_store.py). Vocabulary: docs/DESIGN.md, "Vocabulary".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from eddy_runtime.kafka.partitions import TopicPartition
from eddy_runtime.state.serde import serde_for

__all__ = ["InputOffsets", "StoreOffsets", "StoreSize", "StoreSpec"]

#: consumer positions (next offset to process) per input partition
InputOffsets = Mapping[TopicPartition, int]


@dataclass(frozen=True)
class StoreSpec:
    """What a store is: its name, kind, serdes and (for windows and sessions) size and retention.

    A plain picklable value: the driver builds it and ships it to executors.
    """

    name: str
    kind: Literal["key_value", "window", "session"] = "key_value"
    key_serde: str = "bytes"
    value_serde: str = "bytes"
    window_size_ms: int | None = None
    retention_ms: int | None = None
    #: width of a window (or session) store's time segments; Kafka Streams' default max(retention / 2, 60 s)
    segment_interval_ms: int | None = None
    #: False for a store without a changelog (not restorable; for caches and tests)
    logged: bool = True

    @classmethod
    def key_value(cls, name: str, key_serde: str = "bytes", value_serde: str = "bytes") -> StoreSpec:
        return cls(name=name, kind="key_value", key_serde=key_serde, value_serde=value_serde)

    @classmethod
    def window(
        cls,
        name: str,
        window_size_ms: int,
        retention_ms: int,
        key_serde: str = "bytes",
        value_serde: str = "bytes",
        segment_interval_ms: int | None = None,
    ) -> StoreSpec:
        return cls(
            name=name,
            kind="window",
            key_serde=key_serde,
            value_serde=value_serde,
            window_size_ms=window_size_ms,
            retention_ms=retention_ms,
            segment_interval_ms=segment_interval_ms,
        )

    @classmethod
    def session(
        cls,
        name: str,
        retention_ms: int,
        key_serde: str = "bytes",
        value_serde: str = "bytes",
        segment_interval_ms: int | None = None,
    ) -> StoreSpec:
        """A session store (session_store.py): sessions kept until their end is `retention_ms`
        behind stream time (at least inactivity gap + grace)."""
        return cls(name=name, kind="session", key_serde=key_serde, value_serde=value_serde,
                   retention_ms=retention_ms, segment_interval_ms=segment_interval_ms)

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name or self.name.startswith("."):
            raise ValueError(f"store name {self.name!r} must be a plain, non-hidden folder name")
        serde_for(self.key_serde)
        serde_for(self.value_serde)
        if self.kind == "window":
            if not self.window_size_ms or self.window_size_ms <= 0:
                raise ValueError(f"window store {self.name!r} needs window_size_ms > 0")
            if self.retention_ms is None or self.retention_ms < self.window_size_ms:
                raise ValueError(f"window store {self.name!r} needs retention_ms >= window_size_ms")
        elif self.kind == "session":
            if self.retention_ms is None or self.retention_ms <= 0:
                raise ValueError(f"session store {self.name!r} needs retention_ms > 0")
        elif self.kind != "key_value":
            raise ValueError(f"store {self.name!r}: unknown kind {self.kind!r}")

    @property
    def segment_interval(self) -> int:
        if self.segment_interval_ms:
            return self.segment_interval_ms
        return max((self.retention_ms or 0) // 2, 60_000)

    def window_start(self, timestamp_ms: int) -> int:
        """Start of the tumbling window of `window_size_ms` that holds `timestamp_ms`."""
        assert self.window_size_ms
        return timestamp_ms - timestamp_ms % self.window_size_ms


@dataclass(frozen=True)
class StoreOffsets:
    """Where a store is: the last changelog offset it holds and the input positions it reflects.

    `changelog_offset` is Kafka Streams' checkpoint offset (the last changelog record applied;
    None when none was). `input_offsets` are consumer positions (next offset to process).
    """

    changelog_offset: int | None
    input_offsets: InputOffsets = field(default_factory=dict)
    #: a window or session store's stream time (newest record timestamp seen); None for key-value stores
    stream_time: int | None = None


@dataclass(frozen=True)
class StoreSize:
    """RocksDB's own estimates (cheap: no scan)."""

    keys: int
    bytes: int
