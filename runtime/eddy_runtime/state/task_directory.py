"""Task directories on a state volume: layout, the per-task lock, and the volume's inventory.

Layout (docs/DESIGN.md, "Vocabulary")::

    <stateDir>/<app>/<task>/rocksdb/<store>/   one RocksDB instance per task and store
    <stateDir>/<app>/<task>/.checkpoint        offsets mirror (checkpoint.py)
    <stateDir>/<app>/<task>/.lock              who holds the task (pid, host, since)

`TaskDirectory.lock` makes sure two processes never open one task's stores: an executor may run
a task in another Python worker than last time while the old worker still holds it. The lock is
an ``flock`` on ``.lock``, so the kernel releases it when its holder dies (even by SIGKILL) and a
crash never leaves a stale lock behind. `ProcessorStateManager` (manager.py) takes it first.

`StateDirectory.inventory` lists which tasks and stores a volume holds and their offsets, read
from the ``.checkpoint`` files without opening RocksDB or taking locks. Executors report it to
the driver, which publishes it in the runtime state (driver/runtime_state.py) so that the
operator's assignor places tasks on the executor with the freshest copy.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_fixed

from eddy_contract.tasks import TaskId
from eddy_runtime.kafka.partitions import TopicPartition
from eddy_runtime.state.changelog import CHANGELOG_SUFFIX, changelog_topic_name
from eddy_runtime.state.checkpoint import CHECKPOINT_FILE_NAME, CheckpointError, OffsetCheckpoint

__all__ = [
    "LockHolder",
    "StateDirectory",
    "StoreInventory",
    "TaskDirectory",
    "TaskDirectoryLocked",
    "TaskInventory",
    "TaskLock",
]

LOCK_FILE_NAME = ".lock"
ROCKSDB_DIR_NAME = "rocksdb"


@dataclass(frozen=True)
class LockHolder:
    """The process that holds a task directory's lock."""

    pid: int
    host: str
    since: float  # epoch seconds

    def __str__(self) -> str:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.since))
        return f"pid {self.pid} on host {self.host} (since {when})"


class TaskDirectoryLocked(RuntimeError):
    """Another process holds the task directory; `holder` says which (None if it did not say)."""

    def __init__(self, path: Path, holder: LockHolder | None) -> None:
        who = str(holder) if holder else "another process (which has not written its name yet)"
        super().__init__(f"task directory {path} is locked by {who}; two processes must never open "
                         f"one task's stores")
        self.path = path
        self.holder = holder


