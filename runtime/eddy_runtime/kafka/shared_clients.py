"""Consumers the tasks of a process share for one-off reads: the group's committed positions of a
task taken over (`positions_reader`), how far a changelog partition was written
(`written_ends`), and how far it can be read (`stable_ends`).

A task that opens made its own clients for these, and a new client first connects and finds its
group's coordinator: 30-150 ms of every hand-over's pause on a loaded machine
(bench/handover.py). One consumer per Kafka settings, group and purpose serves every task of the
process that holds a handle on it (librdkafka's calls are safe from any thread, and none of these
consumers is assigned or subscribed); the last handle closed closes it, so a process that runs
many apps one after the other (a test session) keeps none of theirs.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import TYPE_CHECKING

from confluent_kafka import KafkaError, KafkaException

from eddy_runtime.kafka import client as kafka_client
from eddy_runtime.kafka.client import KafkaClientConfig

if TYPE_CHECKING:
    from confluent_kafka import Consumer, TopicPartition

__all__ = ["SharedConsumer", "positions_reader", "stable_ends", "written_ends"]

#: how long a one-off read waits for the broker
_TIMEOUT_S = 30.0
#: what a watermark read answers while the client's metadata is older than a broker's failover
#: (its leader moved, or its connection to the one that went was torn down, or the read waits for
#: a broker that is gone): asked again after a metadata refresh, it is answered (a standby's tail
#: failed on these in e2e/test_chaos.py, and waited 30 s for a stopped leader in
#: tests/state/test_shared_clients.py)
_AFTER_A_FAILOVER = frozenset({
    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.FENCED_LEADER_EPOCH,
    KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError._UNKNOWN_PARTITION, KafkaError._DESTROY_BROKER,
    KafkaError._TRANSPORT, KafkaError._TIMED_OUT,
})
_TRIES = 4
#: how long each read but the last waits (the last waits `_TIMEOUT_S`)
_TRY_TIMEOUT_S = 5.0
_RETRY_BACKOFF_S = 0.05

_lock = threading.Lock()
#: key -> the consumer and how many handles hold it
_shared: dict[tuple[str, KafkaClientConfig, str], tuple[Consumer, int]] = {}


class SharedConsumer:
    """A handle on the process's consumer for `purpose` (with `settings`, which are the same for
    every handle of that purpose): `close` lets go of it."""

    def __init__(self, purpose: str, kafka: KafkaClientConfig | str, group_id: str,
                 settings: dict[str, object]) -> None:
        self._key = (purpose, KafkaClientConfig.of(kafka), group_id)
        with _lock:
            consumer, users = _shared.get(self._key, (None, 0))
            if consumer is None:
                consumer = kafka_client.consumer(self._key[1], {"group.id": group_id, "enable.auto.commit": False,
                                                                **settings})
            _shared[self._key] = (consumer, users + 1)
        self.consumer: Consumer = consumer
        self._closed = False

    def watermarks(self, tp: TopicPartition) -> tuple[int, int]:
        """`tp`'s low watermark and its end as this consumer's isolation level sees it, asked of
        the broker (again, after a metadata refresh, while it answers as after a failover)."""
        for attempt in range(1, _TRIES + 1):
            try:
                timeout = _TIMEOUT_S if attempt == _TRIES else _TRY_TIMEOUT_S
                low, high = self.consumer.get_watermark_offsets(tp, timeout=timeout, cached=False)
                return int(low), int(high)
            except KafkaException as err:
                if attempt == _TRIES or err.args[0].code() not in _AFTER_A_FAILOVER:
                    raise
            time.sleep(_RETRY_BACKOFF_S * attempt)
            with contextlib.suppress(KafkaException):
                self.consumer.list_topics(tp.topic, timeout=_TIMEOUT_S)
        raise AssertionError("unreachable")

    def close(self) -> None:
        with _lock:
            if self._closed:
                return
            self._closed = True
            consumer, users = _shared[self._key]
            if users > 1:
                _shared[self._key] = (consumer, users - 1)
                return
            del _shared[self._key]
        consumer.close()


def positions_reader(kafka: KafkaClientConfig | str, group_id: str, app: str) -> SharedConsumer:
    """The process's consumer that reads `group_id`'s committed positions. Right after a task's
    last owner committed, the coordinator may still hold its offsets as pending (the markers are
    written after the commit returns) and answer UNSTABLE_OFFSET_COMMIT; the fetch is retried
    after retry.backoff.ms, 10 ms here rather than librdkafka's 100."""
    return SharedConsumer("positions", kafka, group_id, {"client.id": f"{app}-positions", "retry.backoff.ms": 10})


def written_ends(kafka: KafkaClientConfig | str, app: str) -> SharedConsumer:
    """The process's consumer that reads how far partitions of `app` were written
    (`SharedConsumer.watermarks`: the offset after the last record, committed or not, where a
    read_committed client sees the last stable offset): what an active restores up to. A
    transaction whose commit has returned may not be stable yet (its markers are written after),
    and its records are part of the task's state: the new owner's committed input positions,
    read next, already count them. Reading read_committed up to here waits for its markers."""
    return SharedConsumer("ends", kafka, f"{app}-restore", {"client.id": f"{app}-ends",
                                                            "isolation.level": "read_uncommitted"})


def stable_ends(kafka: KafkaClientConfig | str, app: str) -> SharedConsumer:
    """The process's consumer that reads how far partitions of `app` are stable
    (`SharedConsumer.watermarks`: the last stable offset).

    Asked by a standby at every tail. Not its own restore consumer: that one keeps a fetch
    waiting at the broker (up to its fetch.wait.max.ms), and a broker answers a connection's
    requests in order, so a ListOffsets sent beside it waited for the fetch, 50 ms a tail on
    average (bench/handover.py); this one fetches nothing."""
    return SharedConsumer("stable-ends", kafka, f"{app}-restore", {"client.id": f"{app}-stable-ends",
                                                                   "isolation.level": "read_committed"})
