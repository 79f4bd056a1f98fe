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

__all__ = ["BusyClock", "BusyShare", "RoundCost"]


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


class RoundCost:
    """What a runner's round costs whatever it carries (`per_round_s`) and per record on top
    (`per_record_s`): a least-squares line through the busy time of its recent rounds against
    their records, each round weighing `decay` times less than the one after it (a half-life of
    about `0.69 / (1 - decay)` rounds).

    A round commits its tasks' records in one transaction: its reads, its commit and the
    bookkeeping around them cost about the same for one record as for a hundred. While input
    arrives slower than the runner could process it, rounds come once per commit interval and
    that cost is most of the busy time; under a backlog rounds run back to back, grow, and it
    is spread over more records. The autoscaler needs both parts to tell how much input an
    executor could take: records per busy second at a light load are a fraction of that
    (operator/eddy_operator/autoscaler.py)."""

    #: rounds of data before an estimate is given
    MIN_ROUNDS = 30.0

    def __init__(self, decay: float = 0.998) -> None:
        self._decay = decay
        self._n = self._x = self._y = self._xx = self._xy = 0.0

    def add(self, records: int, busy_s: float) -> None:
        d = self._decay
        self._n = self._n * d + 1.0
        self._x = self._x * d + records
        self._y = self._y * d + busy_s
        self._xx = self._xx * d + records * records
        self._xy = self._xy * d + records * busy_s

    def estimate(self) -> tuple[float, float] | None:
        """(per_round_s, per_record_s), or None before `MIN_ROUNDS` rounds or while every round
        carried about as many records as the others (no slope to fit). The per-record cost is
        at least a tenth of the mean busy time per record (a fit that noise bent flat or
        downwards must not make the records look free), and the per-round cost is not negative."""
        if self._n < self.MIN_ROUNDS or self._x <= 0:
            return None
        mean_x, mean_y = self._x / self._n, self._y / self._n
        var_x = self._xx / self._n - mean_x * mean_x
        if var_x <= max(1e-9, 0.01 * mean_x * mean_x):
            return None
        slope = (self._xy / self._n - mean_x * mean_y) / var_x
        per_record = min(max(slope, 0.1 * mean_y / mean_x), mean_y / mean_x)
        return max(mean_y - per_record * mean_x, 0.0), per_record

    def fixed_part(self, records: int, busy_s: float) -> float:
        """Add a round; the part of its busy time that its per-round cost explains (0 while no
        estimate is known, and never more than the round took)."""
        self.add(records, busy_s)
        est = self.estimate()
        return 0.0 if est is None else min(est[0], busy_s)
