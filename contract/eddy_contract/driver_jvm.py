"""The driver JVM's options, the same wherever a driver runs: the operator's driver pods (its
`spark.driver.extraJavaOptions`, unless `spec.sparkConf` sets them), `eddy run` and the test
sessions (docs/DESIGN.md, "Figures behind settings in the code"); and the executor JVMs' in the
operator's executor pods."""

from __future__ import annotations

__all__ = ["DRIVER_JAVA_OPTIONS", "EXECUTOR_JAVA_OPTIONS"]

#: the JIT stops at its first tier (C1). A driver schedules jobs and plans batches; its C2
#: compiler threads were most of its start's CPU, which a restart takes from the runners that
#: process meanwhile, while it waits for them (bench/jvm_start.py: a third less CPU to start, and
#: no slower once warm)
DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"

#: the same for the executor JVMs of the operator's pods (`spark.executor.extraJavaOptions`, unless
#: `spec.sparkConf` sets them): an executor JVM runs Spark's tasks, which hand their work to the
#: pod's task runner (Python), and idles between them; on Kubernetes a new one starts in each pod at
#: every driver restart, beside a runner that keeps processing, and its C2 compiles were most of
#: the CPU it took from the runner then (bench/upgrade.py, "driver pod deleted")
EXECUTOR_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"
