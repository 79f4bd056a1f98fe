#!/bin/bash
# The container contract of Spark on Kubernetes (its kubernetes/dockerfiles/spark/entrypoint.sh):
# executor pods get args `executor` and their settings in SPARK_* variables; a cluster-mode driver
# gets `driver ...`. No arguments runs the operator; anything else (eddy driver ...) runs as given.
set -euo pipefail
SPARK_CLASSPATH="${SPARK_CLASSPATH:-}:${SPARK_HOME}/jars/*"
if [ -n "${SPARK_CONF_DIR:-}" ]; then SPARK_CLASSPATH="${SPARK_CONF_DIR}:${SPARK_CLASSPATH}"; fi
if [ -n "${SPARK_EXTRA_CLASSPATH:-}" ]; then SPARK_CLASSPATH="${SPARK_CLASSPATH}:${SPARK_EXTRA_CLASSPATH}"; fi
case "${1:-}" in
  executor)
    shift
    # SPARK_JAVA_OPT_0, _1, ... in numeric order, as Spark's entrypoint reads them.
    mapfile -t java_opts < <(env | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n | sed 's/^[^=]*=//')
    # Not exec'd: when the JVM ends (stopped, or killed), Eddy's task runner notices and closes its
    # stores, which flushes RocksDB's memtables to the volume; the container must outlive that, or
    # the runner dies with it and the next executor on this volume restores what was not flushed.
    "${JAVA_HOME}/bin/java" "${java_opts[@]}" \
      "-Xms${SPARK_EXECUTOR_MEMORY}" "-Xmx${SPARK_EXECUTOR_MEMORY}" \
      -cp "${SPARK_CLASSPATH}:${SPARK_DIST_CLASSPATH:-}" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "${SPARK_DRIVER_URL}" \
      --executor-id "${SPARK_EXECUTOR_ID}" \
      --cores "${SPARK_EXECUTOR_CORES}" \
      --app-id "${SPARK_APPLICATION_ID}" \
      --hostname "${SPARK_EXECUTOR_POD_IP}" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID}" \
      --podName "${SPARK_EXECUTOR_POD_NAME}" \
      "$@" &
    jvm=$!
    trap 'kill -TERM "$jvm" 2>/dev/null || true' TERM INT
    while kill -0 "$jvm" 2>/dev/null; do wait "$jvm" || true; done
    status=0
    wait "$jvm" || status=$?
    for _ in $(seq 200); do  # at most 20 s, within the pod's 30 s grace period
      pgrep -f 'eddy_runtime[.]executor[.]runner' >/dev/null || break
      sleep 0.1
    done
    exit "$status"
    ;;
  driver)
    shift
    exec "${SPARK_HOME}/bin/spark-submit" \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS:-0.0.0.0}" \
      --deploy-mode client "$@"
    ;;
  "")
    exec eddy-operator
    ;;
  *)
    exec "$@"
    ;;
esac
