"""Transactional ids, and fencing one.

A task that commits on its own has ``transactional.id = <app>-<task>``; a runner that commits
its continuous tasks together under exactly-once has ``<app>-runner-<executor>``
(`runner_transactional_id`; executor/producer.py, protocol/fences.py). `fence_transactional_id`
fences whoever produces with an id and aborts its open transaction.
"""

from __future__ import annotations

import threading
import time

from confluent_kafka import KafkaException

from eddy_runtime.kafka import client as kafka_client
from eddy_runtime.kafka.client import KafkaClientConfig
from eddy_runtime.kafka.commit_types import CommitFailed

__all__ = ["fence_transactional_id", "runner_transactional_id", "transactional_id"]


def transactional_id(app: str, task_id: str) -> str:
    """``<app>-<task>``: a task's transactional id (a runner's too, `runner_transactional_id`)."""
    return f"{app}-{task_id}"


def runner_transactional_id(executor: str) -> str:
    """The task id under which an executor's runner commits its continuous tasks together
    (``transactional.id = <app>-runner-<executor>``, executor/continuous.py)."""
    return f"runner-{executor}"


#: while no producer has fenced a transactional id, another one starts this long after the last
FENCE_STAGGER_S = 0.1
#: how long a fence attempt but the last waits in init_transactions: less than the 500 ms after
#: which librdkafka asks again once the coordinator answered CONCURRENT_TRANSACTIONS, so that it
#: is gone before it could fence anything later
FENCE_ATTEMPT_S = 0.45
#: fence attempts before the last one, which waits for the rest of the timeout
FENCE_QUICK_ATTEMPTS = 3


def fence_transactional_id(kafka: KafkaClientConfig | str, app: str, task_id: str, timeout_s: float = 60.0) -> None:
    """Fence whoever produces with `task_id`'s transactional id and abort its open transaction: a
    producer of that id initialised, then dropped. Its records become visible (or not) at once
    instead of holding read_committed readers until the transaction times out.

    The first InitProducerId for an id with a transaction open starts its abort and is answered
    CONCURRENT_TRANSACTIONS until the markers are written, a few milliseconds; librdkafka asks
    again only after a fixed 500 ms (rdkafka_idempotence.c), which was most of a fence and so
    of a failover. So while none has fenced, another producer starts every `FENCE_STAGGER_S`:
    one that starts after the abort fences at once. The attempts but the last give up (and are
    dropped) before librdkafka would ask again; one still under way when another fenced may
    fence once more, which costs the id's next owner one round (it makes a new committer)."""
    tid = transactional_id(app, task_id)
    deadline = time.monotonic() + timeout_s
    fenced = threading.Event()
    errors: list[str] = []

    def attempt(n: int, wait_s: float) -> None:
        try:
            producer = kafka_client.producer(kafka, {"transactional.id": tid, "enable.idempotence": True,
                                                     "client.id": f"{tid}-fence-{n}"})
        except Exception as e:  # noqa: BLE001 - raised by the caller as the fence's failure
            errors.append(f"{type(e).__name__}: {e}")
            return
        try:
            producer.init_transactions(wait_s)
            fenced.set()
        except KafkaException as e:
            errors.append(str(e))
        finally:
            producer.flush(1)

    attempts: list[threading.Thread] = []
    for n in range(FENCE_QUICK_ATTEMPTS + 1):
        last = n == FENCE_QUICK_ATTEMPTS
        wait_s = max(deadline - time.monotonic(), 0.1) if last else FENCE_ATTEMPT_S
        thread = threading.Thread(target=attempt, args=(n, wait_s), name=f"eddy-fence-{n}", daemon=True)
        thread.start()
        attempts.append(thread)
        if fenced.wait(0.0 if last else FENCE_STAGGER_S):
            return
    while not fenced.wait(0.05) and any(t.is_alive() for t in attempts) and time.monotonic() < deadline:
        pass
    if not fenced.is_set():
        raise CommitFailed(f"fencing transactional id {tid}: {errors[-1] if errors else 'timed out'}")
