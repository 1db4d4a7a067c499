"""Unit tests of store/properties.py: the properties string, Java HashMap order, helpers."""

from __future__ import annotations

import pytest
from store_helpers import keys_of, tags_of, uniq_key_of

from rmq_spark.errors import InvalidMessageError
from rmq_spark.store.properties import (
    DELAY,
    KEYS,
    REAL_QID,
    REAL_TOPIC,
    TAGS,
    TIMER_DELIVER_MS,
    TRANSACTION_ID,
    UNIQ_KEY,
    delay_level_of,
    encode_properties,
    java_hashmap_order,
    parse_properties,
)


def test_encode_writes_name_value_pairs_with_trailing_separator_by_default():
    props = {"TAGS": "TagA", "KEYS": "k1 k2"}
    assert encode_properties(props) == "TAGS\x01TagA\x02KEYS\x01k1 k2\x02"
    assert encode_properties(props, trailing_separator=False) == "TAGS\x01TagA\x02KEYS\x01k1 k2"
    assert encode_properties({}) == encode_properties({}, trailing_separator=False) == ""


@pytest.mark.parametrize(
    "props",
    [
        {"": "v"},
        {"k": ""},
        {"a\x01b": "v"},
        {"a\x02b": "v"},
        {"k": "v\x02w"},
        {"k": 5},
        {5: "v"},
        {"ok": "v", "": "v"},
        {"ok": "v", "k": ""},
        {"ok": "v", "a\x01b": "v"},
        {"ok": "v\x01", "k": "v\x02w"},
        {"ok": "v", "k": b"v"},
    ],
)
def test_encode_rejects_entries_that_would_not_read_back(props):
    with pytest.raises(InvalidMessageError, match="properties"):
        encode_properties(props)


def test_encode_allows_name_value_separator_inside_a_value():
    text = encode_properties({"k": "a\x01b"})
    assert parse_properties(text) == {"k": "a\x01b"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        ("TAGS\x01TagA\x02", {"TAGS": "TagA"}),
        ("TAGS\x01TagA", {"TAGS": "TagA"}),
        ("A\x011\x02B\x012", {"A": "1", "B": "2"}),
        ("A\x01x\x01y\x02", {"A": "x\x01y"}),  # only the first \x01 splits
        ("A\x011\x02A\x012\x02", {"A": "2"}),  # later duplicates win
        ("\x01v\x02K\x01w", {"K": "w"}),  # empty key dropped
        ("K\x01\x02L\x01w", {"L": "w"}),  # empty value dropped
        ("noseparator\x02K\x01w", {"K": "w"}),  # segment without \x01 dropped
        ("\x02\x02K\x01w\x02\x02", {"K": "w"}),  # empty segments
        ("K\x01\x01", {"K": "\x01"}),  # value is a lone \x01
        ("\x01\x01\x01", {}),
        ("中文\x01值\x02", {"中文": "值"}),
    ],
)
def test_parse_follows_the_broker_parser_rules(text, expected):
    assert parse_properties(text) == expected


