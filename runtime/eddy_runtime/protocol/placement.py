"""Pinned placement of work on Spark executors: who is alive, pinned RDDs, self-checks, job watches.

Spark has no API to say "run partition i on executor E". What works (docs/DESIGN.md, "Placement
facts"): a partition's preferred location ``executor_<host>_<id>`` set
through ``SparkContext.makeRDD(Seq[(T, Seq[String])])`` plus a high ``spark.locality.wait``.
Narrow steps over such an RDD (a DataFrame built on it, ``mapInArrow``, ``select``...) stay on
the executor until the first shuffle.

The driver uses this module as follows (driver/loop.py, driver/spark_plan.py, driver/executor_steps.py):

- `live_executors` before planning: work is only ever planned onto executors alive right now;
- `PinnedSlots` once per assignment: one partition per slot (a task copy on an executor); the
  per-batch work items travel in the closure of the functions applied to it;
- `BatchWatch` around each batch's Spark job: it cancels the job group as soon as one of the
  batch's executors dies, in Spark's word or the operator's (a job pinned to a dead executor would
  otherwise wait for the locality timeout, or silently run elsewhere on the same host);
- inside a task, every piece of work calls `ensure_on_executor` (built on `current_executor_id`)
  before it touches any state: the one check that it runs where it was planned.
"""

from __future__ import annotations

import functools
import logging
import os
import pickle
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "BatchWatch",
    "ExecutorRef",
    "MisplacedTask",
    "PinnedSlots",
    "current_executor_id",
    "ensure_on_executor",
    "executor_alive",
    "executor_hosts",
    "live_executors",
    "wait_for_executors",
]

log = logging.getLogger("eddy.driver")


@dataclass(frozen=True, order=True)
class ExecutorRef:
    """A live Spark executor as the scheduler knows it: its id and the host it registered with."""

    id: str
    host: str

    @property
    def location(self) -> str:
        """The preferred-location string that pins a partition to this executor."""
        return f"executor_{self.host}_{self.id}"


class MisplacedTask(RuntimeError):
    """A work item reached an executor other than the one it was planned for."""


# -- driver side ------------------------------------------------------------------------------


def live_executors(sc: SparkContext) -> list[ExecutorRef]:
    """Executors registered and alive right now (the driver excluded), sorted by id.

    Reads the task scheduler, not the block manager: ``SparkContext.env()`` cannot be reached
    through py4j on pyspark 4.3 (reflection on SparkEnv needs protobuf classes that the pip
    package does not ship).
    """
    jsc = sc._jsc.sc()
    scheduler = jsc.taskScheduler()
    hosts = {info.host() for info in jsc.statusTracker().getExecutorInfos()}
    found: set[ExecutorRef] = set()
    for host in hosts:
        ids = scheduler.getExecutorsAliveOnHost(host)
        if not ids.isDefined():
            continue
        it = ids.get().iterator()
        while it.hasNext():
            executor_id = it.next()
            if executor_id != "driver":
                found.add(ExecutorRef(str(executor_id), host))
    return sorted(found, key=lambda e: _id_key(e.id))


def _id_key(executor_id: str) -> tuple[int, str]:
    return (int(executor_id), "") if executor_id.isdigit() else (1 << 62, executor_id)


def executor_alive(sc: SparkContext, executor_id: str) -> bool:
    """What the driver's scheduler believes (it learns of a dead executor quickly: `BatchWatch`
    polls this)."""
    return bool(sc._jsc.sc().taskScheduler().isExecutorAlive(executor_id))


def wait_for_executors(sc: SparkContext, count: int, timeout: float = 120.0) -> list[ExecutorRef]:
    """Block until at least `count` executors are alive; raise naming what did register."""
    deadline = time.monotonic() + timeout
    while True:
        found = live_executors(sc)
        if len(found) >= count:
            return found
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(found)} of {count} Spark executors alive after {timeout}s: {found}")
        time.sleep(0.2)


