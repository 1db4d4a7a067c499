"""One broker, built once: ``open_broker`` opens the store and assembles the service, the topic
table and the consume service over it; ``OpenBroker.close`` takes them apart in one order.

The broker process (``server.run_broker``) and the embedded broker (``embedded.Broker``) both
start here, so their start-up and teardown orders cannot drift. Each adds its network parts
on top: ``fronts`` (the gRPC endpoint, the metrics endpoint) and ``announcers`` (name-server
registrations), and ``close`` stops them at the right moment:

1. the announcers stop (unregister first, as RocketMQ's broker does);
2. new sends and receives are refused (``SHUTTING_DOWN``);
3. the fronts stop, the last started first (in-flight calls get the grace);
4. the sends still running finish (up to ``shutdown_grace_ms``);
5. ``topics.json`` and the consumer offsets are saved, then the store is closed.

Does not own: what any part does; the process, its signals and ports (``server.py``).
"""

from __future__ import annotations

import logging
from contextlib import ExitStack
from types import TracebackType

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.consumer.ports import ConsumerWiring
from rmq_spark.broker.consumer.service import ConsumeService
from rmq_spark.broker.remoting.calls import Deps
from rmq_spark.broker.remoting.endpoint import RemotingEndpoint, remoting_bind
from rmq_spark.broker.replication.config_sync import SyncTables
from rmq_spark.broker.replication.node import Replication, ha_bind
from rmq_spark.broker.security.tls import TlsFiles
from rmq_spark.broker.service import BrokerService
from rmq_spark.clock import Clock
from rmq_spark.errors import BrokerError, StoreLockedError
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message_store import MessageStore

__all__ = ["OpenBroker", "open_broker", "open_remoting", "open_store"]

_log = logging.getLogger("rmq_spark.broker")


def open_store(store_config: StoreConfig, clock: Clock) -> MessageStore:
    """Open the MessageStore, turning "locked by another process" into a clear BrokerError."""
    try:
        return MessageStore.open(store_config, clock=clock)
    except StoreLockedError as err:
        raise BrokerError(
            f"store {store_config.root_dir} is in use by another process "
            f"(its lock file is held): {err}"
        ) from err


class OpenBroker:
    """The parts of one open broker; a context manager (``close`` on exit)."""

    def __init__(
        self,
        store: MessageStore,
        service: BrokerService,
        consume: ConsumeService,
        core: ExitStack,
    ) -> None:
        self.store = store
        self.service = service
        self.consume = consume
        self.replication: Replication = service.replication or Replication(service.config, store)
        self.fronts = ExitStack()  # network parts: stopped after new work is refused
        self.announcers = ExitStack()  # name-server registrations: stopped first
        self.idle = True  # False when sends were still running at the close's deadline
        self._core = core
        self._closed = False

    def begin_shutdown(self) -> None:
        """Refuse new sends and receives; the ones in progress finish."""
        self.service.begin_shutdown()
        self.consume.begin_shutdown()

    def close(self) -> None:
        """Stop everything in the order of the module's docstring; idempotent."""
        if self._closed:
            return
        self._closed = True
        with self._core:  # closed whatever happens above
            self.announcers.close()
            self.begin_shutdown()
            self.fronts.close()
            grace_s = self.service.config.shutdown_grace_ms / 1000
            self.idle = self.service.wait_idle(grace_s)

    def __enter__(self) -> OpenBroker:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def open_broker(
    store_config: StoreConfig,
    broker_config: BrokerConfig,
    clock: Clock,
    *,
    consumer_wiring: ConsumerWiring | None = None,
) -> OpenBroker:
    """Open the store at ``store_config.root_dir`` and assemble the broker over it.

    Raises
    ------
    BrokerError
        The store is used by another process. Whatever was opened is closed again.
    """
    core = ExitStack()
    try:
        store = open_store(store_config, clock)
        core.callback(store.close)
        service = BrokerService(
            store,
            broker_config,
            clock=clock,
            max_message_size_bytes=store_config.max_message_size_bytes,
        )
        service.topics.use_config_file(  # topics.json, with the topics the log holds
            store_config.root_dir, clock=clock, seen=store.queue_offsets()
        )
        consume = ConsumeService(service, store, clock=clock, wiring=consumer_wiring)
        core.callback(consume.close)  # saves the consumer offsets
        core.callback(service.topics.close)  # topics.json holds every topic
        service.serve_send_backs(consume)
        tables = SyncTables(
            service.topics, consume.groups, consume.group_settings, store_config.root_dir
        )
        service.replication = replication = Replication(broker_config, store, tables)
        core.callback(replication.stop)  # before the store closes (LIFO)
    except BaseException:
        core.close()
        raise
    return OpenBroker(store, service, consume, core)


def open_remoting(
    broker: OpenBroker, config: BrokerConfig, tls: TlsFiles | None, grpc_port: int
) -> RemotingEndpoint | None:
    """Serve RocketMQ's remoting protocol over ``broker`` on ``config.remoting_listen`` (one of
    its ``fronts``); ``None`` when that is empty. ``grpc_port``: the bound gRPC port (``auto``
    listens next to it)."""
    where = remoting_bind(config, grpc_port)
    if where is None:
        return None
    deps = Deps(broker.service, broker.store, config, broker.consume)
    endpoint = RemotingEndpoint(deps, tls, *where).start()
    broker.fronts.callback(endpoint.stop)
    if ha_bind(config, grpc_port) is not None and endpoint.port > 2:
        _open_vip_channel(broker, deps, tls, where[0], endpoint.port - 2)
    return endpoint


def _open_vip_channel(
    broker: OpenBroker, deps: Deps, tls: TlsFiles | None, host: str, port: int
) -> None:
    """A master with an HA port also serves remoting on RocketMQ's VIP channel, the remoting
    port - 2: a RocketMQ slave's config sync (``SlaveSynchronize``: topics, offsets, groups)
    calls its master there (``MixAll.brokerVIPChannel``). Same handlers and auth; a port
    that cannot be bound is logged and skipped."""
    try:
        vip = RemotingEndpoint(deps, tls, host, port, False).start()
    except (BrokerError, OSError) as err:
        _log.warning("broker: no remoting on the VIP channel %s:%d (RocketMQ slaves sync their "
                     "tables there): %s", host, port, err)  # fmt: skip
        return
    broker.fronts.callback(vip.stop)
