"""``Replication``: one broker's part in a master/slave pair, by ``broker.role``.

Owns what the role means to the rest of the broker: a SLAVE refuses sends (``refusal``) and
runs the ``HaClient``; a master serves its HA port (``HaServer``) and a SYNC_MASTER holds each
stored send until a slave confirmed it (``confirm``/``confirm_async``, ``SlaveAcks``); both
sides log their lag at INFO every ``ha_lag_log_interval_ms`` and expose it (``lag``).

Does not own: the wire (``wire.py``), the append rules (``store/replica_log.py``), the send
path itself (``broker/service.py`` calls in here, in one place for every front).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from pathlib import Path

from rmq_spark.broker.config import BrokerConfig, parse_listen
from rmq_spark.broker.replication.acks import Lag, SlaveAcks
from rmq_spark.broker.replication.config_sync import ConfigSync, SyncTables
from rmq_spark.broker.replication.master import HaServer
from rmq_spark.broker.replication.slave import HaClient
from rmq_spark.broker.security.acl import load_users
from rmq_spark.broker.send_model import SendCode, SendOutcome, reject
from rmq_spark.errors import ConfigError
from rmq_spark.store.message_store import MessageStore

__all__ = ["Replication", "ha_bind", "master_remoting", "sync_credentials"]

log = logging.getLogger("rmq_spark.broker.replication")
_OK = SendCode.OK


def ha_bind(config: BrokerConfig, grpc_port: int) -> tuple[str, int, bool] | None:
    """``(host, port, fallback)`` of the HA port, ``None`` when there is none: a SLAVE, ``""``,
    or ``auto`` on anything but a SYNC_MASTER without auth. The HA protocol has no auth and
    serves the whole log, so a broker opens that port only when it needs slaves (SYNC_MASTER)
    or is told to (an address; an ASYNC_MASTER with slaves names one)."""
    text = config.ha_listen.strip()
    if config.role == "SLAVE" or not text:
        return None
    if text == "auto":
        if config.auth_enabled or config.role != "SYNC_MASTER":
            return None
        return "127.0.0.1", grpc_port + 1 if 0 < grpc_port < 65535 else 0, True
    host, port = parse_listen(text)
    return host, port, False


def master_remoting(config: BrokerConfig) -> tuple[str, int] | None:
    """A SLAVE's master remoting address (its tables are copied from there); ``auto``: the
    HA port - 2, where a master with the default ports (gRPC P, remoting P - 1, HA P + 1)
    serves it; ``None`` for a master or ``""``."""
    text = config.ha_master_remoting.strip()
    if config.role != "SLAVE" or not text:
        return None
    if text == "auto":
        host, port = parse_listen(config.ha_master)
        return (host, port - 2) if port > 2 else None
    return parse_listen(text)


def sync_credentials(config: BrokerConfig) -> tuple[str, str] | None:
    """(access key, secret key) of ``ha_sync_user`` in the users file; ``None`` when unset.

    Raises
    ------
    ConfigError
        The users file cannot be read, or names no such super user.
    """
    if not config.ha_sync_user:
        return None
    user = load_users(Path(config.auth_users_file)).get(config.ha_sync_user)
    if user is None or not user.super_user:
        raise ConfigError(
            "broker.ha_sync_user",
            f"{config.ha_sync_user!r} is not a super user of {config.auth_users_file} (the "
            f"master answers the config sync to super users only)",
        )
    return user.name, user.secret_key


class Replication:
    """The role of one broker over ``store`` (see the module docstring)."""

    def __init__(
        self, config: BrokerConfig, store: MessageStore, tables: SyncTables | None = None
    ) -> None:
        self.config = config
        self._tables = tables
        self.role = config.role
        self._store = store
        self._sync = config.role == "SYNC_MASTER"
        self.acks = SlaveAcks(config.ha_slave_timeout_ms / 1000)
        self.server: HaServer | None = None
        self.client: HaClient | None = None
        self.config_sync: ConfigSync | None = None
        self._stop = threading.Event()
        self._logger: threading.Thread | None = None

    @property
    def is_slave(self) -> bool:
        return self.role == "SLAVE"

    @property
    def broker_id(self) -> int:
        """The name-server brokerId: 0 for a master, > 0 for a slave."""
        return (self.config.broker_id or 1) if self.is_slave else 0

    def start(self, grpc_port: int, loop: asyncio.AbstractEventLoop) -> Replication:
        """Open the HA port on ``loop``, the broker's serving loop (master), or start
        replicating (slave)."""
        if self.is_slave:
            self.config_sync = self._start_config_sync()  # a bad ha_sync_user stops here
            self.client = HaClient(self._store, self.config.ha_master).start()
        else:
            where = ha_bind(self.config, grpc_port)
            if where is not None:
                batch = self.config.ha_transfer_batch_bytes
                self.server = HaServer(self._store, self.acks, batch, where).start(loop)
                log.info("replication: %s, HA port %s", self.role, self.server.address)
        self._logger = threading.Thread(target=self._log_lag, name="ha-lag", daemon=True)
        self._logger.start()
        return self

    def _start_config_sync(self) -> ConfigSync | None:
        master = master_remoting(self.config)
        if master is None or self._tables is None:
            return None
        interval = self.config.ha_config_sync_interval_ms / 1000
        return ConfigSync(master, self._tables, interval, sync_credentials(self.config)).start()

    def stop(self) -> None:
        self._stop.set()
        if self.config_sync is not None:
            self.config_sync.stop()
        if self.client is not None:
            self.client.stop()
        if self.server is not None:
            self.server.stop()
        self.acks.release_all()

    # --- the send path ----------------------------------------------------------------------

    def refusal(self, message_id: str) -> SendOutcome | None:
        """A SLAVE's answer to a send (RocketMQ 5 rejects it: SYSTEM_BUSY); else ``None``."""
        if not self.is_slave:
            return None
        return reject(
            SendCode.NOT_MASTER,
            f"[REJECTREQUEST] this broker is a SLAVE of {self.config.ha_master}: send to its "
            f"master",
            message_id,
        )

    def confirm(self, outcome: SendOutcome, end: int) -> SendOutcome:
        """SYNC_MASTER: ``outcome`` once a slave has everything below ``end``, or the status
        saying why not (the message is stored on the master either way)."""
        if not self._sync or not outcome.ok:
            return outcome
        return self._outcome(outcome, self.acks.wait(end), end)

    async def confirm_async(self, outcome: SendOutcome, end: int) -> SendOutcome:
        """``confirm`` for a coroutine (the loop stays free while it waits)."""
        if not self._sync or not outcome.ok:
            return outcome
        return self._outcome(outcome, await self.acks.wait_async(end), end)

    def _outcome(self, outcome: SendOutcome, code: SendCode, end: int) -> SendOutcome:
        if code is _OK:
            return outcome
        if code is SendCode.SLAVE_NOT_AVAILABLE:
            why = "no slave connected (or too far behind)"
        else:
            why = f"no slave confirmed offset {end} within {self.config.ha_slave_timeout_ms} ms"
        reason = f"{code.name}: {why}; the message is stored on the master"
        return dataclasses.replace(outcome, code=code, reason=reason)

    # --- status -----------------------------------------------------------------------------

    def lag(self) -> Lag:
        """Replication lag in bytes and seconds, as this side sees it."""
        if self.client is not None:
            return self.client.lag()
        return self.acks.lag(self._store.max_offset)

    def _log_lag(self) -> None:
        interval = self.config.ha_lag_log_interval_ms / 1000
        while not self._stop.wait(interval):
            lag = self.lag()
            if self.client is not None and self.client.refused:
                log.error("replication: refused: %s", self.client.refused)
                continue
            log.info(
                "replication: %s, %d peer(s) connected, confirmed offset %d, lag %d bytes "
                "(%.1f s)",
                self.role, lag.connections, lag.acked_offset, lag.bytes, lag.seconds,
            )  # fmt: skip
