"""The container images `infra/image/image.sh build` makes: the OCI archives containerd imports
carry the names the kubelet looks up, the eddy image's config is the Dockerfile's, and the image
really runs Python with Eddy, Spark, RocksDB and Kafka bindings, and Java.

Needs the images built (`infra/image/image.sh build`: `make test` builds them beside the stages
before, and runs these tests, marked `image`, after the build); if they are missing every test
fails saying so."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import CACHE, REPO

pytestmark = [pytest.mark.integration, pytest.mark.image]

ENV_FILE = CACHE / "images" / "images.env"
BUILD = "infra/image/image.sh build"


@pytest.fixture(scope="module")
def images() -> dict[str, str]:
    if not ENV_FILE.is_file():
        pytest.fail(f"{ENV_FILE} is missing: run `{BUILD}` first", pytrace=False)
    env = dict(
        line.split("=", 1) for line in ENV_FILE.read_text().splitlines() if "=" in line and not line.startswith("#")
    )
    for key in ("EDDY_IMAGE", "EDDY_IMAGE_ARCHIVE", "PAUSE_IMAGE", "PAUSE_IMAGE_ARCHIVE"):
        if not env.get(key):
            pytest.fail(f"{ENV_FILE} has no {key}: run `{BUILD}` again", pytrace=False)
    return env


def containerd_name(ref: str) -> str:
    """The name containerd (and so the kubelet) gives `ref`: Docker's normalisation."""
    name = ref if "/" in ref else f"library/{ref}"
    first = name.split("/", 1)[0]
    return name if "." in first or ":" in first or first == "localhost" else f"docker.io/{name}"


def archive_image(path: str) -> tuple[str, dict]:
    """(ref name, image config) of the single image in an OCI archive."""
    if not Path(path).is_file():
        pytest.fail(f"image archive {path} is missing: run `{BUILD}`", pytrace=False)
    with tarfile.open(path) as tar:

        def blob(digest: str) -> dict:
            algo, hexdigest = digest.split(":", 1)
            member = tar.extractfile(f"blobs/{algo}/{hexdigest}")
            assert member is not None, f"{path}: blob {digest} missing"
            return json.load(member)

        index_file = tar.extractfile("index.json")
        assert index_file is not None, f"{path}: no index.json"
        index = json.load(index_file)
        assert len(index["manifests"]) == 1, index
        descriptor = index["manifests"][0]
        manifest = blob(descriptor["digest"])
        return descriptor.get("annotations", {}).get("org.opencontainers.image.ref.name", ""), blob(
            manifest["config"]["digest"]
        )


@pytest.fixture(scope="module")
def eddy_container(images: dict[str, str]) -> Iterator[str]:
    """A buildah working container of the eddy image (removed afterwards)."""
    # By id: another clone on this machine may have tagged its own build eddy:<version> since.
    ref = images.get("EDDY_IMAGE_ID") or containerd_name(images["EDDY_IMAGE"])
    proc = subprocess.run(
        ["buildah", "from", "--pull=never", "--name", f"eddy-test-{os.getpid()}", ref],
        capture_output=True, text=True, timeout=120,
    )
    if proc.returncode != 0:
        pytest.fail(f"buildah from {ref} failed (run `{BUILD}`):\n{proc.stderr[-2000:]}", pytrace=False)
    container = proc.stdout.strip().splitlines()[-1]
    yield container
    subprocess.run(["buildah", "rm", container], capture_output=True, timeout=60)


def run_in(
    container: str, *cmd: str, env: tuple[str, ...] = (), timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    env_args = [arg for item in env for arg in ("--env", item)]
    return subprocess.run(
        ["buildah", "run", "--network", "host", *env_args, container, "--", *cmd],
        capture_output=True, text=True, timeout=timeout,
    )


def test_archives_carry_the_names_containerd_and_the_kubelet_use(images: dict[str, str]) -> None:
    eddy_ref, _ = archive_image(images["EDDY_IMAGE_ARCHIVE"])
    assert eddy_ref == containerd_name(images["EDDY_IMAGE"])
    chart = (REPO / "charts" / "eddy-operator" / "Chart.yaml").read_text()
    version = images["EDDY_IMAGE"].rsplit(":", 1)[1]
    assert f'appVersion: "{version}"' in chart
    pause_ref, pause_config = archive_image(images["PAUSE_IMAGE_ARCHIVE"])
    assert pause_ref == images["PAUSE_IMAGE"]
    assert pause_config["config"]["Entrypoint"] == ["/pause"]


def test_eddy_image_config_is_the_dockerfiles(images: dict[str, str]) -> None:
    _, image = archive_image(images["EDDY_IMAGE_ARCHIVE"])
    config = image["config"]
    assert config["Entrypoint"] == ["/usr/bin/tini", "-s", "--", "/opt/eddy/bin/entrypoint.sh"]
    assert config["Cmd"] == ["eddy-operator"]
    assert config["User"] == "185:185"
    assert config["WorkingDir"] == "/opt/eddy/app"
    env = dict(item.split("=", 1) for item in config["Env"])
    assert env["JAVA_HOME"] == "/opt/java"
    assert env["SPARK_HOME"] == "/opt/eddy/venv/lib/python3.11/site-packages/pyspark"
    assert env["PYSPARK_PYTHON"] == "/opt/eddy/venv/bin/python"
    assert env["PATH"].startswith("/opt/eddy/venv/bin:/opt/java/bin:")
    assert set(config.get("ExposedPorts", {})) == {"8080/tcp", "8081/tcp"}


def test_eddy_image_runs_python_packages_and_java(eddy_container: str) -> None:
    imports = run_in(
        eddy_container, "python", "-c",
        "import os, eddy_runtime, eddy_operator.handlers, pyspark, pyarrow, rocksdict, confluent_kafka; "
        "print(os.getuid(), pyspark.__version__)",
    )
    assert imports.returncode == 0, imports.stderr[-3000:]
    assert imports.stdout.split() == ["185", "4.3.0"]
    java = run_in(eddy_container, "java", "-version")
    assert java.returncode == 0, java.stderr[-3000:]
    assert 'version "17.' in java.stderr


def test_the_class_sharing_archive_holds_for_the_image_s_jars(eddy_container: str) -> None:
    """docker/cds.sh: a JVM whose class path begins with the archive's list maps it (-Xshare:on
    fails the JVM if it cannot, e.g. when a jar differs from the one the archive was made from),
    with a conf dir and more after it, as the entrypoint's executor JVMs have."""
    java = run_in(eddy_container, "sh", "-c",
                  'java -Xshare:on -XX:SharedArchiveFile=/opt/eddy/cds/spark.jsa -Xlog:cds=info '
                  '-cp "$(cat /opt/eddy/cds/classpath):/opt/eddy/app:" -version')
    assert java.returncode == 0, (java.stdout + java.stderr)[-3000:]
    assert "Mapped dynamic region" in java.stdout, java.stdout[-3000:]


def test_entrypoint_runs_other_commands_as_given_and_driver_through_spark_submit(eddy_container: str) -> None:
    given = run_in(eddy_container, "/opt/eddy/bin/entrypoint.sh", "eddy", "--help")
    assert given.returncode == 0, given.stderr[-3000:]
    # A pod's /etc/hosts names its hostname; a buildah container's does not, so Spark is told its address.
    driver = run_in(
        eddy_container, "/opt/eddy/bin/entrypoint.sh", "driver", "--version", env=("SPARK_LOCAL_IP=127.0.0.1",)
    )
    assert driver.returncode == 0, driver.stderr[-3000:]
    assert "version 4.3.0" in driver.stdout + driver.stderr
