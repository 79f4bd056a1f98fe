"""Topic partitions and offset ranges: the Kafka vocabulary every other package speaks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple, TypeAlias

__all__ = ["InputRange", "OffsetsByPartition", "TopicPartition", "topic_partition_offsets"]


class TopicPartition(NamedTuple):
    """One partition of one topic (a tuple, so it keys dicts and pickles as cheaply as one)."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


#: Offsets per partition as a function takes them. A `TopicPartition` is equal to and hashes like
#: its plain ``(topic, partition)`` tuple, so a mapping keyed by either holds the same keys; the
#: function reads either, and returns `TopicPartition` keys (`topic_partition_offsets`).
OffsetsByPartition: TypeAlias = Mapping[TopicPartition, int] | Mapping[tuple[str, int], int]


def topic_partition_offsets(*offsets: OffsetsByPartition) -> dict[TopicPartition, int]:
    """The offsets of every mapping given, keyed by `TopicPartition` (a later mapping wins)."""
    out: dict[TopicPartition, int] = {}
    for mapping in offsets:
        pairs: Iterable[tuple[tuple[str, int], int]] = mapping.items()
        out.update((TopicPartition(*tp), offset) for tp, offset in pairs)
    return out


@dataclass(frozen=True)
class InputRange:
    """Offsets ``[start, end)`` of one topic partition (end: the last stable offset seen)."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def empty(self) -> bool:
        return self.end <= self.start

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)
