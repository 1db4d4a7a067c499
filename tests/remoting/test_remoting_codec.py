"""The remoting frame codec against REMOTING_PROTOCOL.md 1.x: byte-exact frames from the spec,
round trips of both header serializations, and every malformed frame as one typed error."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_spark.broker.fastjson import parse_fastjson
from rmq_spark.broker.remoting.codec import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    LANGUAGES,
    NeedMoreData,
    RemotingCommand,
    SerializeType,
    decode_frame,
    decode_one,
    encode_frame,
)
from rmq_spark.errors import RemoteProtocolError, RemotingFrameError

CLUSTER_INFO = RemotingCommand(code=106, language="JAVA", version=409)
CLUSTER_INFO_JSON = (
    b'{"code":106,"flag":0,"language":"JAVA","opaque":0,'
    b'"serializeTypeCurrentRPC":"JSON","version":409}'
)


def test_json_frame_is_byte_exact_as_in_the_spec() -> None:
    frame = encode_frame(CLUSTER_INFO)
    assert len(CLUSTER_INFO_JSON) == 97
    assert frame == bytes.fromhex("00000065 00000061".replace(" ", "")) + CLUSTER_INFO_JSON
    assert decode_one(frame) == CLUSTER_INFO


def test_rocketmq_frame_is_byte_exact_as_in_the_spec() -> None:
    expected = bytes.fromhex(
        "00000019 01000015 006A 00 0199 00000000 00000000 00000000 00000000".replace(" ", "")
    )
    frame = encode_frame(CLUSTER_INFO, SerializeType.ROCKETMQ)
    assert frame == expected
    decoded = decode_one(frame)
    assert decoded == CLUSTER_INFO and decoded.serialize_type == SerializeType.ROCKETMQ


def test_json_header_with_ext_fields_and_remark_is_in_fastjson_order() -> None:
    request = RemotingCommand(code=105, opaque=7, version=409, ext_fields={"topic": "TopicTest"})
    assert encode_frame(request)[8:] == (
        b'{"code":105,"extFields":{"topic":"TopicTest"},"flag":0,"language":"JAVA","opaque":7,'
        b'"serializeTypeCurrentRPC":"JSON","version":409}'
    )
    response = RemotingCommand(
        code=17, opaque=7, flag=FLAG_RESPONSE, remark="No topic", version=479
    )
    assert b'"opaque":7,"remark":"No topic","serializeTypeCurrentRPC"' in encode_frame(response)
    assert decode_one(encode_frame(response)).is_response


def test_reader_accepts_any_key_order_unknown_keys_and_fastjson_keys() -> None:
    header = b'{version:409,"extra":[1],"opaque":3,"flag":2,"code":34,"extFields":{"a":"1"}}'
    frame = _frame(header, body=b"body")
    command = decode_one(frame)
    assert (command.code, command.opaque, command.version, command.body) == (34, 3, 409, b"body")
    assert command.is_oneway and not command.is_response and command.ext_fields == {"a": "1"}


def test_type_byte_is_masked_off_the_header_length() -> None:
    frame = encode_frame(CLUSTER_INFO, SerializeType.ROCKETMQ)
    (word,) = struct.unpack_from(">i", frame, 4)
    assert word >> 24 == 1 and word & 0xFFFFFF == 21


ext_maps = st.dictionaries(
    st.text(min_size=1, max_size=20), st.text(min_size=1, max_size=40), max_size=6
)
commands = st.builds(
    RemotingCommand,
    code=st.integers(-32768, 32767),
    opaque=st.integers(-(2**31), 2**31 - 1),
    flag=st.sampled_from([0, FLAG_RESPONSE, FLAG_ONEWAY]),
    language=st.sampled_from(LANGUAGES),
    version=st.integers(-32768, 32767),
    remark=st.none() | st.text(min_size=1, max_size=60),
    ext_fields=st.none() | ext_maps.filter(bool),
    body=st.binary(max_size=200),
)


@given(commands, st.sampled_from(list(SerializeType)))
def test_round_trip_in_both_serializations(command: RemotingCommand, kind: SerializeType) -> None:
    frame = encode_frame(command, kind)
    decoded, used = decode_frame(frame + b"next")  # type: ignore[misc]
    assert used == len(frame) and decoded == command


@given(commands, st.data())
def test_every_prefix_of_a_frame_needs_more_data(
    command: RemotingCommand, data: st.DataObject
) -> None:
    frame = encode_frame(command)
    cut = data.draw(st.integers(0, len(frame) - 1))
    assert isinstance(decode_frame(frame[:cut]), NeedMoreData)
    with pytest.raises(RemotingFrameError, match="truncated frame"):
        decode_one(frame[:cut])


def _frame(header: bytes, kind: int = 0, body: bytes = b"", length: int | None = None) -> bytes:
    total = 4 + len(header) + len(body) if length is None else length
    return struct.pack(">ii", total, (kind << 24) | len(header)) + header + body


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (struct.pack(">ii", 10, 50) + b"x" * 6, "header length 50 is past the frame"),
        (struct.pack(">i", 2) + b"xx", "below the 4"),
        (struct.pack(">i", -5), "below the 4"),
        (_frame(b"{not json"), "JSON header does not parse"),
        (_frame(b"[1,2]"), "not an object"),
        (_frame(b'{"code":"x"}'), "code is not an int32"),
        (_frame(b'{"opaque":1}'), "code is not an int32"),
        (_frame(b"\xff\xfe"), "not UTF-8"),
        (_frame(b'{"code":1}', kind=7), "unknown serialize type 7"),
        (_frame(b"\x00" * 10, kind=1), "below 21"),
        (_frame(b"\x00" * 13 + b"\x00\x00\x01\x00" + b"\x00" * 4, kind=1), "remark length 256"),
        (
            _frame(b"\x00" * 17 + b"\x00\x00\x00\x04" + b"\x00\x09ab", kind=1),
            "extFields key length 9",
        ),
    ],
)
def test_malformed_frames_raise_one_typed_error(frame: bytes, message: str) -> None:
    with pytest.raises(RemotingFrameError, match=message) as caught:
        decode_one(frame)
    assert isinstance(caught.value, RemoteProtocolError)


def test_oversize_frame_is_refused_from_its_length_alone() -> None:
    head = struct.pack(">i", 1000)
    with pytest.raises(RemotingFrameError, match="1004 bytes is over the limit of 1000"):
        decode_frame(head, max_frame_bytes=1000)
    assert isinstance(decode_frame(head, max_frame_bytes=1004), NeedMoreData)


def test_bytes_after_one_frame_are_an_error_for_decode_one() -> None:
    with pytest.raises(RemotingFrameError, match="3 bytes after the frame"):
        decode_one(encode_frame(CLUSTER_INFO) + b"abc")


def test_rocketmq_form_cannot_carry_codes_past_int16() -> None:
    with pytest.raises(RemotingFrameError, match="does not fit int16"):
        encode_frame(RemotingCommand(code=200050), SerializeType.ROCKETMQ)
    assert decode_one(encode_frame(RemotingCommand(code=200050))).code == 200050


# Frames the Java NameServer (RocketMQ 5.3.3 NamesrvStartup) sent, captured from a live one:
# answers to GET_BROKER_CLUSTER_INFO (empty, then one broker: fastjson's unquoted Long keys),
# to a REGISTER_BROKER sent in ROCKETMQ serialization (empty extFields) and to a route query
# for an unknown topic (TOPIC_NOT_EXIST with a remark).
JAVA_FRAMES = {
    "cluster_empty": bytes.fromhex(
        "0000008f0000005f7b22636f6465223a302c22666c6167223a312c226c616e6775616765223a224a41564122"
        "2c226f7061717565223a352c2273657269616c697a655479706543757272656e74525043223a224a534f4e22"
        "2c2276657273696f6e223a3437397d7b2262726f6b6572416464725461626c65223a7b7d2c22636c75737465"
        "72416464725461626c65223a7b7d7d"
    ),
    "register": bytes.fromhex(
        "000000720000006e7b22636f6465223a302c226578744669656c6473223a7b7d2c22666c6167223a312c226c"
        "616e6775616765223a224a415641222c226f7061717565223a362c2273657269616c697a6554797065437572"
        "72656e74525043223a224a534f4e222c2276657273696f6e223a3437397d"
    ),
    "route_missing": bytes.fromhex(
        "000000f4000000f07b22636f6465223a31372c22666c6167223a312c226c616e6775616765223a224a415641"
        "222c226f7061717565223a372c2272656d61726b223a224e6f20746f70696320726f75746520696e666f2069"
        "6e206e616d652073657276657220666f722074686520746f7069633a204e6f70655c6e536565206874747073"
        "3a2f2f726f636b65746d712e6170616368652e6f72672f646f63732f6265737450726163746963652f303646"
        "415120666f7220667572746865722064657461696c732e222c2273657269616c697a65547970654375727265"
        "6e74525043223a224a534f4e222c2276657273696f6e223a3437397d"
    ),
    "cluster_one": bytes.fromhex(
        "000001000000005f7b22636f6465223a302c22666c6167223a312c226c616e6775616765223a224a41564122"
        "2c226f7061717565223a382c2273657269616c697a655479706543757272656e74525043223a224a534f4e22"
        "2c2276657273696f6e223a3437397d7b2262726f6b6572416464725461626c65223a7b226231223a7b226272"
        "6f6b65724164647273223a7b303a223132372e302e302e313a3130393131227d2c2262726f6b65724e616d65"
        "223a226231222c22636c7573746572223a224331222c22656e61626c65416374696e674d6173746572223a66"
        "616c73657d7d2c22636c7573746572416464725461626c65223a7b224331223a5b226231225d7d7d"
    ),
}


@pytest.mark.parametrize("name", sorted(JAVA_FRAMES))
def test_frames_of_the_java_name_server_decode_and_encode_back_byte_exact(name: str) -> None:
    frame = JAVA_FRAMES[name]
    command = decode_one(frame)
    assert command.is_response and command.language == "JAVA" and command.version == 479
    assert encode_frame(command) == frame


def test_java_frames_carry_what_the_spec_says() -> None:
    empty = decode_one(JAVA_FRAMES["cluster_empty"])
    assert (empty.code, empty.opaque, empty.ext_fields) == (0, 5, None)
    assert empty.body == b'{"brokerAddrTable":{},"clusterAddrTable":{}}'
    registered = decode_one(JAVA_FRAMES["register"])
    assert (registered.code, registered.opaque, registered.ext_fields) == (0, 6, {})
    missing = decode_one(JAVA_FRAMES["route_missing"])
    assert missing.code == 17 and missing.remark is not None
    assert missing.remark.startswith("No topic route info in name server for the topic: Nope\n")
    one = parse_fastjson(decode_one(JAVA_FRAMES["cluster_one"]).body.decode())
    assert one["brokerAddrTable"]["b1"]["brokerAddrs"] == {"0": "127.0.0.1:10911"}
