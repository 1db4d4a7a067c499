"""Hypothesis strategies for the store's data types: hosts, topics, bodies, properties, records.

Shared by the codec, store and Spark tests (``from strategies import message_records``;
``tests/`` is on ``sys.path`` because ``tests/conftest.py`` lives there). Every value drawn
is *encodable*: within the field ranges of spec STORE_FORMAT.md section 1.2.
"""

from __future__ import annotations

from hypothesis import strategies as st

from rmq_spark.store.codec import MAX_TOPIC_SIZE_BYTES_V2
from rmq_spark.store.layout import MAX_PROPERTIES_SIZE_BYTES
from rmq_spark.store.message import HostAddress, MessageRecord
from rmq_spark.store.properties import encode_properties

__all__ = [
    "bodies",
    "host_addresses",
    "int32s",
    "int64s",
    "message_records",
    "properties_maps",
    "properties_strings",
    "topics",
]

int32s = st.integers(min_value=-(1 << 31), max_value=(1 << 31) - 1)
int64s = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
non_negative_int64s = st.integers(min_value=0, max_value=(1 << 63) - 1)

# Any code point except lone surrogates (not UTF-8 encodable, as in Java strings on disk).
_any_char = st.characters(exclude_categories=("Cs",))
_topic_char = st.sampled_from("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-%|")


def host_addresses() -> st.SearchStrategy[HostAddress]:
    """IPv4 or IPv6 addresses with a port in 0..65535 (occasionally up to int32 max)."""
    ports = st.one_of(st.integers(0, 65535), st.integers(0, (1 << 31) - 1))
    return st.builds(HostAddress, st.ip_addresses().map(str), ports)


def topics(*, max_size: int = 300) -> st.SearchStrategy[str]:
    """Mostly short ASCII topic names; also unicode ones and ones past 127 chars (v2 magic)."""
    return st.one_of(
        st.text(_topic_char, min_size=1, max_size=40),
        st.text(_topic_char, min_size=120, max_size=max_size),
        st.text(_any_char, min_size=1, max_size=max_size // 4),
    ).filter(lambda t: len(t.encode("utf-8")) <= MAX_TOPIC_SIZE_BYTES_V2)


def bodies(*, max_size: int = 2048) -> st.SearchStrategy[bytes]:
    """Arbitrary bodies, empty included."""
    return st.binary(max_size=max_size)


_key_char = st.characters(exclude_categories=("Cs",), exclude_characters="\x01\x02")
_value_char = st.characters(exclude_categories=("Cs",), exclude_characters="\x02")


def properties_maps(*, max_entries: int = 8) -> st.SearchStrategy[dict[str, str]]:
    """Property maps that survive ``encode_properties`` / ``parse_properties`` unchanged.

    Keys have no ``\\x01``/``\\x02``, values no ``\\x02`` (but may contain ``\\x01``); neither
    is empty. Well-known keys (TAGS, KEYS, UNIQ_KEY, DELAY) show up often.
    """
    keys = st.one_of(
        st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "WAIT", "REAL_TOPIC", "CLUSTER"]),
        st.text(_key_char, min_size=1, max_size=12),
    )
    values = st.text(_value_char, min_size=1, max_size=40)
    return st.dictionaries(keys, values, max_size=max_entries)


def properties_strings() -> st.SearchStrategy[str]:
    """Stored properties strings: well-formed (with or without a trailing ``\\x02``) or any text.

    The codec stores the string verbatim, so arbitrary text must round-trip too.
    """
    well_formed = st.builds(encode_properties, properties_maps(), st.booleans())
    return st.one_of(well_formed, st.text(_any_char, max_size=200)).filter(
        lambda p: len(p.encode("utf-8")) <= MAX_PROPERTIES_SIZE_BYTES
    )


@st.composite
def message_records(
    draw: st.DrawFn,
    *,
    topic_strategy: st.SearchStrategy[str] | None = None,
    body_strategy: st.SearchStrategy[bytes] | None = None,
) -> MessageRecord:
    """Encodable ``MessageRecord`` values, with ``body_crc=None`` (the encoder computes it).

    ``sys_flag`` is any int32: the encoder overrides its IPv6 bits from the hosts, so compare
    a decoded record with ``store_helpers.stored_form(record)``.
    """
    return MessageRecord(
        topic=draw(topic_strategy if topic_strategy is not None else topics()),
        body=draw(body_strategy if body_strategy is not None else bodies()),
        properties=draw(properties_strings()),
        queue_id=draw(st.integers(0, (1 << 31) - 1)),
        flag=draw(int32s),
        queue_offset=draw(non_negative_int64s),
        physical_offset=draw(non_negative_int64s),
        sys_flag=draw(int32s),
        born_timestamp_ms=draw(int64s),
        born_host=draw(host_addresses()),
        store_timestamp_ms=draw(int64s),
        store_host=draw(host_addresses()),
        reconsume_times=draw(int32s),
        prepared_transaction_offset=draw(int64s),
    )
