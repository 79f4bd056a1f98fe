"""Events posted by a sync that kopf did not start (the resync and probe loops, which run in the
startup handler's context) reach kopf's poster: before, kopf.event raised LookupError there and
every ExecutorLost or NodeLost Event of a probe-driven failover was dropped (bench/chaos.py, a
node lost while the operator's new leader took over: the failover happened, its Events did not)."""

from __future__ import annotations

import asyncio
import contextvars

import kopf
import pytest
from kopf._core.engines import posting  # kopf's own poster queue, as its resource handlers set it

from eddy_operator import handlers

pytestmark = pytest.mark.unit

APP = {"apiVersion": "eddy.dev/v1alpha1", "kind": "StreamApp",
       "metadata": {"name": "wc", "namespace": "ns", "uid": "u-1"}}


def test_an_event_posted_outside_a_resource_handler_goes_through_one_s_context() -> None:
    async def scenario() -> list[posting.K8sEvent]:
        queue: asyncio.Queue[posting.K8sEvent] = asyncio.Queue()

        def in_a_resource_handler() -> None:  # what kopf's processing sets around each handler
            posting.settings_var.set(kopf.OperatorSettings())
            posting.event_queue_loop_var.set(asyncio.get_running_loop())
            posting.event_queue_var.set(queue)
            handlers.remember_posting_context()

        contextvars.copy_context().run(in_a_resource_handler)
        # a loop started by the startup handler: none of kopf's posting variables set
        contextvars.Context().run(handlers._post_event, APP, "Warning", "ExecutorLost", "executor 1 lost")
        await asyncio.sleep(0)
        return [queue.get_nowait() for _ in range(queue.qsize())]

    handlers._posting = None
    try:
        (event,) = asyncio.run(scenario())
    finally:
        handlers._posting = None
    assert (event.reason, event.type, event.message, event.ref["name"]) == ("ExecutorLost", "Warning",
                                                                             "executor 1 lost", "wc")


def test_without_any_resource_handler_yet_the_failure_is_not_hidden() -> None:
    handlers._posting = None
    with pytest.raises(LookupError):
        contextvars.Context().run(handlers._post_event, APP, "Warning", "ExecutorLost", "x")
