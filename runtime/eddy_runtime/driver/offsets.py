"""The offsets the driver plans a batch with: committed input positions, last stable offsets of
input and changelog partitions (docs/DESIGN.md, "One micro-batch", step 2).

`OffsetReader` owns the driver's admin client and the consumer that reads the app group's
committed offsets; `input_partitions` and `changelog_partitions` say which partitions to ask about.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any, Literal

from eddy_contract.tasks import task_id
from eddy_runtime.kafka import client as kafka_client
from eddy_runtime.kafka.client import KafkaClientConfig
from eddy_runtime.kafka.partitions import TopicPartition
from eddy_runtime.state import changelog_topic_name

if TYPE_CHECKING:
    from eddy_runtime.dsl.subtopology import CompiledApp

__all__ = ["OffsetReader", "TopicPartitions", "changelog_partitions", "input_partitions"]

TopicPartitions = Sequence[TopicPartition]

log = logging.getLogger(__name__)

#: a ListOffsets call slower than this gets a new admin client for the next one
SLOW_ADMIN_S = 2.0
LIST_OFFSETS_TIMEOUT_S = 10


def input_partitions(compiled: CompiledApp, subtopologies: Collection[int] | None = None) -> list[TopicPartition]:
    """Every input partition of every task (sources and joined tables, in task order); of the
    tasks of `subtopologies` only, if given."""
    return [TopicPartition(t, p) for s in compiled.subtopologies if subtopologies is None or s.id in subtopologies
            for t in s.input_topics for p in range(s.partitions)]


def changelog_partitions(compiled: CompiledApp) -> dict[str, list[TopicPartition]]:
    """Per task, the changelog partitions of its stores (empty for a stateless task)."""
    return {task_id(s.id, p): [TopicPartition(changelog_topic_name(compiled.app, st.name), p) for st in s.stores]
            for s in compiled.subtopologies for p in range(s.partitions)}


class OffsetReader:
    """Lists offsets with the driver's admin client and reads the app group's committed offsets."""

    def __init__(self, kafka: KafkaClientConfig, group: str) -> None:
        self.kafka = kafka
        self.group = group
        self._admin: Any = None
        #: reading the app group's committed offsets: settled (read_committed) or not
        self._consumers: dict[bool, Any] = {}
        #: earliest offsets of input partitions nothing was committed for yet (they do not move
        #: back, and asking once per partition is enough)
        self._earliest: dict[TopicPartition, int] = {}

    @property
    def admin(self) -> Any:
        """The driver's admin client (created on first use; replaced after a stale leader epoch)."""
        if self._admin is None:
            self._admin = kafka_client.admin(self.kafka)
        return self._admin

    def list_offsets(self, tps: TopicPartitions, which: Literal["latest", "earliest"]) -> dict[TopicPartition, int]:
        """Last stable (``latest``, read committed) or earliest offsets of `tps`."""
        from confluent_kafka import IsolationLevel, KafkaError, KafkaException
        from confluent_kafka import TopicPartition as KafkaTopicPartition
        from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]  # re-exported without __all__

        if not tps:
            return {}
        spec = OffsetSpec.latest() if which == "latest" else OffsetSpec.earliest()  # type: ignore[no-untyped-call]
        request = {KafkaTopicPartition(t, p): spec for t, p in tps}

        def list_offsets() -> dict[TopicPartition, int]:
            started = time.monotonic()
            futures = self.admin.list_offsets(request, isolation_level=IsolationLevel.READ_COMMITTED,
                                              request_timeout=LIST_OFFSETS_TIMEOUT_S)
            try:
                found = {TopicPartition(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}
                if missing := sorted(str(tp) for tp, offset in found.items() if offset < 0):
                    # -1001 (OFFSET_INVALID) for some partitions, with no error, while a broker was
                    # down (the short fault campaign, 2026-11-29): published, the operator took the
                    # runtime state for unusable. Asked again, from fresh metadata.
                    self._admin = None
                    raise KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE,
                                                    f"no {which} offset for {', '.join(missing[:4])}", retriable=True))
                return found
            except KafkaException as e:
                if "LEADER_EPOCH" in str(e):
                    # After a partition leader moved (a broker stopped or came back), librdkafka's
                    # admin client kept sending its cached leader epoch until its retries ran out
                    # (seen with 2.16): a new client starts from fresh metadata.
                    self._admin = None
                raise
            finally:
                if (took := time.monotonic() - started) > SLOW_ADMIN_S:
                    # Once a broker stopped, the same client answered every later call only at its
                    # request timeout, and a new client at once (librdkafka 2.16, three brokers, one
                    # stopped): the next call uses a new one.
                    log.info("listing offsets took %.1fs: the next call uses a new admin client", took)
                    self._admin = None

        return kafka_client.retrying(list_offsets, "listing offsets")

    def committed(self, tps: TopicPartitions, unsettled_ok: Collection[TopicPartition] = ()
                  ) -> dict[TopicPartition, int]:
        """The group's committed positions of `tps`; the earliest offset where none is committed.

        A read_committed consumer asks for settled offsets (KIP-447's require_stable): the broker
        answers only once no open transaction holds offsets of the partitions asked for, and the
        client retries until then. The partitions in `unsettled_ok` (the continuous path's: their
        runners commit many times a second, so some transaction is nearly always open, and the
        driver uses their positions only for lag) are read without that wait: they are the
        offsets committed before the open transactions (a pending offset is never visible)."""
        from confluent_kafka import TopicPartition as KafkaTopicPartition

        unsettled = set(unsettled_ok)
        loose = [tp for tp in tps if tp in unsettled]
        settled = [tp for tp in tps if tp not in unsettled]
        found: list[Any] = []
        for part, stable in ((settled, True), (loose, False)):
            if part:
                asked = [KafkaTopicPartition(t, p) for t, p in part]
                found += self._read_committed(self._group_consumer(stable), asked)
        out: dict[TopicPartition, int] = {}
        missing: list[TopicPartition] = []
        for tp in found:
            if tp.offset >= 0:
                out[TopicPartition(tp.topic, tp.partition)] = tp.offset
            else:
                missing.append(TopicPartition(tp.topic, tp.partition))
        need = [tp for tp in missing if tp not in self._earliest]
        if need:
            self._earliest.update(self.list_offsets(need, "earliest"))
        for tp in missing:
            out[tp] = self._earliest[tp]
        return out

    @staticmethod
    def _read_committed(consumer: Any, tps: list[Any]) -> list[Any]:
        return kafka_client.retrying(lambda: consumer.committed(tps, timeout=30), "reading committed offsets")

    def _group_consumer(self, stable: bool) -> Any:
        if stable not in self._consumers:
            self._consumers[stable] = kafka_client.consumer(self.kafka, {
                "group.id": self.group, "enable.auto.commit": False,
                "isolation.level": "read_committed" if stable else "read_uncommitted"})
        return self._consumers[stable]

    def close(self) -> None:
        """Close the committed-offsets consumers (the admin client needs no closing)."""
        for consumer in self._consumers.values():
            consumer.close()
        self._consumers.clear()
