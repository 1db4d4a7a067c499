"""Consumer progress on disk: ``config/consumerOffset.json`` plus our in-flight file.

``consumerOffset.json`` is RocketMQ's (``topic@group`` -> queue -> committed offset), written
through the wiring's ``write_offsets``. ``config/consumerInflight.json`` is ours: per queue, the
offsets acknowledged above the committed one and the attempts already made of each message
in flight, so that after a restart acknowledged messages stay acknowledged and attempts keep
counting towards the DLQ. Each file is replaced atomically; the two are written in an order
that needs no transaction (either file alone describes a safe state: see ``save``).

``ProgressSaver`` writes both every ``interval_s`` when something changed, and once more on
``close``.

Offline writers (a Spark query's ``consumerGroup`` commits with no broker running) and a
starting broker exclude each other through ``config/consumerOffset.lock`` (``flock``): the
writer takes it, checks that no process holds the store's ``lock`` and only then rewrites
consumerOffset.json; a broker takes the store's ``lock`` first and then loads the files under
``consumerOffset.lock``. So the broker either loads after the write ended (and keeps it) or
the writer sees the broker and leaves the file to it (``commit_offsets_offline``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from rmq_spark.broker.config_files.rocketmq_config_files import (
    read_consumer_offsets,
    write_consumer_offsets,
)
from rmq_spark.broker.consumer.ports import ConsumerWiring
from rmq_spark.errors import StoreLockedError, StoreMetadataError
from rmq_spark.store.fileio import make_dirs_durably, write_file_atomically
from rmq_spark.store.view import broker_has_store_open

__all__ = [
    "INFLIGHT_FILE",
    "OFFSETS_LOCK_FILE",
    "ProgressFiles",
    "ProgressSaver",
    "commit_offsets_offline",
    "offsets_file_lock",
]

log = logging.getLogger("rmq_spark.broker")

INFLIGHT_FILE = Path("config") / "consumerInflight.json"
OFFSETS_LOCK_FILE = Path("config") / "consumerOffset.lock"

Offsets = dict[tuple[str, str], dict[int, int]]
Extra = dict[str, dict[str, dict[str, object]]]


class ProgressFiles:
    """Reads and writes the two files under a store root."""

    def __init__(self, root: Path, wiring: ConsumerWiring) -> None:
        self._root = Path(root)
        self._wiring = wiring

    def load(self) -> tuple[Offsets, Extra]:
        """Both tables (empty when the files do not exist).

        Raises
        ------
        StoreMetadataError
            A file is not in its format.
        """
        with offsets_file_lock(self._root):  # an offline writer's rewrite ends first
            offsets = self._wiring.read_offsets(self._root)
        path = self._root / INFLIGHT_FILE
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return offsets, {}
        try:
            extra = json.loads(text)["inflightTable"]
            if not isinstance(extra, dict):
                raise ValueError("inflightTable is not an object")
        except (ValueError, KeyError, TypeError) as err:
            raise StoreMetadataError(str(path), f"not a consumer in-flight file: {err}") from err
        return offsets, extra

    def save(self, offsets: Offsets, extra: Extra) -> None:
        """In-flight file first, then the offsets: a crash between the two leaves an older
        committed offset beside newer in-flight facts, which only ever redelivers more."""
        path = self._root / INFLIGHT_FILE
        make_dirs_durably(path.parent)
        data = json.dumps({"inflightTable": extra}, sort_keys=True, separators=(",", ":"))
        write_file_atomically(path, data.encode("utf-8"))
        self._wiring.write_offsets(self._root, offsets)


@contextlib.contextmanager
def offsets_file_lock(root: Path) -> Iterator[None]:
    """Hold ``<root>/config/consumerOffset.lock`` exclusively (waits for the holder)."""
    path = Path(root) / OFFSETS_LOCK_FILE
    make_dirs_durably(path.parent)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # per open file: threads of one process exclude too
        yield
    finally:
        os.close(fd)  # releases the lock


def commit_offsets_offline(
    root: Path, group: str, offsets: Mapping[tuple[str, int], int]
) -> dict[tuple[str, int], int]:
    """Move ``group``'s committed offsets forward in consumerOffset.json while no broker runs.

    ``offsets`` maps (topic, queue id) to a queue offset; an offset at or below the one on
    file is left alone (a replayed commit never moves a group back). Returns what was written.

    Raises
    ------
    StoreLockedError
        A process (a broker) holds the store: commit through it instead.
    """
    root = Path(root)
    with offsets_file_lock(root):
        if broker_has_store_open(root):
            raise StoreLockedError(
                f"{root}: a broker holds the store; commit group {group!r} through it"
            )
        table = read_consumer_offsets(root)
        moved: dict[tuple[str, int], int] = {}
        for (topic, queue_id), offset in offsets.items():
            queues = table.setdefault((topic, group), {})
            if queues.get(queue_id, -1) < offset:
                queues[queue_id] = moved[(topic, queue_id)] = offset
        if moved:
            write_consumer_offsets(root, table)
        return moved


class ProgressSaver:
    """Saves ``snapshot()`` through ``files`` every ``interval_s`` while ``changes()`` moves."""

    def __init__(
        self,
        files: ProgressFiles,
        snapshot: Callable[[], tuple[Offsets, Extra]],
        changes: Callable[[], int],
        interval_s: float,
    ) -> None:
        self._files = files
        self._snapshot = snapshot
        self._changes = changes
        self._interval_s = interval_s
        self._saved = changes()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="consumer-offsets", daemon=True)
        self._thread.start()

    def save_now(self) -> None:
        with self._lock:  # one writer at a time: the temp file name is shared
            changes = self._changes()
            if changes == self._saved:
                return
            offsets, extra = self._snapshot()
            self._files.save(offsets, extra)
            self._saved = changes

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self.save_now()
            except (OSError, StoreMetadataError) as err:
                log.error("broker error: saving consumer offsets failed: %s", err)

    def close(self) -> None:
        """Stop the thread and save a last time (raises ``OSError`` if that fails)."""
        self._stop.set()
        self._thread.join(timeout=30)
        self.save_now()
