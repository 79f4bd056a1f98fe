"""The benches' CPU split by process (bench/throughput.py's `ProcessTreeCpu`): a child that ended
and was waited for keeps its CPU under its own role, not its parent's (the kernel moves it into the
parent's counters when it is reaped), nor under none while it waits, ended, to be reaped. The
processes are real."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))  # the benches import each other so

from throughput import ProcessTreeCpu  # noqa: E402

PARENT = textwrap.dedent("""\
    import subprocess, sys, time
    time.sleep(0.5)
    burn = "import time\\nend = time.process_time() + 0.6\\nwhile time.process_time() < end: pass\\n"
    child = subprocess.Popen([sys.executable, "-c", burn, "cpu-" + "burner"])
    time.sleep(1.5)  # it ends meanwhile, and waits as a zombie, with no command line, to be reaped
    child.wait()
    time.sleep(0.5)
""")


def role(cmdline: str) -> str:
    if "cpu-burner" in cmdline:
        return "burner"
    return "parent" if "cpu-parent" in cmdline else "other"


def test_a_reaped_child_keeps_its_cpu_under_its_own_role() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, "cpu-parent"])
    cpu = ProcessTreeCpu(parent.pid, interval_s=0.05, role=role).start()
    try:
        parent.wait(timeout=30)
    finally:
        cpu.stop()
    start, end = cpu.role_samples[0][0], cpu.role_samples[-1][0]
    roles = cpu.roles_between(start, end)

    assert roles.get("burner", 0.0) >= 0.5, roles
    assert roles.get("parent", 0.0) < 0.3, roles  # its interpreter's start-up, not the child's 0.6 s
    assert roles.get("other", 0.0) < 0.1, roles
