"""The driver JVM's options, the same wherever a driver runs: the operator's driver pods (its
`spark.driver.extraJavaOptions`, unless `spec.sparkConf` sets them), `eddy run` and the test
sessions (docs/DESIGN.md, "Figures behind settings in the code")."""

from __future__ import annotations

__all__ = ["DRIVER_JAVA_OPTIONS"]

#: the JIT stops at its first tier (C1). A driver schedules jobs and plans batches; its C2
#: compiler threads were most of its start's CPU, which a restart takes from the runners that
#: process meanwhile, while it waits for them (bench/jvm_start.py: a third less CPU to start, and
#: no slower once warm)
DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"