# Printed by a JDK 17 HashMap for the first n of these keys (new HashMap() and new HashMap(128)).
_JDK_KEYS = (
    "KEYS TAGS UNIQ_KEY WAIT DELAY REAL_TOPIC REAL_QID CLUSTER TRAN_MSG PGROUP MSG_REGION "
    "TRACE_ON RETRY_TOPIC ORIGIN_MESSAGE_ID RECONSUME_TIME MAX_RECONSUME_TIMES __transactionId__ "
    "TIMER_DELIVER_MS INNER_NUM BORN_TIMESTAMP __SHARDINGKEY CORRELATION_ID MSG_TYPE TTL a b c"
).split()
_JDK_ORDERS = {
    (16, 8): "REAL_TOPIC,KEYS,UNIQ_KEY,CLUSTER,WAIT,DELAY,TAGS,REAL_QID",
    (128, 8): "UNIQ_KEY,CLUSTER,DELAY,TAGS,KEYS,WAIT,REAL_TOPIC,REAL_QID",
    (16, 13): "TRACE_ON,TRAN_MSG,REAL_TOPIC,RETRY_TOPIC,KEYS,MSG_REGION,UNIQ_KEY,CLUSTER,WAIT,"
    "DELAY,PGROUP,TAGS,REAL_QID",
    (128, 13): "RETRY_TOPIC,MSG_REGION,UNIQ_KEY,CLUSTER,PGROUP,DELAY,TAGS,TRAN_MSG,KEYS,WAIT,"
    "TRACE_ON,REAL_TOPIC,REAL_QID",
    (16, 27): "TRAN_MSG,TTL,ORIGIN_MESSAGE_ID,BORN_TIMESTAMP,RETRY_TOPIC,KEYS,MSG_REGION,"
    "TIMER_DELIVER_MS,__SHARDINGKEY,UNIQ_KEY,CLUSTER,WAIT,PGROUP,CORRELATION_ID,a,RECONSUME_TIME,"
    "b,c,TRACE_ON,MAX_RECONSUME_TIMES,INNER_NUM,REAL_TOPIC,MSG_TYPE,__transactionId__,DELAY,TAGS,"
    "REAL_QID",
    (128, 27): "ORIGIN_MESSAGE_ID,RETRY_TOPIC,MSG_REGION,TIMER_DELIVER_MS,__SHARDINGKEY,UNIQ_KEY,"
    "CLUSTER,PGROUP,CORRELATION_ID,RECONSUME_TIME,MSG_TYPE,__transactionId__,DELAY,TAGS,TRAN_MSG,"
    "TTL,BORN_TIMESTAMP,KEYS,WAIT,a,b,c,TRACE_ON,MAX_RECONSUME_TIMES,INNER_NUM,REAL_TOPIC,REAL_QID",
}


@pytest.mark.parametrize(("capacity", "count"), sorted(_JDK_ORDERS))
def test_java_hashmap_order_matches_a_jdk(capacity, count):
    order = java_hashmap_order(_JDK_KEYS[:count], initial_capacity=capacity)
    assert ",".join(order) == _JDK_ORDERS[(capacity, count)]


def test_key_constants_are_the_message_const_strings():
    assert (KEYS, TAGS, UNIQ_KEY, DELAY) == ("KEYS", "TAGS", "UNIQ_KEY", "DELAY")
    assert (REAL_TOPIC, REAL_QID) == ("REAL_TOPIC", "REAL_QID")
    assert (TRANSACTION_ID, TIMER_DELIVER_MS) == ("__transactionId__", "TIMER_DELIVER_MS")


@pytest.mark.parametrize(
    ("keys", "expected"),
    [("k1", ["k1"]), ("k1 k2", ["k1", "k2"]), ("  k1   k2 ", ["k1", "k2"]), ("", []), (None, [])],
)
def test_keys_of_splits_on_single_spaces_and_drops_empty_tokens(keys, expected):
    props = {} if keys is None else {KEYS: keys}
    assert keys_of(props) == expected


def test_keys_of_does_not_split_on_other_whitespace():
    assert keys_of({KEYS: "a\tb c"}) == ["a\tb", "c"]


def test_tags_and_uniq_key_helpers_return_none_when_absent():
    assert tags_of({TAGS: "TagA"}) == "TagA"
    assert tags_of({}) is None
    assert uniq_key_of({UNIQ_KEY: "ABC"}) == "ABC"
    assert uniq_key_of({}) is None


@pytest.mark.parametrize(
    ("text", "level"), [(None, 0), ("3", 3), ("+3", 3), ("-2", -2), ("007", 7), ("0", 0), ("٣", 3)]
)
def test_delay_level_of_reads_like_integer_parse_int(text, level):
    props = {} if text is None else {DELAY: text}
    assert delay_level_of(props) == level


@pytest.mark.parametrize("text", ["", "abc", " 3", "3 ", "1_0", "2147483648", "+-3", "3.0"])
def test_delay_level_of_rejects_what_integer_parse_int_rejects(text):
    with pytest.raises(ValueError, match="DELAY"):
        delay_level_of({DELAY: text})
