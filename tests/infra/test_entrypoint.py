"""The executor container's entrypoint waits for the task runner to close its stores, and keeps
the container (starting a new JVM) while the runner lives: its `pgrep` pattern must match the
runner's command line, or a stopping pod kills the runner before its memtables reach disk (and the
copy comes back empty), and a driver restart takes the runners with it."""

from __future__ import annotations

import re
import sys
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
