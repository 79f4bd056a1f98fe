"""Fencing the runners' transactions on the continuous path under exactly-once (executor/continuous.py;
docs/DESIGN.md, "Runner transactions").

A runner commits all its continuous actives together, one Kafka transaction per commit interval
(``transactional.id = <app>-runner-<executor>``), as a Kafka Streams stream thread does. Kafka
Streams fences a zombie thread through its consumer group's generation (KIP-447); Eddy's driver
owns the assignment instead of a consumer group, so it fences with a topic of its own:

- ``<app>-eddy-fences`` (compacted, one partition) maps each runner to its fence epoch. Only the
  driver writes it. A runner is known by its key (`runner_key`): its executor's id where several
  executors share a host (local mode), its executor's host (the pod's address) on Kubernetes, where
  a runner outlives its executor JVM and a driver restart, and goes on under a new executor id.
- Before any runner hears of a generation in which executor A no longer holds a continuous active
  it held, the driver first asks A's runner, if A is live, to let those tasks go (protocol/work_push.py,
  `ContinuousLoop.release`): A stops processing them, waits for the round holding them to commit
  and closes them. A that answers so in time keeps its epoch and its committer, as a Kafka Streams
  thread that revokes a task in a cooperative rebalance does. Otherwise (A died, does not answer,
  or a round holding them did not commit cleanly) the driver raises A's epoch, writes it, then
  fences A's transactional id (a producer of that id initialised: A's open transaction is aborted
  and A's producer can no longer commit).
- Each generation's work for A carries A's epoch. A runner that makes a committer (its
  ``init_transactions``) reads its epoch from the topic afterwards: above the epoch of the work it
  holds means a later generation fenced it first, so its work is stale and it commits nothing
  until newer work comes. Otherwise any later fence comes after the committer was made, and
  fences it.
- A driver that starts takes the epochs it finds in the topic, and fences nothing yet: the runners
  of an earlier driver may still be processing (on Kubernetes they outlive it). Before its first
  generation reaches any runner, each of them is taken to hold any continuous active: it is asked
  to let go of every active the generation gives to another runner, and fenced if it does not
  answer so in time (the driver asks only the runners of executors registered with it: one on a
  pod that is gone is fenced without waiting for an answer). A runner that the generation leaves its
  tasks goes on without a pause; one that died is fenced, as before, so that none keeps a
  transaction open or commits again.
- A driver that carries out a state reset of an upgrade (driver/upgrade_gate.py) fences every
  runner of an earlier driver at once instead (`fence_earlier`), before it deletes a changelog or
  moves a committed position: none of them commits again, whatever the first generation gives it.
- While no driver runs, the operator carries out a failover itself (operator/eddy_operator/driverless.py):
  it asks a live runner to fence the lost ones (`fence_for_generation`) before it hands the
  generation to the runners. The driver and that runner may both fence a runner for the same
  generation, so a fence for generation G raises an epoch to at least G (`raised_epoch`): either
  writes the same value, and the epochs a driver keeps are never below the topic's. A driver reads
  the topic again before its first generation, for what was fenced while it started.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from confluent_kafka import OFFSET_BEGINNING, KafkaException, Producer, TopicPartition

from eddy_runtime.kafka import client as kafka_client
from eddy_runtime.kafka.client import KafkaClientConfig
from eddy_runtime.kafka.transactional_ids import fence_transactional_id, runner_transactional_id

__all__ = ["FenceBook", "fence_for_generation", "fence_topic", "raised_epoch", "read_epochs", "runner_key"]

log = logging.getLogger(__name__)


def fence_topic(app: str) -> str:
    """The app's fence topic (driver/app_topics.py creates it)."""
    return f"{app}-eddy-fences"


def runner_key(executor: str, host: str, per_executor_state_dirs: bool) -> str:
    """The key a runner's transactional id and fence epoch are kept under: the executor's id where
    executors share a host and each has its own state directory (local mode: a runner ends with
    its executor JVM), the executor's host otherwise (a Kubernetes pod's address: its runner
    outlives the JVM and a driver restart, and keeps its key while the executor id changes)."""
    return executor if per_executor_state_dirs or not host else host


