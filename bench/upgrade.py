"""Change without an outage: the word count changed while input flows, in Eddy and its peers.

    .venv/bin/python bench/upgrade.py --systems kstreams,sss                 # the peers, own broker
    .venv/bin/python bench/upgrade.py --systems kstreams,sss --repeat 3 --json out.json
    infra/cluster/netns.sh .venv/bin/python bench/upgrade.py                 # Eddy on real pods too

The job is bench/throughput.py's word count (one word per input record, re-keyed by word, counted
in a RocksDB store, every updated count to an output topic as ``word`` -> 64-bit big-endian
count, exactly-once where the system has it). For each system and kind of change, one run:

- a fresh input topic (``--partitions``) and output topic; the system's old version started and
  holding its tasks before any input (no start-up backlog is measured);
- a producer at ``--rate`` records/s of Zipf words, each stamped with its send time, and every
  0.2 s a probe word; at least ``--settle`` + ``--steady`` s at the rate, until every probe of
  the last ``--steady`` s was counted within ``--late-ms`` (or ``--warmup-max`` s passed: the
  report then says the system was not steady), then the change (`Subject.change`, in a thread:
  input keeps coming), then ``--tail`` s after the new version holds every task; the input is
  drained and the system stopped cleanly;
- one read_committed observer (throughput.py's) notes when each count update became visible.

What is printed per run (definitions in bench/README.md's upgrade.py section):

- **lateness** of an input record: from its send to the first visible count update that includes
  it (the k-th occurrence of a word is in once its count is >= k): throughput.py's latency;
- **in flight** G: the largest lateness among the records sent in the ``--steady`` s before the
  change that were visible before it; records sent from G before the change to the end of the run
  make the **change window**, those sent in the ``--steady`` s before it the **steady window**;
- **steady p99**, **change p99** and their ratio; **max**: the largest lateness in the change
  window; **late**: its records later than ``--late-ms`` (2000, issue 29's target); **back**:
  from the change to the send of the first record after which none is later than ``--late-ms``;
- **holds all**: from the change's first action to the new version holding every task (what
  that means per system: `Subject.change`'s docstrings and the README);
- **restored**: records the system applied to its state to get it back (per system: Kafka
  Streams' restore listener, Spark's state rows at its first batch, Eddy's runners' restore lines);
- **counts**: the last count of every word equals the input's; an update that repeats or lowers
  its word's count is a duplicate (exactly-once: none allowed; Spark's at-least-once Kafka sink:
  repeats are counted and allowed, a lower count is not).

Systems: ``kstreams`` (a rolling bounce of two instances with one standby to a new version),
``sss`` (Spark Structured Streaming's query stopped and restarted from its checkpoint as a new
version), both in `upgrade_peers.py`; ``eddy`` (five kinds of change to a StreamApp on real pods,
in `upgrade_eddy.py`; needs infra/cluster/netns.sh). ``--repeat N`` runs every case N times,
interleaved, lists every run and quotes the middle one by change p99 (a failed or wrong run
instead, if any). ``--json FILE`` writes every run. Exit code 1 if a run failed or its counts
were wrong; an Eddy case whose feature has not landed reports "not run: <reason>" and does not fail.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import multiprocessing
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import failover as fo
import throughput as tp
from sss import peer as sss

SYSTEMS = ("eddy", "kstreams", "sss")
PROBE = tp.WARMUP_WORD
PROBE_INTERVAL_S = 0.2


class NotRun(Exception):
    """A case that cannot be measured here yet (e.g. an Eddy feature that has not landed); its
    message is the reason. The run's input is still drained and its counts checked."""


@dataclass(frozen=True)
class Settings:
    bootstrap: str
    partitions: int
    rate: float
    settle_s: float
    steady_s: float
    tail_s: float
    late_ms: float
    warmup_max_s: float
    change_timeout_s: float
    commit_interval_ms: int
    kstreams_session_timeout_ms: int
    kstreams_caught_up_lag: int
    sss_restart: str
    work_dir: Path
    #: keys of Eddy's counts store written to its changelog before the app starts (upgrade_eddy.fill_store)
    state_keys: int = 0


