"""Consumer progress on disk: ``config/consumerOffset.json`` plus our in-flight file.

``consumerOffset.json`` is RocketMQ's (``topic@group`` -> queue -> committed offset), written
through the wiring's ``write_offsets``. ``config/consumerInflight.json`` is ours: per queue, the
offsets acknowledged above the committed one and the attempts already made of each message
in flight, so that after a restart acknowledged messages stay acknowledged and attempts keep
counting towards the DLQ. Each file is replaced atomically; the two are written in an order
that needs no transaction (either file alone describes a safe state: see ``save``).

``ProgressSaver`` writes both every ``interval_s`` when something changed, and once more on
``close``.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path

from rmq_spark.broker.consumer.ports import ConsumerWiring
from rmq_spark.errors import StoreMetadataError
from rmq_spark.store.fileio import make_dirs_durably, write_file_atomically

__all__ = ["INFLIGHT_FILE", "ProgressFiles", "ProgressSaver"]

log = logging.getLogger("rmq_spark.broker")

INFLIGHT_FILE = Path("config") / "consumerInflight.json"

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
