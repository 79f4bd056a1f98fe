"""Spark's Python daemon (`spark.python.daemon.module`), importing pyspark from its installed package.

Spark starts each executor's Python daemon, and through it every Python worker, with
`$SPARK_HOME/python/lib/pyspark.zip` first on `PYTHONPATH`. Python cannot cache the bytecode of
modules it imports from a zip, so every daemon and worker compiled pyspark's modules from source
again (`import pyspark.worker`: 0.7-1.0 CPU-seconds from the zip, 0.13 from the installed package;
an executor's daemon and first worker: 0.76 CPU-seconds before, 0.21 after). The same pyspark is
installed beside this runtime (the wheel that holds the zip), with its bytecode cached; this module
takes the zip off the path and runs pyspark's own daemon.

Nothing else changes: workers are forked from this process, so they inherit the path, and the
daemon imports the worker module after each fork, as pyspark's does. Where no installed pyspark
is found (a SPARK_HOME of its own, without the wheel), the path is left as it is. Every Eddy Spark
application names this module: `protocol.runner_client.PYTHON_DAEMON_CONF`. The task runner, which
a worker starts, takes the zip off its path the same way (executor/runner.py).
"""

from __future__ import annotations

import importlib.machinery
import sys


def without_pyspark_zip(path: list[str]) -> list[str]:
    """`path` without Spark's pyspark.zip, if an installed pyspark is on the rest of it."""
    rest = [p for p in path if not p.endswith("pyspark.zip")]
    if len(rest) < len(path) and importlib.machinery.PathFinder.find_spec("pyspark", rest) is not None:
        return rest
    return path


def main() -> None:
    sys.path[:] = without_pyspark_zip(sys.path)
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
