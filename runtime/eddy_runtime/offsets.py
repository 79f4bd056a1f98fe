"""The offsets the driver plans a batch with: committed input positions, last stable offsets of
input and changelog partitions (docs/DESIGN.md, "One micro-batch", step 2).

`OffsetReader` owns the driver's admin client and the consumer that reads the app group's
committed offsets; `input_partitions` and `changelog_partitions` say which partitions to ask about.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from eddy_contract.tasks import task_id
from eddy_runtime import kafka_client
from eddy_runtime.kafka_client import KafkaClientConfig
from eddy_runtime.state import changelog_topic_name

if TYPE_CHECKING:
    from eddy_runtime.compiler import CompiledApp

__all__ = ["OffsetReader", "TopicPartitions", "changelog_partitions", "input_partitions"]

#: (topic, partition) pairs
TopicPartitions = Sequence[tuple[str, int]]


def input_partitions(compiled: CompiledApp) -> list[tuple[str, int]]:
    """Every input partition of every task (sources and joined tables, in task order)."""
    return [(t, p) for s in compiled.subtopologies for t in s.input_topics for p in range(s.partitions)]


def changelog_partitions(compiled: CompiledApp) -> dict[str, list[tuple[str, int]]]:
    """Per task, the changelog partitions of its stores (empty for a stateless task)."""
    return {task_id(s.id, p): [(changelog_topic_name(compiled.app, st.name), p) for st in s.stores]
            for s in compiled.subtopologies for p in range(s.partitions)}


class OffsetReader:
    """Lists offsets with the driver's admin client and reads the app group's committed offsets."""

    def __init__(self, kafka: KafkaClientConfig, group: str) -> None:
        self.kafka = kafka
        self.group = group
        self._admin: Any = None
        self._consumer: Any = None
        #: earliest offsets of input partitions nothing was committed for yet (they do not move
        #: back, and asking once per partition is enough)
        self._earliest: dict[tuple[str, int], int] = {}

    @property
    def admin(self) -> Any:
        """The driver's admin client (created on first use; replaced after a stale leader epoch)."""
        if self._admin is None:
            self._admin = kafka_client.admin(self.kafka)
        return self._admin

    def list_offsets(self, tps: TopicPartitions, which: Literal["latest", "earliest"]) -> dict[tuple[str, int], int]:
        """Last stable (``latest``, read committed) or earliest offsets of `tps`."""
        from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
        from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]  # re-exported without __all__

        if not tps:
            return {}
        spec = OffsetSpec.latest() if which == "latest" else OffsetSpec.earliest()  # type: ignore[no-untyped-call]
        request = {TopicPartition(t, p): spec for t, p in tps}

        def list_offsets() -> dict[tuple[str, int], int]:
            futures = self.admin.list_offsets(request, isolation_level=IsolationLevel.READ_COMMITTED,
                                              request_timeout=30)
            try:
                return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}
            except KafkaException as e:
                if "LEADER_EPOCH" in str(e):
                    # After a partition leader moved (a broker stopped or came back), librdkafka's
                    # admin client kept sending its cached leader epoch until its retries ran out
                    # (seen with 2.16): a new client starts from fresh metadata.
                    self._admin = None
                raise

        return kafka_client.retrying(list_offsets, "listing offsets")

    def committed(self, tps: TopicPartitions) -> dict[tuple[str, int], int]:
        """The group's committed positions of `tps`; the earliest offset where none is committed."""
        from confluent_kafka import TopicPartition

        if self._consumer is None:
            self._consumer = kafka_client.consumer(self.kafka, {"group.id": self.group,
                                                                "enable.auto.commit": False})
        consumer = self._consumer
        found = kafka_client.retrying(lambda: consumer.committed([TopicPartition(t, p) for t, p in tps], timeout=30),
                                      "reading committed offsets")
        out: dict[tuple[str, int], int] = {}
        missing: list[tuple[str, int]] = []
        for tp in found:
            if tp.offset >= 0:
                out[(tp.topic, tp.partition)] = tp.offset
            else:
                missing.append((tp.topic, tp.partition))
        need = [tp for tp in missing if tp not in self._earliest]
        if need:
            self._earliest.update(self.list_offsets(need, "earliest"))
        for tp in missing:
            out[tp] = self._earliest[tp]
        return out

    def close(self) -> None:
        """Close the committed-offsets consumer (the admin client needs no closing)."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
