"""What happens to bad records on the executor: the dead-letter record of a bad record, and the
input records behind rows a user function failed on (docs/DESIGN.md, "One micro-batch", step 4).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from eddy_runtime.kafka.partitions import InputRange
from eddy_runtime.kafka.record_collector import OutputRecord
from eddy_runtime.kafka.records import BadRecord, RangeReader, RawRecords, encode_rows
from eddy_runtime.protocol.work import BatchSettings

__all__ = ["bad_record_output", "failed_row_records"]


def bad_record_output(settings: BatchSettings, task: str, bad: BadRecord) -> OutputRecord:
    """The dead-letter record of `bad`: the original key and value, the error in headers."""
    assert settings.dead_letter_topic is not None
    headers = [
        ("eddy.error", bad.error.encode()),
        ("eddy.error.stage", bad.stage.encode()),
        ("eddy.source.topic", bad.topic.encode()),
        ("eddy.source.partition", str(bad.partition).encode()),
        ("eddy.source.offset", str(bad.offset).encode()),
        ("eddy.task", task.encode()),
        ("eddy.app", settings.app.encode()),
    ]
    return OutputRecord(settings.dead_letter_topic, bad.key, bad.value, None, headers,
                        bad.timestamp if bad.timestamp > 0 else None)


def failed_row_records(sources: Sequence[InputRange], rows: pa.Table, raws: Sequence[RawRecords] | None,
                       failed: dict[int, str], reader: RangeReader, settings: BatchSettings) -> list[BadRecord]:
    """The input records behind rows whose user function failed (re-read by offset when the rows
    came through DataFrame steps; the row itself as JSON when they no longer carry an offset).
    `sources`: the batch's source ranges, several for a merge read in place (the rows' ``topic``
    column says whose each row is), and `raws` their records, None after DataFrame steps."""
    offsets = rows.column("offset").to_pylist() if "offset" in rows.column_names else None
    topics = rows.column("topic").to_pylist() if len(sources) > 1 else None
    source_of = {r.topic: k for k, r in enumerate(sources)}
    by_offset = [{o: i for i, o in enumerate(raw.offsets)} for raw in raws] if raws is not None else []
    out = []
    for i, err in sorted(failed.items()):
        which = source_of[topics[i]] if topics is not None else 0
        source, raw = sources[which], raws[which] if raws is not None else None
        off = offsets[i] if offsets is not None else -1
        if raw is None and off is not None and off >= 0:
            one = reader.read(InputRange(source.topic, source.partition, off, off + 1), settings.read_timeout_s)
            if len(one):
                out.append(BadRecord(source.topic, source.partition, off, one.timestamps[0], one.keys[0],
                                     one.values[0], err, "process"))
                continue
        j = by_offset[which].get(off) if raw is not None else None
        if raw is not None and j is not None:
            key, value, ts = raw.keys[j], raw.values[j], raw.timestamps[j]
        else:
            key = None
            value = encode_rows(rows.slice(i, 1), [c for c in rows.column_names if not c.startswith("__")])[0]
            ts = 0
        out.append(BadRecord(source.topic, source.partition, off if off is not None else -1, ts, key, value, err,
                             "process"))
    return out
