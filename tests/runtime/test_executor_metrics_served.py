"""Each executor's task runner serves its metrics over HTTP, and the figures are what the run did;
the driver serves /healthz (its liveness probe) and /metrics on its metrics port meanwhile.

Word count with one standby per stateful task on Spark `local-cluster` (two executor JVMs on one
host): every runner serves on 127.0.0.1 with a port the kernel picked and writes the address to
its state directory; the test scrapes both over HTTP and checks the figures against the lines
fed, the driver's batch reports and the changelog topic.
"""

from __future__ import annotations

import random
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from eddy_runtime.executor.runner import METRICS_ADDRESS_FILE
from tests.runtime.apps import driver_for, produce, read_all, run_until_idle, streamapp
from tests.runtime.test_health import http_get
from tests.scrape import metric_sum, samples_at
from tests.servers import free_port

pytestmark = pytest.mark.integration

VOCABULARY = [f"w{i:03d}" for i in range(300)]


def scrape(state_dir: Path, timeout_s: float = 30.0) -> list:
    """The samples an executor's runner serves (its address from its state directory)."""
    target = state_dir / METRICS_ADDRESS_FILE
    deadline = time.monotonic() + timeout_s
    while not target.exists():
        assert time.monotonic() < deadline, f"no {target} after {timeout_s}s: the runner serves no metrics"
        time.sleep(0.1)
    address = target.read_text().strip()
    assert address.startswith("127.0.0.1:"), address
    return samples_at(f"http://{address}/metrics")


