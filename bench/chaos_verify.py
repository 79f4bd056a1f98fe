"""The fault campaign's verifier: what the campaign app (examples/chaos/app.py) wrote, checked
against a reference computed from its input, after the run.

Every topic is read to its end: ``read_committed`` for the verdict (what a downstream consumer
sees), ``read_uncommitted`` once more only to count the records of aborted transactions, which
are reported apart and never count against the app. The checks:

- the input: each sequence number of the producer's known sequence exactly once (the producer is
  idempotent and never faulted: a gap or a repeat here is the campaign's own defect);
- ``enriched`` (the join): exactly one record per input event, keyed by its user, holding the
  event and its user's region; a missing, repeated, altered or unknown record is listed;
- ``windows`` (the repartition hop and the windowed counts): every (region, window) key's last
  value is the number of input events of that region with a timestamp in that window; each key's
  values, in the order written, strictly increase (a count is written once per commit when it
  changed, so a repeat or a step back is a duplicated or lost update); a key the input does not
  make is listed.

`verify` is pure (records in, `Verdict` out); `read_topic` and `verify_topics` touch Kafka.
"""

from __future__ import annotations

import json
import struct
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

#: how many examples of each kind of fault a verdict lists (the counts are always whole)
EXAMPLES = 10


@dataclass(frozen=True)
class Record:
    """One record as read back: where it was, its key and value bytes, its timestamp (ms)."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int


@dataclass(frozen=True)
class Event:
    """An input event as the campaign's producer makes it from its sequence number."""

    seq: int
    user: str
    amount: int
    timestamp: int

    def value(self) -> bytes:
        return json.dumps({"seq": self.seq, "user": self.user, "amount": self.amount}, sort_keys=True).encode()


def windowed_key(region: str, window_start: int) -> bytes:
    """A windowed count's key as Eddy writes it: the key, then the window's start (8 bytes, big-endian)."""
    return region.encode() + struct.pack(">q", window_start)


@dataclass
class Verdict:
    """What the verifier found. `ok` only when every list is empty and every count matches."""

    input_events: int = 0
    input_gaps: list[int] = field(default_factory=list)
    input_repeats: list[int] = field(default_factory=list)
    enriched_records: int = 0
    joined_missing: int = 0
    joined_duplicated: int = 0
    joined_wrong: int = 0
    joined_unexpected: int = 0
    window_keys: int = 0
    window_updates: int = 0
    windows_wrong: int = 0
    windows_missing: int = 0
    windows_unexpected: int = 0
    windows_not_monotonic: int = 0
    aborted: dict[str, int] = field(default_factory=dict)
    open_transactions: list[str] = field(default_factory=list)
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def lost(self) -> int:
        return self.joined_missing + self.windows_missing + self.windows_wrong

    @property
    def duplicated(self) -> int:
        return self.joined_duplicated + self.windows_not_monotonic

    @property
    def ok(self) -> bool:
        return not (self.input_gaps or self.input_repeats or self.joined_missing or self.joined_duplicated
                    or self.joined_wrong or self.joined_unexpected or self.windows_wrong or self.windows_missing
                    or self.windows_unexpected or self.windows_not_monotonic or self.open_transactions)

    def note(self, kind: str, text: str) -> None:
        shown = self.examples.setdefault(kind, [])
        if len(shown) < EXAMPLES:
            shown.append(text)

    def summary(self) -> str:
        head = "PASS" if self.ok else "FAIL"
        lines = [f"{head}: {self.input_events} input events; join: {self.enriched_records} records, "
                 f"{self.joined_missing} missing, {self.joined_duplicated} duplicated, {self.joined_wrong} wrong, "
                 f"{self.joined_unexpected} unexpected; windows: {self.window_keys} keys from {self.window_updates} "
                 f"updates, {self.windows_wrong} wrong final counts, {self.windows_missing} missing, "
                 f"{self.windows_unexpected} unexpected, {self.windows_not_monotonic} not increasing; "
                 f"aborted records (read_uncommitted only): {dict(sorted(self.aborted.items()))}"]
        if self.input_gaps or self.input_repeats:
            lines.append(f"input: {len(self.input_gaps)} sequence numbers missing, {len(self.input_repeats)} repeated")
        if self.open_transactions:
            lines.append(f"transactions still open at the end: {self.open_transactions}")
        lines += [f"  {kind}: {'; '.join(shown)}" for kind, shown in sorted(self.examples.items())]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok, "lost": self.lost, "duplicated": self.duplicated}


def decode_events(records: Iterable[Record]) -> list[Event]:
    """The input topic's records as events (their timestamps are the records')."""
    out = []
    for r in records:
        body = json.loads(r.value or b"null")
        out.append(Event(int(body["seq"]), str(body["user"]), int(body["amount"]), r.timestamp))
    return out


def expected_enriched(event: Event, region: str) -> dict[str, Any]:
    """What the join writes for `event` (examples/chaos/app.py): the event's value and the
    table's, as a JSON object of the two columns."""
    return {"value": event.value().decode(), "table_value": region}


def joined_event(body: Any) -> dict[str, Any]:
    """The event in a join record (its ``value`` column: the event's JSON text)."""
    value = body["value"]
    return dict(json.loads(value) if isinstance(value, str) else value)