class TaskLock:
    """A held task-directory lock; release it (or leave the `with` block) to let others in."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is not None:
            # Empty the file first so a reader never names a holder that has gone.
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> TaskLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        if self._fd is not None:
            os.close(self._fd)


class TaskDirectory:
    """One task's folder on a state volume."""

    def __init__(self, state_dir: str | os.PathLike[str], app: str, task_id: str) -> None:
        self.state_dir = Path(state_dir)
        self.app = app
        self.task_id = task_id
        self.path = self.state_dir / app / task_id

    @property
    def rocksdb_dir(self) -> Path:
        return self.path / ROCKSDB_DIR_NAME

    def store_path(self, store: str) -> Path:
        return self.rocksdb_dir / store

    @property
    def checkpoint(self) -> OffsetCheckpoint:
        return OffsetCheckpoint(self.path / CHECKPOINT_FILE_NAME)

    @property
    def lock_path(self) -> Path:
        return self.path / LOCK_FILE_NAME

    def lock(self, timeout: float = 0.0, poll_interval: float = 0.05) -> TaskLock:
        """Take the task's lock, waiting up to `timeout` seconds; `TaskDirectoryLocked` if held."""
        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            for attempt in Retrying(retry=retry_if_exception(_held_elsewhere), stop=stop_after_delay(timeout),
                                    wait=wait_fixed(poll_interval), reraise=True):
                with attempt:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if _held_elsewhere(e):
                raise TaskDirectoryLocked(self.path, self.holder()) from None
            raise
        me = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
        return TaskLock(self.lock_path, fd)

    def holder(self) -> LockHolder | None:
        """Who holds the lock now, or None when nobody does."""
        try:
            fd = os.open(self.lock_path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            try:
                # A shared lock is granted only when nobody holds the exclusive one.
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
                return None
            except OSError:
                pass
            raw = os.pread(fd, 4096, 0)
        finally:
            os.close(fd)
        try:
            d = json.loads(raw)
            return LockHolder(pid=int(d["pid"]), host=str(d["host"]), since=float(d["since"]))
        except (ValueError, KeyError, TypeError):
            return None

    def stores(self) -> list[str]:
        """Names of the stores with a RocksDB folder in this task directory."""
        if not self.rocksdb_dir.is_dir():
            return []
        return sorted(p.name for p in self.rocksdb_dir.iterdir() if p.is_dir())

    def wipe_store(self, store: str) -> None:
        """Delete one store's RocksDB folder (the caller holds the lock and has closed the store)."""
        shutil.rmtree(self.store_path(store), ignore_errors=True)


@dataclass(frozen=True)
class StoreInventory:
    """One store folder on a volume and its changelog offset (from the task's .checkpoint)."""

    name: str
    changelog_topic: str
    changelog_partition: int
    #: offset of the last changelog record the store holds; None when the checkpoint has none.
    changelog_offset: int | None
    size_bytes: int


@dataclass(frozen=True)
class TaskInventory:
    """One task directory on a volume."""

    app: str
    task_id: str
    path: str
    stores: tuple[StoreInventory, ...]
    #: (input partition, offset of the last input record reflected in the stores), sorted
    input_offsets: tuple[tuple[TopicPartition, int], ...]
    locked_by: LockHolder | None
    #: why the checkpoint could not be read, if it could not (offsets are then None)
    checkpoint_error: str | None = None


class StateDirectory:
    """A state volume's root: the task directories of every app on it."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.path = Path(state_dir)

    def task_directory(self, app: str, task_id: str) -> TaskDirectory:
        return TaskDirectory(self.path, app, task_id)

    def inventory(self, app: str | None = None) -> list[TaskInventory]:
        """Every task directory (of `app`, or of all apps) with its stores and offsets."""
        if not self.path.is_dir():
            return []
        apps = [app] if app is not None else sorted(p.name for p in self.path.iterdir() if p.is_dir())
        out: list[TaskInventory] = []
        for a in apps:
            app_dir = self.path / a
            if not app_dir.is_dir():
                continue
            for task_path in sorted(app_dir.iterdir()):
                if not task_path.is_dir():
                    continue
                try:
                    partition = TaskId.parse(task_path.name).partition
                except ValueError:
                    continue  # not a task directory
                out.append(self._task_inventory(TaskDirectory(self.path, a, task_path.name), partition))
        return out

    def _task_inventory(self, td: TaskDirectory, partition: int) -> TaskInventory:
        error = None
        try:
            offsets = td.checkpoint.read()
        except CheckpointError as e:
            offsets, error = {}, str(e)
        stores = []
        store_topics = set()
        for name in td.stores():
            topic = changelog_topic_name(td.app, name)
            store_topics.add(topic)
            stores.append(
                StoreInventory(
                    name=name,
                    changelog_topic=topic,
                    changelog_partition=partition,
                    changelog_offset=offsets.get(TopicPartition(topic, partition)),
                    size_bytes=_dir_size(td.store_path(name)),
                )
            )
        inputs = tuple(
            sorted(
                (tp, off)
                for tp, off in offsets.items()
                if tp.topic not in store_topics and not tp.topic.endswith(CHANGELOG_SUFFIX)
            )
        )
        return TaskInventory(
            app=td.app,
            task_id=td.task_id,
            path=str(td.path),
            stores=tuple(stores),
            input_offsets=inputs,
            locked_by=td.holder(),
            checkpoint_error=error,
        )


def _held_elsewhere(e: BaseException) -> bool:
    """A non-blocking flock refused because another open file description holds the lock."""
    return isinstance(e, OSError) and e.errno in (errno.EWOULDBLOCK, errno.EAGAIN)


def _dir_size(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            # RocksDB deletes obsolete files while we walk.
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(root, f))
    return total
