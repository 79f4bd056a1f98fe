"""The autoscaler's model: how many executors an app needs, from what its driver reports
(docs/operations.md, "Autoscaling"). Pure functions of samples and settings; the orchestrator
feeds them and carries a decision out through the StreamApp's scale subresource.

The model is Flink's autoscaler's (its "true processing rate", target utilisation and catch-up
duration), for one stage of identical executors:

- from two runtime states `metricsWindow` apart: the records the executors' actives processed
  (their rate, `processed`), the seconds they were busy processing them, and the input backlog
  (the consumer lag over the app's input and repartition topics): the backlog's growth rate is
  input that arrived and was not processed, so `input rate = processed + backlog growth`;
- one executor's capacity: the records per second it could take. A runner's round costs about
  the same whatever it carries (its commit, its reads, the bookkeeping: the part of the busy time
  the runners estimate as `per_round_s`, executor/busy_clock.py's `RoundCost`), and rounds grow
  rather than multiply when more input comes, so capacity is the records per second of the busy
  time left after that part, over the share of the time the rounds leave: `records / (busy -
  per_round) x (1 - per-round share)`. Records per busy second alone would take a light load's
  rounds, mostly per-round cost, for a lack of capacity (bench/README.md, `autoscale.py`). Records
  per busy second are still a floor under the capacity (the busy time holds every cost), and the
  highest floor seen over `OBSERVED_KEEP_S` is kept: a window in which the executors were busy
  all the time under a backlog gave their capacity as it is under load, as Flink's "observed
  true processing rate" does; the capacity taken is the higher of the two;
- needed: `ceil((input rate + backlog / catchUpDuration) / (capacity x targetUtilization))`,
  within `minReplicas..maxReplicas`.

Recommendations are kept over time. Scale-out goes to the least recommended over
`scaleOutStabilization`, scale-in to the most over `scaleInStabilization` (as the
HorizontalPodAutoscaler's behavior windows), at most `maxStep` executors at once, and only once
the recommendations span that window. No recommendation is taken while the app is warming up
(warmups placed, restores under way, executors missing or leaving): lag caused by a move does not
cause another; after a decision the history starts over.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from eddy_contract.autoscaling import AutoscalingSpec

__all__ = ["OBSERVED_KEEP_S", "Decision", "History", "Rates", "Sample", "decide", "rates", "recommend"]

#: how long the highest records per busy second seen is kept as a floor under the capacity
OBSERVED_KEEP_S = 900.0


@dataclass(frozen=True)
class Sample:
    """What one runtime state says of the executors' load."""

    #: when the driver wrote it (epoch seconds)
    at: float
    #: when its counters started (a new driver starts them anew)
    since: str | None
    #: executor -> records its actives processed since `since`
    records: Mapping[str, int]
    #: executor -> seconds its actives were busy processing since `since`
    busy_s: Mapping[str, float]
    #: input records not processed yet, over every task
    backlog: int
    #: executor -> the part of `busy_s` its rounds cost whatever they carried (absent: none known)
    per_round_s: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Rates:
    """The load over a window, per second."""

    window_s: float
    executors: int
    processed: float
    #: the backlog's growth (negative: draining)
    backlog_growth: float
    backlog: int
    #: records per second one executor could take; None when nothing was processed
    capacity: float | None
    #: mean fraction of the time each executor was busy
    busy: float
    #: of which the rounds' per-round cost (the time more input would not take)
    per_round: float = 0.0
    #: records per busy second of one executor (a floor under `capacity`); None as for `capacity`
    per_busy_second: float | None = None

    @property
    def input_rate(self) -> float:
        return max(self.processed + self.backlog_growth, 0.0)

    def describe(self) -> str:
        capacity = f"{self.capacity:,.0f} records/s" if self.capacity is not None else "unknown"
        return (f"input {self.input_rate:,.0f} records/s (processed {self.processed:,.0f}, backlog "
                f"{'+' if self.backlog_growth >= 0 else ''}{self.backlog_growth:,.0f}/s), backlog {self.backlog:,} "
                f"records, {self.executors} executor(s) busy {100 * self.busy:.0f}% of the time "
                f"({100 * self.per_round:.0f}% per-round cost), one executor's capacity {capacity} "
                f"(over {self.window_s:.0f} s)")


