"""The broker in-process: ``Broker(store_dir)`` puts messages into a store with broker rules.

Owns opening/closing the store, the put service and the consume service for code that runs
next to the store (jobs, notebooks, tests), and optionally serving gRPC from the same process
(``listen=``) so the official clients can produce and consume too. Does not own the rules of a
send (``service.py``) or of a receive (``consumer/service.py``).

Examples
--------
>>> with Broker(tmp_path / "store") as broker:            # doctest: +SKIP
...     outcome = broker.send("orders", b"hello", tag="TagA", keys=("order-1",))
...     assert outcome.ok
...     with broker.consumer("billing", "orders") as consumer:
...         for message in consumer.receive(wait_ms=1000):
...             consumer.ack(message)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from rmq_spark.broker.assembly import open_broker, open_remoting
from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.consumer.ports import ConsumerWiring
from rmq_spark.broker.consumer.service import ConsumeService
from rmq_spark.broker.consumer_client import Consumer
from rmq_spark.broker.message_id import MessageIdGenerator
from rmq_spark.broker.remoting.endpoint import RemotingEndpoint
from rmq_spark.broker.server import GrpcEndpoint
from rmq_spark.broker.service import BrokerService, MessageKind, SendCommand, SendOutcome
from rmq_spark.clock import Clock, SystemClock
from rmq_spark.errors import BrokerError
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message_store import MessageStore

__all__ = ["Broker"]


class Broker:
    """A broker over the store at ``store_dir``, in this process; a context manager.

    Parameters
    ----------
    store_dir
        Store root directory (created if missing). Overrides ``store_config.root_dir``.
    broker_config, store_config
        Sections of the configuration; defaults when omitted.
    clock
        Clock for the store and the delay checks (``ManualClock`` in tests).
    listen
        ``host:port`` to also serve gRPC on (``127.0.0.1:0`` picks a free port; see
        ``address``). ``None`` (default): no network at all.
    consumer_wiring
        The consume path's ConsumeQueue, filters, group settings and offsets file
        (``consumer/ports.py``; default: the store's own, ``consumer/wiring.py``).

    Raises
    ------
    BrokerError
        The store is used by another process, or the port is taken.
    """

    def __init__(
        self,
        store_dir: str | Path,
        *,
        broker_config: BrokerConfig | None = None,
        store_config: StoreConfig | None = None,
        clock: Clock | None = None,
        listen: str | None = None,
        consumer_wiring: ConsumerWiring | None = None,
    ) -> None:
        self._clock = clock or SystemClock()
        self._broker_config = broker_config or BrokerConfig()
        if listen is not None:
            self._broker_config = dataclasses.replace(self._broker_config, listen=listen)
        store_config = dataclasses.replace(store_config or StoreConfig(), root_dir=Path(store_dir))
        self._parts = open_broker(
            store_config, self._broker_config, self._clock, consumer_wiring=consumer_wiring
        )
        self.store: MessageStore = self._parts.store
        self.service: BrokerService = self._parts.service
        self.consume: ConsumeService = self._parts.consume
        self._ids = MessageIdGenerator(self._clock)
        self._endpoint: GrpcEndpoint | None = None
        self.remoting: RemotingEndpoint | None = None  # RocketMQ 4.x clients, with listen=
        self._closed = False
        if listen is not None:
            try:
                endpoint = GrpcEndpoint(self.service, self._broker_config, self.consume).start()
                self._parts.fronts.callback(endpoint.stop)
                self._endpoint = endpoint
                self.remoting = open_remoting(self._parts, self._broker_config, None, endpoint.port)
            except BaseException:
                self._parts.close()
                raise

    @property
    def address(self) -> str:
        """``host:port`` of the gRPC endpoint (only when started with ``listen=``)."""
        if self._endpoint is None:
            raise BrokerError("this embedded broker was started without listen=; no address")
        return self._endpoint.address

    def send(
        self,
        topic: str,
        body: bytes,
        *,
        tag: str | None = None,
        keys: tuple[str, ...] | list[str] = (),
        properties: Mapping[str, str] | None = None,
        message_group: str | None = None,
        delivery_timestamp_ms: int | None = None,
        message_id: str | None = None,
        delay_level: int | None = None,
    ) -> SendOutcome:
        """Store one message exactly as a gRPC ``SendMessage`` would.

        Returns
        -------
        SendOutcome
            ``outcome.ok`` once the store acknowledged it; otherwise ``outcome.code`` and
            ``outcome.reason`` say why (same codes as the gRPC path). Reusing a
            ``message_id`` for the same topic stores nothing new (``outcome.duplicate``).
        """
        if self._closed:
            raise BrokerError("the embedded broker is closed")
        kind = MessageKind.NORMAL
        if message_group is not None:
            kind = MessageKind.FIFO
        elif delivery_timestamp_ms is not None:
            kind = MessageKind.DELAY
        command = SendCommand(
            topic=topic,
            body=bytes(body),
            message_id=message_id or self._ids.next_id(),
            kind=kind,
            tag=tag,
            keys=tuple(keys),
            user_properties=dict(properties or {}),
            message_group=message_group,
            delivery_timestamp_ms=delivery_timestamp_ms,
            born_timestamp_ms=self._clock.now_ms(),
            delay_level=delay_level,
        )
        return self.service.send(command)

    def consumer(
        self, group: str, topic: str, expression: str = "*", *, filter_kind: str = "TAG"
    ) -> Consumer:
        """A consumer of ``topic`` in ``group`` over this broker, in-process (no gRPC)."""
        if self._closed:
            raise BrokerError("the embedded broker is closed")
        return Consumer(self, group, topic, expression, filter_kind=filter_kind)

    def close(self) -> None:
        """Refuse new sends and receives, stop serving, let in-flight sends finish, save the
        consumer groups' progress, close the store (``assembly.OpenBroker.close``)."""
        self._closed = True
        self._parts.close()

    def __enter__(self) -> Broker:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
