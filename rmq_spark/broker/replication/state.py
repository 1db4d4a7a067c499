"""``config/replication.json``: what a SLAVE last knew of its master, kept in its store for
``rmq-spark broker promote`` (ours; RocketMQ keeps no such file).

``{"role": "SLAVE", "master": "host:port", "masterShownOffset": N, "confirmedOffset": M}``:
N is the end of what the master's transfers had shown, M what this slave had confirmed.
Rewritten about once a second while the slave replicates; ``promote`` sets ``role`` to
``PROMOTED`` and records the end it promoted at.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rmq_spark.errors import StoreMetadataError
from rmq_spark.store.fileio import write_file_atomically

__all__ = ["STATE_FILE", "read_state", "write_state"]

STATE_FILE = Path("config") / "replication.json"


def write_state(root: Path, master: str, shown: int, confirmed: int, role: str = "SLAVE") -> None:
    document = {"role": role, "master": master, "masterShownOffset": shown,
                "confirmedOffset": confirmed}  # fmt: skip
    path = Path(root) / STATE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file_atomically(path, json.dumps(document, sort_keys=True).encode())


def read_state(root: Path) -> dict[str, Any] | None:
    """The file's document; ``None`` when the store was never a slave.

    Raises
    ------
    StoreMetadataError
        The file is not the document above.
    """
    path = Path(root) / STATE_FILE
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise StoreMetadataError(str(path), f"not a replication state file: {err}") from err
    keys = ("role", "master", "masterShownOffset", "confirmedOffset")
    if not isinstance(document, dict) or any(key not in document for key in keys):
        raise StoreMetadataError(str(path), f"expected the keys {', '.join(keys)}")
    return document
