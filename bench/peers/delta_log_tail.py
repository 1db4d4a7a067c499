"""Every commit of a Delta table's log, each read once and kept while the table's writer goes
on: the harness times each row by the commit that added its file, and counts rows by the
commits' statistics, so it must see every commit file. The reput job removes old commit files
after its checkpoints (``reput.log_retention_minutes``); a tail followed by a thread
(``following``) reads each one well before that. A commit file gone before the tail read it is
a ``PeerError`` naming its version, never a count that is silently short.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from peer_common import PeerError

__all__ = ["Commit", "DeltaLogTail", "following"]

FOLLOW_INTERVAL_S = 0.5


@dataclass(frozen=True)
class Commit:
    version: int
    stamp_ms: int  # commitInfo.timestamp
    files: tuple[str, ...]  # data files added with dataChange
    rows: int  # their rows, from their statistics
    meta: dict[str, Any]  # userMetadata as JSON, or {}


def parse_commit(version: int, text: str) -> Commit:
    actions = [json.loads(line) for line in text.splitlines() if line]
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    adds = [a["add"] for a in actions if "add" in a and a["add"]["dataChange"]]
    rows = sum(json.loads(add["stats"])["numRecords"] for add in adds if add.get("stats"))
    try:
        meta = json.loads(info.get("userMetadata") or "{}")
    except ValueError:
        meta = {}
    files = tuple(add["path"] for add in adds)
    return Commit(version, int(info["timestamp"]), files, rows, meta)


class DeltaLogTail:
    """The commits of the Delta table at ``table`` (versions 0, 1, ...), read as they appear."""

    def __init__(self, table: Path) -> None:
        self.table = table
        self._commits: dict[int, Commit] = {}
        self._lock = threading.Lock()

    def commits(self) -> list[Commit]:
        """Every commit so far, by version, after reading the ones not read yet.

        Raises ``PeerError`` when a version below the newest is gone unread."""
        with self._lock:
            known = set(self._commits)
        read: dict[int, Commit] = {}
        for path in sorted((self.table / "_delta_log").glob("*.json")):
            version = int(path.stem)
            if version in known:
                continue
            try:
                read[version] = parse_commit(version, path.read_text())
            except FileNotFoundError:
                continue  # removed since the listing: the gap below says so
        with self._lock:
            for version, commit in read.items():
                self._commits.setdefault(version, commit)
            commits = [self._commits[version] for version in sorted(self._commits)]
        missing = next((want for want, c in enumerate(commits) if c.version != want), None)
        if missing is not None:
            raise PeerError(
                f"{self.table}: commit {missing} of the Delta log was removed before the "
                "harness read it: its rows cannot be counted or timed (follow the table from "
                "its start, or keep the log longer)"
            )
        return commits

    def rows(self) -> int:
        """The rows the commits added (OPTIMIZE's rewrites are not data changes)."""
        return sum(commit.rows for commit in self.commits())


@contextlib.contextmanager
def following(*tails: DeltaLogTail, interval_s: float = FOLLOW_INTERVAL_S) -> Iterator[None]:
    """Read the tails' new commits every ``interval_s`` in a thread while the block runs (a
    lost commit is reported by the next ``commits()`` of the block or after it)."""
    stop = threading.Event()

    def follow() -> None:
        while not stop.wait(interval_s):
            for tail in tails:
                with contextlib.suppress(PeerError):
                    tail.commits()

    thread = threading.Thread(target=follow, name="delta-log-tail", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