class PinnedSlots:
    """An RDD with one partition per slot, partition ``i`` pinned to ``executors[i]``.

    Building it costs py4j round trips, so the driver builds it once per assignment. Each element
    is the slot's index (an ``int``), so a partition function knows its slot, and the per-batch
    work travels in the function's closure.
    """

    def __init__(self, sc: SparkContext, executors: Sequence[ExecutorRef]) -> None:
        from pyspark.rdd import RDD
        from pyspark.serializers import CPickleSerializer

        self.executors: tuple[ExecutorRef, ...] = tuple(executors)
        jvm = sc._jvm
        if jvm is None:
            raise RuntimeError("the SparkContext is stopped")
        convert = jvm.scala.jdk.javaapi.CollectionConverters
        byte_array = jvm.scala.reflect.ClassTag.apply(jvm.java.lang.Class.forName("[B"))
        pairs = jvm.java.util.ArrayList()
        for i, executor in enumerate(self.executors):
            where = jvm.java.util.ArrayList()
            where.add(executor.location)
            pairs.add(jvm.scala.Tuple2(bytearray(pickle.dumps(i)), convert.asScala(where).toList()))
        jrdd = sc._jsc.sc().makeRDD(convert.asScala(pairs).toList(), byte_array)
        java_rdd = jvm.org.apache.spark.api.java.JavaRDD.fromRDD(jrdd, byte_array)
        # Each JVM element is one pickled int: exactly what CPickleSerializer's frames hold.
        self.rdd = RDD(java_rdd, sc, CPickleSerializer())

    def __len__(self) -> int:
        return len(self.executors)

    def run(self, fn: Callable[[int], Iterable[Any]]) -> list[Any]:
        """Run ``fn(slot)`` in every slot's partition, on its executor, and collect what it yields."""

        def partition(index: int, slots: Iterable[int]) -> Iterable[Any]:
            # Drain the input: a partially read iterator stops Spark from reusing the worker.
            for slot in list(slots):
                yield from fn(slot)

        found: list[Any] = self.rdd.mapPartitionsWithIndex(partition).collect()
        return found

    def dataframe(self, spark: SparkSession) -> DataFrame:
        """A one-column DataFrame (``slot int``), one row per partition, still pinned."""
        return spark.createDataFrame(self.rdd.map(lambda i: (i,)), "slot int")


class BatchWatch:
    """Run a Spark job under a job group and cancel it when one of `executors` dies.

    Use as a context manager around the action (e.g. ``collect()``) in the thread that runs it:
    job groups are per thread. After the block, `lost` names the executor that died (None if
    none did); the action itself then raised Spark's cancellation error.
    """

    def __init__(self, sc: SparkContext, group: str, executors: Iterable[str], poll_s: float = 0.1,
                 description: str = "", on_lost: Callable[[str], None] | None = None,
                 gone: Callable[[], Collection[str]] = tuple) -> None:
        self.sc = sc
        #: executors known dead by other means than Spark's scheduler (the operator's word): Spark
        #: learns of a node that died without a word only minutes later
        self.gone = gone
        #: called with the executor that died, on a thread of its own while the job is cancelled
        self.on_lost = on_lost
        self.group = group
        self.executors = tuple(sorted(set(executors)))
        self.poll_s = poll_s
        self.description = description or group
        self.lost: str | None = None
        self.cancelled_reason: str | None = None
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._warned = False

    def __enter__(self) -> BatchWatch:
        self.sc.setJobGroup(self.group, self.description, interruptOnCancel=True)
        self._thread = threading.Thread(target=self._watch, name=f"watch-{self.group}", daemon=True)
        self._thread.start()
        return self

    def cancel(self, reason: str) -> None:
        """Cancel the batch from outside (e.g. a stop request)."""
        if self.cancelled_reason is None:
            self.cancelled_reason = reason
            self.sc.cancelJobGroup(self.group)

    def _watch(self) -> None:
        while not self._done.wait(self.poll_s):
            if self.cancelled_reason is not None:
                # Cancelling a group only reaches jobs already submitted: the action may submit
                # its job after the executor died, so keep cancelling until the block ends.
                self.sc.cancelJobGroup(self.group)
                continue
            gone = self.gone()
            for executor_id in self.executors:
                try:
                    alive = executor_id not in gone and executor_alive(self.sc, executor_id)
                except Exception as e:  # noqa: BLE001 - a py4j hiccup under load, or the context stopping
                    if self.sc._jsc is None:
                        return  # stopped: nothing left to watch
                    # Never stop watching while the job runs: a job pinned to an executor that
                    # dies unwatched waits for the locality timeout (an hour).
                    if not self._warned:
                        log.warning("%s: could not ask whether executor %s lives (%s); asking again",
                                    self.description, executor_id, e)
                        self._warned = True
                    break
                if not alive:
                    self.lost = executor_id
                    log.info("%s: executor %s died; cancelling it", self.description, executor_id)
                    if self.on_lost is not None:  # beside the cancel, which takes a while under load
                        threading.Thread(target=self._react, args=(executor_id,), name=f"lost-{executor_id}",
                                         daemon=True).start()
                    self.cancel(f"executor {executor_id} died")
                    break

    def _react(self, executor_id: str) -> None:
        assert self.on_lost is not None
        try:
            self.on_lost(executor_id)
        except Exception:  # noqa: BLE001 - the batch after this one re-plans anyway
            log.exception("reacting to the loss of executor %s", executor_id)

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        self.sc._jsc.clearJobGroup()


