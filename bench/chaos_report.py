"""The fault campaign's figures (bench/chaos.py): the seeded schedule of faults, each fault's
recovery time and largest lateness, the table per fault kind, the JSON document and the plot.

Pure, but for `plot` (matplotlib, writing a PNG). Times are seconds since the campaign started.

- **Lateness** of an input event: when its join record became readable (read_committed) less
  when the producer sent it; an event never seen counts as infinitely late.
- **Steady p99**: the 99th percentile of the lateness of the events sent in the warm-up, before
  the first fault.
- **Recovery** of a fault: from its injection until the start of the first second (of send
  time), at or after it, that begins `CALM_SECONDS` seconds in a row in which at least
  `IN_TIME_SHARE` of the events sent were within the steady p99: from then on, records are on
  time again. Zero when the fault delayed nothing.
- **Largest lateness** of a fault: the worst lateness among the events whose join record came
  out after it struck and before the next fault did (events in flight when it struck count; an
  event sent just before the next fault and held up by it counts for that one). An event never
  seen counts for the faults whose time it was sent in: from `BEFORE_S` seconds before each until
  the next.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

KINDS = ("executor-pod-deleted", "executor-killed", "driver-pod-deleted", "operator-leader-killed",
         "broker-killed", "node-lost", "executor-cut-off")
#: which broker a broker fault kills, in turn: the KRaft quorum's leader, the app's group
#: coordinator, a transaction coordinator of one of its runners, any broker
BROKER_ROLES = ("controller", "group-coordinator", "transaction-coordinator", "any")
CALM_SECONDS = 3
IN_TIME_SHARE = 0.9
BEFORE_S = 2.0


@dataclass(frozen=True)
class Planned:
    """One fault of the schedule: its kind, the wait before it (after the app settled from the
    one before), how long it lasts (a broker or node down, a network cut off; 0 for a kill or a
    delete), and for a broker fault which broker."""

    kind: str
    gap_s: float
    down_s: float = 0.0
    role: str = ""


def plan(seed: int, faults: int, kinds: Sequence[str] = KINDS, gap_s: tuple[float, float] = (5, 15),
         broker_down_s: tuple[float, float] = (5, 20), node_down_s: tuple[float, float] = (20, 80),
         cut_s: tuple[float, float] = (5, 20)) -> list[Planned]:
    """A seeded random schedule of `faults` faults: every kind equally often (the rest drawn at
    random), in a random order, with random gaps and durations. The same seed, the same schedule."""
    rng = random.Random(seed)
    drawn = [kinds[i % len(kinds)] for i in range(faults - faults % len(kinds))]
    drawn += rng.sample(list(kinds), faults % len(kinds))
    rng.shuffle(drawn)
    out: list[Planned] = []
    brokers = 0
    for kind in drawn:
        gap = round(rng.uniform(*gap_s), 1)
        if kind == "broker-killed":
            out.append(Planned(kind, gap, round(rng.uniform(*broker_down_s), 1), BROKER_ROLES[brokers % 4]))
            brokers += 1
        elif kind == "node-lost":
            out.append(Planned(kind, gap, round(rng.uniform(*node_down_s), 1)))
        elif kind == "executor-cut-off":
            out.append(Planned(kind, gap, round(rng.uniform(*cut_s), 1)))
        else:
            out.append(Planned(kind, gap))
    return out


@dataclass
class Fault:
    """A fault as injected: what, on whom, when it struck and when it was undone."""

    kind: str
    target: str
    started: float
    healed: float
    detail: str = ""
    #: the executor pods it took away (deleted, killed, or on the lost node): each one Eddy must report lost
    executor_pods: list[str] = field(default_factory=list)
    recovery_s: float | None = None
    largest_lateness_s: float | None = None


@dataclass(frozen=True)
class Sample:
    """One input event: when it was sent and how late its join record was (inf: never seen)."""

    sent: float
    lateness: float


def percentile(values: Sequence[float], q: float) -> float:
    """The `q` quantile (0..1) by the nearest rank; nan for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def steady_p99(samples: Sequence[Sample], until: float) -> float:
    return percentile([s.lateness for s in samples if s.sent < until], 0.99)


def per_second(samples: Sequence[Sample]) -> dict[int, list[float]]:
    """Lateness of the events sent in each second."""
    out: dict[int, list[float]] = defaultdict(list)
    for s in samples:
        out[int(math.floor(s.sent))].append(s.lateness)
    return out


def recovery(samples_by_second: dict[int, list[float]], started: float, threshold: float,
             last_second: int) -> float | None:
    """Seconds from `started` until records are on time again (see the module's docstring); None
    if that never happened before `last_second`."""
    first = int(math.floor(started))
    calm = 0
    for second in range(first, last_second + 1):
        late = samples_by_second.get(second)
        on_time = bool(late) and sum(1 for x in late if x <= threshold) >= IN_TIME_SHARE * len(late)
        calm = calm + 1 if on_time else 0
        if calm == CALM_SECONDS:
            return max(0.0, second - CALM_SECONDS + 1 - started)
    return None


def analyse(faults: list[Fault], samples: Sequence[Sample], threshold: float, end: float) -> None:
    """Fill each fault's recovery time and largest lateness (faults in the order injected)."""
    by_second = per_second(samples)
    for i, f in enumerate(faults):
        following = faults[i + 1].started if i + 1 < len(faults) else end
        f.recovery_s = recovery(by_second, f.started, threshold, int(end))
        window = [s.lateness for s in samples
                  if f.started <= s.sent + s.lateness < following
                  or (math.isinf(s.lateness) and f.started - BEFORE_S <= s.sent < following)]
        f.largest_lateness_s = max(window) if window else None


