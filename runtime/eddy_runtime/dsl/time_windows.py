"""Time in pipelines: durations, the time windows of windowed aggregations (`tumbling`,
`hopping`), the session windows of sessionized aggregations (`session_windows`), the join
windows of windowed stream-stream joins (`join_windows`) and when a suppressed table emits
(`until_window_closes`, `until_time_limit`), as Kafka Streams defines them. Users import them
from dsl/pipeline.py, the pipeline API's entry point.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from eddy_runtime.dsl.errors import PipelineError

__all__ = ["JoinWindows", "SessionWindows", "Suppressed", "TimeWindows", "duration_ms", "hopping", "join_windows",
           "session_windows", "tumbling", "until_time_limit", "until_window_closes"]

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def duration_ms(value: int | float | str | timedelta, what: str = "duration") -> int:
    """Milliseconds from ``500`` (ms), ``timedelta(seconds=5)`` or ``"5s"`` / ``"1m"`` / ``"1h"``."""
    if isinstance(value, timedelta):
        ms = int(value.total_seconds() * 1000)
    elif isinstance(value, bool):
        raise PipelineError(f"{what}: {value!r} is not a duration")
    elif isinstance(value, int | float):
        ms = int(value)
    elif isinstance(value, str) and (m := _DURATION.match(value.strip())):
        ms = int(float(m.group(1)) * _UNIT_MS[m.group(2)])
    else:
        raise PipelineError(f"{what}: {value!r} is not a duration (use ms, a timedelta, or '5s', '1m', '1h', '1d')")
    if ms < 0:
        raise PipelineError(f"{what} must not be negative, got {value!r}")
    return ms


@dataclass(frozen=True)
class TimeWindows:
    """Time windows of `size_ms`, starting every `advance_ms` (tumbling when they are equal).

    A record with timestamp ``t`` belongs to every window ``[start, start + size)`` holding
    ``t``, starts aligned to the epoch. A record is dropped as late when ``window end + grace <=
    stream time`` (the newest record timestamp the task has seen), as in Kafka Streams; windows
    are kept for `retention_ms` (at least size + grace).
    """

    size_ms: int
    advance_ms: int
    grace_ms: int = 0
    retention_ms: int = 0

    def __post_init__(self) -> None:
        if self.size_ms <= 0:
            raise PipelineError(f"window size must be positive, got {self.size_ms} ms")
        if not 0 < self.advance_ms <= self.size_ms:
            raise PipelineError(
                f"window advance must be in (0, size], got {self.advance_ms} ms for size {self.size_ms} ms"
            )
        if self.retention_ms < self.size_ms + self.grace_ms:
            raise PipelineError(
                f"window retention ({self.retention_ms} ms) must be at least size + grace "
                f"({self.size_ms + self.grace_ms} ms)"
            )

    @property
    def tumbling(self) -> bool:
        return self.advance_ms == self.size_ms


def tumbling(
    size: int | str | timedelta, grace: int | str | timedelta = 0, retention: int | str | timedelta | None = None
) -> TimeWindows:
    """Non-overlapping windows of `size` (Kafka Streams' ``TimeWindows.ofSizeAndGrace``)."""
    return hopping(size, size, grace, retention)


def hopping(
    size: int | str | timedelta,
    advance: int | str | timedelta,
    grace: int | str | timedelta = 0,
    retention: int | str | timedelta | None = None,
) -> TimeWindows:
    """Overlapping windows of `size` starting every `advance`."""
    size_ms = duration_ms(size, "window size")
    grace_ms = duration_ms(grace, "window grace")
    retention_ms = size_ms + grace_ms if retention is None else duration_ms(retention, "window retention")
    return TimeWindows(size_ms, duration_ms(advance, "window advance"), grace_ms, retention_ms)


@dataclass(frozen=True)
class JoinWindows:
    """Kafka Streams' ``JoinWindows``: a left record at ``t`` joins the right records with
    timestamps in ``[t - before_ms, t + after_ms]`` (a right record at ``t``, the left ones in
    ``[t - after_ms, t + before_ms]``). A record is dropped as late once stream time (the newest
    timestamp the task has seen on either side) passes the end of its window plus `grace_ms`;
    records are kept for before + after + grace."""

    before_ms: int
    after_ms: int
    grace_ms: int

    @property
    def retention_ms(self) -> int:
        return self.before_ms + self.after_ms + self.grace_ms


def join_windows(difference: int | str | timedelta, grace: int | str | timedelta = 0, *,
                 before: int | str | timedelta | None = None,
                 after: int | str | timedelta | None = None) -> JoinWindows:
    """Records whose timestamps differ by at most `difference` join (Kafka Streams'
    ``JoinWindows.ofTimeDifferenceAndGrace``); `before` / `after` make the window asymmetric."""
    d = duration_ms(difference, "join window difference")
    return JoinWindows(d if before is None else duration_ms(before, "join window before"),
                      d if after is None else duration_ms(after, "join window after"),
                      duration_ms(grace, "join window grace"))


@dataclass(frozen=True)
class SessionWindows:
    """Kafka Streams' ``SessionWindows``: a key's records less than `gap_ms` apart (inclusive) form
    one session ``[first timestamp, last timestamp]``; a record within the gap of several
    sessions merges them into one. A record is dropped as late when the session it would end up
    in ends before ``stream time - grace``; sessions are kept for `retention_ms` (at least gap +
    grace) after their end."""

    gap_ms: int
    grace_ms: int = 0
    retention_ms: int = 0

    def __post_init__(self) -> None:
        if self.gap_ms <= 0:
            raise PipelineError(f"session inactivity gap must be positive, got {self.gap_ms} ms")
        if self.retention_ms < self.gap_ms + self.grace_ms:
            raise PipelineError(
                f"session retention ({self.retention_ms} ms) must be at least inactivity gap + grace "
                f"({self.gap_ms + self.grace_ms} ms)"
            )


def session_windows(inactivity_gap: int | str | timedelta, grace: int | str | timedelta = 0,
                    retention: int | str | timedelta | None = None) -> SessionWindows:
    """Sessions of records at most `inactivity_gap` apart (Kafka Streams'
    ``SessionWindows.ofInactivityGapAndGrace``); late records are taken until stream time passes a
    session's end by `grace`."""
    gap_ms = duration_ms(inactivity_gap, "session inactivity gap")
    grace_ms = duration_ms(grace, "session grace")
    retention_ms = gap_ms + grace_ms if retention is None else duration_ms(retention, "session retention")
    return SessionWindows(gap_ms, grace_ms, retention_ms)


@dataclass(frozen=True)
class Suppressed:
    """Kafka Streams' ``Suppressed``: when a suppressed table lets a key's update through.

    `until` ``"window_closes"``: a window's (or session's) final result, once stream time reaches
    its end plus grace (``Suppressed.untilWindowCloses``); ``"time_limit"``: a key's newest update
    `time_to_wait_ms` (by stream time) after the key's first update went into the buffer
    (``Suppressed.untilTimeLimit``). The buffer holds at most `max_records` keys and `max_bytes`
    bytes (None: unbounded); beyond that, `when_full` ``"shut_down"`` fails the task
    (``shutDownWhenFull``) and ``"emit_early"`` emits the oldest updates (``emitEarlyWhenFull``).
    """

    until: Literal["window_closes", "time_limit"]
    time_to_wait_ms: int = 0
    max_records: int | None = None
    max_bytes: int | None = None
    when_full: Literal["shut_down", "emit_early"] = "shut_down"

    def __post_init__(self) -> None:
        for what, limit in (("max_records", self.max_records), ("max_bytes", self.max_bytes)):
            if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
                raise PipelineError(f"suppress {what} must be a whole number >= 0 or None, got {limit!r}")
        if self.when_full not in ("shut_down", "emit_early"):
            raise PipelineError(f"suppress when_full must be 'shut_down' or 'emit_early', got {self.when_full!r}")
        if self.until == "window_closes" and self.when_full != "shut_down":
            raise PipelineError("until_window_closes emits final results only, so a full buffer cannot emit early: "
                                "it fails the task (Kafka Streams' shutDownWhenFull)")

    @property
    def bounded(self) -> bool:
        return self.max_records is not None or self.max_bytes is not None


def until_window_closes(max_records: int | None = None, max_bytes: int | None = None) -> Suppressed:
    """Only each window's final result, once stream time reaches its end plus grace (Kafka
    Streams' ``Suppressed.untilWindowCloses``); for windowed aggregations. A buffer over
    `max_records` / `max_bytes` fails the task (``shutDownWhenFull``): a final result cannot be
    emitted early."""
    return Suppressed("window_closes", 0, max_records, max_bytes, "shut_down")


def until_time_limit(time_to_wait: int | str | timedelta, max_records: int | None = None,
                     max_bytes: int | None = None,
                     when_full: Literal["shut_down", "emit_early"] = "emit_early") -> Suppressed:
    """A key's newest update, `time_to_wait` (by stream time) after its first update was buffered
    (Kafka Streams' ``Suppressed.untilTimeLimit``). A buffer over `max_records` / `max_bytes`
    emits its oldest updates early (``emitEarlyWhenFull``, Kafka Streams' default for a bounded
    buffer) or, with ``when_full="shut_down"``, fails the task."""
    return Suppressed("time_limit", duration_ms(time_to_wait, "suppress time_to_wait"), max_records, max_bytes,
                      when_full)
