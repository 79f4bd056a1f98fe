"""The driver JVM's share of the image's class-data sharing archive (docker/cds.sh).

The archive holds the classes a Spark JVM loads to start and run a task; a JVM that maps it
starts on about half the CPU (bench/README.md, "jvm_start.py"). It holds only for a JVM whose
class path begins with its jars, in the order of the `classpath` list beside it. Spark's launcher
puts `spark.driver.extraClassPath` first (before the conf dir, whose files would void the archive,
and its own jars), so the driver is given that list there, and the archive in
`spark.driver.defaultJavaOptions` (which Spark puts before `extraJavaOptions`). The executors'
JVMs get the same from the container's entrypoint (docker/entrypoint.sh).

An app that sets either key itself keeps its own (its driver starts without the archive), and so
does a driver outside the image (no archive there)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

__all__ = ["ARCHIVE_DIR", "class_sharing_conf"]

#: where the image keeps the archive (`spark.jsa`) and its class path (`classpath`)
ARCHIVE_DIR = Path("/opt/eddy/cds")
_KEYS = ("spark.driver.extraClassPath", "spark.driver.defaultJavaOptions")


def class_sharing_conf(spark_conf: Mapping[str, str], archive_dir: Path = ARCHIVE_DIR) -> dict[str, str]:
    """The Spark settings that give the driver's JVM the archive in `archive_dir`; none if there is
    no archive or if `spark_conf` (the app's) sets either key."""
    archive, listing = archive_dir / "spark.jsa", archive_dir / "classpath"
    if any(key in spark_conf for key in _KEYS) or not (archive.is_file() and listing.is_file()):
        return {}
    return {_KEYS[0]: listing.read_text().strip(), _KEYS[1]: f"-XX:SharedArchiveFile={archive}"}
