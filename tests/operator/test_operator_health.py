"""The operator's liveness decisions: a stuck resync loop and a thread pool whose workers all
hang make the probe fail; a busy but working operator does not."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import pytest

from eddy_operator.health import executor_responds, resync_problem, resync_stall_bound

pytestmark = pytest.mark.unit


def test_the_resync_loop_counts_as_stuck_only_past_four_periods_or_two_minutes():
    assert resync_stall_bound(30) == 120.0
    assert resync_stall_bound(60) == 240.0
    assert resync_problem(last_round_at=0.0, now=120.0, resync_seconds=30) is None
    assert resync_problem(last_round_at=0.0, now=121.0, resync_seconds=30) == (
        "no resync round completed for 121s (bound 120s)"
    )


def test_a_thread_pool_whose_workers_all_hang_fails_the_probe_and_a_free_one_passes():
    release = threading.Event()

    async def scenario() -> tuple[bool, bool]:
        loop = asyncio.get_running_loop()
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)
        loop.set_default_executor(pool)
        free = await executor_responds(timeout_s=2)
        # every worker stuck, as in an apiserver call that never returns
        stuck = [loop.run_in_executor(None, release.wait) for _ in range(2)]
        wedged = await executor_responds(timeout_s=0.5)
        release.set()
        await asyncio.gather(*stuck)
        return free, wedged

    free, wedged = asyncio.run(scenario())
    assert free is True
    assert wedged is False
