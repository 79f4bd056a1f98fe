"""Topic partitions and offset ranges: the Kafka vocabulary every other package speaks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["InputRange", "TopicPartition"]


class TopicPartition(NamedTuple):
    """One partition of one topic (a tuple, so it keys dicts and pickles as cheaply as one)."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


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
