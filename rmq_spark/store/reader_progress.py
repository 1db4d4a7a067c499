"""Reader progress the store knows about: who reads the log, and how far they have processed.

A reader (the reput job, later a consumer group) that must see every record before retention
deletes it publishes its progress to ``<store>/config/readers/<file>.json``::

    {"version": 1, "name": "reput:/data/tables", "physical_offset": 1048576,
     "updated_at_ms": 1700000000000}

``physical_offset``: every record below it is processed. Retention (``retention.py``) deletes
only segments wholly below the slowest reader, except above the emergency disk ratio. A reader
that is gone for good must be removed (``remove_reader_progress``, or
``rmq-spark reput --unregister`` for a reput job), or it pins the log until the disk reaches
the emergency ratio.

The file name is the reader name made file-safe plus a hash of the name (names hold ``:`` and
``/``); the name itself is in the JSON. Files are replaced atomically (``fileio``). Owns the
file format, not the policy (``retention.py``) nor when a reader publishes (its job).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from rmq_spark.errors import StoreIOError, StoreMetadataError
from rmq_spark.store.fileio import fsync_dir, make_dirs_durably, write_file_atomically

__all__ = [
    "READERS_DIR",
    "ReaderProgress",
    "publish_reader_progress",
    "read_reader_progress",
    "reader_progress_path",
    "remove_reader_progress",
]

READERS_DIR = "config/readers"  # under the store root
_VERSION = 1
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_STEM_CHARS = 80


@dataclass(frozen=True, slots=True)
class ReaderProgress:
    """One reader's published progress: every record below ``physical_offset`` is processed."""

    name: str
    physical_offset: int
    updated_at_ms: int


def reader_progress_path(root_dir: Path, name: str) -> Path:
    """``<root>/config/readers/<file-safe name>-<hash>.json`` for the reader ``name``."""
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:12]
    stem = _UNSAFE.sub("_", name).strip("_")[:_STEM_CHARS]
    return Path(root_dir) / READERS_DIR / f"{stem}-{digest}.json"


def publish_reader_progress(
    root_dir: str | Path, name: str, physical_offset: int, now_ms: int
) -> Path:
    """Record that reader ``name`` has processed every record below ``physical_offset``.

    Raises
    ------
    ValueError
        An empty name or a negative offset (our bug).
    StoreIOError
        The file cannot be written.
    """
    if not name or physical_offset < 0:
        raise ValueError(f"reader progress: bad name {name!r} or offset {physical_offset}")
    path = reader_progress_path(Path(root_dir), name)
    body = {
        "version": _VERSION,
        "name": name,
        "physical_offset": physical_offset,
        "updated_at_ms": now_ms,
    }
    try:
        make_dirs_durably(path.parent)
        write_file_atomically(path, json.dumps(body).encode("utf-8"))
    except OSError as err:
        raise StoreIOError(f"{path}: cannot write reader progress: {err}") from err
    return path


def read_reader_progress(root_dir: str | Path) -> list[ReaderProgress]:
    """Every registered reader's progress, by name (none: ``[]``).

    Raises
    ------
    StoreMetadataError
        A progress file is not the JSON above (names the file).
    StoreIOError
        The directory or a file cannot be read.
    """
    directory = Path(root_dir) / READERS_DIR
    try:
        paths = sorted(directory.glob("*.json"))
    except OSError as err:
        raise StoreIOError(f"{directory}: cannot list reader progress: {err}") from err
    readers = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            continue  # removed meanwhile
        except OSError as err:
            raise StoreIOError(f"{path}: cannot read reader progress: {err}") from err
        readers.append(_parse(path, text))
    return sorted(readers, key=lambda reader: reader.name)


def remove_reader_progress(root_dir: str | Path, name: str) -> bool:
    """Forget reader ``name`` (retention stops waiting for it); False if it was not registered.

    Raises
    ------
    StoreIOError
        The file exists but cannot be removed.
    """
    path = reader_progress_path(Path(root_dir), name)
    try:
        path.unlink()
        fsync_dir(path.parent)
    except FileNotFoundError:
        return False
    except OSError as err:
        raise StoreIOError(f"{path}: cannot remove reader progress: {err}") from err
    return True


def _parse(path: Path, text: str) -> ReaderProgress:
    try:
        body = json.loads(text)
    except ValueError as err:
        raise StoreMetadataError(str(path), f"not JSON ({err})") from None
    if not isinstance(body, dict) or body.get("version") != _VERSION:
        raise StoreMetadataError(str(path), f"not a version {_VERSION} reader progress object")
    name, offset, updated = body.get("name"), body.get("physical_offset"), body.get("updated_at_ms")
    if not isinstance(name, str) or not name:
        raise StoreMetadataError(str(path), "'name' is not a non-empty string")
    for key, value in (("physical_offset", offset), ("updated_at_ms", updated)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise StoreMetadataError(str(path), f"{key!r} is not an integer >= 0: {value!r}")
    assert isinstance(offset, int) and isinstance(updated, int)
    return ReaderProgress(name=name, physical_offset=offset, updated_at_ms=updated)
