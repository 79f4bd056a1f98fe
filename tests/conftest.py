"""Session-wide real servers for the test suite.

Each server starts once per test session, on demand (only when a test asks for it), and stops at
the end. Fixtures:

- ``kafka``: a real KRaft broker (``.bootstrap``, ``.admin``, ``.create_topic``, ``.new_topic``);
  it also serves SASL_SSL with SCRAM-SHA-512 on ``.secure_bootstrap`` (``.credentials``: user,
  password, CA file; ``.security_spec()``: the ``spec.kafka`` of an app that uses it).
- ``kafka_credentials``: that listener's credentials, exported for the whole session as a user
  exports them for ``eddy run`` (``EDDY_KAFKA_SASL_USERNAME``, ``_PASSWORD``,
  ``EDDY_KAFKA_SSL_CA_LOCATION``) before Spark starts, so its executors inherit them. Apps on the
  PLAINTEXT listener ignore them.
- ``kafka_cluster``: three KRaft nodes (brokers and controllers), the same API plus
  ``.stop_broker(i)`` / ``.start_broker(i)``; started only by the tests that ask for it.
- ``kube``: a real control plane (``.kubeconfig``, ``.kubectl(...)``, ``.api_client()``);
  ``namespace``: a fresh namespace per test.
- ``spark``: a SparkSession on ``local-cluster[2,1,1024]`` (two executor JVMs).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import (
    ControlPlane,
    KafkaBroker,
    KafkaCluster,
    KafkaCredentials,
    control_plane,
    kafka_broker,
    kafka_nodes,
    spark_env,
)


@pytest.fixture(scope="session")
def servers_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("servers")


@pytest.fixture(scope="session")
def kafka_credentials(servers_dir: Path) -> Iterator[KafkaCredentials]:
    credentials = KafkaCredentials.for_broker(servers_dir / "kafka")
    saved = {k: os.environ.get(k) for k in credentials.env()}
    os.environ.update(credentials.env())
    yield credentials
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def kafka(servers_dir: Path, kafka_credentials: KafkaCredentials) -> Iterator[KafkaBroker]:
    with kafka_broker(servers_dir, credentials=kafka_credentials) as broker:
        yield broker


@pytest.fixture(scope="session")
def kafka_cluster(servers_dir: Path) -> Iterator[KafkaCluster]:
    with kafka_nodes(servers_dir, nodes=3) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def kube(servers_dir: Path) -> Iterator[ControlPlane]:
    with control_plane(servers_dir) as cp:
        yield cp


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests on the control plane are marked `control_plane`: `make test` runs them after the
    others, once the Go builds that it runs beside those stages have made its binaries."""
    for item in items:
        if "kube" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.control_plane)


@pytest.fixture
def namespace(kube: ControlPlane) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    kube.kubectl("create", "namespace", name)
    yield name
    kube.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="session")
def spark_session(kafka_credentials: KafkaCredentials, servers_dir: Path):  # -> pyspark.sql.SparkSession
    # The executor JVMs (and their Python workers) inherit this process's environment, with the
    # Kafka credentials in it: nothing secret goes into the SparkConf or a task closure.
    os.environ.update(spark_env())
    from pyspark.sql import SparkSession

    from eddy_contract.driver_jvm import DRIVER_JAVA_OPTIONS
    from eddy_runtime.protocol.runner_client import PYTHON_DAEMON_CONF

    spark_tmp = servers_dir / "spark-tmp"
    spark_tmp.mkdir(parents=True, exist_ok=True)

    session = (
        SparkSession.builder.master("local-cluster[2,1,1024]")
        .appName("eddy-tests")
        # as the operator's drivers run; the JVMs' temporary files (lz4-java's native library,
        # Spark's block managers) in the session's folder, not /tmp
        .config("spark.driver.extraJavaOptions", f"{DRIVER_JAVA_OPTIONS} -Djava.io.tmpdir={spark_tmp}")
        .config("spark.executor.extraJavaOptions", f"-Djava.io.tmpdir={spark_tmp}")
        .config("spark.locality.wait", "3600s")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.executor.memory", "1g")
        .config(map=PYTHON_DAEMON_CONF)
        .getOrCreate()
    )
    yield session
    session.stop()


@pytest.fixture
def spark(spark_session):  # -> pyspark.sql.SparkSession
    """The session, with both executor JVMs registered when the test starts (so tests can pin
    work to them; the first test waits for the session's start too): a test that killed
    one leaves Spark starting its replacement, and the next test must not begin with one executor
    (its first assignment would put everything there and move half of it a few seconds later)."""
    from eddy_runtime.protocol.placement import wait_for_executors

    wait_for_executors(spark_session.sparkContext, 2, timeout=120)
    return spark_session
