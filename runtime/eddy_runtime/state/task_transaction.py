"""One batch of one task across all its stores: `TaskTransaction`, applied after the Kafka commit.

`ProcessorStateManager.transaction()` (manager.py) opens one per batch; processing reads and
writes its stores' transactions (`key_value`, `window`, `session`); the record collector
(kafka/record_collector.py) sends its `changelog_batches` to Kafka with the batch's outputs, and
once Kafka has them `apply` writes each store with the changelog offsets Kafka gave (the commit
order: executor/commit.py; docs/DESIGN.md, "One micro-batch").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from eddy_runtime.kafka.partitions import OffsetsByPartition
from eddy_runtime.state.changelog import changelog_topic_name
from eddy_runtime.state.session_store import SessionTransaction
from eddy_runtime.state.store import KeyValueTransaction
from eddy_runtime.state.stores import StateStore
from eddy_runtime.state.window_store import WindowTransaction

__all__ = ["TaskTransaction"]


class TaskTransaction:
    """One batch of one task: a transaction per store, applied together after the Kafka commit."""

    def __init__(self, app: str, task_id: str, partition: int, stores: Mapping[str, StateStore]) -> None:
        self.app = app
        self.task_id = task_id
        #: the task's partition of each changelog
        self.partition = partition
        self._stores = stores
        self._txs: dict[str, KeyValueTransaction | WindowTransaction | SessionTransaction] = {
            name: store.begin() for name, store in stores.items()
        }
        self._applied = False

    def store(self, name: str) -> Any:
        """The named store's transaction (`KeyValueTransaction`, `WindowTransaction` or `SessionTransaction`)."""
        try:
            return self._txs[name]
        except KeyError:
            raise KeyError(f"task {self.task_id} has no store {name!r}; "
                           f"it has {sorted(self._txs)}") from None

    __getitem__ = store

    def key_value(self, name: str) -> KeyValueTransaction:
        tx = self.store(name)
        if not isinstance(tx, KeyValueTransaction):
            raise TypeError(f"store {name!r} is not a key-value store")
        return tx

    def window(self, name: str) -> WindowTransaction:
        tx = self.store(name)
        if not isinstance(tx, WindowTransaction):
            raise TypeError(f"store {name!r} is not a window store")
        return tx

    def session(self, name: str) -> SessionTransaction:
        tx = self.store(name)
        if not isinstance(tx, SessionTransaction):
            raise TypeError(f"store {name!r} is not a session store")
        return tx

    def changelog_batches(self) -> Iterator[tuple[str, str, int, list[tuple[bytes, bytes | None]]]]:
        """(store, changelog topic, partition, records) for each logged store with writes."""
        for name, tx in self._txs.items():
            if self._stores[name].spec.logged and tx.dirty:
                yield name, changelog_topic_name(self.app, name), self.partition, tx.changelog_records()

    def apply(
        self, changelog_offsets: Mapping[str, int | None], input_offsets: OffsetsByPartition | None
    ) -> None:
        """Phase two of a commit: write each store's batch with its offsets (one write batch per store)."""
        if self._applied:
            raise RuntimeError("task transaction already applied")
        for name, tx in self._txs.items():
            tx.apply(changelog_offsets.get(name), input_offsets)
        self._applied = True