def test_executors_serve_per_task_records_latencies_store_and_standby_figures(kafka, spark, tmp_path):
    app = kafka.unique_name("xm")
    source = kafka.create_topic(f"{app}-lines", partitions=4)
    out = f"{app}-counts"
    rnd = random.Random(3)
    fed = [" ".join(rnd.sample(VOCABULARY, 4)) for _ in range(2000)]
    # Keyed, so that every partition gets lines (null keys stick to one partition per producer batch).
    produce(kafka.bootstrap, source, ((str(i).encode(), line.encode()) for i, line in enumerate(fed)))
    spec = streamapp(app, kafka.bootstrap, "examples.wordcount.app", {"input_topic": source, "output_topic": out},
                     processingGuarantee="exactly_once", state={"standbyReplicas": 1})
    state = tmp_path / "state"
    driver_port = free_port()
    driver = driver_for(spark, spec, str(state), metrics_port=driver_port, metrics_addr="127.0.0.1")
    scraped: dict[str, list] = {}
    probes: list[tuple[int, str, int]] = []

    def scrape_all(_report) -> None:
        # The driver's probe endpoint reads the real batch loop's progress.
        status, body = http_get(driver_port, "/healthz")
        metrics_status, metrics = http_get(driver_port, "/metrics")
        assert metrics_status == 200 and "eddy_driver_batches_total" in metrics
        probes.append((status, body, driver.progress.batches_finished))
        # After every batch (the runners stop with the driver): the last scrape follows the last batch.
        assert driver.assignment is not None
        for e in {e for a in driver.assignment.tasks.values() for e in a.copies}:
            scraped[e] = scrape(state / f"executor-{e}")

    t0 = time.monotonic()
    reports = run_until_idle(driver, timeout_s=240, on_batch=scrape_all)
    ran_s = time.monotonic() - t0
    assert probes and all((status, body) == (200, "ok\n") for status, body, _ in probes), probes
    assert probes[-1][2] >= 1  # batches were counted as progress
    with pytest.raises(OSError):  # closed with the driver
        http_get(driver_port, "/healthz")
    assignment = driver.assignment
    assert assignment is not None
    executors = sorted({e for a in assignment.tasks.values() for e in a.copies})
    assert sorted(scraped) == executors and len(executors) == 2, (sorted(scraped), assignment)

    # What the run did, by the driver's reports: per task records, items that processed input, commits.
    did: dict[str, Counter] = defaultdict(Counter)
    for report in reports:
        for r in report.results:
            if r.status == "processed" and r.records_in:
                did[r.task]["in"] += r.records_in
                did[r.task]["out"] += r.records_out
                did[r.task]["items"] += 1
                did[r.task]["where:" + r.executor] += 1
    assert sum(metric_sum(s, "eddy_executor_records_in_total", app=app, task=f"0_{p}")
               for s in scraped.values() for p in range(4)) == len(fed)
    # Sub-topology 0 writes one repartition record per word and batch (counts pre-combined);
    # sub-topology 1 reads each of them.
    repartitioned = sum(metric_sum(s, "eddy_executor_records_out_total", app=app, task=f"0_{p}")
                        for s in scraped.values() for p in range(4))
    assert repartitioned == sum(did[f"0_{p}"]["out"] for p in range(4)) > 0
    assert sum(metric_sum(s, "eddy_executor_records_in_total", app=app, task=f"1_{p}")
               for s in scraped.values() for p in range(4)) == repartitioned
    assert all(did[f"0_{p}"]["items"] for p in range(4)), did
    for task, figures in did.items():
        for e, samples in scraped.items():
            items_here = figures["where:" + e]
            processed = metric_sum(samples, "eddy_executor_process_latency_seconds_count", app=app, task=task)
            # Sub-topology 1 runs continuously: its result at each sync covers every commit since the last.
            assert processed == items_here if task.startswith("0_") else processed >= items_here, (task, e)
            if items_here == figures["items"]:  # the task ran only here: its records too
                assert metric_sum(samples, "eddy_executor_records_in_total", app=app, task=task) == figures["in"]
                assert metric_sum(samples, "eddy_executor_records_out_total", app=app, task=task) == figures["out"]
                assert metric_sum(samples, "eddy_executor_process_latency_seconds_sum", app=app, task=task) > 0
                # Exactly-once: every item that processed input committed once (empty batches too).
                commits = metric_sum(samples, "eddy_executor_commit_latency_seconds_count", app=app, task=task)
                assert commits >= items_here

    # Stores: each stateful task's active holds every distinct word of its partition.
    changelog = Counter(m.partition() for m in read_all(kafka.bootstrap, f"{app}-counts-changelog"))
    for p in range(4):
        task = f"1_{p}"
        placement = assignment.tasks[task]
        active = scraped[placement.active]
        copy = {"app": app, "task": task, "store": "counts"}
        assert metric_sum(active, "eddy_executor_store_entries", role="active", **copy) >= 1
        assert metric_sum(active, "eddy_executor_store_size_bytes", role="active", **copy) > 0
        assert metric_sum(active, "eddy_executor_restore_remaining_records", role="active", **copy) == 0
        (standby_executor,) = placement.standbys
        standby = scraped[standby_executor]
        # The standby tailed the whole changelog (all but a trailing commit marker, at most).
        assert metric_sum(standby, "eddy_executor_standby_lag_records", role="standby", **copy) <= 1
        assert metric_sum(standby, "eddy_executor_restored_records_total", role="standby", **copy) == changelog[p]
        assert metric_sum(standby, "eddy_executor_restore_eta_seconds", role="standby", **copy) == 0 or \
            metric_sum(standby, "eddy_executor_standby_lag_records", role="standby", **copy) > 0
    distinct = len({w for line in fed for w in line.split()})
    entries = sum(metric_sum(scraped[assignment.tasks[f"1_{p}"].active], "eddy_executor_store_entries", app=app,
                        task=f"1_{p}", role="active") for p in range(4))
    # RocksDB's estimate counts a key overwritten in the memtable once per write.
    assert distinct <= entries <= repartitioned, (distinct, entries, repartitioned)
    print(f"\nword count of {len(fed)} lines on 2 executors in {ran_s:.1f}s ({len(reports)} batches); "
          f"scraped {sum(len(s) for s in scraped.values())} samples; store entries {entries:.0f} "
          f"for {distinct} distinct words; changelog records {sum(changelog.values())}")
