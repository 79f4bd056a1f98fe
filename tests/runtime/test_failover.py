"""Failover: executor JVMs killed with SIGKILL while word count runs with one standby per task.

What must hold (issue 4): the run goes on from the standby copies on the surviving executor
(their stores are promoted; only the few records the standby had not applied yet are restored,
never the whole changelog), Spark brings a replacement executor, tasks move back onto it once its
copies caught up, and the final counts are exact.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest

from eddy_runtime.driver.loop import Driver
from eddy_runtime.driver.outcomes import BatchReport
from eddy_runtime.protocol.placement import live_executors
from tests.runtime.apps import driver_for, latest_counts, produce, streamapp

pytestmark = pytest.mark.integration

VOCABULARY = [f"w{i:05d}" for i in range(20_000)]
#: kills in a row: each after the previous one's replacement executor has taken half the tasks back
KILLS = 2
#: a copy this close to its changelog's end counts as caught up (spec.state.acceptableRecoveryLag)
ACCEPTABLE_RECOVERY_LAG = 1000


def executor_jvm_pid(sc, executor_id: str) -> int:
    """The pid of this application's executor JVM `executor_id` (other Spark apps may run here too)."""
    app_id = sc.applicationId
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if (b"--executor-id" in args and b"--app-id" in args
                and args[args.index(b"--executor-id") + 1].decode() == executor_id
                and args[args.index(b"--app-id") + 1].decode() == app_id):
            return int(entry)
    raise AssertionError(f"no JVM for executor {executor_id} of {app_id}")


