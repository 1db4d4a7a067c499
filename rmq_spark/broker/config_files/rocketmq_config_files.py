"""RocketMQ's config files under ``<store>/config/``, read and written durably.

Owns where the files are and how they are replaced, as a 5.x broker's ``ConfigManager``
does: the previous content is kept in ``<file>.bak``, the new content replaces the file
atomically (``write_file_atomically``), and a reader falls back to ``.bak`` when the file is
missing, empty or unparsable. Each write bumps the file's ``dataVersion``. A file that cannot
be read (and no usable backup) raises ``StoreMetadataError`` naming it; a refused write
raises ``StoreIOError``.

* ``read_topics`` / ``write_topics``: ``topics.json`` (``TopicTable.use_config_file`` keeps
  it current, so a RocketMQ broker started on a copy of the store routes every topic);
* ``read_consumer_offsets`` / ``write_consumer_offsets``: ``consumerOffset.json``;
* ``SubscriptionGroups``: ``subscriptionGroup.json`` as a table (retry max, FIFO);
* ``read_delay_offsets`` / ``write_delay_offsets``: ``delayOffset.json`` (the schedule job,
  ``rmq_spark.delay.progress``, decides when, under its lock).

The formats themselves are in ``rocketmq_config.py``.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from rmq_spark.broker.config_files.rocketmq_config import (
    DataVersion,
    GroupSettings,
    TopicConfig,
    decode_consumer_offsets,
    decode_delay_offsets,
    decode_subscription_groups,
    decode_topics,
    encode_consumer_offsets,
    encode_delay_offsets,
    encode_subscription_groups,
    encode_topics,
)
from rmq_spark.clock import Clock, SystemClock
from rmq_spark.errors import StoreIOError, StoreMetadataError
from rmq_spark.store.fileio import make_dirs_durably, write_file_atomically

__all__ = [
    "CONFIG_DIR",
    "CONSUMER_OFFSET_FILE",
    "DELAY_OFFSET_FILE",
    "SUBSCRIPTION_GROUP_FILE",
    "SubscriptionGroups",
    "TOPICS_FILE",
    "config_path",
    "read_consumer_offsets",
    "read_delay_offsets",
    "read_topics",
    "read_topics_versioned",
    "write_consumer_offsets",
    "write_delay_offsets",
    "write_topics",
]

log = logging.getLogger("rmq_spark.broker")

CONFIG_DIR = "config"
TOPICS_FILE = "topics.json"
SUBSCRIPTION_GROUP_FILE = "subscriptionGroup.json"
CONSUMER_OFFSET_FILE = "consumerOffset.json"
DELAY_OFFSET_FILE = "delayOffset.json"

T = TypeVar("T")


def config_path(root: Path, name: str) -> Path:
    """``<root>/config/<name>``: where a RocketMQ broker with this store root keeps it."""
    return Path(root) / CONFIG_DIR / name


def _bak(path: Path) -> Path:
    return path.with_name(path.name + ".bak")


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as err:
        raise StoreMetadataError(str(path), f"cannot read: {err}") from err


def _load(path: Path, decode: Callable[[str, str], T]) -> T | None:
    """The file decoded, else its ``.bak``; ``None`` when neither has content.

    As ``ConfigManager.load``: an unparsable file falls back to the backup; only when the
    backup cannot be used either is the file's own error raised.
    """
    text = _read_text(path)
    if text is not None and text.strip():
        try:
            return decode(text, str(path))
        except StoreMetadataError as err:
            backup = _read_text(_bak(path))
            if backup is None or not backup.strip():
                raise
            log.warning("%s; loading %s instead", err, _bak(path))
            return decode(backup, str(_bak(path)))
    backup = _read_text(_bak(path))
    if backup is not None and backup.strip():
        return decode(backup, str(_bak(path)))
    return None


def _store(path: Path, text: str) -> None:
    """Keep the old content in ``.bak``, then replace the file atomically."""
    try:
        make_dirs_durably(path.parent)
        previous = _read_text(path)
        if previous is not None and previous.strip():
            write_file_atomically(_bak(path), previous.encode("utf-8"))
        write_file_atomically(path, text.encode("utf-8"))
    except OSError as err:
        raise StoreIOError(f"{path}: cannot write: {err}") from err


def _next_version(
    path: Path, version_of: Callable[[str, str], DataVersion | None], now_ms: int
) -> DataVersion:
    """The data version after the one in the current file (counter 1 without a readable one)."""
    text = _read_text(path)
    previous = None
    if text is not None and text.strip():
        try:
            previous = version_of(text, str(path))
        except StoreMetadataError:
            previous = None  # the file is being replaced; its counter is lost with it
    return (previous or DataVersion()).next(now_ms)


# --- topics.json ------------------------------------------------------------------------------


def read_topics(root: Path) -> dict[str, TopicConfig]:
    """Topic name -> config from ``<root>/config/topics.json`` (empty when absent)."""
    return read_topics_versioned(root)[0]


def read_topics_versioned(root: Path) -> tuple[dict[str, TopicConfig], DataVersion | None]:
    """``read_topics`` and the file's data version (``None``: no file or no version)."""
    loaded = _load(config_path(root, TOPICS_FILE), decode_topics)
    return loaded if loaded is not None else ({}, None)


