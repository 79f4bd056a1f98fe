"""Crash test: a stateful count killed with SIGKILL at random points, many times, stays exact.

A child process (crash_child.py) counts words of a generated input with repeating keys through
task 0_0's store; the test appends a chunk of input before each run, so every run has work. The
test kills it over and over: from outside at random moments (while it
starts, restores, processes or commits), and from inside at named points of the commit protocol
(before the Kafka commit, between the Kafka commit and the store write, after the store write);
now and then the state directory is deleted too, as if the volume were lost. After the last
restart runs to the end, the store's counts must equal the reference exactly under
exactly_once, and be at least the reference under at_least_once.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import time
from collections import Counter

import pytest

from eddy_runtime.executor.commit import StateCommitter
from tests.servers import REPO
from tests.state.conftest import COUNTS, StateApp, produce
from tests.state.crash_child import BATCH, EXIT_INCONSISTENT

pytestmark = pytest.mark.integration

#: kills per guarantee: at_least_once promises less (no count below the input's), and gets half
#: as many (32 took 51 s of the integration stage, 2026-11-29); its first three runs still die
#: between the Kafka commit and the store write, as exactly_once's do
KILLS = {"exactly_once": 32, "at_least_once": 16}
#: bounds on the kill loop: runs that finish before their kill count no kill
MAX_RUNS = 4 * max(KILLS.values())
MAX_SECONDS = 900
CHUNK = 800  # input records appended before each run
DISTINCT_KEYS = 250
NAMED_POINTS = ("between_commit_and_store", "between_commit_and_store", "before_commit", "after_store")


def run_child(app: StateApp, guarantee: str, env: dict[str, str], kill_after_s: float | None) -> int:
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.state.crash_child", app.bootstrap, app.name, str(app.state_dir),
         app.input_topic, guarantee],
        cwd=REPO, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        _, err = child.communicate(timeout=kill_after_s)
    except subprocess.TimeoutExpired:
        child.kill()  # SIGKILL
        _, err = child.communicate(timeout=30)
    if child.returncode == EXIT_INCONSISTENT:
        pytest.fail(f"child found its store inconsistent with Kafka: {err}")
    if child.returncode not in (0, -9):
        pytest.fail(f"child failed with {child.returncode}: {err[-3000:]}")
    return child.returncode


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
def test_counts_survive_repeated_sigkills(state_app: StateApp, guarantee: str) -> None:
    rnd = random.Random(f"{guarantee}-{state_app.name}")
    reference: Counter[str] = Counter()

    def append_input() -> None:
        words = [f"word-{rnd.randrange(DISTINCT_KEYS)}" for _ in range(CHUNK)]
        produce(state_app.bootstrap, state_app.input_topic, [(None, w.encode()) for w in words], partition=0)
        reference.update(words)

    state_app.ensure_changelogs()

    kills: Counter[str] = Counter()
    started = time.monotonic()
    finished_early = 0
    runs = 0
    while kills.total() - kills["lost_volume"] < KILLS[guarantee]:
        # A run that ends before its kill counts no kill: bound the loop, not only each run.
        assert runs < MAX_RUNS and time.monotonic() - started < MAX_SECONDS, (
            f"only {dict(kills)} kills after {runs} runs and {time.monotonic() - started:.0f}s "
            f"({finished_early} runs finished before their kill)"
        )
        append_input()
        runs += 1
        if runs > 3 and rnd.random() < 0.1:
            shutil.rmtree(state_app.state_dir, ignore_errors=True)
            kills["lost_volume"] += 1
        # The first runs always die between the Kafka commit and the store write.
        if runs <= 3 or rnd.random() < 0.4:
            name = NAMED_POINTS[0] if runs <= 3 else rnd.choice(NAMED_POINTS)
            point = f"{name}:{rnd.randint(1, CHUNK // BATCH)}"
            code = run_child(state_app, guarantee, {"CRASH_AT": point}, kill_after_s=120)
            kills[name] += code == -9
        else:
            code = run_child(state_app, guarantee, {}, kill_after_s=rnd.uniform(0.2, 1.5))
            kills["outside"] += code == -9
        finished_early += code == 0
    assert run_child(state_app, guarantee, {}, kill_after_s=120) == 0

    with StateCommitter.open(state_app.name, "0_0", [COUNTS], state_app.state_dir, state_app.bootstrap,
                             guarantee=guarantee) as task:
        assert task.state.restored
        counts = dict(task.state.store("counts").items())
    assert kills.total() - kills["lost_volume"] >= KILLS[guarantee]
    assert kills["between_commit_and_store"] >= 3
    if guarantee == "exactly_once":
        assert counts == dict(reference)
    else:
        assert set(counts) == set(reference)
        below = {k: (counts[k], n) for k, n in reference.items() if counts[k] < n}
        assert not below, f"at_least_once lost updates: {below}"


