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
`PeriodicCheckpoint` writes a task's file every interval on one thread of the process's.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from eddy_runtime.kafka.partitions import OffsetsByPartition, TopicPartition, topic_partition_offsets

__all__ = ["CHECKPOINT_FILE_NAME", "CheckpointError", "CheckpointOffsets", "OffsetCheckpoint", "PeriodicCheckpoint"]

log = logging.getLogger(__name__)

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


_writer_lock = threading.Lock()
_writer: ThreadPoolExecutor | None = None


def _checkpoint_writer() -> ThreadPoolExecutor:
    """The process's one thread that writes periodic checkpoints: their two fsyncs (file and
    directory) would otherwise sit inside the commit of a continuous round (docs/DESIGN.md)."""
    global _writer
    with _writer_lock:
        if _writer is None:
            _writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="eddy-checkpoint")
        return _writer


#: what a checkpoint says: the logged stores' changelog offsets, and the input positions per store
CheckpointOffsets = tuple[dict[TopicPartition, int], list[dict[TopicPartition, int]]]


class PeriodicCheckpoint:
    """A task's `.checkpoint` file, written every interval on the process's writer thread
    (`_checkpoint_writer`), off the commit's path; none while the last one is still being
    written, and a write now (`write_now`) waits for it first."""

    def __init__(self, file: OffsetCheckpoint, interval_s: float, offsets: Callable[[], CheckpointOffsets],
                 context: str) -> None:
        self._file = file
        self._interval_s = interval_s
        self._offsets = offsets
        self._ctx = context
        self._last = 0.0
        #: the periodic checkpoint being written (`maybe_write`); at most one at a time
        self._writing: Future[None] | None = None

    def maybe_write(self) -> None:
        """The offsets as of now handed to the writer thread, if an interval has passed."""
        if time.monotonic() - self._last < self._interval_s:
            return
        if self._writing is not None and not self._writing.done():
            return
        changelogs, inputs = self._offsets()
        self._writing = _checkpoint_writer().submit(self._write_quietly, changelogs, inputs)
        self._last = time.monotonic()

    def _write_quietly(self, changelogs: dict[TopicPartition, int], inputs: list[dict[TopicPartition, int]]) -> None:
        try:
            self._file.write_store_offsets(changelogs, inputs)
        except Exception:  # noqa: BLE001 - the next one is written an interval later, or at close
            log.exception("%s: writing the checkpoint failed", self._ctx)

    def wait(self) -> None:
        """Wait for the periodic checkpoint being written, if any (a later write must not race it)."""
        if self._writing is not None:
            self._writing.result()
            self._writing = None

    def write_now(self) -> None:
        """The offsets as of now written on this thread (atomic), after the one under way."""
        self.wait()
        self._file.write_store_offsets(*self._offsets())
        self._last = time.monotonic()
