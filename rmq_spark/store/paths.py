"""PURE: local file-system paths from what users write: a POSIX path or a ``file://`` URI."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlparse

__all__ = ["local_fs_path"]


def local_fs_path(text: str) -> Path:
    """``text`` as a local path: ``/data/store``, ``file:///data/store`` or ``file:/data/store``
    (Hadoop's spelling).

    Raises
    ------
    ValueError
        Another scheme (``hdfs://``, ``s3a://``): a store is a local directory, its segments
        are memory-mapped.
    """
    if "://" not in text and not text.startswith("file:"):
        return Path(text)
    parsed = urlparse(text)
    if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
        raise ValueError(
            f"{text}: only local paths or file:// URIs are supported (a store is a local "
            "directory whose segments are memory-mapped; tables live beside it)"
        )
    return Path(unquote(parsed.path))
