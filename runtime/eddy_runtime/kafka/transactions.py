"""The Kafka side of a commit: `TaskCommitter` wraps one producer and the consumer that reads
(and, at-least-once, commits) input positions.

A committer commits one task's batch (`commit_to_kafka`) or, on the continuous path under
exactly-once, the batches of all the continuous tasks of a runner in one transaction
(`commit_parts`, with the runner's transactional id; executor/producer.py owns that committer).
Its `RecordCollector` (kafka/record_collector.py) sends the records and notes the offsets Kafka
gives them. What happens to the stores before and after is the executor's commit order
(executor/commit.py; docs/DESIGN.md, "One micro-batch").

``exactly_once``: one Kafka transaction per commit, carrying the output records, the changelog
records and the input offsets (``send_offsets_to_transaction``). Making a committer that fences
calls ``init_transactions``, which fences a zombie with the same transactional id and aborts its
open transaction. A committer made with ``fence=False`` only reads positions: its task commits
through its runner's transactions, and fencing is the runner's (protocol/fences.py).

``at_least_once``: produce outputs and changelog records and flush (every record acknowledged),
then commit the input offsets (kafka/at_least_once.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NoReturn

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaPartition
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_delay

from eddy_contract.spec import ProcessingGuarantee
from eddy_runtime.kafka import client as kafka_client
from eddy_runtime.kafka.at_least_once import commit_at_least_once, inputs_of
from eddy_runtime.kafka.client import KafkaClientConfig
from eddy_runtime.kafka.commit_types import CommitFailed, CommitPart, KafkaCommit, PlannedPositions, TaskFenced
from eddy_runtime.kafka.partitions import TopicPartition
from eddy_runtime.kafka.record_collector import ChangelogBatches, OutputRecord, RecordCollector, SentRecords
from eddy_runtime.kafka.shared_clients import positions_reader
from eddy_runtime.kafka.transactional_ids import transactional_id

__all__ = [
    "CommitFailed",  # the commit types are defined in kafka/commit_types.py; named here beside their user
    "CommitPart",
    "KafkaCommit",
    "OutputRecord",  # defined in kafka/record_collector.py, which sends it; named here beside the commit types
    "PlannedPositions",
    "TaskCommitter",
    "TaskFenced",
    "producer_settings",
]

log = logging.getLogger(__name__)

#: send_offsets_to_transaction takes milliseconds (AddOffsetsToTxn, TxnOffsetCommit); past this it
#: waits on a group coordinator that went away (`TaskCommitter._bounded_started`)
SEND_OFFSETS_TIMEOUT_S = 10.0


def producer_settings(app: str, task_id: str, guarantee: ProcessingGuarantee, **overrides: Any) -> dict[str, Any]:
    """A task's producer settings (`kafka_client` adds bootstrap, spec.kafka.config and security)."""
    conf: dict[str, Any] = {
        "client.id": f"{app}-{task_id}",
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "compression.type": "lz4",
        # Kafka's Java default, so keyed outputs land where a Kafka Streams app expects them.
        "partitioner": "murmur2_random",
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1 << 20,
        # After a commit the coordinator writes markers asynchronously and answers the next
        # transaction's first request with CONCURRENT_TRANSACTIONS; the default 100 ms backoff
        # made every other commit ~100 ms slower.
        "retry.backoff.ms": 10,
    }
    if guarantee == ProcessingGuarantee.EXACTLY_ONCE:
        conf["transactional.id"] = transactional_id(app, task_id)
        conf["transaction.timeout.ms"] = 60_000
    conf.update(overrides)
    return conf