@dataclass
class KindFigures:
    kind: str
    count: int
    recovery_p50_s: float | None
    recovery_max_s: float | None
    not_recovered: int
    largest_lateness_s: float | None


def per_kind(faults: Sequence[Fault]) -> list[KindFigures]:
    rows = []
    for kind in KINDS:
        of = [f for f in faults if f.kind == kind]
        if not of:
            continue
        rec = [f.recovery_s for f in of if f.recovery_s is not None]
        late = [f.largest_lateness_s for f in of if f.largest_lateness_s is not None]
        rows.append(KindFigures(kind, len(of), percentile(rec, 0.5) if rec else None, max(rec) if rec else None,
                                len(of) - len(rec), max(late) if late else None))
    return rows


@dataclass
class Report:
    """Everything the campaign reports; `text()` and `to_json()` are the two forms."""

    seed: int
    command: str
    duration_s: float
    rate: float
    steady_p50_s: float
    steady_p99_s: float
    faults: list[Fault]
    verdict: dict[str, Any]
    verdict_text: str
    mismatches: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.verdict.get("ok"))

    def text(self) -> str:
        def s(x: float | None) -> str:
            return "-" if x is None or math.isnan(x) else ("never" if math.isinf(x) else f"{x:.1f}")

        lines = [f"Fault campaign: seed {self.seed}, {len(self.faults)} faults over {self.duration_s / 60:.1f} min, "
                 f"{self.rate:g} events/s; steady lateness p50 {self.steady_p50_s * 1000:.0f} ms, "
                 f"p99 {self.steady_p99_s * 1000:.0f} ms",
                 f"command: {self.command}", "",
                 f"{'fault kind':<24} {'count':>5} {'recovery p50 s':>15} {'recovery max s':>15} "
                 f"{'not recovered':>14} {'largest lateness s':>19}"]
        for k in per_kind(self.faults):
            lines.append(f"{k.kind:<24} {k.count:>5} {s(k.recovery_p50_s):>15} {s(k.recovery_max_s):>15} "
                         f"{k.not_recovered:>14} {s(k.largest_lateness_s):>19}")
        lines += ["", f"verifier: {self.verdict_text}", ""]
        lines.append(f"Eddy's own reports against the faults injected: {len(self.mismatches)} mismatch(es)")
        lines += [f"  - {m}" for m in self.mismatches]
        lines += ["", "faults (s since start: kind, target, recovery s, largest lateness s, detail):"]
        lines += [f"  {f.started:7.1f} {f.kind:<24} {f.target:<40} {s(f.recovery_s):>6} {s(f.largest_lateness_s):>7}"
                  f"  {f.detail}" for f in self.faults]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        def clean(x: Any) -> Any:
            if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
                return None if math.isnan(x) else "inf"
            if isinstance(x, dict):
                return {k: clean(v) for k, v in x.items()}
            if isinstance(x, list):
                return [clean(v) for v in x]
            return x

        return clean({"seed": self.seed, "command": self.command, "duration_s": self.duration_s, "rate": self.rate,
                      "steady_p50_s": self.steady_p50_s, "steady_p99_s": self.steady_p99_s,
                      "per_kind": [asdict(k) for k in per_kind(self.faults)],
                      "faults": [asdict(f) for f in self.faults], "verdict": self.verdict,
                      "mismatches": self.mismatches, "notes": self.notes})


def plot(path: Path, samples: Sequence[Sample], lag: Sequence[tuple[float, int]], faults: Sequence[Fault],
         steady_p99_s: float, title: str) -> None:
    """Lag (events sent and not yet joined) and the p99 lateness per second over time, each fault
    a vertical line coloured by kind (a shaded span while it lasted)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_second = per_second(samples)
    seconds = sorted(by_second)
    p99 = [min(percentile(by_second[t], 0.99), 1e6) for t in seconds]
    fig, (ax_lag, ax_p99) = plt.subplots(2, 1, figsize=(16, 8), sharex=True)
    ax_lag.plot([t for t, _ in lag], [n for _, n in lag], lw=0.8, color="black")
    ax_lag.set_ylabel("lag (events sent, not yet joined)")
    ax_p99.plot(seconds, p99, lw=0.8, color="black")
    ax_p99.axhline(steady_p99_s, color="grey", ls="--", lw=0.8, label=f"steady p99 {steady_p99_s * 1000:.0f} ms")
    ax_p99.set_yscale("log")
    ax_p99.set_ylabel("p99 lateness per second of send time (s)")
    ax_p99.set_xlabel("seconds since the campaign started")
    colours = dict(zip(KINDS, plt.get_cmap("tab10").colors, strict=False))
    shown: set[str] = set()
    for f in faults:
        for ax in (ax_lag, ax_p99):
            ax.axvline(f.started, color=colours.get(f.kind, "red"), lw=1,
                       label=f.kind if ax is ax_p99 and f.kind not in shown else None)
            if f.healed > f.started:
                ax.axvspan(f.started, f.healed, color=colours.get(f.kind, "red"), alpha=0.12)
        shown.add(f.kind)
    ax_p99.legend(loc="upper left", fontsize=8, ncol=4)
    ax_lag.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
