"""What the continuous loop did for a task since the driver's last sync: `merge_results` adds up
the `ItemResult`s of its steps and rounds into one (executor/continuous.py hands them back).
"""

from __future__ import annotations

from dataclasses import replace

from eddy_runtime.protocol.work import ItemResult

__all__ = ["merge_results"]


def merge_results(old: ItemResult | None, new: ItemResult) -> ItemResult:
    """What a task did since the last sync: counts added up, the latest status and figures."""
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
        restored=old.restored + new.restored,
        figures=new.figures or old.figures,
        message=new.message or old.message,
    )
