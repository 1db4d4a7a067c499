"""BrokerConfig: the ``[broker]`` config section (listen address, topics, limits, timer).

Owns the broker's settings and their validation only. The store's own settings (root
directory, flush policy, segment size) are ``store/config.py: StoreConfig``; the gRPC wire
details derived from these values (receive limit, Telemetry settings) live in ``grpc_api.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["BrokerConfig", "ROLES", "parse_listen", "parse_namesrv_addr", "parse_topic_spec"]

_TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")
_TOPIC_LENGTH_MAX = 127
_QUEUE_COUNT_MAX = 1024
_MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    listen: str = "127.0.0.1:8081"  # host:port the gRPC server binds (port 0: any free port)
    remoting_listen: str = "auto"  # remoting host:port; auto: the gRPC port - 1; "": off
    advertised_host: str = ""  # host put in routes for clients; empty: the listen host
    broker_name: str = "broker-a"  # broker name in the routes clients receive
    cluster_name: str = "DefaultCluster"  # stored as the CLUSTER property of every message
    auto_create_topics: bool = True  # unknown topics are created on first route/send
    default_queue_count: int = 8  # queues of an auto-created topic (RocketMQ default 8)
    auto_create_topics_per_s: float = 10.0  # topics one client address may create a second; 0: any
    auto_create_topics_burst: int = 100  # topics one client address may create at once
    topics: tuple[str, ...] = ()  # topics that exist from the start: "name" or "name:queues"
    # gRPC inbound limit; raised to store.max_message_size_bytes + 1 MiB if lower (Java: 130 MiB)
    grpc_receive_limit_bytes: int = 130 * _MIB
    user_property_count_max: int = 128  # user properties per message (Java proxy limit)
    user_properties_size_bytes_max: int = 16 * 1024  # total key+value bytes of user properties
    message_group_length_max: int = 64  # longest FIFO message group (Java proxy limit)
    delay_ms_max: int = 86_400_000  # furthest delivery time ahead (Java proxy: 1 day)
    timer_precision_ms: int = 1000  # TIMER_OUT_MS rounding step (RocketMQ timerPrecisionMs)
    send_max_attempts: int = 3  # send attempts the Telemetry settings tell clients to make
    # Transactions (docs/TRANSACTIONS.md): RocketMQ's check-back of pending half messages
    transaction_timeout_ms: int = 6000  # a half this old without commit/rollback is checked
    transaction_check_interval_ms: int = 30_000  # how often pending halves are scanned
    transaction_check_max: int = 15  # checks of one half before it is discarded
    transaction_check: str = "broker"  # who checks: broker (in process) or job (rmq-spark txcheck)
    auth_enabled: bool = False  # every RPC signed by a user of auth_users_file, ACL applies
    auth_users_file: str = ""  # TOML users and ACL policies (docs/BROKER.md); needed with auth
    auth_skew_ms: int = 900_000  # largest x-mq-date-time distance from the broker's clock
    grpc_worker_threads: int = 8  # threads for puts to a store without put_async (else: the loop)
    shutdown_grace_ms: int = 5000  # how long a stop waits for in-flight requests
    event_loop: str = "asyncio"  # the server's loop: asyncio, uvloop, auto (uvloop if installed)
    grpc_front: str = "auto"  # gRPC wire: native (native/front) if built, else python (grpc.aio)
    metrics_listen: str = ""  # Prometheus /metrics on host:port (127.0.0.1:9105); empty: off
    # TLS and resource limits (docs/BROKER.md, "TLS and resource limits")
    tls_mode: str = "permissive"  # permissive: TLS and plaintext on one port; enforcing; disabled
    tls_cert_file: str = ""  # PEM certificate chain; empty: self-signed in <store>/config/tls/
    tls_key_file: str = ""  # PEM private key of tls_cert_file
    max_connections: int = 1000  # client connections at once (front.py says who gives way)
    max_connections_per_address: int = 100  # connections from one client address (loopback too)
    handshake_timeout_ms: int = 10_000  # a connection without a whole call this long: closed
    connection_idle_timeout_ms: int = 300_000  # a connection without any call this long: closed
    keepalive_time_ms: int = 60_000  # ping a quiet client this often (finds dead peers)
    keepalive_timeout_ms: int = 20_000  # a ping unanswered this long: the connection is closed
    inflight_request_bytes_max: int = (
        256 * _MIB
    )  # request bytes booked at once (front); past it: RESOURCE_EXHAUSTED
    namesrv_addr: str = ""  # RocketMQ name servers to register with, "host:port;host:port"
    register_interval_ms: int = 30_000  # REGISTER_BROKER period (RocketMQ: 10000..60000)
    log_repeat_interval_ms: int = 10_000  # a repeated log line: once per interval, with a count
    # Replication (docs/REPLICATION.md): RocketMQ's master/slave HA protocol
    role: str = "ASYNC_MASTER"  # ASYNC_MASTER, SYNC_MASTER (ack after a slave has it), SLAVE
    broker_id: int = 0  # name-server brokerId: masters 0; a SLAVE's 0 means 1
    ha_listen: str = "auto"  # HA host:port; auto: SYNC_MASTER at 127.0.0.1:gRPC+1, no auth; "": off
    ha_allow_remote: bool = False  # let ha_listen bind a non-loopback host (HA has no auth)
    ha_master: str = ""  # SLAVE: the master's HA host:port
    ha_slave_timeout_ms: int = 3000  # SYNC_MASTER: longest wait for a slave (RocketMQ slaveTimeout)
    ha_transfer_batch_bytes: int = 32 * 1024  # largest chunk one transfer carries (RocketMQ 32 KiB)
    ha_lag_log_interval_ms: int = 30_000  # replication lag logged at INFO this often
    ha_master_remoting: str = "auto"  # SLAVE: master's remoting host:port; auto: ha_master port-2
    ha_config_sync_interval_ms: int = 5000  # SLAVE: copy the master's topics/offsets/groups
    ha_sync_user: str = ""  # SLAVE: a super user of auth_users_file signing the config sync
    slave_read_enable: bool = False  # master: suggest the slave to pullers far behind

    def __post_init__(self) -> None:
        from rmq_spark.eventloop import EVENT_LOOPS

        if self.event_loop not in EVENT_LOOPS:
            raise ValueError(
                f"event_loop: must be one of {', '.join(EVENT_LOOPS)}, got {self.event_loop!r}"
            )
        try:
            parse_listen(self.listen)
        except ValueError as err:
            raise ValueError(f"listen: {err}") from None
        if self.remoting_listen.strip() not in ("", "auto"):
            try:
                parse_listen(self.remoting_listen)
            except ValueError as err:
                raise ValueError(f"remoting_listen: {err}") from None
        if self.metrics_listen:
            try:
                parse_listen(self.metrics_listen)
            except ValueError as err:
                raise ValueError(f"metrics_listen: {err}") from None
        if not self.broker_name or "|" in self.broker_name:
            raise ValueError(
                f"broker_name: must be non-empty without '|', got {self.broker_name!r}"
            )
        if not 1 <= self.default_queue_count <= _QUEUE_COUNT_MAX:
            raise ValueError(
                f"default_queue_count: must be in [1, {_QUEUE_COUNT_MAX}], "
                f"got {self.default_queue_count}"
            )
        if not self.auto_create_topics_per_s >= 0:
            raise ValueError(
                f"auto_create_topics_per_s: must be >= 0, got {self.auto_create_topics_per_s}"
            )
        if self.auto_create_topics_burst < 1:
            raise ValueError(
                f"auto_create_topics_burst: must be >= 1, got {self.auto_create_topics_burst}"
            )
        for spec in self.topics:
            try:
                parse_topic_spec(spec, self.default_queue_count)
            except ValueError as err:
                raise ValueError(f"topics: {err}") from None
        if self.transaction_check not in ("broker", "job"):
            raise ValueError(
                f"transaction_check: must be broker or job, got {self.transaction_check!r}"
            )
        if self.auth_enabled and not self.auth_users_file:
            raise ValueError("auth_users_file: must name the users file when auth_enabled")
        if self.auth_skew_ms < 1000:
            raise ValueError(f"auth_skew_ms: must be >= 1000, got {self.auth_skew_ms}")
        if self.grpc_receive_limit_bytes < 1 * _MIB:
            raise ValueError(
                f"grpc_receive_limit_bytes: must be >= 1 MiB, got {self.grpc_receive_limit_bytes}"
            )
        for name in (
            "user_property_count_max",
            "user_properties_size_bytes_max",
            "message_group_length_max",
            "delay_ms_max",
            "timer_precision_ms",
            "send_max_attempts",
            "grpc_worker_threads",
            "transaction_timeout_ms",
            "transaction_check_interval_ms",
            "transaction_check_max",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        _check_tls_and_limits(self)
        _check_namesrv(self)
        _check_replication(self)
        if self.shutdown_grace_ms < 0:
            raise ValueError(f"shutdown_grace_ms: must be >= 0, got {self.shutdown_grace_ms}")

    @property
    def route_host(self) -> str:
        """The host clients are told to connect to (``advertised_host`` or the listen host)."""
        return self.advertised_host or parse_listen(self.listen)[0]


_TLS_MODES = ("permissive", "enforcing", "disabled")  # RocketMQ's TlsMode values


def _check_tls_and_limits(config: BrokerConfig) -> None:
    if config.grpc_front not in ("auto", "python", "native"):
        raise ValueError(f"grpc_front: must be auto, python or native, got {config.grpc_front!r}")
    if config.tls_mode not in _TLS_MODES:
        raise ValueError(
            f"tls_mode: must be one of {', '.join(_TLS_MODES)}, got {config.tls_mode!r}"
        )
    if bool(config.tls_cert_file) != bool(config.tls_key_file):
        raise ValueError("tls_cert_file, tls_key_file: set both or neither")
    for name in (
        "max_connections",
        "max_connections_per_address",
        "handshake_timeout_ms",
        "connection_idle_timeout_ms",
        "keepalive_time_ms",
        "keepalive_timeout_ms",
        "log_repeat_interval_ms",
    ):
        if getattr(config, name) < 1:
            raise ValueError(f"{name}: must be >= 1, got {getattr(config, name)}")
    if config.inflight_request_bytes_max < config.grpc_receive_limit_bytes:
        raise ValueError(
            f"inflight_request_bytes_max: must be >= grpc_receive_limit_bytes "
            f"({config.grpc_receive_limit_bytes}), got {config.inflight_request_bytes_max}"
        )


def _check_namesrv(config: BrokerConfig) -> None:
    try:
        parse_namesrv_addr(config.namesrv_addr)
    except ValueError as err:
        raise ValueError(f"namesrv_addr: {err}") from None
    if not 10_000 <= config.register_interval_ms <= 60_000:
        raise ValueError(
            f"register_interval_ms: must be in [10000, 60000], got {config.register_interval_ms}"
        )


ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")  # RocketMQ's BrokerRole
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _check_replication(config: BrokerConfig) -> None:
    if config.role not in ROLES:
        raise ValueError(f"role: must be one of {', '.join(ROLES)}, got {config.role!r}")
    slave = config.role == "SLAVE"
    if slave and not config.ha_master:
        raise ValueError("ha_master: a SLAVE needs its master's HA host:port")
    if config.ha_master:
        if not slave:
            raise ValueError(f"ha_master: only a SLAVE has a master (role is {config.role})")
        try:
            if parse_listen(config.ha_master)[1] == 0:
                raise ValueError("port 0")
        except ValueError as err:
            raise ValueError(f"ha_master: {err}") from None
    listen = config.ha_listen.strip()
    if config.role == "SYNC_MASTER" and not listen:
        raise ValueError("ha_listen: a SYNC_MASTER needs its HA port (slaves connect to it)")
    if listen not in ("", "auto"):
        try:
            host, _ = parse_listen(listen)
        except ValueError as err:
            raise ValueError(f"ha_listen: {err}") from None
        if host not in _LOOPBACK and not config.ha_allow_remote:
            raise ValueError(
                f"ha_listen: {listen} is not loopback; the HA port serves the whole log to "
                f"anyone who connects (RocketMQ's protocol has no auth): set "
                f"broker.ha_allow_remote = true to accept that"
            )
    if config.ha_master_remoting.strip() not in ("", "auto"):
        try:
            parse_listen(config.ha_master_remoting)
        except ValueError as err:
            raise ValueError(f"ha_master_remoting: {err}") from None
    if config.ha_sync_user and not config.auth_users_file:
        raise ValueError("ha_sync_user: names a user of auth_users_file, which is not set")
    if config.broker_id < 0 or (config.broker_id and not slave):
        raise ValueError(f"broker_id: masters are 0, slaves > 0; got {config.broker_id}")
    for name in ("ha_slave_timeout_ms", "ha_lag_log_interval_ms", "ha_config_sync_interval_ms"):
        if getattr(config, name) < 1:
            raise ValueError(f"{name}: must be >= 1, got {getattr(config, name)}")
    if not 1024 <= config.ha_transfer_batch_bytes <= 64 * _MIB:
        raise ValueError(
            f"ha_transfer_batch_bytes: must be in [1024, 64 MiB], "
            f"got {config.ha_transfer_batch_bytes}"
        )


def parse_listen(text: str) -> tuple[str, int]:
    """Split ``host:port`` (``[::1]:8081`` for IPv6) into ``(host, port)``.

    Raises
    ------
    ValueError
        Not ``host:port``, or the port is outside ``[0, 65535]``.
    """
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"expected host:port, got {text!r}")
    if not 0 <= int(port) <= 65535:
        raise ValueError(f"port must be in [0, 65535], got {text!r}")
    return host, int(port)


def parse_namesrv_addr(text: str) -> tuple[tuple[str, int], ...]:
    """RocketMQ's ``namesrvAddr``: ``"h1:9876;h2:9876"`` -> ``(("h1", 9876), ("h2", 9876))``.

    Raises ``ValueError`` naming the bad part (port 0 too: a name server has a port)."""
    addresses = []
    for part in (piece.strip() for piece in text.split(";")):
        if not part:
            continue
        host, port = parse_listen(part)
        if port == 0:
            raise ValueError(f"name server port must be in [1, 65535], got {part!r}")
        addresses.append((host, port))
    return tuple(addresses)


def parse_topic_spec(spec: str, default_queue_count: int) -> tuple[str, int]:
    """``"orders:4"`` -> ``("orders", 4)``; ``"orders"`` -> ``("orders", default_queue_count)``.

    Raises
    ------
    ValueError
        A bad topic name or queue count.
    """
    name, sep, count = spec.partition(":")
    name = name.strip()
    if not name or len(name) > _TOPIC_LENGTH_MAX or not _TOPIC_RE.match(name):
        raise ValueError(f"bad topic name in {spec!r}")
    if not sep:
        return name, default_queue_count
    if not count.strip().isdigit() or not 1 <= int(count) <= _QUEUE_COUNT_MAX:
        raise ValueError(f"queue count in {spec!r} must be in [1, {_QUEUE_COUNT_MAX}]")
    return name, int(count)
