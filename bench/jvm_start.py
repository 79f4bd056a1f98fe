"""What a Spark driver JVM costs to start, and per job once warm, under given JVM options.

Each run is a fresh Python process that starts a SparkSession on ``local[2]`` (the driver JVM
and its executor threads in one JVM) with ``spark.driver.extraJavaOptions`` set to the option
set under test, and prints:

- **up**: seconds from the builder's ``getOrCreate()`` to the session, and the JVM's CPU-seconds
  by then (user + system, from ``/proc``: every thread, the JIT compilers' and GC's included);
- **first job**: the JVM's CPU-seconds after one small job;
- **per job**: the wall time per job of 60 small aggregations, after 30 to warm up.

A driver restart on Kubernetes is the JVM's start in a pod that requests a tenth of a core,
beside runners that keep processing: its CPU is what the restart takes from them, and what its
time to take over waits for. The option sets are interleaved (``--repeat``), every run listed.

    .venv/bin/python bench/jvm_start.py
    .venv/bin/python bench/jvm_start.py --repeat 5 --options "" "-XX:TieredStopAtLevel=1"
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "contract"))

from eddy_contract.driver_jvm import DRIVER_JAVA_OPTIONS  # noqa: E402

#: one run, in a process of its own (a JVM starts once per process)
_RUN = """
import os, sys, time
from pyspark.sql import SparkSession
b = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
     .config("spark.ui.showConsoleProgress", "false"))
if sys.argv[1]:
    b = b.config("spark.driver.extraJavaOptions", sys.argv[1])
t = time.monotonic()
s = b.getOrCreate()
up = time.monotonic() - t
pid = s.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
def cpu():
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
at_up = cpu()
df = s.range(100000).selectExpr("id % 97 as k", "id as v")
df.groupBy("k").sum("v").collect()
first = cpu()
for i in range(30):
    df.groupBy("k").sum("v").collect()
t = time.monotonic()
for i in range(60):
    df.filter(f"v > {i}").groupBy("k").sum("v").collect()
per_job = (time.monotonic() - t) / 60
print(f"RESULT {up:.2f} {at_up:.2f} {first:.2f} {per_job * 1000:.0f}", flush=True)
s.stop()
"""


def run_once(options: str) -> tuple[float, float, float, float]:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.run([sys.executable, "-c", _RUN, options], capture_output=True, text=True, env=env,
                          timeout=300, check=False)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            up, at_up, first, per_job = (float(x) for x in line.split()[1:])
            return up, at_up, first, per_job
    raise RuntimeError(f"no result from a run with {options!r}: {proc.stderr[-2000:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--options", nargs="+", default=["", DRIVER_JAVA_OPTIONS],
                    help="JVM option sets to compare ('' is the JVM's defaults)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    runs: dict[str, list[tuple[float, float, float, float]]] = {o: [] for o in args.options}
    for i in range(args.repeat):
        for options in args.options:
            r = run_once(options)
            runs[options].append(r)
            print(f"run {i + 1} [{options or 'defaults'}]: up {r[0]:.1f} s, JVM CPU {r[1]:.1f} s at up, "
                  f"{r[2]:.1f} s after the first job; {r[3]:.0f} ms per warm job", flush=True)
    print("\noptions | up s | JVM CPU-s at up | after the first job | ms per warm job  (middle of the runs)")
    for options, rs in runs.items():
        mid = [statistics.median(col) for col in zip(*rs, strict=True)]
        print(f"{options or 'defaults'} | {mid[0]:.1f} | {mid[1]:.1f} | {mid[2]:.1f} | {mid[3]:.0f}")


if __name__ == "__main__":
    main()
