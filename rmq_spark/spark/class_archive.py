"""The driver JVM's class-data archive: Spark's and Delta's classes mapped from one file.

A Spark driver loads and verifies some twenty thousand classes from its jars before its first
query, and more on its first stream and Delta commit: a new session here spends ~6 s starting,
and a first reput catch-up ~0.6 s more than a second. Java's class-data sharing keeps classes
already parsed and verified in an archive that the JVM maps instead (``-XX:SharedArchiveFile``,
a dynamic archive written by ``-XX:ArchiveClassesAtExit`` at the end of a representative run:
``class_archive_build``, which ``make setup`` runs).

The JVM checks an archive against its own build and its classpath (each jar's size and time)
and ignores one that does not match; the file's name carries a fingerprint of both, so a
changed jar or JDK names a new archive and a stale one is never offered. ``-Xlog:cds*=off``
keeps the JVM quiet where it still declines one (a user's own classpath in front of Spark's):
the session then starts as it would without it.

Owns where the archive lives, its fingerprint and the driver's option; not the run that
writes it (``class_archive_build``).
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

from rmq_spark.envcheck import java_candidates

__all__ = ["archive_option", "archive_path", "java_executable"]

_log = logging.getLogger(__name__)

ARCHIVE_FOLDER = "rmq-spark-class-archive"
QUIET_OPTION = "-Xlog:cds*=off"


def java_executable() -> Path | None:
    """The ``java`` spark-submit runs (``envcheck.java_candidates``' first), resolved;
    ``None`` if there is none (``check_java`` says so to the user)."""
    candidates = java_candidates()
    return Path(candidates[0]).resolve() if candidates else None


def _fingerprint(java: Path, spark_home: Path) -> str:
    """Sixteen hex digits naming this JDK build and this Spark's classpath (``jars/*``, as
    spark-submit gives it): each file's name, size and modification time."""
    digest = hashlib.sha256(str(java).encode())
    jdk = java.parent.parent
    for part in (jdk / "lib" / "modules", jdk / "lib" / "server" / "libjvm.so"):
        digest.update(_file_identity(part))
    for jar in sorted((spark_home / "jars").glob("*.jar")):
        digest.update(_file_identity(jar))
    return digest.hexdigest()[:16]


def _file_identity(path: Path) -> bytes:
    try:
        info = path.stat()
    except OSError:
        return f"{path.name}:missing\n".encode()
    return f"{path.name}:{info.st_size}:{info.st_mtime_ns}\n".encode()


def archive_path(spark_home: Path, java: Path | None = None) -> Path | None:
    """Where this Spark's archive for ``java`` (default: ``java_executable()``) lives, beside
    the Spark it describes; ``None`` without a Java."""
    java = java or java_executable()
    if java is None:
        return None
    return spark_home / ARCHIVE_FOLDER / f"{_fingerprint(java, spark_home)}.jsa"


def archive_option(spark_home: Path) -> str:
    """The driver JVM's option naming the archive, or ``""`` when there is none for this JDK
    and classpath (``make setup`` writes it)."""
    path = archive_path(spark_home)
    if path is None or not path.is_file():
        _log.debug("no class-data archive for this JDK and classpath (%s)", path)
        return ""
    return f"-XX:SharedArchiveFile={path} {QUIET_OPTION}"