def write_topics(
    root: Path,
    topics: Mapping[str, TopicConfig],
    *,
    clock: Clock | None = None,
    version: DataVersion | None = None,
) -> DataVersion:
    """Replace ``<root>/config/topics.json`` with ``topics``; the data version written.

    ``version`` is the one written last (its successor is written); without it the file is
    read for it. A writer that keeps it saves parsing the whole file on every write.
    """
    path = config_path(root, TOPICS_FILE)
    now_ms = (clock or SystemClock()).now_ms()
    if version is None:
        version = _next_version(path, lambda text, src: decode_topics(text, src)[1], now_ms)
    else:
        version = version.next(now_ms)
    _store(path, encode_topics(topics, version))
    return version


# --- consumerOffset.json ----------------------------------------------------------------------


def read_consumer_offsets(root: Path) -> dict[tuple[str, str], dict[int, int]]:
    """``(topic, group)`` -> queue id -> offset from ``<root>/config/consumerOffset.json``."""
    loaded = _load(config_path(root, CONSUMER_OFFSET_FILE), decode_consumer_offsets)
    return loaded[0] if loaded is not None else {}


def write_consumer_offsets(
    root: Path,
    table: Mapping[tuple[str, str], Mapping[int, int]],
    *,
    clock: Clock | None = None,
) -> None:
    """Replace ``<root>/config/consumerOffset.json`` with ``table`` (durable on return)."""
    path = config_path(root, CONSUMER_OFFSET_FILE)
    now_ms = (clock or SystemClock()).now_ms()
    version = _next_version(path, lambda text, src: decode_consumer_offsets(text, src)[1], now_ms)
    _store(path, encode_consumer_offsets(table, version))


# --- delayOffset.json ------------------------------------------------------------------------


def read_delay_offsets(root: Path) -> dict[int, int] | None:
    """Delay level -> next offset of ``SCHEDULE_TOPIC_XXXX`` from
    ``<root>/config/delayOffset.json`` (or its ``.bak``); ``None`` when neither has content."""
    loaded = _load(config_path(root, DELAY_OFFSET_FILE), decode_delay_offsets)
    return loaded[0] if loaded is not None else None


def write_delay_offsets(
    root: Path, table: Mapping[int, int], *, clock: Clock | None = None
) -> None:
    """Replace ``<root>/config/delayOffset.json`` with ``table`` (durable on return)."""
    path = config_path(root, DELAY_OFFSET_FILE)
    now_ms = (clock or SystemClock()).now_ms()
    version = _next_version(path, lambda text, src: decode_delay_offsets(text, src)[1], now_ms)
    _store(path, encode_delay_offsets(table, version))


# --- subscriptionGroup.json -------------------------------------------------------------------


class SubscriptionGroups:
    """The consumer groups' settings, persisted in ``<root>/config/subscriptionGroup.json``.

    ``get`` answers RocketMQ's defaults (16 retries, not FIFO) for a group never updated.
    Groups and fields a RocketMQ broker wrote are kept. Thread-safe.
    """

    def __init__(self, root: Path, *, clock: Clock | None = None) -> None:
        self._path = config_path(root, SUBSCRIPTION_GROUP_FILE)
        self._clock = clock or SystemClock()
        self._lock = threading.Lock()
        loaded = _load(self._path, decode_subscription_groups)
        self._groups: dict[str, GroupSettings] = {}
        self._version: DataVersion | None = None
        self._forbidden: dict[str, Any] = {}
        if loaded is not None:
            self._groups, self._version, self._forbidden = loaded

    @property
    def path(self) -> Path:
        return self._path

    def get(self, group: str) -> GroupSettings:
        """The settings of ``group`` (RocketMQ's defaults when it has none)."""
        with self._lock:
            return self._groups.get(group) or GroupSettings()

    def snapshot(self) -> dict[str, GroupSettings]:
        """Group -> settings, for every group with a stored entry."""
        with self._lock:
            return dict(self._groups)

    def document(self) -> str:
        """The file's text as it stands (``subscriptionGroupTable`` and ``dataVersion``), what
        a RocketMQ broker answers ``GET_ALL_SUBSCRIPTIONGROUP_CONFIG`` with."""
        with self._lock:
            groups, version, forbidden = self._groups, self._version, self._forbidden
        return encode_subscription_groups(groups, version or DataVersion(), forbidden)

    def update(
        self,
        group: str,
        *,
        retry_max_times: int | None = None,
        fifo: bool | None = None,
        consume_enable: bool | None = None,
    ) -> GroupSettings:
        """Change the given settings of ``group`` (creating it) and persist the file."""
        if retry_max_times is not None and retry_max_times < 0:
            raise ValueError(f"retry_max_times must be >= 0, got {retry_max_times}")
        with self._lock:
            current = self._groups.get(group) or GroupSettings()
            changes: dict[str, Any] = {}
            if retry_max_times is not None:
                changes["retry_max_times"] = retry_max_times
            if fifo is not None:
                changes["fifo"] = fifo
            if consume_enable is not None:
                changes["consume_enable"] = consume_enable
            updated = dataclasses.replace(current, **changes)
            groups = {**self._groups, group: updated}
            version = (self._version or DataVersion()).next(self._clock.now_ms())
            _store(self._path, encode_subscription_groups(groups, version, self._forbidden))
            self._groups, self._version = groups, version
            return updated
