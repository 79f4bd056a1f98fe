"""Fixtures for the runtime tests.

`spark` overrides the root fixture with the same settings: the root one waits for executors
through ``tests/spark_util.executor_ids``, which reaches ``SparkContext.env()`` through py4j and
fails on pyspark 4.3 (reflection on SparkEnv needs protobuf classes the pip package lacks).
Remove this override once the root fixture waits with `eddy_runtime.placement.wait_for_executors`.
"""

from __future__ import annotations

import os

import pytest

from tests.servers import spark_env


@pytest.fixture(scope="session")
def spark():  # -> pyspark.sql.SparkSession
    os.environ.update(spark_env())
    from pyspark.sql import SparkSession

    from eddy_runtime.placement import wait_for_executors

    session = (
        SparkSession.builder.master("local-cluster[2,1,1024]")
        .appName("eddy-tests")
        .config("spark.locality.wait", "3600s")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.executor.memory", "1g")
        .getOrCreate()
    )
    wait_for_executors(session.sparkContext, 2, timeout=120)
    yield session
    session.stop()
