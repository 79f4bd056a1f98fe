"""The bucket bounds of every Eddy histogram of a duration, the operator's and the runtime's alike.

Eddy's records reach their outputs in tens to a few hundred milliseconds, commits take a few, and
failovers and restores seconds: the bounds are fine in the millisecond range (so that 100 ms and
150 ms land in different buckets, and a quantile read off them is close to the true one) and still
reach a minute. The runners report end-to-end latency as counts per bucket of this ladder
(`eddy_runtime.protocol.work.ItemResult.latency_counts`), so a driver and its runners must agree on
it: a change is a change of that message.
"""

from __future__ import annotations

__all__ = ["DURATION_BUCKETS_S"]

#: upper bounds in seconds; Prometheus adds +Inf
DURATION_BUCKETS_S: tuple[float, ...] = (
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75,
    1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 20.0, 30.0, 60.0,
)
