"""The driver's committed-offset reads on a real broker while a transaction holds offsets of the
group: settled reads wait for it (KIP-447), reads of the continuous path's partitions do not."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from eddy_runtime.driver.offsets import OffsetReader

pytestmark = pytest.mark.integration


def test_an_open_transaction_holds_up_settled_reads_but_not_the_continuous_paths(kafka):
    app = kafka.unique_name("offsets")
    topic = kafka.create_topic(f"{app}-in", partitions=2)
    group = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": app})
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": f"{app}-0_0"})
    reader = OffsetReader(kafka.bootstrap, app)
    try:
        producer.init_transactions(30)
        for offset in (10, 42):
            producer.begin_transaction()
            producer.send_offsets_to_transaction([TopicPartition(topic, 0, offset)],
                                                 group.consumer_group_metadata(), 30)
            producer.flush(30)
            if offset == 10:
                producer.commit_transaction(30)
        # The transaction with 42 is open. The continuous path's read does not wait for it, and
        # sees the offsets committed before it (a pending offset is never visible).
        started = time.monotonic()
        assert reader.committed([(topic, 0), (topic, 1)], unsettled_ok=[(topic, 0), (topic, 1)]) == {
            (topic, 0): 10, (topic, 1): 0}
        assert time.monotonic() - started < 5
        # A partition the transaction does not hold reads settled at once.
        assert reader.committed([(topic, 1)]) == {(topic, 1): 0}
        # A settled read of partition 0 waits until the transaction ends.
        settled: list[dict[tuple[str, int], int]] = []
        waiting = threading.Thread(target=lambda: settled.append(reader.committed([(topic, 0)])), daemon=True)
        waiting.start()
        waiting.join(2)
        assert waiting.is_alive() and not settled
        producer.commit_transaction(30)
        waiting.join(30)
        assert settled == [{(topic, 0): 42}]
    finally:
        reader.close()
        group.close()