def rates(samples: Sequence[Sample], window_s: float) -> Rates | None:
    """The rates between the newest sample and the oldest one within `window_s` of it from the same
    counters; None without at least half a window of them (or if a counter went down)."""
    if not samples:
        return None
    newest = samples[-1]
    same = [s for s in samples if s.since == newest.since and s.at >= newest.at - window_s]
    oldest = same[0]
    dt = newest.at - oldest.at
    if dt < window_s / 2:
        return None
    executors = [e for e in newest.records if e in oldest.records]
    if not executors:
        return None
    d_records = sum(newest.records[e] - oldest.records[e] for e in executors)
    d_busy = sum(newest.busy_s.get(e, 0.0) - oldest.busy_s.get(e, 0.0) for e in executors)
    d_round = sum(newest.per_round_s.get(e, 0.0) - oldest.per_round_s.get(e, 0.0) for e in executors)
    if d_records < 0 or d_busy < 0 or d_round < 0:
        return None
    busy = min(d_busy / dt / len(executors), 1.0)
    d_round = min(d_round, 0.9 * d_busy)  # the runners' floor on the per-record cost, kept here too
    per_round = busy * d_round / d_busy if d_busy > 0 else 0.0
    measured = d_records > 0 and d_busy > 0
    return Rates(
        window_s=dt,
        executors=len(executors),
        processed=d_records / dt,
        backlog_growth=(newest.backlog - oldest.backlog) / dt,
        backlog=newest.backlog,
        capacity=d_records / (d_busy - d_round) * (1 - per_round) if measured else None,
        busy=busy,
        per_round=per_round,
        per_busy_second=d_records / d_busy if measured else None,
    )


def recommend(r: Rates, current: int, s: AutoscalingSpec, observed: float | None = None) -> tuple[int, str]:
    """How many executors the load needs, and why (for the Event and status); `observed` is the
    highest records per busy second seen lately (`History.observe`), a floor under the capacity."""
    if r.capacity is None:
        if r.input_rate == 0 and r.backlog == 0:
            return s.min_replicas, "no input and no backlog"
        return current, "no processing measured yet"
    needed_rate = r.input_rate + r.backlog / s.catch_up_s
    capacity = max(r.capacity, observed or 0.0)
    per_executor = capacity * s.target_utilization / 100
    n = max(1, math.ceil(needed_rate / per_executor - 1e-9))
    bounded = min(max(n, s.min_replicas), s.max_replicas)
    why = (f"{needed_rate:,.0f} records/s to process (input + backlog over {s.catch_up_s:.0f} s) at "
           f"{per_executor:,.0f} records/s per executor ({s.target_utilization}% of its capacity"
           f"{', as observed under load' if capacity > r.capacity else ''}): {n}")
    if bounded != n:
        why += f", within {s.min_replicas}..{s.max_replicas}: {bounded}"
    return bounded, why


@dataclass
class History:
    """The recommendations of one app, oldest first: (time, executors); and the records per busy
    second of one executor seen (time, records/s), over `OBSERVED_KEEP_S`."""

    recommended: list[tuple[float, int]] = field(default_factory=list)
    per_busy_second: list[tuple[float, float]] = field(default_factory=list)

    def add(self, at: float, n: int, keep_s: float) -> None:
        self.recommended.append((at, n))
        self.recommended = [(t, x) for t, x in self.recommended if t >= at - keep_s]

    def observe(self, at: float, r: Rates) -> float | None:
        """Keep `r`'s records per busy second; the highest kept (None: none yet)."""
        if r.per_busy_second is not None:
            self.per_busy_second.append((at, r.per_busy_second))
        self.per_busy_second = [(t, x) for t, x in self.per_busy_second if t >= at - OBSERVED_KEEP_S]
        return max((x for _, x in self.per_busy_second), default=None)

    def clear(self) -> None:
        """Start the recommendations over (after a move, or a decision); what was observed stays."""
        self.recommended = []


@dataclass(frozen=True)
class Decision:
    """Scale from `current` to `target` executors."""

    current: int
    target: int
    reason: str


def decide(history: History, now: float, current: int, s: AutoscalingSpec) -> Decision | None:
    """Scale out to the least recommendation over the scale-out window, in to the most over the
    scale-in window, once the recommendations span that window; at most `maxStep` at once."""
    recs = history.recommended
    if not recs:
        return None

    def over(window_s: float) -> list[int] | None:
        if recs[0][0] > now - window_s:
            return None  # not seen for the whole window yet
        return [n for t, n in recs if t >= now - window_s]

    out = over(s.scale_out_stabilization_s)
    if out and min(out) > current:
        target = min(min(out), current + s.max_step, s.max_replicas)
        return Decision(current, target, f"at least {min(out)} recommended for {s.scale_out_stabilization_s:.0f} s")
    in_ = over(s.scale_in_stabilization_s)
    if in_ and max(in_) < current:
        target = max(max(in_), current - s.max_step, s.min_replicas)
        return Decision(current, target, f"at most {max(in_)} recommended for {s.scale_in_stabilization_s:.0f} s")
    if current < s.min_replicas or current > s.max_replicas:
        target = min(max(current, s.min_replicas), s.max_replicas)
        return Decision(current, target, f"outside {s.min_replicas}..{s.max_replicas}")
    return None
