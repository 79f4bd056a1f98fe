"""`.checkpoint` files: a task's offsets in Kafka Streams' OffsetCheckpoint text format.

The authoritative offsets of a store live inside the store (its metadata column family, written
in the same RocksDB write batch as the data, see rocksdb_store.py). This file mirrors them so that tools,
and the operator's inventory of a volume (task_directory.py), can read a task's offsets without
opening RocksDB or taking the task's lock. `ProcessorStateManager` (manager.py) writes it after
restores, on commits (throttled) and on close (docs/DESIGN.md, "Vocabulary").

Format (version 0, as Kafka Streams writes it)::

    0
    <number of entries>
    <topic> <partition> <offset>
    ...

Every offset is Kafka Streams' "last record reflected in the store" offset: for each store's
changelog partition the offset of the last changelog record applied, and for each input
partition of the task the offset of the last input record whose effects the stores hold (one
less than the consumer position the store metadata keeps; absent while nothing was processed).
A reader tells the two apart by topic name (changelogs end in ``-changelog``).
Writes are atomic: a temporary file is written and fsynced, renamed over the old one, and the
directory is fsynced, so a crash leaves either the old or the new file, never a torn one.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from eddy_runtime.kafka.partitions import OffsetsByPartition, TopicPartition, topic_partition_offsets

__all__ = ["CHECKPOINT_FILE_NAME", "CheckpointError", "OffsetCheckpoint"]

CHECKPOINT_FILE_NAME = ".checkpoint"
_VERSION = 0


class CheckpointError(ValueError):
    """A checkpoint file exists but cannot be read; the message names the file and the line."""


class OffsetCheckpoint:
    """Reads and atomically writes one `.checkpoint` file of (topic, partition) -> offset."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def write(self, offsets: OffsetsByPartition) -> None:
        lines = [str(_VERSION), str(len(offsets))]
        for (topic, partition), offset in sorted(offsets.items()):
            if " " in topic or "\n" in topic:
                raise CheckpointError(f"topic name {topic!r} cannot be written to a checkpoint")
            lines.append(f"{topic} {int(partition)} {int(offset)}")
        data = ("\n".join(lines) + "\n").encode()
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        _fsync_dir(self.path.parent)

    def write_store_offsets(
        self, changelogs: OffsetsByPartition, input_positions: Iterable[OffsetsByPartition]
    ) -> None:
        """Write what stores hold: their changelog offsets as they are, and of the input positions
        (next offset to process) they reflect, the last record reflected (the highest, less one)."""
        offsets = topic_partition_offsets(changelogs)
        for positions in input_positions:
            for tp, pos in topic_partition_offsets(positions).items():
                if pos > 0:
                    offsets[tp] = max(offsets.get(tp, -1), pos - 1)
        self.write(offsets)

    def read(self) -> dict[TopicPartition, int]:
        """The offsets in the file; empty when there is no file."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        lines = text.splitlines()
        if len(lines) < 2:
            raise CheckpointError(f"{self.path}: truncated (expected a version and a count line)")
        try:
            version = int(lines[0])
            count = int(lines[1])
        except ValueError:
            raise CheckpointError(f"{self.path}: version and count must be integers") from None
        if version != _VERSION:
            raise CheckpointError(f"{self.path}: unknown checkpoint version {version}")
        entries = [line for line in lines[2:] if line.strip()]
        if len(entries) != count:
            raise CheckpointError(f"{self.path}: header says {count} entries, found {len(entries)}")
        offsets: dict[TopicPartition, int] = {}
        for n, line in enumerate(entries, start=3):
            parts = line.split()
            if len(parts) != 3:
                raise CheckpointError(f"{self.path}:{n}: expected 'topic partition offset': {line!r}")
            try:
                offsets[TopicPartition(parts[0], int(parts[1]))] = int(parts[2])
            except ValueError:
                raise CheckpointError(f"{self.path}:{n}: partition and offset must be integers") from None
        return offsets

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
