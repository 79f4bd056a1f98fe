"""A Spark Python worker's connection to its executor's task runner (executor/runner.py): the socket
address, the wire format (pickled `runner_messages` requests and replies), and starting the runner
on first use (docs/DESIGN.md, "One micro-batch", step 4).
"""

from __future__ import annotations

import hashlib
import os
import pickle
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Client, Connection
from pathlib import Path
from typing import ClassVar, TypeVar, cast

from eddy_runtime.protocol.placement import executor_jvm_pid
from eddy_runtime.protocol.runner_messages import NeedProgram, Program, RunnerRequest, RunWork
from eddy_runtime.protocol.work import BatchSettings, ItemResult, SlotWork

__all__ = [
    "OUTLIVES_EXECUTOR_ENV", "PICKLE_PROTOCOL", "PYTHON_DAEMON_CONF", "RunnerClient", "runner_address",
    "runner_outlives_executor",
]

#: the pickle protocol of requests and replies
PICKLE_PROTOCOL = 5

_Reply = TypeVar("_Reply")


#: the module the runner process runs as (``python -m``)
RUNNER_MODULE = "eddy_runtime.executor.runner"
#: what every Eddy Spark application is given (`eddy driver`, `eddy run`, the tests and benches):
#: Spark's Python daemon, and so every Python worker, imports pyspark from the installed package's
#: bytecode instead of compiling it from pyspark.zip (executor/python_daemon.py)
PYTHON_DAEMON_CONF = {"spark.python.daemon.module": "eddy_runtime.executor.python_daemon"}
#: "1" on Kubernetes executor pods (the operator's pod template): the runner outlives its executor
#: JVM and the driver, and goes on processing its continuous tasks until the pod stops
#: (docker/entrypoint.sh starts a new JVM meanwhile; docs/operations.md, "Upgrading an app")
OUTLIVES_EXECUTOR_ENV = "EDDY_RUNNER_OUTLIVES_EXECUTOR"


def runner_outlives_executor() -> bool:
    """Whether this process's runner outlives its executor JVM (`OUTLIVES_EXECUTOR_ENV`)."""
    return os.environ.get(OUTLIVES_EXECUTOR_ENV) == "1"


def runner_address(state_dir: str) -> str:
    """An abstract Unix socket name (no file, no path-length limit) unique to the state directory."""
    digest = hashlib.sha256(os.path.realpath(state_dir).encode()).hexdigest()[:24]
    return f"\0eddy-runner-{digest}"


class RunnerClient:
    """A Python worker's connection to its executor's runner (started on first use)."""

    _connections: ClassVar[dict[str, Connection]] = {}

    def __init__(self, state_dir: str, executor_id: str) -> None:
        self.state_dir = state_dir
        self.executor_id = executor_id
        self.address = runner_address(state_dir)

    def run(self, program: Program, settings: BatchSettings, slot: SlotWork, data: object) -> list[ItemResult]:
        """Run `slot`'s work in the runner (`RunWork`), sending the program only if the runner
        has not cached it yet."""
        reply = self.call(RunWork(program.program_id, None, settings, slot, data))
        if isinstance(reply, NeedProgram):
            reply = self.call(RunWork(program.program_id, program.sub_topologies, settings, slot, data))
        if isinstance(reply, NeedProgram):
            raise RuntimeError(f"the task runner of executor {self.executor_id} did not take program "
                               f"{program.program_id}")
        return reply

    def call(self, request: RunnerRequest[_Reply], timeout_s: float = 600.0, start: bool = True) -> _Reply:
        """Send `request` and wait for the reply; `start`: start the runner if it is not running
        (otherwise raise `ConnectionRefusedError`). A runner that failed to serve the request
        answers with the exception, raised here."""
        for attempt in range(2):
            conn = self._connect(start)
            try:
                conn.send_bytes(pickle.dumps(request, protocol=PICKLE_PROTOCOL))
                if not conn.poll(timeout_s):
                    raise TimeoutError(f"task runner of executor {self.executor_id} did not answer in {timeout_s}s")
                reply: object = pickle.loads(conn.recv_bytes())
            except (EOFError, OSError, BrokenPipeError):
                self._connections.pop(self.address, None)
                if attempt:
                    raise
                continue
            if isinstance(reply, Exception):
                raise reply
            # The runner answers each request kind with the reply type the request names.
            return cast(_Reply, reply)
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

    def command(self, executor_pid: int | None = None) -> list[str]:
        """The runner's command line (docker/entrypoint.sh waits for a process that matches it)."""
        args = [sys.executable, "-m", RUNNER_MODULE, "--state-dir", self.state_dir, "--executor-id",
                self.executor_id, "--address", self.address.lstrip("\0")]
        if executor_pid is not None:
            args += ["--executor-pid", str(executor_pid)]
        return args

    def _spawn(self) -> None:
        Path(self.state_dir).mkdir(parents=True, exist_ok=True)
        args = self.command(None if runner_outlives_executor() else executor_jvm_pid())
        with open(self.log_path, "ab") as logf:
            proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                    close_fds=True, start_new_session=True)
        # Reap it if it exits before this worker does; otherwise init inherits it.
        threading.Thread(target=proc.wait, daemon=True).start()
