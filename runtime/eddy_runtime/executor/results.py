"""What the continuous loop did for a task since the driver's last sync: `merge_results` adds up
the `ItemResult`s of its steps and rounds into one (executor/continuous.py hands them back);
`share_busy` splits a round's busy time among its tasks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from eddy_runtime.protocol.work import ItemResult

__all__ = ["merge_results", "share_busy"]


def merge_results(old: ItemResult | None, new: ItemResult) -> ItemResult:
    """What a task did since the last sync: counts added up, the latest status and figures (a
    copy's restore progress among them: `restored` counts from the restore's start, so it is
    not added up)."""
    if old is None:
        return new
    counts = new.latency_counts
    if old.latency_counts and counts:
        counts = tuple(a + b for a, b in zip(old.latency_counts, counts, strict=True))
    elif old.latency_counts:
        counts = old.latency_counts
    return replace(
        new,
        records_in=old.records_in + new.records_in,
        records_out=old.records_out + new.records_out,
        committed={**old.committed, **new.committed},
        skipped=old.skipped + new.skipped,
        dead_lettered=old.dead_lettered + new.dead_lettered,
        dropped=old.dropped + new.dropped,
        bad_records=(old.bad_records + new.bad_records)[:20],
        latency_counts=counts,
        latency_sum_s=old.latency_sum_s + new.latency_sum_s,
        duration_s=old.duration_s + new.duration_s,
        busy_s=old.busy_s + new.busy_s,
        busy_per_round_s=old.busy_per_round_s + new.busy_per_round_s,
        figures=new.figures or old.figures,
        message=new.message or old.message,
    )


def share_busy(results: Sequence[ItemResult], seconds: float, per_round_s: float = 0.0) -> list[ItemResult]:
    """`results` of one round, which kept the runner busy `seconds` in all (`per_round_s` of them
    the round's cost whatever it carried: busy_clock.RoundCost), each with its share of both: by
    the records it processed (evenly when none processed any), so that the shares add up to the
    round's."""
    records = sum(r.records_in for r in results)
    if not results:
        return []
    shares = [1 / len(results)] * len(results) if not records else [r.records_in / records for r in results]
    return [replace(r, busy_s=seconds * k, busy_per_round_s=per_round_s * k)
            for r, k in zip(results, shares, strict=True)]
