"""``ConfigSync``: a SLAVE copies its master's tables every ``ha_config_sync_interval_ms``, as
RocketMQ's ``SlaveSynchronize.syncAll`` does, over the master's remoting port:
``GET_ALL_TOPIC_CONFIG`` (21), ``GET_ALL_CONSUMER_OFFSET`` (43), ``GET_ALL_DELAY_OFFSET`` (45)
and ``GET_ALL_SUBSCRIPTIONGROUP_CONFIG`` (201).

What each round does with the answers (``SyncTables.apply_*``), RocketMQ's rules:

* topics the slave lacks are added (a topic the master deleted stays on the slave);
* every offset the master holds replaces the slave's (``putAll``): an offset a consumer
  committed on the slave while the master was gone is kept until the master's table names
  the same queue again; the broker never sends it back (the 4.x client commits to the master
  again from its own memory once the master is back);
* the delay offsets replace ``config/delayOffset.json``;
* groups the master has are updated to the master's settings.

A master that cannot be reached or refuses (``NO_PERMISSION``: with auth on, the calls are a
super user's: ``ha_sync_user`` names one of this broker's users file) is logged once per
change of reason, and tried again next round.

Does not own: the files' formats (``config_files``), the tables (topics, groups, settings).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmq_spark.broker.config_files.rocketmq_config import (
    decode_consumer_offsets,
    decode_delay_offsets,
    decode_subscription_groups,
    decode_topics,
)
from rmq_spark.broker.config_files.rocketmq_config_files import (
    read_delay_offsets,
    write_delay_offsets,
)
from rmq_spark.broker.remoting.codec import RemotingCommand
from rmq_spark.broker.remoting.codes import RequestCode, ResponseCode
from rmq_spark.broker.remoting.gate import signed_command
from rmq_spark.broker.remoting.namesrv_client import NamesrvConnection
from rmq_spark.errors import RemotingFrameError, RmqError

__all__ = ["ConfigSync", "SyncTables"]

log = logging.getLogger("rmq_spark.broker.replication")
_CALL_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class SyncTables:
    """The slave's tables a sync writes into: the topic table, the consumer groups' offsets,
    the groups' settings and the store root (``config/delayOffset.json``)."""

    topics: Any  # broker.topics.TopicTable
    groups: Any  # consumer.groups.ConsumerGroups
    settings: Any  # consumer.ports.GroupSettingsSource
    root: Path

    def apply_topics(self, text: str) -> int:
        added = 0
        for topic, config in decode_topics(text, "the master's topics")[0].items():
            if self.topics.queue_count(topic) is None:
                count = max(config.read_queue_nums, config.write_queue_nums, 1)
                added += bool(self.topics.add_internal(topic, count))
        return added

    def apply_offsets(self, text: str) -> int:
        changed = 0
        table, _ = decode_consumer_offsets(text, "the master's consumer offsets")
        for (topic, group), queues in table.items():
            for queue_id, offset in queues.items():
                if self.groups.committed_offset(group, topic, queue_id) != offset:
                    self.groups.set_committed(group, topic, queue_id, offset)
                    changed += 1
        return changed

    def apply_delay_offsets(self, text: str) -> int:
        table, _ = decode_delay_offsets(text, "the master's delay offsets")
        if (read_delay_offsets(self.root) or {}) == table:
            return 0
        write_delay_offsets(self.root, table)
        return len(table)

    def apply_groups(self, text: str) -> int:
        changed = 0
        mine = self.settings.snapshot()
        for name, theirs in decode_subscription_groups(text, "the master's groups")[0].items():
            if mine.get(name) != theirs:
                self.settings.update(
                    name,
                    retry_max_times=theirs.retry_max_times,
                    fifo=theirs.fifo,
                    consume_enable=theirs.consume_enable,
                )
                changed += 1
        return changed


_CALLS = (
    (RequestCode.GET_ALL_TOPIC_CONFIG, "topics", SyncTables.apply_topics),
    (RequestCode.GET_ALL_CONSUMER_OFFSET, "consumer offsets", SyncTables.apply_offsets),
    (RequestCode.GET_ALL_DELAY_OFFSET, "delay offsets", SyncTables.apply_delay_offsets),
    (RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, "subscription groups", SyncTables.apply_groups),
)


class ConfigSync:
    """Copies the master's tables into ``tables`` every ``interval_s`` (see the module
    docstring); ``credentials`` (access key, secret key) sign the calls."""

    def __init__(
        self,
        master: tuple[str, int],
        tables: SyncTables,
        interval_s: float,
        credentials: tuple[str, str] | None = None,
    ) -> None:
        self._master = master
        self._tables = tables
        self._interval_s = interval_s
        self._credentials = credentials
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ha-config-sync", daemon=True)
        self.rounds = 0  # completed rounds (every table copied)
        self.problem: str | None = None

    def start(self) -> ConfigSync:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=_CALL_TIMEOUT_S + 1)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                changed = asyncio.run(self.sync_once())
                problem = None
                self.rounds += 1
                if changed or self.rounds == 1:
                    log.info("replication: config sync from %s:%d: %s", *self._master,
                             changed or "in step")  # fmt: skip
            except (OSError, TimeoutError, RemotingFrameError, RmqError, ValueError) as err:
                problem = f"{type(err).__name__}: {err}"
            if problem != self.problem:
                if problem is not None:
                    log.warning(
                        "replication: config sync from %s:%d failed: %s; retrying every %.0f s",
                        *self._master,
                        problem,
                        self._interval_s,
                    )
                self.problem = problem
            self._stop.wait(self._interval_s)

    async def sync_once(self) -> str:
        """One round: every table; a summary of what changed ("" when nothing)."""
        conn = NamesrvConnection(*self._master)
        changes = []
        try:
            for code, what, apply in _CALLS:
                answer = await conn.call(self._request(code), _CALL_TIMEOUT_S)
                if answer.code != ResponseCode.SUCCESS:
                    raise ValueError(f"{what}: code {answer.code}: {answer.remark or ''}")
                text = (answer.body or b"").decode("utf-8")
                count = await asyncio.to_thread(apply, self._tables, text)
                if count:
                    changes.append(f"{count} {what}")
        finally:
            await conn.close()
        return ", ".join(changes)

    def _request(self, code: int) -> RemotingCommand:
        return signed_command(code, {}, self._credentials)
