"""A task of a two-input join (table-table, windowed stream-stream) on real RocksDB stores, batch
by batch: `this` input as rows, the `other` input as the second input's records, as the task
runner hands them to `process_batch`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from eddy_runtime.processing.batch import TaskState
from eddy_runtime.processing.joins import TableUpdates
from eddy_runtime.processing.operators import process_batch
from tests.runtime.test_operators import StoreTransactions, rows


class TwoInputs:
    """(key, value, timestamp ms) records in, (int key, decoded value or None, timestamp) out."""

    def __init__(self, sub: Any, path: Path) -> None:
        self.sub = sub
        self.tx = StoreTransactions(path, sub.stores)
        self.dropped = 0

    def this(self, *records: tuple[int, str | None, int]) -> list[tuple[int, str | None, int]]:
        return self.batch(rows([str(k) for k, _, _ in records], [ts for _, _, ts in records],
                               value=[v for _, v, _ in records]), None)

    def other(self, *records: tuple[int, str | None, int]) -> list[tuple[int, str | None, int]]:
        updates = TableUpdates([str(k).encode() for k, _, _ in records],
                               [None if v is None else v.encode() for _, v, _ in records], [ts for _, _, ts in records])
        return self.batch(rows([], [], value=[]), updates)

    def batch(self, batch: Any, updates: TableUpdates | None) -> list[tuple[int, str | None, int]]:
        out = process_batch(self.sub, batch, self.tx, TaskState(), updates)
        self.tx.commit()
        self.dropped = out.dropped
        return [(int(r.key.decode()), None if r.value is None else r.value.decode(), r.timestamp)
                for r in out.outputs]

    def close(self) -> None:
        self.tx.close()


@pytest.fixture
def joined(tmp_path: Path) -> Iterator[Callable[[Any], TwoInputs]]:
    """joined(sub): a `TwoInputs` of that sub-topology on fresh stores, closed after the test."""
    made: list[TwoInputs] = []

    def make(sub: Any) -> TwoInputs:
        made.append(TwoInputs(sub, tmp_path / f"stores-{len(made)}"))
        return made[-1]

    yield make
    for t in made:
        t.close()
