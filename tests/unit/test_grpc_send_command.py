"""A SendMessage request's message as the ``SendCommand`` the service is given, field by field."""

from __future__ import annotations

import asyncio
import hashlib
import zlib

from rmq_spark.broker.grpc.grpc_producer import ProducerRpcs
from rmq_spark.broker.grpc.grpc_wire import digest_problem, timestamp_problem
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.security.resources import Name
from rmq_spark.broker.send_model import MessageKind, SendCommand
from rmq_spark.store.message import HostAddress

_TOPIC = Name("Orders", "ns1", "ns1%Orders")
_PEER = HostAddress("10.0.0.7", 50_000)


def _rpcs() -> ProducerRpcs:
    return ProducerRpcs(
        None,  # type: ignore[arg-type]  # _command uses no service
        endpoints=pb.Endpoints(),
        shutdown=asyncio.Event(),
        client_peer=lambda peer: peer,
    )


def test_every_field_of_a_message_lands_in_its_own_place() -> None:
    message = pb.Message(body=b"payload", user_properties={"k": "v", "k2": "v2"})
    props = message.system_properties
    props.tag = "TagA"
    props.keys.extend(["key1", "key2"])
    props.message_id = "01ABCDEF"
    props.message_type = pb.FIFO
    props.message_group = "group-7"
    props.delivery_timestamp.FromMilliseconds(1_900_000_000_123)
    props.born_timestamp.FromMilliseconds(1_700_000_000_456)
    props.born_host = "client-host"
    props.trace_context = "00-trace"
    assert _rpcs()._command(message, _TOPIC, _PEER) == SendCommand(
        topic="Orders",
        namespace="ns1",
        body=b"payload",
        message_id="01ABCDEF",
        kind=MessageKind.FIFO,
        tag="TagA",
        keys=("key1", "key2"),
        user_properties={"k": "v", "k2": "v2"},
        message_group="group-7",
        delivery_timestamp_ms=1_900_000_000_123,
        born_timestamp_ms=1_700_000_000_456,
        born_host=_PEER,
        born_host_text="client-host",
        trace_context="00-trace",
    )


def test_fields_a_message_leaves_unset_read_as_none_or_empty() -> None:
    message = pb.Message(body=b"x")
    message.system_properties.message_id = "01"
    message.system_properties.message_type = pb.NORMAL
    assert _rpcs()._command(message, _TOPIC, None) == SendCommand(
        topic="Orders", namespace="ns1", body=b"x", message_id="01", kind=MessageKind.NORMAL
    )


def test_timestamps_outside_the_protobuf_rules_are_named() -> None:
    props = pb.SystemProperties()
    assert timestamp_problem(props) is None  # none set
    props.born_timestamp.seconds = 253_402_300_800  # year 10000
    assert timestamp_problem(props) == (
        pb.BAD_REQUEST,
        "born_timestamp seconds=253402300800 nanos=0 is not a valid Timestamp",
    )
    props.born_timestamp.seconds = 1
    props.delivery_timestamp.nanos = -1
    assert timestamp_problem(props) == (
        pb.ILLEGAL_DELIVERY_TIME,
        "delivery_timestamp seconds=0 nanos=-1 is not a valid Timestamp",
    )
    props.delivery_timestamp.nanos = 0
    props.born_timestamp.nanos = 1_000_000_000
    assert timestamp_problem(props)[0] == pb.BAD_REQUEST  # type: ignore[index]


def test_each_body_digest_is_checked_and_an_unset_one_is_not() -> None:
    message = pb.Message(body=b"payload")
    assert digest_problem(message) is None  # no digest
    digest = message.system_properties.body_digest
    digest.type = pb.CRC32
    digest.checksum = f"{zlib.crc32(b'payload'):08x}"  # any case
    assert digest_problem(message) is None
    digest.checksum = "00000000"
    assert digest_problem(message) == (
        f"body digest mismatch: sent 00000000, computed {zlib.crc32(b'payload'):08X}"
    )
    digest.type = pb.SHA1
    digest.checksum = hashlib.sha1(b"payload").hexdigest()
    assert digest_problem(message) is None
    digest.type = 99  # type: ignore[assignment]
    assert digest_problem(message) == "unknown body digest type 99"
    digest.type = pb.DIGEST_TYPE_UNSPECIFIED
    assert digest_problem(message) is None
