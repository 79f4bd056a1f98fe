"""The runner's one transactional producer on the continuous path under exactly-once (Kafka
Streams' StreamsProducer role).

A runner commits all its continuous actives together, one transaction per round, with
``transactional.id = <app>-runner-<key>`` (`runner_transactional_id`; the key is the work's
`ContinuousWork.runner`, which outlives a driver restart on Kubernetes, see protocol/fences.py's
`runner_key`). `RunnerProducer` makes that committer on the loop's pool, keeps it while it is
valid for the work's runner key and fence epoch, and drops it once the driver fenced the runner (a
newer epoch) or it broke; how the driver fences runners is protocol/fences.py.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

from eddy_contract.spec import ProcessingGuarantee
from eddy_runtime.executor.task_metadata import RETRY_AFTER_S
from eddy_runtime.kafka.transactional_ids import runner_transactional_id
from eddy_runtime.kafka.transactions import TaskCommitter
from eddy_runtime.protocol.fences import fence_topic, read_epochs
from eddy_runtime.protocol.work import BatchSettings, ContinuousWork

__all__ = ["RunnerProducer"]

log = logging.getLogger("eddy.continuous")


class RunnerProducer:
    """Owns the runner's committer (its transactional producer) for the continuous path."""

    def __init__(self, executor_id: str) -> None:
        self.executor_id = executor_id
        #: the committer every round commits through, valid up to the fence epoch `epoch`, made
        #: for the runner key `key`
        self.committer: TaskCommitter | None = None
        self.epoch = -1
        self.key = ""
        self._making: Future[None] | None = None
        #: set once a committer was made (or found stale): what a newcomer's first sync waits for
        self.made = threading.Event()
        self._retry_at = 0.0
        #: a committer made under work of this epoch found a newer one in the fence topic
        self.stale_epoch = -1
        #: whether the runner has been without a valid committer since the last one was made (one
        #: dropped: fenced, broken, of an older epoch or key; or one made found stale)
        self.lapsed = False
        #: committers made after such a lapse: the loop lets go of every active it holds before
        #: the first round through each (executor/continuous.py)
        self.made_after_lapse = 0

    def ready(self, work: ContinuousWork, settings: BatchSettings, pool: ThreadPoolExecutor) -> bool:
        """Whether the committer is there and valid for `work`; if not, start making one on `pool`."""
        if self.committer is not None and self.epoch >= work.fence_epoch and self.key == self.key_of(work):
            return True
        if self.committer is not None:  # fenced since, or a new key: a new one, checked again
            self.drop()
        making = self._making
        if making is not None:
            if not making.done():
                return False
            self._making = None
            if making.exception() is not None:
                log.error("making the runner's committer failed: %s", making.exception())
                self._retry_at = time.monotonic() + RETRY_AFTER_S
            return self.committer is not None
        if not self.stale_for(work) and time.monotonic() >= self._retry_at:
            self._making = pool.submit(self.make, work, settings)
        return False

    def stale_for(self, work: ContinuousWork) -> bool:
        """Whether the runner is fenced out of `work`: no committer, and one made for it found a newer
        fence epoch for this runner than the work's; nothing commits under it until newer work comes."""
        return self.committer is None and work.fence_epoch <= self.stale_epoch

    def key_of(self, work: ContinuousWork) -> str:
        """The key `work`'s committer is made for: the work's runner key, or the executor's id."""
        return work.runner or self.executor_id

    def make(self, work: ContinuousWork, settings: BatchSettings) -> None:
        """A committer for this runner's transactional id (its init_transactions fences an earlier
        one), kept only if the fence topic holds no newer epoch for this runner than `work`'s."""
        key = self.key_of(work)
        committer = TaskCommitter(settings.app, runner_transactional_id(key), settings.kafka,
                                  ProcessingGuarantee.EXACTLY_ONCE)
        try:
            epoch = read_epochs(settings.kafka, fence_topic(settings.app)).get(key, 0)
        except Exception:
            committer.close()
            raise
        if epoch > work.fence_epoch:
            log.warning("generation %d is stale here (fence epoch %d, the driver's is %d): committing nothing "
                        "until newer work comes", work.generation, work.fence_epoch, epoch)
            committer.close()
            self.stale_epoch = work.fence_epoch
            self.lapsed = True
            self.made.set()
            return
        log.info("runner committer %s ready for generation %d (fence epoch %d)", key, work.generation,
                 work.fence_epoch)
        if self.lapsed:
            self.made_after_lapse += 1
            self.lapsed = False
        self.committer, self.epoch, self.key = committer, work.fence_epoch, key
        self.made.set()

    def drop_if(self, committer: TaskCommitter) -> None:
        """Drop `committer` if it is still the current one and was fenced or broke."""
        if not committer.usable and self.committer is committer:
            log.warning("the runner's committer was fenced or broke: a new one is made and checked")
            self.drop()

    def drop(self) -> None:
        committer, self.committer = self.committer, None
        if committer is not None:  # a fenced producer's flush may wait: not on the loop's thread
            self.lapsed = True
            threading.Thread(target=_close_dropped, args=(committer,), name="eddy-committer-close",
                             daemon=True).start()

    def close(self) -> None:
        """Close the committer now (the loop has stopped)."""
        if self.committer is not None:
            with contextlib.suppress(Exception):
                self.committer.close()
            self.committer = None


def _close_dropped(committer: TaskCommitter) -> None:
    try:
        committer.close()
    except Exception:  # noqa: BLE001 - a fenced or broken producer: nothing more to save
        log.debug("closing a dropped committer failed", exc_info=True)
