"""How long a runner's actives spend processing their input (`BusyClock`), for the executor's load
in the runtime state (docs/DESIGN.md, "The operator's part").

Whatever processes an active's records (a micro-batch item, a continuous step, a round under
exactly-once) runs inside `BusyClock.busy()`; restores, standby tails and the loop's polls do
not. Such spans may overlap (the continuous loop's steps run on a pool, and each Spark worker's
request on a thread of its own), and the runner's Python runs one thread at a time, so a span
is given its fair share of the time it overlaps others: while k spans run, each is credited
1/k of every second. The shares of all spans add up to the time at least one ran, never to
more than the wall time: a busy fraction of 1 is a runner that never waited for input.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["BusyClock", "BusyShare"]


class BusyShare:
    """One span's share of the runner's busy time, in seconds (set when the span ends)."""

    __slots__ = ("seconds",)

    def __init__(self) -> None:
        self.seconds = 0.0


class BusyClock:
    """Fair shares of a runner's busy time among the spans that process input at once."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._running = 0
        #: seconds credited so far to each span that ran throughout (a processor-sharing clock)
        self._credited = 0.0
        self._at = clock()

    def _advance(self) -> float:
        """Credit the time since the last change to the spans running (lock held)."""
        now = self._clock()
        if self._running:
            self._credited += (now - self._at) / self._running
        self._at = now
        return self._credited

    @contextmanager
    def busy(self) -> Iterator[BusyShare]:
        """A span of processing: its share is in the `BusyShare` once the block ends."""
        share = BusyShare()
        with self._lock:
            start = self._advance()
            self._running += 1
        try:
            yield share
        finally:
            with self._lock:
                share.seconds = self._advance() - start
                self._running -= 1
