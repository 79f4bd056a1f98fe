# One image for all of Eddy: the operator (`eddy-operator`), the Spark driver (`eddy driver ...`)
# and Spark's executors (Spark on Kubernetes starts them with the single argument `executor`).
# Python 3.11 and a Java 17 runtime; Spark comes from the pinned pyspark wheel (its jars include
# spark-kubernetes); runs as uid 185 like Spark's own images.
#
#   docker build -t eddy:0.1.0 .
#   infra/image/image.sh build      the same without Docker or any registry (buildah, a debootstrap
#                                   base passed as --build-arg PYTHON_IMAGE=...); see its header
#   FROM eddy:0.1.0 + COPY your pipeline package under /opt/eddy/app for your own apps.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/eddy/venv
WORKDIR /src
COPY pyproject.toml ./
# The pinned dependencies first, in a layer that only pyproject.toml invalidates (pyspark alone is
# ~400 MB; README.md is a stand-in here so that editing it does not download them again); then Eddy
# itself, which a code change rebuilds in seconds. Compiled to bytecode at install: the image's
# root filesystem is read-only at run time, and every Spark Python worker would compile again.
RUN mkdir -p contract operator runtime && touch README.md \
    && /opt/eddy/venv/bin/pip install . \
    && /opt/eddy/venv/bin/pip uninstall --yes eddy
COPY README.md ./
COPY contract/ contract/
COPY operator/ operator/
COPY runtime/ runtime/
RUN /opt/eddy/venv/bin/pip install --no-deps . \
    && /opt/eddy/venv/bin/python -c "import eddy_operator.handlers, eddy_runtime.driver.loop, eddy_contract.crd, pyspark, confluent_kafka, rocksdict"

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

# A class-data sharing archive for Spark's JVMs (the executors' and the driver's): a JVM that
# starts beside task runners takes half the CPU to do so (docker/cds.sh).
COPY docker/cds.sh docker/cds_job.py /opt/eddy/bin/
RUN /opt/eddy/bin/cds.sh

# The container contract of Spark on Kubernetes: `executor`, `driver ...`, no arguments (the
# operator) or any other command; see docker/entrypoint.sh.
COPY --chmod=755 docker/entrypoint.sh /opt/eddy/bin/entrypoint.sh

WORKDIR /opt/eddy/app
USER 185:185
EXPOSE 8080 8081
ENTRYPOINT ["/usr/bin/tini", "-s", "--", "/opt/eddy/bin/entrypoint.sh"]
CMD ["eddy-operator"]