def verify(events: Sequence[Event], regions: Mapping[str, str], sent: int, enriched: Sequence[Record],
           windows: Sequence[Record], window_ms: int, aborted: Mapping[str, int] | None = None,
           open_transactions: Sequence[str] = ()) -> Verdict:
    """Check the outputs against the input. `events` as read back from the input topic, `sent`
    how many the producer sent (sequence numbers 0..sent-1), `regions` the users table."""
    v = Verdict(input_events=len(events), aborted=dict(aborted or {}), open_transactions=list(open_transactions))
    by_seq: dict[int, Event] = {}
    seen = Counter(e.seq for e in events)
    v.input_repeats = sorted(s for s, n in seen.items() if n > 1)
    v.input_gaps = sorted(set(range(sent)) - set(seen))
    for e in events:
        by_seq.setdefault(e.seq, e)

    # the join: one record per event
    v.enriched_records = len(enriched)
    joined: Counter[int] = Counter()
    for r in enriched:
        try:
            body = json.loads(r.value or b"null")
            seq = int(joined_event(body)["seq"])
        except (ValueError, TypeError, KeyError):
            v.joined_unexpected += 1
            v.note("join: unexpected", f"p{r.partition}@{r.offset} {r.value!r:.80}")
            continue
        joined[seq] += 1
        event = by_seq.get(seq)
        if event is None:
            v.joined_unexpected += 1
            v.note("join: unexpected", f"seq {seq} was never sent (p{r.partition}@{r.offset})")
            continue
        if joined[seq] > 1:
            v.joined_duplicated += 1
            v.note("join: duplicated", f"seq {seq} again at p{r.partition}@{r.offset}")
        want = expected_enriched(event, regions.get(event.user, "?"))
        same = joined_event(body) == joined_event(want) and body.get("table_value") == want["table_value"]
        if not same or set(body) != set(want) or (r.key or b"").decode() != event.user:
            v.joined_wrong += 1
            v.note("join: wrong", f"seq {seq}: key {r.key!r}, {body} instead of {want}")
    missing = sorted(set(by_seq) - set(joined))
    v.joined_missing = len(missing)
    for seq in missing[:EXAMPLES]:
        v.note("join: missing", f"seq {seq}")

    # the windows: each key's final count, and its updates strictly increasing
    want_counts: Counter[bytes] = Counter()
    for e in by_seq.values():
        want_counts[windowed_key(regions.get(e.user, "?"), e.timestamp - e.timestamp % window_ms)] += 1
    updates: dict[bytes, list[int]] = defaultdict(list)
    for r in sorted(windows, key=lambda r: (r.partition, r.offset)):
        v.window_updates += 1
        if r.key is None or r.value is None or len(r.value) != 8:
            v.windows_unexpected += 1
            v.note("windows: unexpected", f"p{r.partition}@{r.offset} key {r.key!r} value {r.value!r}")
            continue
        updates[r.key].append(struct.unpack(">q", r.value)[0])
    v.window_keys = len(updates)
    for key, values in updates.items():
        shown = _window_name(key)
        if key not in want_counts:
            v.windows_unexpected += 1
            v.note("windows: unexpected", f"{shown} = {values[-1]}, a window no input falls in")
            continue
        if values[-1] != want_counts[key]:
            v.windows_wrong += 1
            v.note("windows: wrong", f"{shown}: {values[-1]} instead of {want_counts[key]}")
        steps_back = [(a, b) for a, b in zip(values, values[1:], strict=False) if b <= a]
        if steps_back:
            v.windows_not_monotonic += 1
            v.note("windows: not increasing", f"{shown}: {steps_back[:3]} in {len(values)} updates")
    for key in sorted(set(want_counts) - set(updates))[:EXAMPLES]:
        v.note("windows: missing", f"{_window_name(key)} (want {want_counts[key]})")
    v.windows_missing = len(set(want_counts) - set(updates))
    return v


def _window_name(key: bytes) -> str:
    return f"{key[:-8].decode(errors='replace')}@{struct.unpack('>q', key[-8:])[0]}"


# -- Kafka ---------------------------------------------------------------------------------------


def read_topic(bootstrap: str, topic: str, isolation: str = "read_committed",
               timeout_s: float = 120.0) -> tuple[list[Record], bool]:
    """Every record of `topic` from its start to its end as of now: (records, complete). Under
    read_committed the end is the last stable offset; `complete` is false when a partition did
    not get there within `timeout_s` (a transaction left open)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"chaos-verify-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "isolation.level": isolation,
                         "enable.partition.eof": True, "fetch.max.bytes": 16 << 20})
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        records: list[Record] = []
        done = {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + timeout_s
        while len(done) < len(partitions) and time.monotonic() < deadline:
            for m in consumer.consume(10_000, timeout=0.5):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF and m.offset() >= ends[m.partition()]:
                        done.add(m.partition())
                    continue
                records.append(Record(m.partition(), m.offset(), m.key(), m.value(), m.timestamp()[1]))
                if m.offset() + 1 >= ends[m.partition()]:
                    done.add(m.partition())
            # past the last record, only control markers may be left: ask where the consumer stands
            for tp in consumer.position([TopicPartition(topic, p) for p in partitions if p not in done]):
                if tp.offset >= ends[tp.partition]:
                    done.add(tp.partition)
        return records, len(done) == len(partitions)
    finally:
        consumer.close()


def verify_topics(bootstrap: str, events_topic: str, users: Mapping[str, str], sent: int, enriched_topic: str,
                  windows_topic: str, window_ms: int, timeout_s: float = 120.0) -> Verdict:
    """Read the input and both outputs to their ends and `verify` them; aborted records counted apart."""
    incomplete: list[str] = []
    read: dict[str, list[Record]] = {}
    aborted: dict[str, int] = {}
    for topic in (events_topic, enriched_topic, windows_topic):
        committed, complete = read_topic(bootstrap, topic, "read_committed", timeout_s)
        if not complete:
            incomplete.append(topic)
        everything, _ = read_topic(bootstrap, topic, "read_uncommitted", timeout_s)
        read[topic] = committed
        aborted[topic] = len(everything) - len(committed)
    return verify(decode_events(read[events_topic]), users, sent, read[enriched_topic], read[windows_topic],
                  window_ms, aborted, incomplete)
