"""How long a move pauses a partition: actives handed over between two caught-up executors, timed.

The job is bench/throughput.py's stateful word count (one word per record, re-keyed through a
repartition topic, counted in a RocksDB store with a changelog), Eddy's ``examples/wordcount``
run by ``failover.py _eddy`` on Spark ``local-cluster[2,1,1024]`` with exactly-once, a commit
interval of ``--commit-interval-ms`` (100) and one standby per stateful task. Its assignment
comes from this script, in the operator's channel format, through a file the driver watches
(driver/channel_io.py: the operator's ConfigMap, as a file): so a move here is the operator's
move, the cooperative hand-over a drain, a rollout and a scale-in make (driver/handoff.py: the
runner losing an active commits and lets go, then every runner hears the new generation).

Once both executors hold their actives and the standbys have had ``--settle`` s to catch up, a
producer sends ``--rate`` records/s (Zipf words, round-robin over the input partitions, each
stamped with its send time); every ``--every`` s the script publishes a generation that moves
every active: a stateful task's active and standby swap executors, a stateless task's active
goes to the other executor. So every move is to a caught-up copy, and every task moves.

Printed per run, over the groups of records that a move holds up (an input partition, or a count
task: the words Kafka's murmur2 puts in one repartition partition; autoscale.py's `pauses`): a
record's wait is from its send, or its group's previous visible count update if later, to its
own visible update; **pause in a move** is the longest wait that overlaps a move (from its
publication to ``MOVE_WINDOW_S`` after), per move and the longest; **outside** is the longest
wait elsewhere (the cadence of commits at that rate); steady p99 of the latency (send to
visible count) outside moves, and p99 and max over the records sent in moves; counts checked
exactly (the last count of every word, no update repeated or lowered).

    .venv/bin/python bench/handover.py                      # 8 moves, one run
    .venv/bin/python bench/handover.py --repeat 3 --moves 6 --rate 2000

Issue 31's target: no partition paused longer than 250 ms by a move. The phases of each move
are in the runners' logs (``--keep``: the driver's log and ``state/*/executor-*/eddy-runner.log``).
"""

from __future__ import annotations

import argparse
import datetime
import math
import multiprocessing
import pickle
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import throughput as tp
from autoscale import pauses
from failover import record_latencies

from eddy_contract.assignor import Assignment, AssignorSettings, Executor, TaskAssignment, assign_app
from eddy_contract.channel import (
    ASSIGNMENT_KEY,
    RUNTIME_STATE_KEY,
    AssignmentMessage,
    RuntimeState,
    decode_runtime_state,
    encode_assignment,
)

REPO = tp.REPO
FAILOVER = Path(__file__).resolve().parent / "failover.py"
#: a move holds records up from its publication for at most this long (longer waits are outside)
MOVE_WINDOW_S = 3.0


@dataclass
class Run:
    moves: list[float] = field(default_factory=list)  # longest pause per move, ms
    pause_in_move_ms: float = math.nan
    pause_outside_ms: float = math.nan
    steady_p99_ms: float = math.nan
    move_p99_ms: float = math.nan
    move_max_ms: float = math.nan
    records: int = 0
    wrong: list[str] = field(default_factory=list)
    error: str | None = None


def read_state(channel: Path) -> RuntimeState | None:
    path = channel / "runtime-state.json"
    try:
        return decode_runtime_state({RUNTIME_STATE_KEY: path.read_text()})
    except (OSError, ValueError):
        return None


def publish(channel: Path, app: str, assignment: Assignment, state: RuntimeState, reason: str) -> None:
    """Write `assignment` where the driver watches, as the operator writes its ConfigMap."""
    executors = tuple(Executor(id=e) for e in sorted(state.executors))
    hosts = {e: inv.host for e, inv in state.executors.items() if inv.host}
    message = AssignmentMessage(app, assignment, executors, datetime.datetime.now(datetime.UTC).isoformat(),
                                reason, hosts)
    tmp = channel / "assignment.json.tmp"
    tmp.write_text(encode_assignment(message)[ASSIGNMENT_KEY])
    tmp.replace(channel / "assignment.json")


