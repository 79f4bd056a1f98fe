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
    # Not exec'd. Eddy's task runner (started by the first Spark task) is a process of its own. With
    # EDDY_RUNNER_OUTLIVES_EXECUTOR=1 (the operator's pod template) it outlives the JVM: when the JVM
    # ends (its driver stopped or restarted, or it was killed) while the runner lives, the runner goes
    # on processing its tasks and a new JVM starts here, which registers with the (next) driver under
    # a new executor id and is adopted with the runner's tasks still open. The pod stops only on
    # SIGTERM (deleted, evicted, drained): the JVM first, then the runner, which closes its stores
    # (flushing RocksDB's memtables to the volume) within the pod's grace period. Without it, the
    # runner closes when its JVM ends, and the container waits for that.
    #
    # A JVM started while the runner processes (after the first) runs under SCHED_IDLE: its start
    # (class loading, JIT) would otherwise take much of the CPU from the runners, which keep
    # processing meanwhile. Niceness did not do it: it weighs threads only against the other
    # threads of the pod, and a starting JVM runs a score of them (at 19 the runners of a 2-core
    # node got about half the CPU they need while two pods' JVMs started); a SCHED_IDLE
    # thread gives way to any other thread that wakes on its CPU (bench/upgrade.py, "compatible
    # image upgrade": change p99 2.3-2.6x steady, 4.1x at niceness 19). A JVM cannot take its
    # priority back without CAP_SYS_NICE, so this one stays there: it idles where the runner does
    # the work (sub-topologies without DataFrame steps); micro-batch tasks it runs get what the
    # node's other threads leave.
    runner='eddy_runtime[.]executor[.]runner'
    # SPARK_DRIVER_URL is spark://CoarseGrainedScheduler@HOST:PORT (the driver's Service: the same
    # address for every driver of the app). A driver's RPC port opens long before its scheduler
    # takes registrations (a JVM that comes then fails, and ends); its block manager's port
    # (EDDY_DRIVER_READY_PORT, from the operator) opens only after (Spark's SparkContext starts its
    # task scheduler, then its block manager).
    driver_address=${SPARK_DRIVER_URL##*@}
    driver_host=${driver_address%:*} driver_ready_port=${EDDY_DRIVER_READY_PORT:-${driver_address##*:}}
    driver_listens() { timeout 1 bash -c "exec 3<>/dev/tcp/$driver_host/$driver_ready_port" 2>/dev/null; }
    # The image's class-data sharing archive (docker/cds.sh) holds for a class path that begins
    # with its jars, in its order: they go first (the conf dir after them: no jar has a file of its).
    class_path="${SPARK_CLASSPATH}:${SPARK_DIST_CLASSPATH:-}" sharing=()
    if [ -r /opt/eddy/cds/spark.jsa ] && [ -r /opt/eddy/cds/classpath ]; then
      class_path="$(cat /opt/eddy/cds/classpath):${class_path}" sharing=(-XX:SharedArchiveFile=/opt/eddy/cds/spark.jsa)
    fi
    stopping=0
    priority=()
    trap 'stopping=1; kill -TERM "$jvm" 2>/dev/null || true' TERM INT
    while true; do
      "${priority[@]}" "${JAVA_HOME}/bin/java" "${sharing[@]}" "${java_opts[@]}" \
        "-Xms${SPARK_EXECUTOR_MEMORY}" "-Xmx${SPARK_EXECUTOR_MEMORY}" \
        -cp "${class_path}" \
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
      # A driver whose node died closes no connection: the JVM would wait ten minutes of heartbeats
      # for it while the next driver waits for the JVM (eddy_runtime/executor/driver_watch.py).
      watcher=
      if [ "${EDDY_RUNNER_OUTLIVES_EXECUTOR:-}" = 1 ]; then
        "${PYSPARK_PYTHON:-python3}" -m eddy_runtime.executor.driver_watch "$jvm" "${SPARK_DRIVER_URL}" &
        watcher=$!
      fi
      while kill -0 "$jvm" 2>/dev/null; do wait "$jvm" || true; done
      status=0
      wait "$jvm" || status=$?
      if [ -n "$watcher" ]; then kill "$watcher" 2>/dev/null || true; wait "$watcher" 2>/dev/null || true; fi
      # SIGKILLed (status 137: killed by hand, or by the kernel out of memory): not a driver that
      # left, so the pod is not trusted either; the runner closes its stores and the container
      # restarts, as it does without EDDY_RUNNER_OUTLIVES_EXECUTOR.
      if [ "$stopping" = 1 ] || [ "$status" = 137 ] || [ "${EDDY_RUNNER_OUTLIVES_EXECUTOR:-}" != 1 ] ||
          ! pgrep -f "$runner" >/dev/null; then
        break
      fi
      echo "executor JVM ended ($status); the task runner goes on, and a new JVM registers with the next driver" >&2
      priority=(chrt --idle 0)
      sleep 2
      # Not before the next driver takes registrations: a JVM started earlier fails to register and
      # ends, and one such start every few seconds (class loading, JIT: a core-second or more each)
      # took a core of the node from the runners all through a driver restart (bench/upgrade.py,
      # "driver pod deleted").
      # (nor once the runner is gone: the container ends, as it does when the runner goes first)
      until [ "$stopping" = 1 ] || ! pgrep -f "$runner" >/dev/null || driver_listens; do sleep 0.5; done
      if [ "$stopping" = 1 ] || ! pgrep -f "$runner" >/dev/null; then break; fi
    done
    if [ "${EDDY_RUNNER_OUTLIVES_EXECUTOR:-}" = 1 ]; then  # it does not watch the JVM: told to close
      pkill -TERM -f "$runner" 2>/dev/null || true
    fi
    for _ in $(seq 200); do  # at most 20 s, within the pod's grace period (after its preStop hand-over)
      pgrep -f "$runner" >/dev/null || break
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
