"""The RocketMQ 5 wire's small pieces, shared by the gRPC handlers (PURE apart from protobuf).

Owns ``SendCode`` -> ``apache.rocketmq.v2.Code``, ``Status`` building, the client's wire
quirks (delivery timestamps in seconds or milliseconds, ``Timestamp`` ranges, peer address
parsing, body digests), route ``Endpoints``, our server's channel options and ``Malformed``
(undecodable input, answered BAD_REQUEST at the boundary). Does not own any RPC
(``grpc_api.py``, ``grpc_producer.py``, ``grpc_telemetry.py``).
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
from typing import Any

from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.send_model import SendCode
from rmq_spark.store.crc import crc32
from rmq_spark.store.message import HostAddress

__all__ = [
    "CLIENT_ID_HEADER",
    "Malformed",
    "delivery_timestamp_ms",
    "digest_problem",
    "endpoints_of",
    "grpc_server_options",
    "not_implemented",
    "peer_address",
    "status",
    "status_code",
    "timestamp_problem",
]

CLIENT_ID_HEADER = "x-mq-client-id"
# Above this a Timestamp.seconds value is really milliseconds (year ~5138 in seconds): the
# Python client copies the user's number verbatim and its docs use milliseconds.
_SECONDS_THAT_ARE_MS = 10**11

_CODES: dict[SendCode, int] = {
    SendCode.OK: pb.OK,
    SendCode.BAD_REQUEST: pb.BAD_REQUEST,
    SendCode.ILLEGAL_TOPIC: pb.ILLEGAL_TOPIC,
    SendCode.ILLEGAL_MESSAGE_TAG: pb.ILLEGAL_MESSAGE_TAG,
    SendCode.ILLEGAL_MESSAGE_KEY: pb.ILLEGAL_MESSAGE_KEY,
    SendCode.ILLEGAL_MESSAGE_GROUP: pb.ILLEGAL_MESSAGE_GROUP,
    SendCode.ILLEGAL_MESSAGE_PROPERTY_KEY: pb.ILLEGAL_MESSAGE_PROPERTY_KEY,
    SendCode.ILLEGAL_MESSAGE_ID: pb.ILLEGAL_MESSAGE_ID,
    SendCode.ILLEGAL_DELIVERY_TIME: pb.ILLEGAL_DELIVERY_TIME,
    SendCode.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE: pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    SendCode.TOPIC_NOT_FOUND: pb.TOPIC_NOT_FOUND,
    SendCode.MESSAGE_BODY_EMPTY: pb.MESSAGE_BODY_EMPTY,
    SendCode.MESSAGE_BODY_TOO_LARGE: pb.MESSAGE_BODY_TOO_LARGE,
    SendCode.MESSAGE_PROPERTIES_TOO_LARGE: pb.MESSAGE_PROPERTIES_TOO_LARGE,
    SendCode.UNSUPPORTED: pb.UNSUPPORTED,
    # RocketMQ's SERVICE_NOT_AVAILABLE has no v2 code of its own; the proxy answers 50001.
    SendCode.SHUTTING_DOWN: pb.INTERNAL_SERVER_ERROR,
    SendCode.FLUSH_TIMEOUT: pb.MASTER_PERSISTENCE_TIMEOUT,
    SendCode.STORE_ERROR: pb.INTERNAL_SERVER_ERROR,
    # RocketMQ 5 proxy: FLUSH_SLAVE_TIMEOUT and SLAVE_NOT_AVAILABLE send statuses
    SendCode.FLUSH_SLAVE_TIMEOUT: pb.SLAVE_PERSISTENCE_TIMEOUT,
    SendCode.SLAVE_NOT_AVAILABLE: pb.HA_NOT_AVAILABLE,
    SendCode.NOT_MASTER: pb.FORBIDDEN,  # a slave takes no sends
}


def status_code(code: SendCode) -> int:
    """The ``apache.rocketmq.v2.Code`` value for a service outcome."""
    return _CODES[code]


def grpc_server_options(receive_limit_bytes: int) -> list[tuple[str, Any]]:
    """Channel options for our server: a raised inbound limit, and no SO_REUSEPORT.

    grpc enables SO_REUSEPORT by default, which lets a second broker bind the same port
    silently; we want "port taken" to be an error.
    """
    return [
        ("grpc.max_receive_message_length", receive_limit_bytes),
        ("grpc.max_send_message_length", -1),
        ("grpc.so_reuseport", 0),
    ]


def delivery_timestamp_ms(timestamp: Any) -> int:
    """A ``google.protobuf.Timestamp`` from the client as epoch milliseconds.

    The Python client 5.1.2 writes the user's number into ``seconds`` unchanged; its example
    passes seconds, its docs milliseconds. Values above 10**11 are taken as milliseconds.
    """
    seconds = int(timestamp.seconds)
    if seconds > _SECONDS_THAT_ARE_MS:
        return seconds
    return seconds * 1000 + int(timestamp.nanos) // 1_000_000


# google.protobuf.Timestamp's valid range: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z.
_TIMESTAMP_SECONDS = (-62_135_596_800, 253_402_300_799)


def timestamp_problem(props: Any) -> tuple[int, str] | None:
    """A delivery or born timestamp that breaks ``Timestamp``'s rules as ``(code, reason)``:
    nanos outside [0, 10**9), born seconds outside years 1..9999. Delivery seconds may be
    milliseconds (``delivery_timestamp_ms``): the service checks the instant they make."""
    if props.HasField("delivery_timestamp"):
        stamp = props.delivery_timestamp
        if not 0 <= stamp.nanos < 1_000_000_000:
            return pb.ILLEGAL_DELIVERY_TIME, _not_a_timestamp("delivery_timestamp", stamp)
    stamp = props.born_timestamp  # unset: zero, which is valid
    if not (
        _TIMESTAMP_SECONDS[0] <= stamp.seconds <= _TIMESTAMP_SECONDS[1]
        and 0 <= stamp.nanos < 1_000_000_000
    ):
        return pb.BAD_REQUEST, _not_a_timestamp("born_timestamp", stamp)
    return None


def _not_a_timestamp(name: str, stamp: Any) -> str:
    return f"{name} seconds={stamp.seconds} nanos={stamp.nanos} is not a valid Timestamp"


@functools.lru_cache(maxsize=4096)  # a connection's calls all name its peer; parsing is slow
def peer_address(peer: str) -> HostAddress | None:
    """``ipv4:127.0.0.1:5000`` / ``ipv6:[::1]:5000`` (grpc's ``context.peer()``) as an address."""
    kind, _, rest = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return None
    try:
        return HostAddress.parse(rest)
    except ValueError:
        return None


def endpoints_of(host: str, port: int) -> pb.Endpoints:
    """``Endpoints`` for ``host:port`` with the address scheme the client needs."""
    try:
        version = ipaddress.ip_address(host).version
        scheme = pb.IPv4 if version == 4 else pb.IPv6
    except ValueError:
        scheme = pb.DOMAIN_NAME
    return pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=host, port=port)])


