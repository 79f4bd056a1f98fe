"""The task runner: the one process per executor (and state directory) that owns its tasks' stores.

Why a process of its own. The three options DESIGN.md lists, measured on this 2-core machine
(under load; one key-value store, exactly-once, local broker):

- open per batch: ``ProcessorStateManager.open`` of an exactly-once active takes ~590 ms
  (``init_transactions``, changelog offsets, RocksDB) and ``close`` ~25 ms, for every task and
  batch; a commit on an open manager takes ~16 ms. Ruled out.
- one core per executor, handles cached in Python workers: a DataFrame task runs a Python step on
  each side of the user's steps, i.e. two workers at once, and either may serve a task next
  batch, so a cached handle finds the task's lock held by the other worker. Ruled out.
- one long-lived process per executor (this module): a round trip costs ~1 ms, ~80 ms with a
  100k-row Arrow table; stores, producers (transactions initialised once) and consumers stay open
  across batches, and nothing else ever opens the executor's stores. Chosen.

Who calls it: `RunnerClient.call` in Spark tasks (driver.py's partition functions), which
starts the runner on first use (detached, in its own session) and reconnects if it died. The
runner exits when its executor JVM does (it polls the pid), closing its stores cleanly, or on a
`shutdown` request.

Requests (pickled tuples): ``("run", program_id, program_or_None, settings, slot, data)`` ->
list of `ItemResult`; ``("stash", batch_id, task, bad_records, read)`` keeps what a read
step found (bad records, records read) for the sink of the same batch; ``("close", None)`` closes every task;
``("shutdown",)`` closes every task and exits (the driver sends it when it stops).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import logging
import os
import pickle
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from eddy_runtime.commit import CommitFailed, OutputRecord, TaskFenced
from eddy_runtime.compiler import SubTopology
from eddy_runtime.metrics import ExecutorMetrics
from eddy_runtime.operators import BatchOutput, PipelineRuntimeError, TaskState, apply_table_updates, process_batch
from eddy_runtime.placement import current_executor_id, executor_jvm_pid
from eddy_runtime.records import BadRecord, RawRecords, decode_repartition, decode_source, range_reader
from eddy_runtime.state import ProcessorStateManager, TaskDirectoryLocked
from eddy_runtime.work import (
    LATENCY_BUCKETS_S,
    BadRecordInfo,
    BatchSettings,
    InputRange,
    ItemResult,
    SlotWork,
    WorkItem,
)

__all__ = [
    "METRICS_ADDRESS_FILE",
    "RunnerClient",
    "TaskRunner",
    "bad_record_output",
    "latency_histogram",
    "runner_address",
]

log = logging.getLogger("eddy.runner")

_PROTOCOL = 5


def runner_address(state_dir: str) -> str:
    """An abstract Unix socket name (no file, no path-length limit) unique to the state directory."""
    digest = hashlib.sha256(os.path.realpath(state_dir).encode()).hexdigest()[:24]
    return f"\0eddy-runner-{digest}"


def latency_histogram(latencies_s: np.ndarray) -> tuple[tuple[int, ...], float]:
    """Counts per `LATENCY_BUCKETS_S` bucket (upper bounds, plus one overflow) and the sum."""
    if latencies_s.size == 0:
        return (), 0.0
    idx = np.searchsorted(np.asarray(LATENCY_BUCKETS_S), latencies_s, side="left")
    counts = np.bincount(idx, minlength=len(LATENCY_BUCKETS_S) + 1)
    return tuple(int(c) for c in counts), float(latencies_s.sum())


def bad_record_output(settings: BatchSettings, task: str, bad: BadRecord) -> OutputRecord:
    """The dead-letter record of `bad`: the original key and value, the error in headers."""
    assert settings.dead_letter_topic is not None
    headers = [
        ("eddy.error", bad.error.encode()),
        ("eddy.error.stage", bad.stage.encode()),
        ("eddy.source.topic", bad.topic.encode()),
        ("eddy.source.partition", str(bad.partition).encode()),
        ("eddy.source.offset", str(bad.offset).encode()),
        ("eddy.task", task.encode()),
        ("eddy.app", settings.app.encode()),
    ]
    return OutputRecord(settings.dead_letter_topic, bad.key, bad.value, None, headers,
                        bad.timestamp if bad.timestamp > 0 else None)


class _Task:
    """A task the runner holds: its state manager, what it keeps between batches, its lock."""

    def __init__(self, manager: ProcessorStateManager) -> None:
        self.manager = manager
        self.state = TaskState()
        self.lock = threading.Lock()
        #: input positions this runner committed (or found committed when it opened the task)
        self.positions: dict[tuple[str, int], int] | None = None


class TaskRunner:
    """Runs work items against the tasks it holds; one instance per runner process."""

    def __init__(self, executor_id: str, state_dir: str, metrics: ExecutorMetrics | None = None) -> None:
        self.executor_id = executor_id
        self.state_dir = state_dir
        self.metrics = metrics
        self._tasks: dict[str, _Task] = {}
        self._tasks_lock = threading.Lock()
        self._programs: dict[str, dict[int, SubTopology]] = {}
        #: (batch, task) -> bad records and the count of records a read step read for the sink
        self._stash: dict[tuple[int, str], tuple[list[BadRecord], int]] = {}

    # -- requests -----------------------------------------------------------------------------

    def handle(self, request: tuple[Any, ...]) -> Any:
        kind = request[0]
        if kind == "run":
            _, program_id, program, settings, slot, data = request
            if program is not None:
                self._programs[program_id] = {s.id: s for s in pickle.loads(program)}
            elif program_id not in self._programs:
                return "need-program"
            return self.run(self._programs[program_id], settings, slot, data)
        if kind == "stash":
            _, batch_id, task, records, read = request
            self._stash[(batch_id, task)] = (list(records), read)
            # Old batches' leftovers (a sink that never came) must not pile up.
            for key in [k for k in self._stash if k[0] < batch_id - 10]:
                del self._stash[key]
            return "ok"
        if kind == "close":
            self.close_all()
            return "ok"
        if kind == "ping":
            return ("pong", self.executor_id, os.getpid())
        raise ValueError(f"unknown request {kind!r}")

    def run(self, subs: dict[int, SubTopology], settings: BatchSettings, slot: SlotWork,
            data: pa.Table | BatchOutput | None) -> list[ItemResult]:
        if slot.held is not None:
            self._release_unheld(dict(slot.held))
        results = []
        for item in slot.items:
            started = time.monotonic()
            result = self._run_item(subs, settings, slot, item, data)
            results.append(_with_duration(result, time.monotonic() - started))
        if self.metrics is not None:
            self.metrics.observe(settings.app, results)
        return results

    # -- tasks --------------------------------------------------------------------------------

    def _release_unheld(self, held: dict[str, str]) -> None:
        with self._tasks_lock:
            gone = [t for t in self._tasks if t not in held]
        for task in gone:
            self._close(task, "no longer assigned here")

    def _close(self, task_id: str, why: str) -> None:
        with self._tasks_lock:
            t = self._tasks.pop(task_id, None)
        if t is None:
            return
        with t.lock:
            log.info("closing task %s (%s): %s", task_id, t.manager.role, why)
            if self.metrics is not None:
                self.metrics.forget(t.manager.app, task_id, list(t.manager.stores))
            try:
                t.manager.close()
            except Exception:  # noqa: BLE001 - the lock is released by close() even on errors
                log.exception("closing task %s failed", task_id)

    def close_all(self) -> None:
        for task in list(self._tasks):
            self._close(task, "runner closing")

    def _task(self, settings: BatchSettings, sub: SubTopology, task_id: str, role: str) -> _Task:
        """The held task in `role`: opened, promoted from standby, or reopened as a standby."""
        with self._tasks_lock:
            t = self._tasks.get(task_id)
        if t is not None and t.manager.role == role:
            return t
        if t is not None and role == "active":
            with t.lock:
                log.info("promoting task %s from standby", task_id)
                t.manager.promote()
                t.positions = None
                return t
        if t is not None:
            self._close(task_id, "becomes a standby here")
        manager = ProcessorStateManager.open(
            settings.app,
            task_id,
            list(sub.stores),
            settings.state_dir_for(self.executor_id),
            settings.kafka,
            role=role,  # type: ignore[arg-type]
            guarantee=settings.guarantee,
            lock_timeout=5.0,
        )
        log.info("opened task %s as %s", task_id, role)
        t = _Task(manager)
        for spec in sub.stores:
            if spec.kind == "window":
                st = manager.store(spec.name).offsets.stream_time
                t.state.stream_time = st
        with self._tasks_lock:
            self._tasks[task_id] = t
        return t

    # -- one item -------------------------------------------------------------------------------

    def _run_item(self, subs: dict[int, SubTopology], settings: BatchSettings, slot: SlotWork, item: WorkItem,
                  data: pa.Table | BatchOutput | None) -> ItemResult:
        base = {"task": item.task, "executor": slot.executor, "role": item.role}
        here = current_executor_id() or self.executor_id
        if slot.executor != self.executor_id or here != self.executor_id:
            return ItemResult(**base, status="misplaced",
                              message=f"planned for executor {slot.executor}, runner of executor {here}")
        sub = subs[int(item.task.split("_")[0])]
        try:
            t = self._task(settings, sub, item.task, item.role)
        except TaskDirectoryLocked as e:
            return ItemResult(**base, status="locked", message=str(e))
        except CommitFailed as e:  # init_transactions failed
            return ItemResult(**base, status="failed", message=f"opening task {item.task}: {e}")
        except Exception as e:  # noqa: BLE001 - reported to the driver, which decides
            log.exception("opening task %s failed", item.task)
            return ItemResult(**base, status="failed", message=f"opening task {item.task}: {type(e).__name__}: {e}")
        with t.lock:
            try:
                if item.role == "standby":
                    progress = t.manager.standby_chunk(max_seconds=settings.standby_chunk_seconds)
                    return ItemResult(**base, status="standby", figures=t.manager.figures(),
                                      restored=progress.restored, restore_remaining=progress.remaining)
                return self._active(settings, sub, item, t, data, base)
            except TaskFenced as e:
                self._close_quietly(item.task)
                return ItemResult(**base, status="fenced", message=str(e))
            except CommitFailed as e:
                status = "aborted" if e.aborted else "failed"
                t.positions = None
                return ItemResult(**base, status=status, message=str(e))
            except PipelineRuntimeError as e:
                return ItemResult(**base, status="failed", message=f"pipeline error: {e}")
            except Exception as e:  # noqa: BLE001
                log.exception("task %s failed", item.task)
                self._close_quietly(item.task)
                return ItemResult(**base, status="failed",
                                  message=f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=8)}")

    def _close_quietly(self, task_id: str) -> None:
        with self._tasks_lock:
            t = self._tasks.pop(task_id, None)
        if t is not None:
            if self.metrics is not None:
                self.metrics.forget(t.manager.app, task_id, list(t.manager.stores))
            try:
                t.manager.close()
            except Exception:  # noqa: BLE001
                log.exception("closing task %s failed", task_id)

    def _active(self, settings: BatchSettings, sub: SubTopology, item: WorkItem, t: _Task,
                data: pa.Table | BatchOutput | None, base: dict[str, Any]) -> ItemResult:
        mgr = t.manager
        if not mgr.restored:
            progress = mgr.restore_chunk(max_records=settings.restore_chunk_records,
                                         max_seconds=settings.restore_chunk_seconds)
            return ItemResult(**base, status="restoring", figures=mgr.figures(), restored=progress.restored,
                              restore_remaining=progress.remaining)
        if t.positions is None:
            t.positions = self._committed(mgr, item.ranges)
        stale = [r for r in item.ranges if t.positions.get((r.topic, r.partition), 0) != r.start]
        if stale:
            return ItemResult(**base, status="aborted", figures=mgr.figures(),
                              message=f"stale plan: {[(r.topic, r.partition, r.start) for r in stale]} but "
                                      f"committed positions are {t.positions}")
        if item.restore_only or all(r.empty for r in item.ranges):
            return ItemResult(**base, status="processed", figures=mgr.figures())
        bad, records_read = self._stash.pop((settings.batch_id, item.task), ([], 0))
        reader = range_reader(settings.kafka)
        source = item.ranges[0]
        raw_source: RawRecords | None = None
        precomputed: BatchOutput | None = None
        if data is None:
            raw_source = reader.read(source, settings.read_timeout_s)
            if sub.source.repartition:
                rows, bad_rows = decode_repartition(raw_source, sub.source.key_serde, sub.source.combined,
                                                    sub.source.combined_column)
            else:
                rows, bad_rows = decode_source(raw_source, sub.source.key_serde, sub.source.value_serde)
            bad.extend(bad_rows)
            records_in = len(raw_source)
        else:
            # A stateless sub-topology's sink step already ran its sinks (driver._sink_step).
            precomputed = data if isinstance(data, BatchOutput) else None
            rows = pa.table({}) if precomputed is not None else data
            records_in = records_read
        if bad and settings.bad_record_policy == "fail":
            return self._stop_at(base, bad, mgr)
        tx = mgr.transaction()
        if sub.table is not None and len(item.ranges) > 1:
            raw_table = reader.read(item.ranges[1], settings.read_timeout_s)
            records_in += len(raw_table)
            for offset, err in apply_table_updates(sub.table, raw_table, tx):
                i = raw_table.offsets.index(offset)
                bad.append(BadRecord(raw_table.topic, raw_table.partition, offset, raw_table.timestamps[i],
                                     raw_table.keys[i], raw_table.values[i], err, "deserialize"))
            if bad and settings.bad_record_policy == "fail":
                return self._stop_at(base, bad, mgr)
        if precomputed is not None:
            out = precomputed
        else:
            out = process_batch(sub, rows, tx, t.state) if rows.num_rows else BatchOutput()
        if out.failed_rows:
            bad.extend(_failed_row_records(source, rows, raw_source, out.failed_rows, reader, settings))
            if settings.bad_record_policy == "fail":
                return self._stop_at(base, bad, mgr)
        outputs = out.outputs
        dead = 0
        if bad and settings.bad_record_policy == "dead-letter":
            outputs = outputs + [bad_record_output(settings, item.task, b) for b in bad]
            dead = len(bad)
        for b in bad:
            log.warning("app %s task %s: bad record %s[%d]@%d (%s): %s", settings.app, item.task, b.topic,
                        b.partition, b.offset, "dead-lettered" if dead else "skipped", b.error)
        input_offsets = {(r.topic, r.partition): r.end for r in item.ranges}
        mgr.commit(tx, outputs, input_offsets)
        t.positions.update(input_offsets)
        committed_at = time.time() * 1000
        counts: tuple[int, ...] = ()
        total = 0.0
        if out.output_timestamps:
            lat = (committed_at - np.concatenate(out.output_timestamps)) / 1000.0
            counts, total = latency_histogram(np.maximum(lat, 0.0))
        return ItemResult(
            **base,
            status="processed",
            records_in=records_in,
            records_out=len(out.outputs),
            committed=input_offsets,
            skipped=len(bad) - dead,
            dead_lettered=dead,
            dropped=out.dropped,
            bad_records=tuple(BadRecordInfo(b.topic, b.partition, b.offset, b.error) for b in bad[:20]),
            latency_counts=counts,
            latency_sum_s=total,
            figures=mgr.figures(),
        )

    def _stop_at(self, base: dict[str, Any], bad: Sequence[BadRecord], mgr: ProcessorStateManager) -> ItemResult:
        first = min(bad, key=lambda b: b.offset)
        msg = f"bad record at {first.topic}[{first.partition}] offset {first.offset}: {first.error}"
        log.error("task %s: %s (policy fail: nothing of this batch is committed)", base["task"], msg)
        return ItemResult(**base, status="bad-record", message=msg, figures=mgr.figures(),
                          bad_records=(BadRecordInfo(first.topic, first.partition, first.offset, first.error),))

    @staticmethod
    def _committed(mgr: ProcessorStateManager, ranges: Sequence[InputRange]) -> dict[tuple[str, int], int]:
        """Input positions committed for the app's group, read once after the task (re)opens.

        Opening the task fenced any older instance, so from here on only this runner moves them.
        """
        from confluent_kafka import TopicPartition

        committer = mgr.committer
        assert committer is not None
        tps = [TopicPartition(r.topic, r.partition) for r in ranges]
        found = committer._consumer.committed(tps, timeout=30)
        return {(tp.topic, tp.partition): max(tp.offset, 0) for tp in found}


def _failed_row_records(source: InputRange, rows: pa.Table, raw: RawRecords | None, failed: dict[int, str],
                        reader: Any, settings: BatchSettings) -> list[BadRecord]:
    """The input records behind rows whose user function failed (re-read by offset when the rows
    came through DataFrame steps; the row itself as JSON when they no longer carry an offset)."""
    from eddy_runtime.records import encode_rows

    offsets = rows.column("offset").to_pylist() if "offset" in rows.column_names else None
    by_offset = {o: i for i, o in enumerate(raw.offsets)} if raw is not None else {}
    out = []
    for i, err in sorted(failed.items()):
        off = offsets[i] if offsets is not None else -1
        if raw is None and off is not None and off >= 0:
            one = reader.read(InputRange(source.topic, source.partition, off, off + 1), settings.read_timeout_s)
            if len(one):
                out.append(BadRecord(source.topic, source.partition, off, one.timestamps[0], one.keys[0],
                                     one.values[0], err, "process"))
                continue
        j = by_offset.get(off)
        if raw is not None and j is not None:
            key, value, ts = raw.keys[j], raw.values[j], raw.timestamps[j]
        else:
            key = None
            value = encode_rows(rows.slice(i, 1), [c for c in rows.column_names if not c.startswith("__")])[0]
            ts = 0
        out.append(BadRecord(source.topic, source.partition, off if off is not None else -1, ts, key, value, err,
                             "process"))
    return out


def _with_duration(result: ItemResult, seconds: float) -> ItemResult:
    from dataclasses import replace

    return replace(result, duration_s=seconds)


# -- the runner process -----------------------------------------------------------------------------


def serve(address: str, executor_id: str, state_dir: str, executor_pid: int | None) -> None:
    """Serve requests until the executor JVM dies or a shutdown request comes."""
    try:
        listener = Listener(address, family="AF_UNIX")
    except OSError as e:  # another runner serves this state directory already
        log.info("runner for %s already running (%s); exiting", state_dir, e)
        return
    runner = TaskRunner(executor_id, state_dir, _served_metrics(state_dir))
    stop = threading.Event()
    log.info("runner pid %d for executor %s serving %s (executor pid %s)", os.getpid(), executor_id, state_dir,
             executor_pid)

    def watch_executor() -> None:
        while not stop.wait(0.2):
            if executor_pid is not None and not _alive(executor_pid):
                log.warning("executor %s (pid %d) is gone; closing tasks and exiting", executor_id, executor_pid)
                stop.set()
        # Wake the accept loop.
        with contextlib.suppress(OSError):
            Client(address, family="AF_UNIX").close()

    def connection(conn: Connection) -> None:
        with conn:
            while not stop.is_set():
                try:
                    request = pickle.loads(conn.recv_bytes())
                except (EOFError, OSError):
                    return
                if request[0] == "shutdown":
                    runner.close_all()
                    stop.set()
                    conn.send_bytes(pickle.dumps("ok"))
                    with contextlib.suppress(OSError):  # wake the accept loop
                        Client(address, family="AF_UNIX").close()
                    return
                try:
                    reply: Any = runner.handle(request)
                except Exception as e:  # noqa: BLE001 - the client turns it into a failed item
                    log.exception("request %s failed", request[0])
                    reply = RuntimeError(f"runner request {request[0]} failed: {type(e).__name__}: {e}")
                try:
                    conn.send_bytes(pickle.dumps(reply, protocol=_PROTOCOL))
                except OSError:
                    return

    threading.Thread(target=watch_executor, daemon=True).start()
    with listener:
        while not stop.is_set():
            try:
                conn = listener.accept()
            except OSError:
                continue
            if stop.is_set():
                conn.close()
                break
            threading.Thread(target=connection, args=(conn,), daemon=True).start()
    runner.close_all()
    log.info("runner for executor %s stopped", executor_id)


#: in the runner's state directory: ``host:port`` its metrics are served on
METRICS_ADDRESS_FILE = "eddy-runner-metrics"


def _served_metrics(state_dir: str) -> ExecutorMetrics | None:
    """The executor's metrics, served over HTTP. On a Kubernetes pod: on the pod's metrics port
    (``EDDY_METRICS_PORT``, set by the executor pod template). Elsewhere (local-cluster, where
    several executors share one host and the driver serves that port): on 127.0.0.1, with a port
    the kernel picks. Either way the address goes to `METRICS_ADDRESS_FILE` and the log."""
    port = os.environ.get("EDDY_METRICS_PORT")
    on_pod = bool(port and os.environ.get("SPARK_EXECUTOR_POD_IP"))
    addr = "0.0.0.0" if on_pod else "127.0.0.1"
    metrics = ExecutorMetrics()
    try:
        bound = metrics.serve(int(port) if on_pod and port else 0, addr)
    except (OSError, ValueError) as e:
        log.warning("cannot serve executor metrics on %s:%s: %s", addr, port, e)
        return None
    target = Path(state_dir) / METRICS_ADDRESS_FILE
    with contextlib.suppress(OSError):
        Path(state_dir).mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".tmp")
        tmp.write_text(f"{addr}:{bound}\n")
        tmp.replace(target)
    log.info("executor metrics on http://%s:%d/metrics", addr, bound)
    return metrics


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class RunnerClient:
    """A Python worker's connection to its executor's runner (started on first use)."""

    _connections: dict[str, Connection] = {}

    def __init__(self, state_dir: str, executor_id: str) -> None:
        self.state_dir = state_dir
        self.executor_id = executor_id
        self.address = runner_address(state_dir)

    def call(self, request: tuple[Any, ...], timeout_s: float = 600.0, start: bool = True) -> Any:
        """Send `request` and wait for the reply; `start`: start the runner if it is not running
        (otherwise raise `ConnectionRefusedError`)."""
        for attempt in range(2):
            conn = self._connect(start)
            try:
                conn.send_bytes(pickle.dumps(request, protocol=_PROTOCOL))
                if not conn.poll(timeout_s):
                    raise TimeoutError(f"task runner of executor {self.executor_id} did not answer in {timeout_s}s")
                reply = pickle.loads(conn.recv_bytes())
            except (EOFError, OSError, BrokenPipeError):
                self._connections.pop(self.address, None)
                if attempt:
                    raise
                continue
            if isinstance(reply, Exception):
                raise reply
            return reply
        raise AssertionError("unreachable")

    def _connect(self, start: bool) -> Connection:
        conn = self._connections.get(self.address)
        if conn is not None and not conn.closed:
            return conn
        try:
            conn = Client(self.address, family="AF_UNIX")
        except (ConnectionRefusedError, FileNotFoundError):
            if not start:
                raise
            self._spawn()
            deadline = time.monotonic() + 60
            while True:
                try:
                    conn = Client(self.address, family="AF_UNIX")
                    break
                except (ConnectionRefusedError, FileNotFoundError):
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"the task runner for {self.state_dir} did not start; see "
                                           f"{self.log_path}") from None
                    time.sleep(0.05)
        self._connections[self.address] = conn
        return conn

    @property
    def log_path(self) -> Path:
        return Path(self.state_dir) / "eddy-runner.log"

    def _spawn(self) -> None:
        Path(self.state_dir).mkdir(parents=True, exist_ok=True)
        pid = executor_jvm_pid()
        args = [sys.executable, "-m", "eddy_runtime.runner", "--state-dir", self.state_dir, "--executor-id",
                self.executor_id, "--address", self.address.lstrip("\0")]
        if pid is not None:
            args += ["--executor-pid", str(pid)]
        with open(self.log_path, "ab") as logf:
            proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                    close_fds=True, start_new_session=True)
        # Reap it if it exits before this worker does; otherwise init inherits it.
        threading.Thread(target=proc.wait, daemon=True).start()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m eddy_runtime.runner", description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--executor-id", required=True)
    parser.add_argument("--address", required=True, help="abstract socket name (without the leading NUL)")
    parser.add_argument("--executor-pid", type=int)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format=f"%(asctime)s %(levelname)s [runner {args.executor_id} {socket.gethostname()}] "
                               "%(name)s: %(message)s")
    serve("\0" + args.address, args.executor_id, args.state_dir, args.executor_pid)


if __name__ == "__main__":
    main()
