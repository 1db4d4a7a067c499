"""Round trips of the PURE store codecs over Hypothesis-drawn values."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_helpers import stored_form
from strategies import bodies, host_addresses, message_records, properties_maps, topics

from rmq_spark.store.codec import DecodedRecord, NeedMoreData, decode_record, encode_record
from rmq_spark.store.consume_queue import decode_cq_unit, encode_cq_unit
from rmq_spark.store.message import MessageRecord
from rmq_spark.store.msg_id import decode_offset_msg_id, offset_msg_id
from rmq_spark.store.properties import encode_properties, parse_properties

# Drawing whole records is slow-ish and the machine is shared: generation speed is not what
# these tests are about, so Hypothesis must not fail them for it.
records_settings = settings(
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


@records_settings
@given(message_records())
def test_decode_inverts_encode_for_every_message(record):
    data = encode_record(record)
    outcome = decode_record(data)
    assert isinstance(outcome, DecodedRecord)
    assert outcome.record == stored_form(record)
    assert outcome.total_size == len(data)
    assert outcome.magic_version == (1 if data[4:8] == bytes.fromhex("daa320a7") else 2)


@records_settings
@given(message_records())
def test_reencoding_a_decoded_record_gives_the_same_bytes(record):
    data = encode_record(record)
    assert encode_record(decode_record(data).record) == data


@records_settings
@given(
    st.lists(message_records(body_strategy=bodies(max_size=64)), min_size=1, max_size=4),
    st.binary(max_size=16),
)
def test_records_decode_back_to_back_from_one_buffer(records, junk):
    blob = b"".join(encode_record(r) for r in records)
    buf = memoryview(blob + junk)
    position = 0
    for record in records:
        outcome = decode_record(buf, position)
        assert outcome.record == stored_form(record)
        position = outcome.next_position
    assert position == len(blob)


@records_settings
@given(message_records(), st.data())
def test_every_proper_prefix_needs_more_data(record, data):
    encoded = encode_record(record)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    outcome = decode_record(encoded[:cut])
    assert isinstance(outcome, NeedMoreData)
    assert outcome.have == cut
    assert outcome.need in (8, len(encoded))


@given(topics())
def test_topic_choice_of_magic_follows_utf16_length(topic):
    data = encode_record(MessageRecord(topic))
    utf16_units = len(topic.encode("utf-16-le")) // 2
    long_topic = utf16_units > 127 or len(topic.encode("utf-8")) > 127
    assert decode_record(data).magic_version == (2 if long_topic else 1)


@given(properties_maps(), st.booleans())
def test_parse_inverts_encode_for_every_property_map(props, trailing):
    assert parse_properties(encode_properties(props, trailing_separator=trailing)) == props


@given(host_addresses(), st.integers(0, (1 << 63) - 1))
def test_offset_msg_id_round_trips(host, offset):
    msg_id = offset_msg_id(host, offset)
    assert len(msg_id) == (56 if host.is_ipv6 else 32)
    assert decode_offset_msg_id(msg_id) == (host, offset)
    assert decode_offset_msg_id(msg_id.lower()) == (host, offset)


@given(
    st.integers(0, (1 << 63) - 1),
    st.integers(1, (1 << 31) - 1),
    st.integers(-(1 << 63), (1 << 63) - 1),
)
def test_cq_unit_round_trips(physical_offset, size, tags_code):
    unit = decode_cq_unit(encode_cq_unit(physical_offset, size, tags_code))
    assert (unit.physical_offset, unit.size, unit.tags_code) == (physical_offset, size, tags_code)