def status(code: int, message: str = "") -> pb.Status:
    """A ``Status`` of ``code`` with ``message``."""
    return pb.Status(code=code, message=message)


def not_implemented(method: str) -> pb.Status:
    """The status of an RPC this broker does not serve."""
    return status(pb.NOT_IMPLEMENTED, f"{method} is not implemented by this broker")


def digest_problem(message: Any) -> str | None:
    """Check ``system_properties.body_digest`` when the client sent one."""
    digest = message.system_properties.body_digest  # unset: of DIGEST_TYPE_UNSPECIFIED
    kind = digest.type
    if kind == pb.CRC32:  # what the clients send: tested first
        expected = f"{crc32(message.body):08X}"
    elif kind == pb.DIGEST_TYPE_UNSPECIFIED:
        return None
    elif kind == pb.MD5:
        expected = hashlib.md5(message.body).hexdigest().upper()
    elif kind == pb.SHA1:
        expected = hashlib.sha1(message.body).hexdigest().upper()
    else:
        return f"unknown body digest type {kind}"
    if digest.checksum.upper() != expected:
        return f"body digest mismatch: sent {digest.checksum}, computed {expected}"
    return None


class Malformed:
    """Stands for a request whose bytes are not the expected protobuf message.

    Our deserializers return it instead of raising, so the handler can answer BAD_REQUEST
    (grpc would log a traceback and answer a bare UNKNOWN/INTERNAL).
    """

    __slots__ = ("code", "error")

    def __init__(self, error: str, code: int = pb.BAD_REQUEST) -> None:
        self.error = error
        self.code = code  # TOO_MANY_REQUESTS: refused unparsed by limits.InflightBytes
