"""Small helpers for tests that drive a real Spark local-cluster."""

from __future__ import annotations

import time


def executor_ids(sc) -> list[str]:  # sc: pyspark.SparkContext
    """Ids of the executors registered with the driver right now (the driver itself excluded)."""
    block_managers = sc._jsc.sc().env().blockManager().master().getMemoryStatus().keySet().iterator()
    ids = []
    while block_managers.hasNext():
        executor_id = block_managers.next().executorId()
        if executor_id != "driver":
            ids.append(executor_id)
    return sorted(ids)


def wait_for_executors(sc, count: int, timeout: float = 120) -> list[str]:
    """Block until at least ``count`` executors have registered; fail loudly otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        ids = executor_ids(sc)
        if len(ids) >= count:
            return ids
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(ids)} of {count} Spark executors registered after {timeout}s: {ids}")
        time.sleep(0.2)