@dataclass
class Marks:
    """What a change did and when (epoch ms), filled in by `Subject.change` as it goes."""

    started_ms: float = math.nan
    #: the new version holds every task
    done_ms: float = math.nan
    steps: list[tuple[str, float]] = field(default_factory=list)
    restored: int | None = None
    restored_label: str = ""
    notes: list[str] = field(default_factory=list)
    #: parts of the change measured apart: (name, start ms, end ms), e.g. a drain and the return after it
    phases: list[tuple[str, float, float]] = field(default_factory=list)

    def start(self) -> None:
        self.started_ms = time.time() * 1000

    def step(self, what: str) -> None:
        self.steps.append((what, time.time() * 1000))
        tp.say(f"  {what} (+{(time.time() * 1000 - self.started_ms) / 1000:.1f} s)")

    def done(self) -> None:
        self.done_ms = time.time() * 1000


class Subject(Protocol):
    """One system running the word count, and one kind of change made to it."""

    system: str
    case: str
    #: a word's count may repeat on the output (an at-least-once sink)
    repeats_allowed: bool
    log: Path

    def start(self) -> None:
        """Start the old version."""

    def ready(self) -> bool:
        """The old version holds every task (and its standbys, if any, are placed)."""

    def alive(self) -> bool: ...

    def prepare(self) -> None:
        """What a careful operator does before the change, before any input (may do nothing)."""

    def change(self, marks: Marks) -> None:
        """Make the change; return once the new version holds every task (`marks.done`).
        Raise `NotRun` if the case cannot be measured here."""

    def stop(self) -> dict[str, Any]:
        """Stop cleanly; each process's JSON line."""

    def kill_all(self) -> None: ...


SubjectFactory = Callable[[Settings, str, str, str], Subject]


@dataclass
class Upgrade:
    """One run of one case."""

    system: str
    case: str
    records: int = 0
    #: from the first input to the change: once the probes of --steady s were within --late-ms, or --warmup-max
    warmup_s: float = math.nan
    warmup_met: bool = False
    in_flight_ms: float = math.nan
    steady_p50_ms: float = math.nan
    steady_p99_ms: float = math.nan
    change_records: int = 0
    change_p99_ms: float = math.nan
    change_max_ms: float = math.nan
    late_records: int = 0
    #: when the late records were sent (`late_spans`)
    late_spans: list[tuple[float, float, float]] = field(default_factory=list)
    #: per phase of the change (`Marks.phases`): (name, seconds, records sent in it, p99 ms, max ms, late)
    phases: list[tuple[str, float, int, float, float, int]] = field(default_factory=list)
    back_s: float = math.nan
    back: bool = False
    holds_all_s: float = math.nan
    steps: list[tuple[str, float]] = field(default_factory=list)
    restored: int | None = None
    restored_label: str = ""
    output_records: int = 0
    repeated: int = 0
    lowered: int = 0
    notes: list[str] = field(default_factory=list)
    load: tuple[float, float] = (math.nan, math.nan)
    wrong: list[str] = field(default_factory=list)
    error: str | None = None
    not_run: str | None = None

    @property
    def ratio(self) -> float:
        return self.change_p99_ms / self.steady_p99_ms if self.steady_p99_ms else math.nan

    @property
    def failed(self) -> bool:
        return bool(self.error or self.wrong)


# -- measuring ------------------------------------------------------------------------------------------------


def windows(sent: Sequence[tuple[bytes, int]], lat: Sequence[float], started_ms: float, steady_s: float
            ) -> tuple[float, list[float], int]:
    """(in-flight G ms, sorted steady latencies, index of the change window's first record).

    G is the largest latency among records sent in the `steady_s` before the change that were
    visible before it (records sent later than `started_ms - G` may have met the change in flight);
    the steady window is the `steady_s` before `started_ms - G`."""
    recent = [x for (_, ts), x in zip(sent, lat, strict=True)
              if started_ms - steady_s * 1000 <= ts < started_ms and ts + x < started_ms]
    g = max(recent, default=1000.0)
    steady = sorted(x for (_, ts), x in zip(sent, lat, strict=True)
                    if started_ms - g - steady_s * 1000 <= ts < started_ms - g and not math.isnan(x))
    first = next((i for i, (_, ts) in enumerate(sent) if ts >= started_ms - g), len(sent))
    return g, steady, first


