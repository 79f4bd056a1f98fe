"""bench/upgrade.py's ``--state-keys`` (upgrade_eddy.fill_store): the records it writes to the word
count's changelog restore into the count store as the app would have written them: every key on
the task Kafka's partitioner gives it, each count 1 under the store's own serde. The broker, the
restore and RocksDB are real."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest

from eddy_runtime.queries.routing import kafka_partition
from eddy_runtime.state import ProcessorStateManager, StoreSpec
from eddy_runtime.state.serde import serde_for
from tests.servers import KafkaBroker

pytestmark = pytest.mark.integration

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))  # the benches import each other so

from upgrade_eddy import STORE, fill_store  # noqa: E402

KEYS, PARTITIONS = 3_000, 3


def test_the_filled_changelog_restores_into_the_count_store_task_by_task(kafka: KafkaBroker, tmp_path: Path) -> None:
    app = f"fill-{uuid.uuid4().hex[:6]}"
    fill_store(kafka.bootstrap, f"{app}-{STORE}-changelog", PARTITIONS, KEYS)
    # the word count's store as its compiled topology has it: string keys, int64 counts
    spec = StoreSpec.key_value(STORE, key_serde="string", value_serde="int64")
    values = serde_for("int64")
    found: dict[int, set[bytes]] = {}
    for partition in range(PARTITIONS):
        mgr = ProcessorStateManager.open(app, f"1_{partition}", [spec], tmp_path / str(partition), kafka.bootstrap)
        try:
            while not mgr.restored:
                mgr.restore_chunk(max_records=1_000, max_seconds=1.0)
            items = [(k, v) for k, v in mgr.store(STORE).db.items() if k.startswith(b"state-")]
        finally:
            mgr.close()
        assert {values.deserialize(v) for _, v in items} == {1}
        found[partition] = {k for k, _ in items}
    assert sum(len(keys) for keys in found.values()) == KEYS
    for partition, keys in found.items():
        assert keys and all(kafka_partition(k, PARTITIONS) == partition for k in keys), partition
