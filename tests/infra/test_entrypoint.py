"""The executor container's entrypoint waits for the task runner to close its stores, and keeps
the container (starting a new JVM) while the runner lives: its `pgrep` pattern must match the
runner's command line, or a stopping pod kills the runner before its memtables reach disk (and the
copy comes back empty), and a driver restart takes the runners with it."""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eddy_runtime.executor import runner
from eddy_runtime.protocol.runner_client import RunnerClient

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.unit


def test_the_entrypoint_waits_for_the_process_the_runner_runs_as(tmp_path: Path) -> None:
    script = (REPO / "docker" / "entrypoint.sh").read_text()
    patterns = re.findall(r"runner='([^']+)'", script)
    assert len(patterns) == 1, patterns
    command = " ".join(RunnerClient(str(tmp_path), "1").command())
    assert f"-m {runner.__name__} " in command, command
    assert re.search(patterns[0], command), (patterns[0], command)
    assert not re.search(patterns[0], f"{sys.executable} -m pyspark.daemon"), patterns[0]


FAKE_JAVA = '''#!{python}
"""A stand-in for the executor JVM: the first connects to the dead driver's address (127.0.0.2),
every later one to the address the driver's name has (127.0.0.1); each stays until signalled."""
import pathlib, signal, socket, sys, time
args = sys.argv[1:]
port = int(args[args.index("--driver-url") + 1].rsplit(":", 1)[1])
log = pathlib.Path({log!r})
n = len(log.read_text().splitlines()) + 1 if log.exists() else 1
address = "127.0.0.2" if n == 1 else "127.0.0.1"
s = socket.create_connection((address, port))
with log.open("a") as f:
    f.write(f"jvm {{n}} connected to {{address}}\\n")
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
while True:
    time.sleep(1)
'''


def test_a_jvm_left_on_a_dead_drivers_address_is_ended_and_the_next_one_registers(tmp_path: Path) -> None:
    """The entrypoint's loop with its driver watch (eddy_runtime/executor/driver_watch.py), in a
    PID namespace of its own (its pgrep and pkill see only its processes): a JVM connected to an
    address the driver's name (`localhost`) does not have is ended, the task runner lives on, and
    the next JVM starts and connects to the name's address."""
    with socket.socket() as driver:  # 127.0.0.2 is the dead driver's pod address, 127.0.0.1 the new one's
        driver.bind(("0.0.0.0", 0))
        driver.listen()
        port = driver.getsockname()[1]
        log = tmp_path / "jvms.log"
        java_home = tmp_path / "java"
        (java_home / "bin").mkdir(parents=True)
        java = java_home / "bin" / "java"
        java.write_text(FAKE_JAVA.format(python=sys.executable, log=str(log)))
        java.chmod(0o755)
        env = {**os.environ, "JAVA_HOME": str(java_home), "SPARK_HOME": str(tmp_path), "PYSPARK_PYTHON": sys.executable,
               "EDDY_RUNNER_OUTLIVES_EXECUTOR": "1", "SPARK_EXECUTOR_MEMORY": "64m",
               "SPARK_DRIVER_URL": f"spark://CoarseGrainedScheduler@localhost:{port}", "SPARK_EXECUTOR_ID": "1",
               "SPARK_EXECUTOR_CORES": "1", "SPARK_APPLICATION_ID": "app", "SPARK_EXECUTOR_POD_IP": "127.0.0.1",
               "SPARK_RESOURCE_PROFILE_ID": "0", "SPARK_EXECUTOR_POD_NAME": "pod-0"}
        runner = f"{shlex.quote(sys.executable)} -c 'import time; time.sleep(120)' eddy_runtime.executor.runner"
        proc = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--mount-proc", "bash", "-c",
             f"{runner} & exec {shlex.quote(str(REPO / 'docker' / 'entrypoint.sh'))} executor"],
            env=env, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while "jvm 2" not in (log.read_text() if log.exists() else "") and time.monotonic() < deadline:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.2)
            assert log.read_text().splitlines() == ["jvm 1 connected to 127.0.0.2", "jvm 2 connected to 127.0.0.1"]
        finally:
            # the entrypoint is the namespace's PID 1 (unshare passes no signal on): the pod's SIGTERM
            entrypoint = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
            os.kill(int(entrypoint[0]), signal.SIGTERM)
            _, stderr = proc.communicate(timeout=60)
        assert "is connected to its driver at 127.0.0.2" in stderr, stderr
        assert "executor JVM ended (143); the task runner goes on" in stderr, stderr