def late_spans(sent: Sequence[tuple[bytes, int]], lat: Sequence[float], started_ms: float, late_ms: float,
               gap_s: float = 1.0) -> list[tuple[float, float, float]]:
    """When the late records were sent: (first, last, worst latency ms) per span of sends (seconds
    after the change; a span ends at a gap over `gap_s` between late records): where a change
    stalls the output."""
    spans: list[list[float]] = []
    for (_, ts), x in zip(sent, lat, strict=True):
        x = math.inf if math.isnan(x) else x
        if x <= late_ms:
            continue
        at = (ts - started_ms) / 1000
        if spans and at - spans[-1][1] <= gap_s:
            spans[-1][1], spans[-1][2] = at, max(spans[-1][2], x)
        else:
            spans.append([at, at, x])
    return [(a, b, w) for a, b, w in spans]


def analyse(result: Upgrade, s: Settings, sent: Sequence[tuple[bytes, int]], seen: Sequence[tuple[bytes, int, float]],
            marks: Marks, repeats_allowed: bool) -> None:
    lat = fo.record_latencies(sent, seen)
    result.records = len(sent)
    if not math.isnan(marks.started_ms):
        g, steady, first = windows(sent, lat, marks.started_ms, s.steady_s)
        result.in_flight_ms = g
        result.steady_p50_ms, result.steady_p99_ms = tp.percentile(steady, 0.5), tp.percentile(steady, 0.99)
        window = sorted(math.inf if math.isnan(x) else x for x in lat[first:])
        result.change_records = len(window)
        result.change_p99_ms = tp.percentile(window, 0.99)
        result.change_max_ms = window[-1] if window else math.nan
        result.late_records = sum(1 for x in window if x > s.late_ms)
        result.late_spans = late_spans(sent[first:], lat[first:], marks.started_ms, s.late_ms)
        for name, start_ms, end_ms in marks.phases:
            # a record sent from G before the phase's start (it may have met the phase in flight) to its end
            part = sorted(math.inf if math.isnan(x) else x for (_, ts), x in zip(sent, lat, strict=True)
                          if start_ms - g <= ts < end_ms)
            result.phases.append((name, (end_ms - start_ms) / 1000, len(part), tp.percentile(part, 0.99),
                                  part[-1] if part else math.nan, sum(1 for x in part if x > s.late_ms)))
        back_s, result.back, _, _ = fo.recovery(sent, lat, marks.started_ms, s.late_ms, sent[first][1]
                                                if first < len(sent) else math.inf)
        result.back_s = back_s
    if not math.isnan(marks.done_ms):
        result.holds_all_s = (marks.done_ms - marks.started_ms) / 1000
    result.steps = [(what, (at - marks.started_ms) / 1000) for what, at in marks.steps]
    result.restored, result.restored_label = marks.restored, marks.restored_label
    result.notes += marks.notes
    expected: dict[bytes, int] = {}
    for w, _ in sent:
        expected[w] = expected.get(w, 0) + 1
    latest: dict[bytes, int] = {}
    for word, count, _ in seen:
        before = latest.get(word, 0)
        if count < before:
            result.lowered += 1
        elif count == before:
            result.repeated += 1
        latest[word] = count
    result.output_records = len(seen)
    result.wrong = tp.count_errors(expected, latest)
    missing = sum(1 for x in lat if math.isnan(x))
    if missing:
        result.wrong.append(f"{missing} input records never seen counted")
    if result.lowered or (result.repeated and not repeats_allowed):
        result.wrong.append(f"{result.repeated} updates repeated and {result.lowered} lowered their word's count")


