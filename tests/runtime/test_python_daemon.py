"""Spark's Python daemon as Eddy starts it (eddy_runtime/executor/python_daemon.py): pyspark.zip
leaves the path only where an installed pyspark is on the rest of it, and the executors' Python
workers of a real Spark application import pyspark from the installed package."""

from __future__ import annotations

from pathlib import Path

import pytest

from eddy_runtime.executor.python_daemon import without_pyspark_zip


@pytest.mark.unit
def test_the_zip_leaves_the_path_when_pyspark_is_installed_beside_it(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    (site / "pyspark").mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    zip_path = str(site / "pyspark" / "python" / "lib" / "pyspark.zip")
    py4j = str(site / "pyspark" / "python" / "lib" / "py4j-0.10.9.9-src.zip")

    assert without_pyspark_zip([zip_path, py4j, str(tmp_path), str(site)]) == [py4j, str(tmp_path), str(site)]


@pytest.mark.unit
def test_the_path_is_left_alone_without_an_installed_pyspark_or_without_the_zip(tmp_path: Path) -> None:
    zip_path = str(tmp_path / "spark" / "python" / "lib" / "pyspark.zip")
    alone = [zip_path, str(tmp_path)]
    assert without_pyspark_zip(alone) == alone  # a SPARK_HOME of its own: its zip is all there is
    no_zip = [str(tmp_path)]
    assert without_pyspark_zip(no_zip) == no_zip


@pytest.mark.integration
def test_executor_python_workers_import_the_installed_pyspark(spark) -> None:
    files = spark.sparkContext.parallelize(range(4), 4).map(lambda _: __import__("pyspark").__file__).collect()

    assert files and all("pyspark.zip" not in f for f in files), files
    assert all(f.endswith("/site-packages/pyspark/__init__.py") for f in files), files
