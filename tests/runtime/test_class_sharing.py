"""The driver's settings for the image's class-data sharing archive (eddy_runtime.driver.class_sharing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from eddy_runtime.driver.class_sharing import class_sharing_conf

pytestmark = pytest.mark.unit


def _archive(tmp_path: Path) -> Path:
    (tmp_path / "spark.jsa").write_bytes(b"\0")
    (tmp_path / "classpath").write_text("/jars/a.jar:/jars/b.jar\n")
    return tmp_path


def test_the_driver_gets_the_archive_and_its_jars_first(tmp_path: Path) -> None:
    conf = class_sharing_conf({"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1"}, _archive(tmp_path))
    assert conf == {"spark.driver.extraClassPath": "/jars/a.jar:/jars/b.jar",
                    "spark.driver.defaultJavaOptions": f"-XX:SharedArchiveFile={tmp_path / 'spark.jsa'}"}


@pytest.mark.parametrize("key", ["spark.driver.extraClassPath", "spark.driver.defaultJavaOptions"])
def test_an_app_s_own_setting_stands(tmp_path: Path, key: str) -> None:
    assert class_sharing_conf({key: "x"}, _archive(tmp_path)) == {}


def test_no_archive_no_settings(tmp_path: Path) -> None:
    (tmp_path / "classpath").write_text("/jars/a.jar")
    assert class_sharing_conf({}, tmp_path) == {}
    assert class_sharing_conf({}, tmp_path / "absent") == {}
