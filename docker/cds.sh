#!/bin/bash
# Builds the image's class-data sharing archive for Spark's JVMs (the executors':
# docker/entrypoint.sh; the driver's: eddy_runtime/driver/class_sharing.py): the
# classes a Spark JVM loads to start and run a task (docker/cds_job.py), stored as the JVM keeps
# them in memory, which a JVM started with -XX:SharedArchiveFile maps instead of reading,
# verifying and parsing each class from its jar. It halves the CPU of a JVM's start
# (bench/README.md, "jvm_start.py"), which matters where a JVM starts beside task runners that
# process all along: a new driver, and the executor JVMs that register with it.
#
# The archive holds for a JVM whose class path begins with the one it was made with, jar by jar
# (same files, sizes and times): `classpath` beside it is that list, sorted, which the JVMs get
# first. Another JVM (or a changed jar) only loses the sharing: the JVM checks and loads
# classes from the jars as before.
set -euo pipefail
out=/opt/eddy/cds
mkdir -p "$out"
ls "${SPARK_HOME}"/jars/*.jar | sort | paste -sd: > "$out/classpath"
# The module options Spark's launcher gives its JVMs (org.apache.spark.launcher.JavaModuleOptions):
# the job needs them to run.
opens=()
for p in java.lang java.lang.invoke java.lang.reflect java.io java.net java.nio java.util java.util.concurrent \
    java.util.concurrent.atomic jdk.internal.ref sun.nio.ch sun.nio.cs sun.security.action sun.util.calendar; do
  opens+=("--add-opens=java.base/$p=ALL-UNNAMED")
done
SPARK_LOCAL_IP=127.0.0.1 java -XX:+IgnoreUnrecognizedVMOptions --add-modules=jdk.incubator.vector "${opens[@]}" \
  -Dio.netty.tryReflectionSetAccessible=true -XX:TieredStopAtLevel=1 \
  -XX:ArchiveClassesAtExit="$out/spark.jsa" -Xlog:cds=error -cp "$(cat "$out/classpath")" \
  org.apache.spark.deploy.SparkSubmit --master 'local[1]' "$(dirname "$0")/cds_job.py"
chmod -R a+rX "$out"
ls -l "$out/spark.jsa"