class Run:
    """The driver in a background thread, its reports, and waits that surface its errors."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver
        self.reports: list[BatchReport] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.driver.run(on_batch=self.reports.append)
        except BaseException as e:  # noqa: BLE001 - surfaced by wait()
            self.error = e

    def wait(self, what: str, condition: Callable[[], bool], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if self.error is not None:
                raise self.error
            if time.monotonic() > deadline:
                last = self.reports[-1] if self.reports else None
                raise AssertionError(f"timed out after {timeout_s}s waiting for {what}; assignment "
                                     f"{self.driver.assignment}; last batch {last and (last.outcome, last.error)}")
            time.sleep(0.2)

    def drain(self, feeding: threading.Event, feeder: threading.Thread, what: str) -> None:
        """Stop feeding, then wait until the driver has processed every input record."""
        feeding.clear()
        feeder.join(30)
        assert not feeder.is_alive(), "the feeder still produced 30 s after it was told to stop"
        self.wait(what, lambda: sum(self.driver.last_lag.values()) == 0 and self.reports[-1].records_in == 0, 240)

    def kill_under_load(self, feed: Callable[[], None], what: str, settled_lag: int = 500) -> None:
        """Once the input is nearly processed and the standbys caught up, keep calling `feed`
        (every 0.2 s), SIGKILL the executor JVM holding the most stateful actives, wait until its
        tasks run elsewhere, feed 3 s more, then stop feeding and wait until `what` is processed."""
        driver = self.driver
        sc = driver.sc

        def caught_up() -> bool:
            lags = driver.standby_lags()
            return (bool(self.reports) and sum(driver.last_lag.values()) < settled_lag and bool(lags)
                    and all(lag <= 1000 for per in lags.values() for lag in per.values()))

        self.wait(f"{what} to be processed and the standbys to catch up", caught_up, 300)
        feeding = threading.Event()
        feeding.set()

        def feeder_loop() -> None:
            while feeding.is_set():
                feed()
                time.sleep(0.2)

        feeder = threading.Thread(target=feeder_loop, daemon=True)
        feeder.start()
        try:
            assert driver.compiled is not None
            stateful = set(driver.compiled.stateful_tasks())
            victim = Counter(driver.assignment.tasks[t].active for t in stateful).most_common(1)[0][0]
            survivor = ({e.id for e in live_executors(sc)} - {victim}).pop()
            time.sleep(1.0)
            os.kill(executor_jvm_pid(sc, victim), signal.SIGKILL)
            self.wait(f"executor {victim}'s tasks to run on executor {survivor}",
                      lambda: all(driver.assignment.tasks[t].active != victim for t in stateful), 120)
            time.sleep(3.0)  # keep feeding on the promoted copies
            self.drain(feeding, feeder, f"the last of {what}")
        finally:
            feeding.clear()

    def stop(self) -> None:
        self.driver.request_stop()
        self.thread.join(180)
        assert not self.thread.is_alive(), "the driver still ran 180 s after request_stop()"


def restored_by_copy(reports: list[BatchReport]) -> dict[tuple[str, str], int]:
    """Records each task copy (task, executor) restored from its changelog since it opened."""
    out: dict[tuple[str, str], int] = {}
    for r in reports:
        for x in r.results:
            if x.figures is not None and x.figures.stores:
                out[(x.task, x.executor)] = sum(s.restored_records for s in x.figures.stores)
    return out


# Over SASL_SSL once: the same path, every client of the app authenticating (credentials from env),
# with the counting sub-topology as micro-batches (continuous otherwise).
@pytest.mark.parametrize(("listener", "kills", "execution"),
                         [("plaintext", KILLS, "continuous"), ("sasl_ssl", 1, "microBatch")])
def test_killed_executors_fail_over_to_standbys_and_tasks_move_back(kafka, spark, tmp_path, listener, kills,
                                                                    execution):
    sc = spark.sparkContext
    app = kafka.unique_name("fo")
    source = kafka.create_topic(f"{app}-lines", partitions=4)
    out = f"{app}-counts"
    rnd = random.Random(7)
    fed = [" ".join(rnd.sample(VOCABULARY, 5)) for _ in range(12_000)]
    produce(kafka.bootstrap, source, ((None, line.encode()) for line in fed))
    spec = streamapp(app, kafka.bootstrap, "examples.wordcount.app", {"input_topic": source, "output_topic": out},
                     triggerInterval="300ms", processingGuarantee="exactly_once",
                     state={"standbyReplicas": 1, "acceptableRecoveryLag": ACCEPTABLE_RECOVERY_LAG},
                     kafka=kafka.kafka_spec(listener), execution=execution)
    driver = driver_for(spark, spec, str(tmp_path / "state"))
    feeding = threading.Event()

    def feed() -> None:
        r = random.Random(8)
        while feeding.is_set():
            lines = [" ".join(r.sample(VOCABULARY, 5)) for _ in range(20)]
            produce(kafka.bootstrap, source, ((None, line.encode()) for line in lines))
            fed.extend(lines)
            time.sleep(0.2)

    run = Run(driver)
    feeder = threading.Thread(target=feed, daemon=True)
    try:
        preload = len(fed)

        def caught_up() -> bool:
            lags = driver.standby_lags()
            counted = sum(x.records_in for r in run.reports for x in r.results if x.task.startswith("0_"))
            return (counted >= preload and sum(driver.last_lag.values()) < 2000 and bool(lags)
                    and all(lag <= ACCEPTABLE_RECOVERY_LAG for per in lags.values() for lag in per.values()))

        run.wait("the preloaded lines to be counted and the standbys to catch up", caught_up, 300)
        stateful = set(driver.compiled.stateful_tasks())
        feeding.set()
        feeder.start()
        seen = {e.id for e in live_executors(sc)}
        victims = []
        for kill in range(1, kills + 1):
            before = driver.assignment
            victim = Counter(before.tasks[t].active for t in stateful).most_common(1)[0][0]
            victims.append(victim)
            survivor = ({e.id for e in live_executors(sc)} - {victim}).pop()
            orphans = {t for t in stateful if before.tasks[t].active == victim}
            assert all(before.tasks[t].standbys == (survivor,) for t in orphans)
            first = len(run.reports)
            restored_before = restored_by_copy(run.reports)
            os.kill(executor_jvm_pid(sc, victim), signal.SIGKILL)

            run.wait(f"kill {kill}: executor {victim}'s tasks to run on executor {survivor}",
                     lambda survivor=survivor, first=first: all(driver.assignment.tasks[t].active == survivor
                                                                for t in stateful)
                     and any(r.outcome == "ok" for r in run.reports[first + 1:]), 120)
            run.wait(f"kill {kill}: a replacement executor", lambda: bool({e.id for e in live_executors(sc)} - seen),
                     180)
            new = ({e.id for e in live_executors(sc)} - seen).pop()
            seen.add(new)
            run.wait(f"kill {kill}: half the stateful tasks to move back onto executor {new}",
                     lambda new=new: sum(driver.assignment.tasks[t].active == new for t in stateful)
                     == len(stateful) // 2, 240)
            generation = driver.assignment.generation
            run.wait("the batch of that assignment to report",
                     lambda generation=generation: run.reports[-1].generation >= generation, 60)
            after = run.reports[first:]
            # A batch running on the victim is cancelled; none fails.
            assert all(r.outcome != "failed" for r in after), [(r.batch_id, r.error) for r in after]
            promotions = {m.task: m for r in after for m in r.moves if m.source == victim and m.target == survivor}
            assert {t for t, m in promotions.items() if m.kind == "promoted"} == orphans
            # No full restore: a promoted standby restored at most what it lagged behind.
            restored_after = restored_by_copy(run.reports)
            for t in orphans:
                delta = restored_after[(t, survivor)] - restored_before.get((t, survivor), 0)
                assert delta <= ACCEPTABLE_RECOVERY_LAG, (t, delta)
                assert driver.changelog_ends[t] > 5 * ACCEPTABLE_RECOVERY_LAG
            # Moving back promoted the new executor's caught-up copies (no move to an empty copy).
            back = [m for r in after for m in r.moves if m.target == new and m.task in stateful
                    and m.kind in ("promoted", "moved")]
            assert back and all(m.kind == "promoted" for m in back), [(r.batch_id, r.moves) for r in after if r.moves]
        run.drain(feeding, feeder, "the last lines to be counted")
    finally:
        feeding.clear()
        run.stop()
    assert run.error is None, run.error
    losses = driver.metrics.registry.get_sample_value("eddy_driver_executor_losses_total", {"app": app})
    assert losses == kills
    assert [e for r in run.reports for e in r.lost_executors] == victims
    assert latest_counts(kafka.bootstrap, out) == Counter(w for line in fed for w in line.split())