def first_assignment(state: RuntimeState) -> Assignment:
    """What the operator would assign first: its assignor, one standby per stateful task."""
    stateful = {t for t, stores in state.changelog_end_offsets.items() if stores}
    executors = [Executor(id=e) for e in sorted(state.executors)]
    return assign_app(executors, state.end_offsets(), state.held_offsets(), None,
                      AssignorSettings(standby_replicas=1), stateful)


def swapped(previous: Assignment, executors: Sequence[str]) -> Assignment:
    """Every active moved: to the standby (which becomes the standby of the old active's place),
    or, with none, to the other executor."""
    tasks = {}
    for task, a in previous.tasks.items():
        if a.standbys:
            tasks[task] = TaskAssignment(a.standbys[0], (a.active, *a.standbys[1:]), ())
        else:
            tasks[task] = TaskAssignment(next(e for e in executors if e != a.active), (), ())
    return Assignment(previous.generation + 1, tasks)


def run_once(args: argparse.Namespace, bootstrap: str, work_dir: Path, words: Sequence[bytes]) -> Run:
    from confluent_kafka import Producer

    result = Run()
    tag = uuid.uuid4().hex[:6]
    app = f"bench-handover-{tag}"
    source = f"{app}-in"
    tp.create_topics(bootstrap, [source], args.partitions)
    out = tp.output_topic(bootstrap, f"{app}-out", args.partitions)
    channel = work_dir / app / "channel"
    channel.mkdir(parents=True)
    log = work_dir / f"{app}.log"
    argv = [sys.executable, str(FAILOVER), "_eddy", "--bootstrap", bootstrap, "--input", source, "--output", out,
            "--app-id", app, "--state-dir", str(work_dir / app / "state"), "--standbys", "1",
            "--trigger-ms", str(args.commit_interval_ms), "--status-file", str(work_dir / app / "status.json"),
            "--channel-dir", str(channel)]
    seen_path = work_dir / f"seen-{tag}.pickle"
    warm, stop, observer = tp.start_observer(bootstrap, out, args.partitions, seen_path)
    tp.say(f"handover: app {app}, log {log}")
    with log.open("w") as err:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, cwd=REPO,
                                start_new_session=True)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    sent: list[tuple[bytes, int]] = []
    parts: list[int] = []
    published: list[float] = []
    try:
        deadline = time.monotonic() + args.timeout
        state = read_state(channel)
        while state is None or len(state.executors) < 2 or not state.changelog_end_offsets:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the driver published no runtime state with two executors")
            time.sleep(0.2)
            state = read_state(channel)
        current = first_assignment(state)
        publish(channel, app, current, state, "bench: first assignment")
        tp.warm_up(producer, source, warm, lambda: proc.poll() is None, deadline)
        tp.say(f"handover: warm-up counted; {args.rate:g} records/s, a move every {args.every:g} s after "
               f"{args.settle:g} s")
        start = time.time()
        length = args.settle + args.moves * args.every
        next_move, i = start + args.settle, 0
        while (now := time.time()) < start + length + args.every:
            if now >= next_move and len(published) < args.moves:
                current = swapped(current, sorted(state.executors))
                publish(channel, app, current, state, f"bench: move {len(published) + 1}")
                published.append(now * 1000)
                next_move += args.every
            due = min(len(words), int((now - start) * args.rate) + 1)
            while i < due:
                now_ms = int(time.time() * 1000)
                p = i % args.partitions
                producer.produce(source, words[i], partition=p, timestamp=now_ms)
                sent.append((words[i], now_ms))
                parts.append(p)
                i += 1
            producer.poll(0)
            time.sleep(0.001)
        producer.flush(30)
        time.sleep(5.0)  # the last records counted
    except Exception as e:  # noqa: BLE001 - reported in the run's line
        result.error = str(e)
    finally:
        try:
            proc.communicate(input="", timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
        stop.set()
        observer.join(120)
    if result.error:
        return result
    with seen_path.open("rb") as f:
        seen: list[tuple[bytes, int, float]] = pickle.load(f)
    lat = record_latencies(sent, seen)
    windows = [(at, at + MOVE_WINDOW_S * 1000) for at in published]
    result.moves = [pauses(sent, parts, lat, args.partitions, [w])[0] for w in windows]
    result.pause_in_move_ms, result.pause_outside_ms = pauses(sent, parts, lat, args.partitions, windows)
    in_move = sorted(x for (_, ts), x in zip(sent, lat, strict=True)
                     if not math.isnan(x) and any(a <= ts + x and ts <= b for a, b in windows))
    steady = sorted(x for (_, ts), x in zip(sent, lat, strict=True)
                    if not math.isnan(x) and ts >= start * 1000 + 2000 and not any(a <= ts + x and ts <= b
                                                                                   for a, b in windows))
    result.steady_p99_ms = tp.percentile(steady, 0.99)
    result.move_p99_ms = tp.percentile(in_move, 0.99)
    result.move_max_ms = in_move[-1] if in_move else math.nan
    result.records = len(sent)
    expected: dict[bytes, int] = {tp.WARMUP_WORD: tp.WARMUP_RECORDS}
    for w, _ in sent:
        expected[w] = expected.get(w, 0) + 1
    latest: dict[bytes, int] = {}
    for word, count, _ in seen:
        if count <= latest.get(word, 0):
            result.wrong.append(f"{word!r}: {count} after {latest.get(word, 0)}")
        latest[word] = count
    result.wrong += tp.count_errors(expected, latest)
    if missing := sum(1 for x in lat if math.isnan(x)):
        result.wrong.append(f"{missing} records never seen counted")
    return result


def line(n: int, r: Run) -> str:
    if r.error:
        return f"run {n}: FAILED: {r.error}"
    return (f"run {n}: pause in a move {tp.fmt(r.pause_in_move_ms)} ms (per move "
            f"{', '.join(tp.fmt(x) for x in r.moves)}), outside {tp.fmt(r.pause_outside_ms)} ms; latency steady "
            f"p99 {tp.fmt(r.steady_p99_ms)} ms, in moves p99 {tp.fmt(r.move_p99_ms)} / max "
            f"{tp.fmt(r.move_max_ms)} ms; {r.records:,} records, counts "
            + ("exact" if not r.wrong else f"WRONG {r.wrong[:3]}"))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--bootstrap", help="an existing broker (default: start one)")
    ap.add_argument("--rate", type=float, default=1000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--moves", type=int, default=8)
    ap.add_argument("--every", type=float, default=6.0, help="seconds between moves")
    ap.add_argument("--settle", type=float, default=15.0, help="seconds at the rate before the first move")
    ap.add_argument("--commit-interval-ms", type=int, default=100)
    ap.add_argument("--distinct", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--keep", action="store_true", help="keep the logs and state under .cache/bench/")
    args = ap.parse_args(argv)
    work_dir = REPO / ".cache" / "bench" / f"handover-{uuid.uuid4().hex[:6]}"
    work_dir.mkdir(parents=True)
    count = int(args.rate * (args.settle + (args.moves + 1) * args.every)) + 1000
    words = tp.zipf_words(count, args.distinct, 1.1, seed=7).words
    runs: list[Run] = []
    with tp.broker(args.bootstrap) as bootstrap:
        for n in range(1, args.repeat + 1):
            runs.append(run_once(args, bootstrap, work_dir, words))
            tp.say(line(n, runs[-1]))
    print()
    for n, r in enumerate(runs, 1):
        print(line(n, r))
    good = sorted((r for r in runs if not r.error and not r.wrong), key=lambda r: r.pause_in_move_ms)
    if good:
        mid = good[len(good) // 2]
        verdict = "met" if mid.pause_in_move_ms <= 250 else "not met"
        print(f"middle run: pause in a move {tp.fmt(mid.pause_in_move_ms)} ms (target 250 ms: {verdict}), outside "
              f"{tp.fmt(mid.pause_outside_ms)} ms; {args.rate:g} records/s, {args.partitions} partitions, commit "
              f"interval {args.commit_interval_ms} ms, load {tp.loadavg():.1f}")
    failed = [r for r in runs if r.error or r.wrong]
    if not args.keep and not failed:
        shutil.rmtree(work_dir, ignore_errors=True)
    else:
        print(f"logs and state kept in {work_dir}")
    return 1 if failed else 0


if __name__ == "__main__":
    multiprocessing.set_start_method("spawn")
    threading.current_thread().name = "bench"
    sys.exit(main())