class TaskCommitter:
    """Commits batches under `guarantee` with one producer: one task's (a task that commits on its
    own), or all of a runner's continuous tasks' together (`runner_transactional_id`)."""

    def __init__(
        self,
        app: str,
        task_id: str,
        kafka: KafkaClientConfig | str,
        guarantee: ProcessingGuarantee = ProcessingGuarantee.EXACTLY_ONCE,
        *,
        group_id: str | None = None,
        producer_overrides: Mapping[str, Any] | None = None,
        timeout_s: float = 60.0,
        fence: bool = True,
    ) -> None:
        """`fence` False (exactly-once only): the task commits through its runner's transactions
        (executor/continuous.py, protocol/fences.py), so this committer only reads its committed positions; its
        producer is not initialised (no fence of ``<app>-<task>``) and commits raise."""
        guarantee = ProcessingGuarantee(guarantee)  # a string raises ValueError unless it is one
        self.app = app
        self.task_id = task_id
        self.guarantee = guarantee
        self.group_id = group_id or app
        self._timeout = timeout_s
        self._ctx = f"app {app} task {task_id}"
        #: why this committer may not commit (it only reads positions), if so
        self._read_only = (None if fence or guarantee != ProcessingGuarantee.EXACTLY_ONCE
                           else "it commits through its runner's transactions")
        # A committer that only reads positions has no producer: a task moved on the continuous
        # path opens and closes no more than its positions' consumer.
        self._collector = (RecordCollector(kafka, producer_settings(app, task_id, guarantee,
                                                                    **(producer_overrides or {})))
                           if self._read_only is None else None)
        # Reads the group's committed positions (and, at-least-once, commits them): the same
        # brokers, settings and credentials as every other client of the app. One that only reads
        # them (a task taken over reads them at once) shares the process's (kafka/shared_clients.py).
        self._shared = positions_reader(kafka, self.group_id, app) if self._read_only is not None else None
        self._consumer = (self._shared.consumer if self._shared is not None
                          else kafka_client.consumer(kafka, {"group.id": self.group_id, "enable.auto.commit": False,
                                                             "client.id": f"{app}-{task_id}-committer"}))
        self._unusable: str | None = None
        if guarantee == ProcessingGuarantee.EXACTLY_ONCE and fence:
            # Fences any zombie with this transactional.id and aborts its open transaction, so
            # the changelog's last stable offset is final before this task restores.
            try:
                self._producer.init_transactions(timeout_s)
            except KafkaException as e:
                raise CommitFailed(f"{self._ctx}: init_transactions failed: {e}", fatal=True) from e

    @property
    def _producer(self) -> Producer:
        # No attribute of its own and no local references: a traceback that outlives a failure
        # must not keep the producer connected after `close` dropped it.
        producer = self._collector.producer if self._collector is not None else None
        if producer is None:
            raise TaskFenced(f"{self._ctx}: committer is closed", fatal=True)
        return producer

    @property
    def _sender(self) -> RecordCollector:
        if self._collector is None:
            raise CommitFailed(f"{self._ctx}: this committer only reads positions: {self._read_only}", fatal=True)
        return self._collector

    def delivered(self) -> dict[TopicPartition, int]:
        """Per partition the last commit wrote to, the offset of its last record there."""
        return self._sender.last_offsets()

    @property
    def usable(self) -> bool:
        """False once fenced, broken (a fatal producer error) or closed."""
        return self._unusable is None

    def committed_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed positions of input partitions (0 where nothing is committed).

        Read them after the task opened: under exactly_once that fenced any older instance, and
        the read waits for a transaction's pending offsets to settle.
        """
        tps = [KafkaPartition(t, p) for t, p in partitions]
        if not tps:
            return {}
        found = self._consumer.committed(tps, timeout=self._timeout)
        return {TopicPartition(tp.topic, tp.partition): max(tp.offset, 0) for tp in found}

    def commit_to_kafka(
        self,
        tx: ChangelogBatches | None,
        outputs: Iterable[OutputRecord] = (),
        input_offsets: Mapping[TopicPartition, int] | None = None,
        *,
        group_metadata: Any = None,
    ) -> KafkaCommit:
        """Phase one: make the batch (outputs, changelog records, input offsets) durable in Kafka;
        the caller then applies `tx` to the stores with the returned changelog offsets.

        `input_offsets` are consumer positions (the next offset to process) per input partition.
        `group_metadata` is the input consumer's ``consumer_group_metadata()``; by default the
        committer's own (group `group_id`, partitions assigned, not subscribed).
        """
        return self.commit_parts([CommitPart(tx, outputs, dict(input_offsets or {}))],
                                 group_metadata=group_metadata)[0]

    def commit_parts(self, parts: Iterable[CommitPart], *, group_metadata: Any = None,
                     planned: PlannedPositions | None = None) -> list[KafkaCommit]:
        """`commit_to_kafka` for several tasks' batches at once, in one transaction under
        exactly-once (a runner's committer on the continuous path, executor/producer.py):
        each part's changelog records carry its own input positions, and each part gets back its
        own stores' changelog offsets. All of them commit, or none.

        `parts` may be a generator that processes each task's batch when it is asked for the
        part: under exactly-once each part's records go out as soon as it is yielded, while the
        next one is processed (as Kafka Streams sends while it processes), so the commit waits
        only for what the broker has not acknowledged yet. With `planned`, the input positions go
        to the coordinators before the first part is asked for, and are corrected before the
        commit for a part that was not yielded or moved other positions. A `parts` that yields
        nothing commits nothing; one that raises aborts the transaction."""
        if self._unusable:
            raise TaskFenced(f"{self._ctx}: committer is unusable: {self._unusable}", fatal=True)
        self._sender.begin()  # a committer that only reads positions has none: it refuses here
        if self.guarantee == ProcessingGuarantee.EXACTLY_ONCE:
            taken, sent, started = self._exactly_once(parts, group_metadata, planned)
        else:
            taken, started = list(parts), time.monotonic()
            sent = commit_at_least_once(self._sender, self._producer, self._consumer, taken, self._timeout,
                                         self._ctx)
        commits = []
        for part, (n_out, n_cl, changelog_of_store) in zip(taken, sent, strict=True):
            offsets: dict[str, int | None] = {}
            for store, (topic, partition) in changelog_of_store.items():
                off = self._sender.last_offset(topic, partition)
                if off is None:
                    raise CommitFailed(f"{self._ctx}: no delivery report for changelog {topic}[{partition}] of "
                                       f"store {store}")
                offsets[store] = off
            commits.append(KafkaCommit(offsets, dict(part.input_offsets), n_out, n_cl, started))
        return commits

    # -- exactly once -------------------------------------------------------------------------

    def _exactly_once(self, parts: Iterable[CommitPart], group_metadata: Any,
                      planned: PlannedPositions | None) -> tuple[list[CommitPart], list[SentRecords], float]:
        """The parts taken, what was sent of each, and when the commit proper started (the last
        part sent)."""
        errors = self._sender.errors
        taken: list[CommitPart] = []
        sent: list[SentRecords] = []
        begun = False
        #: commit_transaction was called: only from then on can a failure leave the outcome unknown
        committing = False
        #: the send_offsets_to_transaction under way (the client takes one such call at a time)
        pending: list[Callable[[], None]] = []

        def settle() -> None:
            while pending:
                pending.pop()()

        try:
            if planned is not None and planned.to:
                # Two round trips to the coordinators, under way while the parts are processed.
                self._producer.begin_transaction()
                begun = True
                pending.append(self._offsets_started(planned.to, group_metadata))
            for part in parts:
                if not begun:
                    self._producer.begin_transaction()
                    begun = True
                taken.append(part)
                sent.append(self._sender.send(part.outputs, part.tx, part.input_offsets))
            started = time.monotonic()
            if not taken:
                if begun:
                    settle()
                    self._abort_quietly()
                return taken, sent, started
            inputs = inputs_of(taken)
            late = inputs if planned is None else planned.corrections(inputs)
            if late:  # under way while the last records go out; it overrides the planned ones
                settle()
                pending.append(self._offsets_started(late, group_metadata))
            # flush serves the delivery reports that carry the changelog offsets.
            remaining = self._producer.flush(self._timeout)
            settle()
            if remaining:
                raise CommitFailed(f"{self._ctx}: {remaining} records not delivered in {self._timeout}s")
            committing = True
            _commit_with_retries(self._producer, self._timeout, self._ctx)
        except BaseException as e:
            try:
                settle()
            except Exception:  # noqa: BLE001 - the transaction is aborted below either way
                log.debug("%s: send_offsets_to_transaction failed", self._ctx, exc_info=True)
            self._failed(e, begun, committing)
        if errors:
            # Cannot happen after a successful commit (the broker would have refused it); keep the
            # store untouched and the caller informed if it ever does.
            raise CommitFailed(f"{self._ctx}: delivery errors in a committed transaction: {errors[:3]}")
        return taken, sent, started

    def _offsets_started(self, positions: Mapping[TopicPartition, int], group_metadata: Any) -> Callable[[], None]:
        """send_offsets_to_transaction of `positions` started; the function returned waits for it."""
        tps = [KafkaPartition(t, n, off) for (t, n), off in positions.items()]
        metadata = group_metadata or self._consumer.consumer_group_metadata()
        bound = min(self._timeout, SEND_OFFSETS_TIMEOUT_S)
        return self._bounded_started("send_offsets_to_transaction",
                                     lambda: self._producer.send_offsets_to_transaction(tps, metadata, bound), bound)

    def _failed(self, e: BaseException, begun: bool, committing: bool = True) -> NoReturn:
        """Raise what a failed exactly-once commit comes to (its transaction aborted if it can be).

        A Kafka error before commit_transaction was called (a send_offsets_to_transaction that timed
        out against a group coordinator that moved, e.g. its broker SIGKILLed) leaves no doubt: the
        transaction did not commit, and it is aborted, or the producer replaced if it cannot be. Left
        open, every later round of the task failed on it and the task never committed again
        (bench/chaos.py, a broker killed)."""
        if isinstance(e, KafkaException) and begun and not committing:
            err: KafkaError = e.args[0]
            if not (err.fatal() or err.code() in _FENCING_CODES):
                self._abort_or_replace(e)
        if isinstance(e, KafkaException):
            self._fail(e)
        if isinstance(e, SystemError):
            # After a fatal error (e.g. fenced) the client runs delivery callbacks with that
            # error still set and the call fails with a SystemError; abort to learn the real error.
            try:
                self._producer.abort_transaction(self._timeout)
            except KafkaException as ke:
                self._fail(ke)
            raise CommitFailed(f"{self._ctx}: Kafka client error, transaction aborted: {e}", aborted=True) from e
        if isinstance(e, TaskFenced):
            raise e
        if isinstance(e, CommitFailed):
            self._abort_quietly()
            raise CommitFailed(str(e), aborted=True) from e
        if begun:  # the parts' generator failed: nothing of the round may commit
            self._abort_quietly()
        raise e

    def _bounded_started(self, what: str, call: Callable[[], None], timeout_s: float) -> Callable[[], None]:
        """`call()` started on a thread of its own; the function returned waits for it, and gives up
        on it after `timeout_s` (its own timeout) even if the client ignores it.

        librdkafka's send_offsets_to_transaction can wait forever, past its timeout, when the
        group coordinator's broker goes away (confluentinc/librdkafka#5456, #5511; seen here with
        2.16 when one broker of three stopped). The producer is then unusable: the task is closed
        and reopened, and the new producer's init_transactions fences the stuck one."""
        outcome: list[BaseException | None] = []

        def run() -> None:
            try:
                call()
                outcome.append(None)
            except BaseException as e:  # noqa: BLE001 - handed to the calling thread
                outcome.append(e)

        worker = threading.Thread(target=run, name=f"{what} {self._ctx}", daemon=True)
        worker.start()

        def wait() -> None:
            worker.join(timeout_s + 5)
            if not outcome:
                self._unusable = f"{what} did not return within {timeout_s}s"
                raise TaskFenced(f"{self._ctx}: {what} hung past its {timeout_s}s timeout; the task is "
                                 "reopened with a new producer", fatal=True)
            if outcome[0] is not None:
                raise outcome[0]

        return wait

    def _abort_or_replace(self, e: KafkaException) -> NoReturn:
        """Abort the open transaction after `e`, which came before its commit: CommitFailed (aborted);
        if even the abort fails, the producer is unusable and the task is reopened with a new one
        (whose init_transactions fences this one)."""
        try:
            self._producer.abort_transaction(self._timeout)
        except KafkaException as ke:
            self._unusable = f"abort_transaction failed after {e}: {ke}"
            raise TaskFenced(f"{self._ctx}: transaction could not be aborted after {e}: {ke}; the task is "
                             "reopened with a new producer", fatal=True) from e
        raise CommitFailed(f"{self._ctx}: transaction aborted before its commit: {e}", aborted=True) from e

    def _fail(self, e: KafkaException) -> NoReturn:
        err: KafkaError = e.args[0]
        # _FATAL: what commit_transaction raises once a fence came mid-transaction (err.fatal()
        # is False on it): the transaction did not commit, the producer is done.
        if err.fatal() or err.code() in _FENCING_CODES:
            self._unusable = str(err)
            raise TaskFenced(f"{self._ctx}: fenced or fatal producer error: {err}", fatal=True) from e
        errors = self._sender.errors
        detail = f"; failed records: {errors[:3]}" if errors else ""
        if err.txn_requires_abort():
            self._abort_quietly()
            raise CommitFailed(f"{self._ctx}: transaction aborted: {err}{detail}", aborted=True) from e
        raise CommitFailed(f"{self._ctx}: commit outcome unknown: {err}{detail}") from e

    def _abort_quietly(self) -> None:
        try:
            self._producer.abort_transaction(self._timeout)
        except KafkaException as e:
            log.warning("%s: abort_transaction failed: %s", self._ctx, e)

    # -- at least once ------------------------------------------------------------------------

    def close(self) -> None:
        """Flush and drop the Kafka clients (a producer is only destroyed with its last reference,
        and a traceback that keeps this committer alive must not keep the producer connected)."""
        if self._unusable == "closed":
            return
        try:
            if self._collector is not None and self._collector.producer is not None:
                self._producer.flush(self._timeout)
        finally:
            if self._shared is not None:
                self._shared.close()
            else:
                self._consumer.close()
            if self._collector is not None:
                self._collector.producer = None
            self._unusable = "closed"


#: what a fenced or dead producer answers (besides err.fatal())
_FENCING_CODES = (KafkaError._FATAL, KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)


def _flagged_retriable(e: BaseException) -> bool:
    return isinstance(e, KafkaException) and bool(e.args) and bool(e.args[0].retriable())


def _commit_with_retries(producer: Producer, timeout_s: float, context: str) -> None:
    """commit_transaction, again at once after a retriable error, until `timeout_s`.

    Not `kafka_client.retrying`: that backs off between tries and also retries errors that
    librdkafka does not flag retriable; a commit is retried only when the client says so, at
    once, with what is left of one deadline as each call's timeout."""
    deadline = time.monotonic() + timeout_s

    def note(state: RetryCallState) -> None:
        log.warning("%s: commit_transaction retriable error, retrying: %s", context,
                    state.outcome.exception() if state.outcome else "?")

    for attempt in Retrying(retry=retry_if_exception(_flagged_retriable), stop=stop_after_delay(timeout_s),
                            before_sleep=note, reraise=True):
        with attempt:
            producer.commit_transaction(max(1.0, deadline - time.monotonic()))
