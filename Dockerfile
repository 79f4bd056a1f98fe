# syntax=docker/dockerfile:1.7
# One image for all of Eddy: the operator (`eddy-operator`), the Spark driver (`eddy driver ...`)
# and Spark's executors (Spark on Kubernetes starts them with the single argument `executor`).
# Python 3.11 and a Java 17 runtime; Spark comes from the pinned pyspark wheel (its jars include
# spark-kubernetes); runs as uid 185 like Spark's own images.
#
#   docker build -t eddy:0.1.0 .
#   FROM eddy:0.1.0 + COPY your pipeline package under /opt/eddy/app for your own apps.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/eddy/venv
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/ operator/
COPY runtime/ runtime/
RUN /opt/eddy/venv/bin/pip install --no-compile . \
    && /opt/eddy/venv/bin/python -c "import eddy_operator.handlers, pyspark, confluent_kafka, rocksdict"

FROM ${PYTHON_IMAGE}
# Java for Spark's JVMs; tini reaps the JVM and Python workers and forwards signals; procps
# gives Spark's scripts `ps`. Versions float within bookworm so security fixes come in.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless tini procps bash \
    && rm -rf /var/lib/apt/lists/* \
    && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /opt/java \
    && groupadd --gid 185 spark \
    && useradd --uid 185 --gid 185 --home-dir /opt/eddy --no-create-home --shell /usr/sbin/nologin spark

COPY --from=build /opt/eddy/venv /opt/eddy/venv
COPY examples/ /opt/eddy/app/examples/

ENV JAVA_HOME=/opt/java \
    SPARK_HOME=/opt/eddy/venv/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=/opt/eddy/venv/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/eddy/venv/bin/python \
    PYTHONPATH=/opt/eddy/app \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    PATH=/opt/eddy/venv/bin:/opt/java/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# The container contract of Spark on Kubernetes (its kubernetes/dockerfiles/spark/entrypoint.sh):
# executor pods get args `executor` and their settings in SPARK_* variables; a cluster-mode driver
# gets `driver ...`. Anything else (eddy-operator, eddy driver ...) runs as given.
COPY --chmod=755 <<'EOF' /opt/eddy/bin/entrypoint.sh
#!/bin/bash
set -euo pipefail
SPARK_CLASSPATH="${SPARK_CLASSPATH:-}:${SPARK_HOME}/jars/*"
if [ -n "${SPARK_CONF_DIR:-}" ]; then SPARK_CLASSPATH="${SPARK_CONF_DIR}:${SPARK_CLASSPATH}"; fi
if [ -n "${SPARK_EXTRA_CLASSPATH:-}" ]; then SPARK_CLASSPATH="${SPARK_CLASSPATH}:${SPARK_EXTRA_CLASSPATH}"; fi
case "${1:-}" in
  executor)
    shift
    # SPARK_JAVA_OPT_0, _1, ... in numeric order, as Spark's entrypoint reads them.
    mapfile -t java_opts < <(env | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n | sed 's/^[^=]*=//')
    exec "${JAVA_HOME}/bin/java" "${java_opts[@]}" \
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
      "$@"
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
EOF

WORKDIR /opt/eddy/app
USER 185:185
EXPOSE 8080 8081
ENTRYPOINT ["/usr/bin/tini", "-s", "--", "/opt/eddy/bin/entrypoint.sh"]
CMD ["eddy-operator"]