def read_epochs(kafka: KafkaClientConfig | str, topic: str, timeout_s: float = 30.0) -> dict[str, int]:
    """Every executor's latest fence epoch in `topic` (read to its end as of now)."""
    consumer = kafka_client.consumer(kafka, {"group.id": f"{topic}-reader", "enable.auto.commit": False,
                                             "isolation.level": "read_committed"})
    try:
        _, high = kafka_client.retrying(  # a topic just created may not have its leader yet
            lambda: consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout_s),
            f"reading the end of {topic}")
        epochs: dict[str, int] = {}
        if high <= 0:
            return epochs
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout_s
        position = 0
        while position < high:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic} to offset {high} took over {timeout_s}s")
            m = consumer.poll(0.2)
            if m is None:
                continue
            if m.error() is not None:
                raise KafkaException(m.error())
            position = (m.offset() or 0) + 1
            key, value = m.key(), m.value()
            if key is not None and value is not None:
                epochs[key.decode()] = int(value)
        return epochs
    finally:
        consumer.close()


def raised_epoch(epoch: int, generation: int | None) -> int:
    """A runner's fence epoch once fenced for `generation` (None: for no generation, a state
    reset's `fence_earlier`): above `epoch`, and at least the generation, so that a driver and the
    operator's driverless failover that both fence a runner for one generation write one value."""
    return max(epoch + 1, generation or 0)


def _write_epochs(producer: Producer, topic: str, epochs: Mapping[str, int], timeout_s: float) -> None:
    if not epochs:
        return
    errors: list[str] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    for runner, epoch in epochs.items():
        producer.produce(topic, str(epoch).encode(), runner.encode(), on_delivery=delivered)
    remaining = producer.flush(timeout_s)
    if remaining or errors:
        raise RuntimeError(f"writing fence epochs to {topic} failed: {remaining} undelivered, {errors[:3]}")


def _fence_ids(kafka: KafkaClientConfig | str, app: str, runners: Collection[str], timeout_s: float) -> None:
    """Fence the runner transactions of `runners` (their epochs written first), all at once."""
    with ThreadPoolExecutor(max_workers=min(8, len(runners))) as pool:
        for done in [pool.submit(fence_transactional_id, kafka, app, runner_transactional_id(r), timeout_s)
                     for r in runners]:
            done.result()


def fence_for_generation(kafka: KafkaClientConfig | str, app: str, generation: int, runners: Collection[str],
                         timeout_s: float = 30.0) -> dict[str, int]:
    """Fence `runners` for `generation` with no driver there (the operator's driverless failover,
    asked of a live runner): each epoch in the topic below the generation is raised to it, then
    each runner's transactional id is fenced (its open transaction aborted; it commits no more). A
    runner the topic already has at the generation or above was fenced for it (or later) by a
    driver: it is not raised again, only its transactional id fenced. The epochs written."""
    if not runners:
        return {}
    epochs = read_epochs(kafka, fence_topic(app), timeout_s)
    raised = {r: generation for r in runners if epochs.get(r, 0) < generation}
    producer = kafka_client.producer(kafka, {"acks": "all", "enable.idempotence": True, "linger.ms": 0})
    try:
        _write_epochs(producer, fence_topic(app), raised, timeout_s)
    finally:
        producer.flush(5)
    _fence_ids(kafka, app, runners, timeout_s)
    log.info("generation %d (no driver): fenced the runner transactions of %s (epochs raised: %s)",
             generation, sorted(runners), raised)
    return raised


