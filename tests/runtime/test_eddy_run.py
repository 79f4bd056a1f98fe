"""``eddy run`` on the word-count example, as a user runs it (``make demo``): it counts and prints
the top counts, Ctrl-C stops it cleanly within a bound, and a second run resumes from its stores:
counts continue from where they were and no input counted before is counted again.

It runs against the session's broker (``--bootstrap-servers``) instead of starting one of its own,
with the example's manifest, a topic pair and ``applicationId`` of its own, and the sample fed once
(``--feed-rate 0``) so that the counts are exact."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from eddy_runtime.protocol.runner_client import RUNNER_MODULE
from tests.runtime.apps import read_all
from tests.servers import REPO

pytestmark = pytest.mark.integration

EXAMPLE = REPO / "examples" / "wordcount"
#: where ``eddy run`` keeps its stores (runtime/eddy_runtime/local/run.py: ``.cache/eddy-run/state``)
RUN_STATE = REPO / ".cache" / "eddy-run" / "state"
#: Ctrl-C lets the running batch finish, then closes the stores and stops Spark: seconds, not minutes
STOP_BOUND_S = 60.0
SECOND_SAMPLE = "The heron returns to the eddy.\nThe eddy keeps its count: zanzibar quokka quokka.\n"


def _words(text: str) -> Counter[str]:
    return Counter(w for line in text.splitlines() for w in re.split(r"[^\w']+", line.lower()) if w)


def _counts(kafka: Any, topic: str) -> tuple[dict[str, int], list[tuple[int, int, str, int]]]:
    """Latest count per word, and every record as (partition, offset, word, count)."""
    records = [(m.partition(), m.offset(), m.key().decode(), int.from_bytes(m.value(), "big", signed=True))
               for m in read_all(kafka.bootstrap, topic, idle_s=0.5)]
    latest = {word: count for _, _, word, count in sorted(records)}
    return latest, records


class EddyRun:
    """One ``eddy run`` subprocess whose output goes to a log file."""

    def __init__(self, manifest: Path, bootstrap: str, log: Path) -> None:
        self.log = log
        self._out = log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "eddy_runtime.cli", "run", str(manifest), "--bootstrap-servers", bootstrap,
             "--feed-rate", "0"],
            cwd=REPO, stdout=self._out, stderr=subprocess.STDOUT, text=True)

    def text(self) -> str:
        return self.log.read_text()

    def wait_until(self, what: str, done: Any, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            assert self.proc.poll() is None, f"eddy run exited {self.proc.returncode} before {what}:\n{self.tail()}"
            assert time.monotonic() < deadline, f"{what}: not after {timeout_s:.0f} s:\n{self.tail()}"
            time.sleep(1)

    def ctrl_c(self) -> float:
        """Send SIGINT as a terminal's Ctrl-C does; the seconds until it exited with status 0."""
        start = time.monotonic()
        self.proc.send_signal(signal.SIGINT)
        try:
            rc = self.proc.wait(STOP_BOUND_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"eddy run still running {STOP_BOUND_S:.0f} s after Ctrl-C:\n{self.tail()}") from None
        elapsed = time.monotonic() - start
        assert rc == 0, f"eddy run exited {rc} after Ctrl-C:\n{self.tail()}"
        assert "stopped: stores closed and checkpointed" in self.text(), self.tail()
        deadline = time.monotonic() + 15
        while runners := _runners():
            assert time.monotonic() < deadline, f"task runners {runners} still running 15 s after eddy run exited"
            time.sleep(0.5)
        return elapsed

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        self._out.close()

    def tail(self) -> str:
        return self.text()[-4000:]


def _runners() -> list[int]:
    """PIDs of executor task runners (runtime/eddy_runtime/executor/runner.py) working in ``eddy run``'s state."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue  # gone meanwhile
        if RUNNER_MODULE.encode() in args and any(a.startswith(str(RUN_STATE).encode()) for a in args):
            found.append(int(cmdline.parent.name))
    return found


def _top_line(topic: str, counts: dict[str, int]) -> str:
    """What ``eddy run`` prints for these counts (local/run.py ``watch_output``: top 10, ties by word)."""
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
    return f"top of {topic} ({len(counts)} keys): " + "  ".join(f"{k} {v}" for k, v in top)


def test_eddy_run_counts_stops_on_ctrl_c_and_resumes_from_its_stores(kafka, tmp_path: Path) -> None:
    app = kafka.unique_name("demo")
    lines, counts = f"{app}-lines", f"{app}-counts"
    body = yaml.safe_load((EXAMPLE / "streamapp.yaml").read_text())
    body["spec"]["applicationId"] = app
    body["spec"]["pipeline"]["args"] = {"input_topic": lines, "output_topic": counts}
    manifest = tmp_path / "streamapp.yaml"
    manifest.write_text(yaml.safe_dump(body))
    sample = (EXAMPLE / "sample.txt").read_text()
    (tmp_path / "sample.txt").write_text(sample)  # eddy run feeds the sample.txt beside the manifest
    first = _words(sample)
    second = _words(SECOND_SAMPLE)
    assert set(first) - set(second) and set(second) - set(first) and set(first) & set(second)
    runs: list[EddyRun] = []
    try:
        # First run: the sample counted exactly, and printed.
        run = EddyRun(manifest, kafka.bootstrap, tmp_path / "run-1.log")
        runs.append(run)
        run.wait_until("the sample counted in the output topic", lambda: _counts(kafka, counts)[0] == first, 300)
        run.wait_until("the final top counts printed", lambda: _top_line(counts, first) in run.text(), 30)
        stop_1 = run.ctrl_c()
        latest, before = _counts(kafka, counts)
        assert latest == first, "Ctrl-C changed the counts"

        # Second run on the same stores, fed a new sample: counts go on from the first run's.
        (tmp_path / "sample.txt").write_text(SECOND_SAMPLE)
        run = EddyRun(manifest, kafka.bootstrap, tmp_path / "run-2.log")
        runs.append(run)
        expected = first + second
        run.wait_until("the second sample counted on top of the first",
                       lambda: _counts(kafka, counts)[0] == expected, 300)
        # The stores were closed with checkpoints: they open as they were, without a changelog restore.
        assert "restoring task" not in run.text(), f"the second run restored from the changelog:\n{run.tail()}"
        stop_2 = run.ctrl_c()
        latest, records = _counts(kafka, counts)
        assert latest == expected
        seen = {(p, o) for p, o, _, _ in before}
        new = [(word, count) for p, o, word, count in records if (p, o) not in seen]
        # Nothing of the first sample is counted again: only the second sample's words change.
        assert {word for word, _ in new} == set(second), new
        # Counts continue from the stores: no update starts again from zero.
        restarted = [(word, count) for word, count in new if count <= first.get(word, 0)]
        assert not restarted, f"counts restarted below the first run's: {restarted}"
        print(f"Ctrl-C to exit: {stop_1:.1f} s, {stop_2:.1f} s")
    finally:
        for r in runs:
            r.stop()
        for pid in _runners():  # only if a failed run left them
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for state in RUN_STATE.glob(f"executor-*/{app}"):
            shutil.rmtree(state, ignore_errors=True)