# -- executor side ----------------------------------------------------------------------------


@functools.cache
def _executor_jvm() -> tuple[int, list[bytes]] | None:
    """(pid, command line) of the executor JVM above this process, found by walking up /proc."""
    pid = os.getpid()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None
        if b"--executor-id" in args:
            return pid, args
        pid = parent
    return None


#: What Spark's `statefulset` allocator passes as ``--executor-id`` and ``SPARK_EXECUTOR_ID``: the
#: executor JVM asks the driver for its id when it registers (``GenerateExecID``), so nothing in the
#: pod's environment names it.
GENERATED_ID = "EXECID"


@functools.cache
def _launch_executor_id() -> str | None:
    """The executor id this process's executor JVM was launched with, if any."""
    env = os.environ.get("SPARK_EXECUTOR_ID")
    if env:
        return env
    jvm = _executor_jvm()
    if jvm is None:
        return None
    args = jvm[1]
    i = args.index(b"--executor-id")
    return args[i + 1].decode() if i + 1 < len(args) else None


def executor_hosts(executors: Iterable[ExecutorRef]) -> dict[str, str]:
    """Host -> executor id, for the hosts that carry exactly one executor (every Kubernetes
    executor pod has an address of its own; local-cluster executors share 127.0.0.1)."""
    executors = list(executors)
    per_host = Counter(e.host for e in executors)
    return {e.host: e.id for e in executors if per_host[e.host] == 1}


def current_executor_id(hosts: Mapping[str, str] | None = None) -> str | None:
    """The id of the Spark executor this Python process works for (None if unknown).

    Kubernetes executors export ``SPARK_EXECUTOR_ID``; in ``local-cluster`` mode nothing does,
    and the executor JVM's ``--executor-id`` argument tells it. Executors of Spark's
    ``statefulset`` allocator get their id from the driver only when they register, so there
    the driver's `hosts` map (`executor_hosts`, shipped with the work) names the executor that
    registered with this pod's address (``SPARK_EXECUTOR_POD_IP``).
    """
    launched = _launch_executor_id()
    if launched != GENERATED_ID:
        return launched
    ip = os.environ.get("SPARK_EXECUTOR_POD_IP")
    return (hosts or {}).get(ip) if ip else None


def executor_jvm_pid() -> int | None:
    """The pid of the executor JVM above this process (to notice when it dies), if found."""
    jvm = _executor_jvm()
    return jvm[0] if jvm is not None else None


def ensure_on_executor(expected: str, what: str, hosts: Mapping[str, str] | None = None, *,
                       unknown_ok: bool = False) -> None:
    """Raise `MisplacedTask` unless this process belongs to executor `expected`: the one check
    every piece of work makes before it touches state.

    `unknown_ok`: a process that cannot tell its executor trusts `expected` (the task runner,
    started with its executor's id, once the worker that started it is gone).
    """
    here = current_executor_id(hosts)
    if here == expected or (here is None and unknown_ok):
        return
    raise MisplacedTask(f"{what} was planned for executor {expected} but runs on executor {here}")