class FenceBook:
    """The driver's side: who held which continuous active, each executor's epoch, and the fences."""

    def __init__(self, kafka: KafkaClientConfig | str, app: str, timeout_s: float = 60.0) -> None:
        """Keys are runner keys (`runner_key`)."""
        self.kafka = kafka
        self.app = app
        self.topic = fence_topic(app)
        self._timeout = timeout_s
        self._producer: Producer | None = kafka_client.producer(
            kafka, {"acks": "all", "enable.idempotence": True, "linger.ms": 0})
        self._lock = threading.Lock()
        #: executor -> fence epoch (written to the topic before any work carries it)
        self._epochs: dict[str, int] = {}
        #: task -> the runner that last held it as active
        self._holders: dict[str, str] = {}
        #: the runners of an earlier driver, until this driver's first generation: any may hold any active
        self._earlier: set[str] = set()
        self._generation = -1

    def start(self) -> None:
        """Take the epochs the topic holds (an earlier driver's runners); they are asked to let go,
        or fenced, before the first generation (see the module's docstring)."""
        found = read_epochs(self.kafka, self.topic, self._timeout)
        with self._lock:
            self._epochs.update(found)
            self._earlier = set(found)
            if found:
                log.info("runners of an earlier driver: %s (asked to let go, or fenced, before the first "
                         "generation)", sorted(found))

    def fence_earlier(self) -> list[str]:
        """Fence every runner of an earlier driver now (`start` read them), instead of asking them
        to let go before the first generation: a state reset must know that none of them commits
        again before it drops state. The runners fenced."""
        with self._lock:
            earlier = sorted(self._earlier)
            if earlier:
                log.info("fencing the runner transactions of every runner of an earlier driver: %s", earlier)
                self._fence(earlier)
            self._earlier.clear()
            return earlier

    def epochs(self) -> dict[str, int]:
        with self._lock:
            return dict(self._epochs)

    def holders(self) -> dict[str, str]:
        """Task -> the runner that held it as active in this driver's last generation (none before
        its first)."""
        with self._lock:
            return dict(self._holders)

    def before_generation(self, generation: int, actives: Mapping[str, str],
                          release: Callable[[Mapping[str, Sequence[str]]], Collection[str]] | None = None) -> None:
        """Before any runner hears of `generation` (`actives`: each continuous task's active
        executor in it): each executor that held one of them last and holds it no longer either
        lets them go (`release`: executor -> the tasks it loses; gives back the executors that
        did so cleanly) or is fenced; so does, before the first generation, each runner of an
        earlier driver, for every active that `actives` gives to another runner. Once per
        generation; a second caller waits for the first."""
        with self._lock:
            if generation <= self._generation:
                return
            if self._generation < 0:
                # what the operator fenced while this driver started (operator/eddy_operator/driverless.py)
                for runner, epoch in read_epochs(self.kafka, self.topic, self._timeout).items():
                    self._epochs[runner] = max(epoch, self._epochs.get(runner, 0))
            losing: dict[str, list[str]] = {}
            for task, old in sorted(self._holders.items()):
                if actives.get(task) != old:
                    losing.setdefault(old, []).append(task)
            for runner in sorted(self._earlier):
                held = set(losing.get(runner, ()))
                held.update(task for task, active in actives.items() if active != runner)
                if held:
                    losing[runner] = sorted(held)
            fresh = {e for e in actives.values() if e not in self._epochs and e not in losing}
            # named in the topic, so that a later driver fences them
            self._write({e: 0 for e in fresh})
            self._epochs.update({e: 0 for e in fresh})
            released = set(release(losing)) if release is not None and losing else set()
            if released:
                log.info("generation %d: %s let their tasks go", generation, sorted(released))
            losers = set(losing) - released
            if losers:
                log.info("generation %d: fencing the runner transactions of %s", generation, sorted(losers))
                self._fence(losers, generation)
            # Only once every fence is done (a failure raises, and the next call fences again).
            self._holders = dict(actives)
            self._earlier.clear()
            self._generation = generation

    def _fence(self, executors: Iterable[str], generation: int | None = None) -> None:
        raised = {e: raised_epoch(self._epochs.get(e, 0), generation) for e in executors}
        self._write(raised)  # first the epochs, then the fences (see the module's docstring)
        self._epochs.update(raised)
        _fence_ids(self.kafka, self.app, list(raised), self._timeout)

    def _write(self, epochs: Mapping[str, int]) -> None:
        producer = self._producer
        if producer is None:
            raise RuntimeError(f"the fences of {self.app} are closed")
        _write_epochs(producer, self.topic, epochs, self._timeout)

    def close(self) -> None:
        """Drop the producer (a producer disconnects only when its last reference goes)."""
        producer, self._producer = self._producer, None
        if producer is not None:
            producer.flush(5)
