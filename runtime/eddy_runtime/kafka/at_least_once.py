"""The at-least-once commit of a `TaskCommitter` (kafka/transactions.py): produce every part's
output and changelog records and flush (each acknowledged), then commit the parts' input
positions through the consumer. A crash between the two sends the records again on restart,
never loses one: the guarantee's name."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaPartition

from eddy_runtime.kafka.commit_types import CommitFailed, CommitPart
from eddy_runtime.kafka.partitions import TopicPartition
from eddy_runtime.kafka.record_collector import RecordCollector, SentRecords

__all__ = ["commit_at_least_once", "inputs_of"]


def inputs_of(parts: Iterable[CommitPart]) -> dict[TopicPartition, int]:
    """Every part's input positions, in one mapping."""
    return {tp: off for p in parts for tp, off in p.input_offsets.items()}


def commit_at_least_once(sender: RecordCollector, producer: Producer, consumer: Consumer,
                         parts: Sequence[CommitPart], timeout_s: float, context: str) -> list[SentRecords]:
    """At-least-once: produce every part's records and flush (each acknowledged), then commit
    the parts' input positions; what was sent of each part."""
    errors = sender.errors
    try:
        sent = [sender.send(p.outputs, p.tx, p.input_offsets) for p in parts]
        remaining = producer.flush(timeout_s)
    except KafkaException as e:
        raise CommitFailed(f"{context}: produce failed: {e}", fatal=e.args[0].fatal()) from e
    if remaining or errors:
        raise CommitFailed(
            f"{context}: {remaining} records undelivered, errors: {errors[:3]}; input offsets "
            "not committed, the batch will be processed again"
        )
    inputs = inputs_of(parts)
    if inputs:
        tps = [KafkaPartition(t, part, off) for (t, part), off in inputs.items()]
        try:
            result = consumer.commit(offsets=tps, asynchronous=False)
        except KafkaException as e:
            raise CommitFailed(f"{context}: committing input offsets failed: {e}") from e
        bad = [tp for tp in result or [] if tp.error is not None]
        if bad:
            raise CommitFailed(f"{context}: committing input offsets failed: {bad}")
    return sent