def run_case(s: Settings, system: str, case: str, factory: SubjectFactory, words: Sequence[bytes]) -> Upgrade:
    """Start the old version, feed it, change it while feeding, drain, stop, measure."""
    from confluent_kafka import Producer

    result = Upgrade(system, case)
    tag = uuid.uuid4().hex[:6]
    input_topic = f"bench-up-{system}-in-{tag}"
    tp.create_topics(s.bootstrap, [input_topic], s.partitions)
    out = tp.output_topic(s.bootstrap, f"bench-up-{system}-out-{tag}", s.partitions)
    ctx = multiprocessing.get_context("spawn")
    probe_count, stop = ctx.Value("q", 0), ctx.Event()
    seen_path = s.work_dir / f"seen-{system}-{tag}.pickle"
    observer = ctx.Process(target=tp.observe, args=(s.bootstrap, out, s.partitions, probe_count, stop,
                                                     str(seen_path)), daemon=True)
    observer.start()
    app_id = f"bench-up-{system}-{tag}"
    subject = factory(s, input_topic, out, app_id)
    result.load = (tp.loadavg(), math.nan)
    marks = Marks()
    failure: list[BaseException] = []
    sent: list[tuple[bytes, int]] = []
    tp.say(f"{system} / {case}: starting (app {app_id}, log {subject.log})")

    def change() -> None:
        try:
            subject.change(marks)
        except BaseException as e:  # noqa: BLE001 - handed to the producer's loop
            failure.append(e)

    try:
        subject.start()
        deadline = time.monotonic() + 600
        while not subject.ready():
            if not subject.alive() or time.monotonic() > deadline:
                raise RuntimeError("the old version did not hold its tasks within 600 s")
            time.sleep(0.2)
        subject.prepare()
        tp.say(f"{system} / {case}: old version holds its tasks; producing")
        producer = Producer({"bootstrap.servers": s.bootstrap, "linger.ms": 1})
        probes: list[tuple[float, float]] = []  # (send ms, latency ms or nan)
        start = time.time()
        i = probes_counted = 0
        next_probe = start
        changer: threading.Thread | None = None
        changed_at = end_at = math.inf
        while time.time() < end_at:
            now = time.time()
            if changer is None and now - start >= s.settle_s + s.steady_s:
                # Steady: the probes of the last `steady_s` that are due were each counted within --late-ms.
                late_s = s.late_ms / 1000
                window = [(t, x) for t, x in probes if t >= (now - s.steady_s - late_s) * 1000]
                steady = all(x <= s.late_ms if not math.isnan(x) else now * 1000 - t <= s.late_ms for t, x in window)
                if steady or now - start >= s.settle_s + s.warmup_max_s:
                    result.warmup_s, result.warmup_met, changed_at = now - start, steady, now
                    changer = threading.Thread(target=change, name="change", daemon=True)
                    changer.start()
            elif changer is not None and not changer.is_alive() and end_at == math.inf:
                end_at = now + s.tail_s
            # A safety net: each wait of a change is bounded by --change-timeout (and says what it waited for).
            if changer is not None and changer.is_alive() and now - changed_at > 2 * s.change_timeout_s + 60:
                raise RuntimeError(f"the change did not end within {2 * s.change_timeout_s + 60:g} s")
            if i >= len(words):
                raise RuntimeError("ran out of words")
            due = min(len(words), int((now - start) * s.rate) + 1)
            while i < due:
                now_ms = int(time.time() * 1000)
                word = words[i]
                if now >= next_probe:
                    word, next_probe = PROBE, next_probe + PROBE_INTERVAL_S
                    probes.append((now_ms, math.nan))
                producer.produce(input_topic, word, timestamp=now_ms)
                sent.append((word, now_ms))
                i += 1
            producer.poll(0)
            while probes_counted < min(probe_count.value, len(probes)):
                t = probes[probes_counted][0]
                probes[probes_counted] = (t, time.time() * 1000 - t)
                probes_counted += 1
            time.sleep(0.001)
        producer.flush(30)
        if failure and not isinstance(failure[0], NotRun):
            raise failure[0]
        if failure:
            result.not_run = str(failure[0])
        tp.say(f"{system} / {case}: sent {len(sent)} records; draining")
        deadline = time.monotonic() + 180
        while not fo.output_settled(s.bootstrap, out, probe_count.value, len(probes)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the input was not drained within 180 s ({probe_count.value} of {len(probes)} "
                                   "probes counted)")
            time.sleep(1)
        lines = subject.stop()
        result.notes += [f"{n}: {json.dumps(x)}" for n, x in lines.items() if "error" in x]
    except NotRun as e:  # found out before the change (e.g. a field the cluster does not know)
        result.not_run = str(e)
        subject.kill_all()
    except Exception as e:  # noqa: BLE001 - one case's failure is reported in its row
        result.error = f"{type(e).__name__}: {e}"
        tp.say(f"{system} / {case}: failed: {result.error}")
        subject.kill_all()
    except BaseException:  # Ctrl-C: no process of the run is left behind
        subject.kill_all()
        raise
    finally:
        stop.set()
        observer.join(120)
    result.load = (result.load[0], tp.loadavg())
    if result.error is None and seen_path.exists():
        with seen_path.open("rb") as f:
            seen: list[tuple[bytes, int, float]] = pickle.load(f)
        analyse(result, s, sent, seen, marks, subject.repeats_allowed)
        with (s.work_dir / f"run-{system}-{tag}.pickle").open("wb") as f:  # kept with --keep
            pickle.dump({"sent": sent, "seen": seen, "marks": asdict(marks)}, f)
    tp.say(f"{system} / {case}: " + summary(result))
    return result


# -- report ---------------------------------------------------------------------------------------------------


def summary(r: Upgrade) -> str:
    if r.error:
        return f"FAILED: {r.error}"
    head = f"not run: {r.not_run}; " if r.not_run else ""
    return (head + f"steady p99 {tp.fmt(r.steady_p99_ms)} ms, change p99 {tp.fmt(r.change_p99_ms)} ms "
            f"({tp.fmt(r.ratio, '.1f')}x), max {tp.fmt(r.change_max_ms)} ms, {r.late_records} late"
            + "".join(f" (sent +{a:.1f}-{b:.1f} s)" for a, b, _ in r.late_spans[:4]) + ", holds all after "
            f"{tp.fmt(r.holds_all_s, '.1f')} s, restored {r.restored if r.restored is not None else '-'}, counts "
            + ("exact" if not r.wrong else f"WRONG {r.wrong[:3]}")
            + "".join(f"; {name} ({secs:.1f} s, {n} records): p99 {tp.fmt(p99)} ms, max {tp.fmt(mx)} ms, {late} late"
                      for name, secs, n, p99, mx, late in r.phases))


def middle(runs: list[Upgrade]) -> Upgrade:
    """The middle run by change p99 (the lower middle of an even count), or the first failed one."""
    bad = [r for r in runs if r.failed]
    if bad:
        return bad[0]
    measured = [r for r in runs if not r.not_run] or runs
    return sorted(measured, key=lambda r: r.change_p99_ms)[(len(measured) - 1) // 2]


def report(runs: dict[tuple[str, str], list[Upgrade]], args: argparse.Namespace) -> str:
    late = f"{args.late_ms / 1000:g} s"
    rows = [("system", "change", "steady p50/p99 ms", "change p99 ms", "x steady", "max ms", f"late >{late}",
             f"back <{late}", "holds all s", "restored", "counts")]
    quoted = {key: middle(rs) for key, rs in runs.items() if rs}
    for (system, case), r in quoted.items():
        if r.error or (r.not_run and math.isnan(r.change_p99_ms)):
            rows.append((system, case, *["-"] * 8, "FAILED" if r.error else "not run"))
            continue
        rows.append((
            system, case,
            f"{tp.fmt(r.steady_p50_ms)}/{tp.fmt(r.steady_p99_ms)}",
            tp.fmt(r.change_p99_ms), tp.fmt(r.ratio, ".1f"), tp.fmt(r.change_max_ms), str(r.late_records),
            tp.fmt(r.back_s, ".1f") if r.back else "never",
            tp.fmt(r.holds_all_s, ".1f"),
            "-" if r.restored is None else f"{r.restored:,}",
            "exact" if not r.wrong else "WRONG",
        ))
    widths = [max(len(x[i]) for x in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(n) if i < 2 else c.rjust(n) for i, (c, n) in enumerate(zip(row, widths, strict=True)))
             for row in rows]
    for (system, case), r in quoted.items():
        label = f"{system} / {case}"
        if r.not_run:
            lines.append(f"{label}: not run: {r.not_run}")
        if not r.warmup_met and not r.error:
            lines.append(f"{label}: NOT steady before the change: some probe of the last {args.steady:g} s took over "
                         f"{args.late_ms:g} ms; changed after {tp.fmt(r.warmup_s, '.0f')} s of input anyway")
        if r.error:
            lines.append(f"{label}: FAILED: {r.error}")
        if r.wrong:
            lines.append(f"{label}: wrong: {r.wrong[:5]}")
        if r.steps:
            lines.append(f"{label}: steps: " + ", ".join(f"{what} +{at:.1f} s" for what, at in r.steps))
        if r.late_spans:
            lines.append(f"{label}: late records sent at " + ", ".join(
                f"+{a:.1f}-{b:.1f} s (worst {tp.fmt(w)} ms)" for a, b, w in r.late_spans[:8]))
        if r.restored_label:
            lines.append(f"{label}: restored = {r.restored_label}")
        if r.repeated or r.lowered:
            lines.append(f"{label}: {r.repeated} count updates repeated, {r.lowered} lowered, of {r.output_records}")
        lines += [f"{label}: {n}" for n in r.notes]
    if args.repeat > 1:
        for (system, case), rs in runs.items():
            lines.append(f"{system} / {case} runs, steady p99 / change p99 / max ms / holds all s: " + " | ".join(
                "FAILED" if r.error else f"{tp.fmt(r.steady_p99_ms)} / {tp.fmt(r.change_p99_ms)} / "
                f"{tp.fmt(r.change_max_ms)} / {tp.fmt(r.holds_all_s, '.1f')}" for r in rs))
    lines.append("load average (1 min) at start -> end: " + ", ".join(
        f"{r.system}/{r.case} {r.load[0]:.1f}->{r.load[1]:.1f}" for rs in runs.values() for r in rs))
    lines.append(f"{args.rate:g} records/s over {args.distinct} distinct words (Zipf {args.zipf}), {args.partitions} "
                 f"partitions, {args.steady:g} s steady before the change, {args.tail:g} s after it; exactly-once "
                 f"(sss: at-least-once sink); commit interval / trigger {args.commit_interval_ms} ms; "
                 f"{os.cpu_count()} CPUs on this machine")
    if "sss" in args.systems:
        lines.append(sss.AT_LEAST_ONCE_NOTE)
    if "eddy" in args.systems:
        lines += eddy_targets(quoted)
    return "\n".join(lines)


def eddy_targets(quoted: dict[tuple[str, str], Upgrade]) -> list[str]:
    """Issue 29's targets for Eddy: no record later than 2 s, change p99 at most 2x steady p99."""
    out = []
    for (system, case), r in quoted.items():
        if system != "eddy" or r.error or r.not_run or math.isnan(r.change_p99_ms):
            continue
        ok_max, ok_p99 = r.change_max_ms <= 2000, r.ratio <= 2
        out.append(f"eddy / {case}: target max <= 2 s {'met' if ok_max else 'NOT met'} "
                   f"({tp.fmt(r.change_max_ms)} ms); p99 <= 2x steady {'met' if ok_p99 else 'NOT met'} "
                   f"({tp.fmt(r.ratio, '.2f')}x)")
    return out


# -- main ---------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def brokers(args: argparse.Namespace, work_dir: Path) -> Iterator[tuple[str, Any]]:
    """(bootstrap, Eddy's node or None). With Eddy: the one-node cluster, a broker on the node's
    address (pods reach it; so do the peers, inside the same network namespace) and the operator;
    otherwise throughput.py's broker on loopback."""
    if "eddy" not in args.systems:
        with tp.broker(args.bootstrap) as bootstrap:
            yield bootstrap, None
        return
    import upgrade_eddy

    with upgrade_eddy.cluster(work_dir, args.nodes) as (bootstrap, node):
        yield bootstrap, node


def factories(system: str, node: Any) -> list[tuple[str, SubjectFactory]]:
    """(case, factory) of every kind of change measured for `system`."""
    import upgrade_peers

    if system == "kstreams":
        kinds = (upgrade_peers.KafkaStreamsBounce, upgrade_peers.KafkaStreamsBounceLeaving)
        return [(kind.case, kind) for kind in kinds]
    if system == "sss":
        return [(upgrade_peers.SssRestart.case, upgrade_peers.SssRestart)]
    import upgrade_eddy

    return upgrade_eddy.cases(node)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", help="an existing broker (peers only); default: start one")
    ap.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated subset of {','.join(SYSTEMS)}")
    ap.add_argument("--cases", default="", help="Eddy's cases to run (comma-separated; default: all)")
    ap.add_argument("--rate", type=float, default=2000, help="input records/s, all through the run")
    ap.add_argument("--settle", type=float, default=10, help="seconds at the rate before the steady window")
    ap.add_argument("--steady", type=float, default=20, help="seconds of the steady window before the change")
    ap.add_argument("--tail", type=float, default=20, help="seconds of input after the new version holds every task")
    ap.add_argument("--late-ms", type=float, default=2000, help="a record later than this is late")
    ap.add_argument("--warmup-max", type=float, default=120,
                    help="change after this many seconds (after --settle) even if the probes of --steady s were "
                    "not all within --late-ms (the report says so)")
    ap.add_argument("--change-timeout", type=float, default=600,
                    help="seconds each wait of a change may take (a change is stopped after twice that + 60 s)")
    ap.add_argument("--distinct", type=int, default=50_000, help="distinct words")
    ap.add_argument("--zipf", type=float, default=1.0, help="Zipf exponent of the word frequencies")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--commit-interval-ms", type=int, default=100,
                    help="Kafka Streams' commit.interval.ms, sss's processingTime trigger")
    ap.add_argument("--kstreams-session-timeout-ms", type=int, default=45_000,
                    help="session.timeout.ms of the Kafka Streams instances (static members)")
    ap.add_argument("--kstreams-caught-up-lag", type=int, default=2000,
                    help="a restarted instance's store lag under which the bounce moves to the next instance")
    ap.add_argument("--sss-restart", choices=("warm", "cold"), default="warm",
                    help="warm: the new version's Spark session is up before the old query stops; cold: the new "
                    "process starts after the old one exited")
    ap.add_argument("--nodes", type=int, default=1,
                    help="Eddy's cluster: real nodes (3: zones a, a, b); the drain cases need 2 or more")
    ap.add_argument("--state-keys", type=int, default=0,
                    help="Eddy: keys of the counts store written to its changelog before the app starts (it starts "
                    "by restoring them; a copy made from scratch restores them again)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of every case, interleaved; the middle one is quoted")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", help="also write every run's figures to this file")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (logs, state, records)")
    args = ap.parse_args(argv)
    args.systems = [x.strip() for x in args.systems.split(",") if x.strip()]
    if set(args.systems) - set(SYSTEMS):
        ap.error(f"unknown systems: {', '.join(sorted(set(args.systems) - set(SYSTEMS)))}")
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")

    tp.say(f"machine: {os.cpu_count()} CPUs, load average {tp.loadavg():.2f}")
    if "kstreams" in args.systems:
        subprocess.run([str(tp.KSTREAMS_SH), "build"], check=True, stdout=subprocess.DEVNULL)
    if "sss" in args.systems:
        subprocess.run([str(sss.CONNECTOR_SH), "fetch"], check=True, stdout=subprocess.DEVNULL)
    total = int(args.rate * (args.settle + args.warmup_max + args.change_timeout + args.tail + 30))
    words = tp.zipf_words(total, args.distinct, args.zipf, args.seed).words
    tp.CACHE.mkdir(parents=True, exist_ok=True)
    work_dir = Path(tempfile.mkdtemp(prefix="upgrade-", dir=tp.CACHE))
    runs: dict[tuple[str, str], list[Upgrade]] = {}
    with brokers(args, work_dir) as (bootstrap, node):
        settings = Settings(bootstrap, args.partitions, args.rate, args.settle, args.steady, args.tail, args.late_ms,
                            args.warmup_max, args.change_timeout, args.commit_interval_ms,
                            args.kstreams_session_timeout_ms, args.kstreams_caught_up_lag, args.sss_restart, work_dir,
                            args.state_keys)
        chosen = [x.strip() for x in args.cases.split(",") if x.strip()]
        plan = [(system, case, factory) for system in args.systems for case, factory in factories(system, node)
                if system != "eddy" or not chosen or case in chosen]
        for system, case, _ in plan:
            runs[(system, case)] = []
        for _ in range(args.repeat):
            for system, case, factory in plan:
                runs[(system, case)].append(run_case(settings, system, case, factory, words))
    print(report(runs, args), flush=True)
    tp.say(f"load average after the runs: {tp.loadavg():.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(tp._json_safe({
            "runs": [{**asdict(r), "ratio": r.ratio} for rs in runs.values() for r in rs],
            "quoted": [{**asdict(middle(rs)), "ratio": middle(rs).ratio} for rs in runs.values() if rs],
            "settings": {k: v for k, v in vars(args).items()}}), indent=2, default=str))
    failed = sorted({f"{r.system}/{r.case}" for rs in runs.values() for r in rs if r.failed})
    if args.keep or failed:
        tp.say(f"logs and state kept in {work_dir}")
    else:
        subprocess.run(["rm", "-rf", str(work_dir)])
    if failed:
        tp.say(f"FAILED or wrong counts: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    # As the module `upgrade`, which upgrade_peers and upgrade_eddy import: one NotRun, one Marks.
    import upgrade

    sys.exit(upgrade.main())
