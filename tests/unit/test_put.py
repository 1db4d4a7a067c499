from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from store_helpers import open_store

from rmq_spark.clock import ManualClock
from rmq_spark.errors import InvalidMessageError
from rmq_spark.store.codec import encode_record
from rmq_spark.store.config import IoMode
from rmq_spark.store.layout import (
    RMQ_SYS_SCHEDULE_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from rmq_spark.store.message import LOCALHOST, HostAddress, MessageRecord
from rmq_spark.store.msg_id import decode_offset_msg_id, offset_msg_id
from rmq_spark.store.properties import encode_properties, java_hashmap_order, parse_properties
from rmq_spark.store.put import (
    PutRequest,
    PutStatus,
    check_topic,
    order_properties,
    properties_text,
)
from rmq_spark.store.put_encode import encode_ipv4_v1
from rmq_spark.store.put_state import IdempotencyWindow, WindowEntry


@pytest.fixture
def store(tmp_path: Path):  # type: ignore[no-untyped-def]
    store = open_store(tmp_path / "store", max_message_size_bytes=1024)
    yield store
    store.close()


# --- validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("topic", "reason"),
    [
        ("", "blank"),
        ("   ", "blank"),
        ("Topic With Space", "characters"),
        ("tópico", "characters"),
        ("a/b", "characters"),
        ("T" * 128, "at most 127"),
        ("%RETRY%" + "g" * 249, "at most 255"),
    ],
)
def test_illegal_topics_are_rejected_with_a_reason(store, topic: str, reason: str) -> None:  # type: ignore[no-untyped-def]
    result = store.put(PutRequest(topic, b"x"))
    assert result.status is PutStatus.MESSAGE_ILLEGAL
    assert reason in result.detail
    assert store.max_offset == 0


def test_retry_topics_may_be_up_to_255_bytes_and_use_the_v2_magic(store) -> None:  # type: ignore[no-untyped-def]
    topic = "%RETRY%" + "g" * 248
    result = store.put(PutRequest(topic, b"x"))
    assert result.ok
    decoded = store.read_decoded(result.physical_offset)
    assert decoded.record.topic == topic and decoded.magic_version == 2


def test_topic_of_127_bytes_is_accepted(store) -> None:  # type: ignore[no-untyped-def]
    assert store.put(PutRequest("T" * 127, b"x")).ok


def test_check_topic_allows_rocketmq_characters() -> None:
    assert check_topic("%DLQ%group|a_b-C9") == ""


def test_negative_queue_id_is_illegal(store) -> None:  # type: ignore[no-untyped-def]
    result = store.put(PutRequest("T", b"x", queue_id=-1))
    assert result.status is PutStatus.MESSAGE_ILLEGAL and "queue id" in result.detail


def test_oversized_body_is_illegal_and_nothing_is_written(store) -> None:  # type: ignore[no-untyped-def]
    assert store.put(PutRequest("T", b"x" * 1024)).ok
    before = store.max_offset
    result = store.put(PutRequest("T", b"x" * 1025))
    assert result.status is PutStatus.MESSAGE_ILLEGAL
    assert "1025" in result.detail and "max_message_size_bytes" in result.detail
    assert store.max_offset == before


def test_oversized_properties_exceed_the_properties_size(tmp_path: Path) -> None:
    store = open_store(tmp_path, segment_size_bytes=1 << 20)
    result = store.put(PutRequest("T", b"x", properties={"big": "v" * 32767}))
    assert result.status is PutStatus.PROPERTIES_SIZE_EXCEEDED
    assert "32767" in result.detail
    multibyte = store.put(PutRequest("T", b"x", properties={"big": "é" * 16384}))
    assert multibyte.status is PutStatus.PROPERTIES_SIZE_EXCEEDED
    store.close()


def test_a_property_value_with_a_separator_is_illegal(store) -> None:  # type: ignore[no-untyped-def]
    result = store.put(PutRequest("T", b"x", properties={"k": "a\x02b"}))
    assert result.status is PutStatus.MESSAGE_ILLEGAL


def test_a_field_out_of_its_int_range_is_illegal(store) -> None:  # type: ignore[no-untyped-def]
    result = store.put(PutRequest("T", b"x", flag=1 << 40))
    assert result.status is PutStatus.MESSAGE_ILLEGAL and "flag" in result.detail


def test_non_bytes_body_is_illegal(store) -> None:  # type: ignore[no-untyped-def]
    result = store.put(PutRequest("T", "text"))  # type: ignore[arg-type]
    assert result.status is PutStatus.MESSAGE_ILLEGAL


# --- what is stored -------------------------------------------------------------------------------


def test_put_result_carries_offsets_ids_and_the_stored_fields(tmp_path: Path) -> None:
    clock = ManualClock(1_700_000_000_000)
    store = open_store(tmp_path, clock=clock, store_host="192.168.0.1:10911")
    first = store.put(PutRequest("TopicA", b"one", queue_id=2, tags="TagA", keys=("k1", "k2")))
    clock.advance(5)
    second = store.put(PutRequest("TopicA", b"two", queue_id=2))
    assert (first.physical_offset, first.queue_offset) == (0, 0)
    assert (second.physical_offset, second.queue_offset) == (first.total_size, 1)
    assert second.store_timestamp_ms == 1_700_000_000_005
    assert first.msg_id == offset_msg_id(HostAddress("192.168.0.1", 10911), 0)
    assert decode_offset_msg_id(second.msg_id)[1] == second.physical_offset
    record = store.read(first.physical_offset)
    props = parse_properties(record.properties)
    assert props["TAGS"] == "TagA" and props["KEYS"] == "k1 k2"
    assert props["UNIQ_KEY"] == first.uniq_key and len(first.uniq_key) == 32
    assert record.store_timestamp_ms == first.store_timestamp_ms
    assert record.born_timestamp_ms == 1_700_000_000_000  # none given: the store's now
    assert (record.queue_id, record.queue_offset, record.physical_offset) == (2, 0, 0)
    assert record.store_host == HostAddress("192.168.0.1", 10911)
    store.close()


def test_producer_uniq_key_is_kept(store) -> None:  # type: ignore[no-untyped-def]
    result = store.put(PutRequest("T", b"x", properties={"UNIQ_KEY": "ABC123"}))
    assert result.uniq_key == "ABC123"
    assert parse_properties(store.read(result.physical_offset).properties)["UNIQ_KEY"] == "ABC123"


def test_properties_are_stored_in_java_hashmap_order_with_trailing_separator(store) -> None:  # type: ignore[no-untyped-def]
    props = {"zeta": "1", "KEYS": "k", "TAGS": "t", "UNIQ_KEY": "U", "a": "2", "WAIT": "true"}
    result = store.put(PutRequest("T", b"x", properties=props))
    text = store.read(result.physical_offset).properties
    order = java_hashmap_order(props, 128)
    assert text == "".join(f"{k}\x01{props[k]}\x02" for k in order)
    assert order_properties(props) == order


_TEXTS = st.text(st.sampled_from("ab%{}\x01\x02é😀 "), max_size=4)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.tuples(_TEXTS, st.one_of(_TEXTS, st.integers(0, 1))), max_size=6),
    st.integers(0, 3),
)
def test_properties_text_is_encode_properties_in_java_order(
    pairs: list[tuple[str, object]], repeats: int
) -> None:
    props = dict(pairs)
    try:
        expected: str | None = encode_properties({k: props[k] for k in order_properties(props)})
    except InvalidMessageError:
        expected = None
    for _ in range(repeats + 1):  # the key set's shape is kept after the first
        if expected is None:
            with pytest.raises(InvalidMessageError):
                properties_text(props)  # type: ignore[arg-type]
        else:
            assert properties_text(props) == expected  # type: ignore[arg-type]


def test_a_shape_of_long_keys_is_used_but_not_kept() -> None:
    from rmq_spark.store import put

    long_keys = {"k" * 700: "1", "j" * 700: "2"}
    text = properties_text(long_keys)
    assert text == encode_properties({k: long_keys[k] for k in order_properties(long_keys)})
    assert tuple(long_keys) not in put._TEXT_SHAPES
    assert tuple({"short": "x"}) not in put._TEXT_SHAPES
    properties_text({"short": "x"})
    assert tuple({"short": "x"}) in put._TEXT_SHAPES
    refused = {"ok": "1", "b\x01" + "d" * 2000: "2"}
    with pytest.raises(InvalidMessageError):
        properties_text(refused)
    assert tuple(refused) not in put._TEXT_SHAPES


def test_raw_properties_are_stored_verbatim(store) -> None:  # type: ignore[no-untyped-def]
    raw = "DELAY\x013\x02REAL_TOPIC\x01T\x02UNIQ_KEY\x01K1"
    result = store.put(PutRequest("T", b"x", raw_properties=raw))
    record = store.read(result.physical_offset)
    # No delay rewrite, no new key; the record CRC property is inserted after a separator
    # (docs/FORMAT.md 2.3), which stays when the property is left out on reading.
    assert record.properties == raw + "\x02" and record.topic == "T"
    assert result.uniq_key == "K1"


def test_raw_properties_exclude_properties(store) -> None:  # type: ignore[no-untyped-def]
    result = store.put(PutRequest("T", b"x", raw_properties="a\x01b", tags="t"))
    assert result.status is PutStatus.MESSAGE_ILLEGAL


def test_queue_offsets_count_per_topic_and_queue(store) -> None:  # type: ignore[no-untyped-def]
    offsets = [store.put(PutRequest(t, b"x", queue_id=q)).queue_offset for t, q in
               [("A", 0), ("A", 0), ("A", 1), ("B", 0), ("A", 0), ("A", 1)]]  # fmt: skip
    assert offsets == [0, 1, 0, 0, 2, 1]
    assert store.queue_offset("A", 0) == 3 and store.queue_offset("Z", 0) == 0


@pytest.mark.parametrize("tx_type", [TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE])
def test_prepared_and_rollback_messages_take_no_queue_offset(store, tx_type: int) -> None:  # type: ignore[no-untyped-def]
    store.put(PutRequest("A", b"x"))
    result = store.put(PutRequest("A", b"tx", sys_flag=tx_type))
    assert result.ok and result.queue_offset == 0
    assert store.read(result.physical_offset).queue_offset == 0
    assert store.put(PutRequest("A", b"y")).queue_offset == 1


def test_commit_messages_take_a_queue_offset(store) -> None:  # type: ignore[no-untyped-def]
    store.put(PutRequest("A", b"x"))
    assert store.put(PutRequest("A", b"c", sys_flag=TRANSACTION_COMMIT_TYPE)).queue_offset == 1


# --- delay rewrite (spec 9.2) ---------------------------------------------------------------------


def test_delayed_message_goes_to_the_schedule_topic(store) -> None:  # type: ignore[no-untyped-def]
    result = store.put(PutRequest("TopicA", b"x", queue_id=3, properties={"DELAY": "3"}))
    assert (result.topic, result.queue_id, result.queue_offset) == (RMQ_SYS_SCHEDULE_TOPIC, 2, 0)
    record = store.read(result.physical_offset)
    assert (record.topic, record.queue_id) == (RMQ_SYS_SCHEDULE_TOPIC, 2)
    props = parse_properties(record.properties)
    assert (props["DELAY"], props["REAL_TOPIC"], props["REAL_QID"]) == ("3", "TopicA", "3")
    assert record.properties == "".join(
        f"{k}\x01{props[k]}\x02" for k in java_hashmap_order(props, 128)
    )
    assert store.queue_offset(RMQ_SYS_SCHEDULE_TOPIC, 2) == 1
    assert store.queue_offset("TopicA", 3) == 0


def test_delay_above_the_highest_level_is_clamped(store) -> None:  # type: ignore[no-untyped-def]
    result = store.put(PutRequest("TopicA", b"x", properties={"DELAY": "99"}))
    assert result.queue_id == 17
    assert parse_properties(store.read(result.physical_offset).properties)["DELAY"] == "18"


def test_delay_level_drops_timer_properties(store) -> None:  # type: ignore[no-untyped-def]
    props = {"DELAY": "1", "TIMER_DELIVER_MS": "5", "TIMER_DELAY_SEC": "3"}
    result = store.put(PutRequest("TopicA", b"x", properties=props))
    stored = parse_properties(store.read(result.physical_offset).properties)
    assert "TIMER_DELIVER_MS" not in stored and "TIMER_DELAY_SEC" not in stored


@pytest.mark.parametrize("delay", ["0", "-2"])
def test_delay_of_zero_or_less_is_not_rewritten(store, delay: str) -> None:  # type: ignore[no-untyped-def]
    result = store.put(PutRequest("TopicA", b"x", properties={"DELAY": delay}))
    assert result.topic == "TopicA"


def test_delay_on_a_prepared_message_is_not_rewritten(store) -> None:  # type: ignore[no-untyped-def]
    request = PutRequest(
        "TopicA", b"x", properties={"DELAY": "2"}, sys_flag=TRANSACTION_PREPARED_TYPE
    )
    assert store.put(request).topic == "TopicA"


def test_unparsable_delay_is_illegal(store) -> None:  # type: ignore[no-untyped-def]
    result = store.put(PutRequest("TopicA", b"x", properties={"DELAY": "soon"}))
    assert result.status is PutStatus.MESSAGE_ILLEGAL and "DELAY" in result.detail


def test_custom_delay_levels_bound_the_clamp(tmp_path: Path) -> None:
    store = open_store(tmp_path, message_delay_level="1s 2s")
    result = store.put(PutRequest("T", b"x", properties={"DELAY": "5"}))
    assert result.queue_id == 1
    store.close()


# --- idempotency --------------------------------------------------------------------------------


def test_idempotent_retry_is_stored_once(store) -> None:  # type: ignore[no-untyped-def]
    request = PutRequest("T", b"x", properties={"UNIQ_KEY": "K1"}, idempotent=True)
    first = store.put(request)
    again = store.put(request)
    assert again.ok and again.duplicate and not first.duplicate
    assert (again.physical_offset, again.queue_offset, again.msg_id) == (
        first.physical_offset,
        first.queue_offset,
        first.msg_id,
    )
    assert store.max_offset == first.total_size


def test_non_idempotent_put_with_the_same_key_is_stored_again(store) -> None:  # type: ignore[no-untyped-def]
    request = PutRequest("T", b"x", properties={"UNIQ_KEY": "K1"})
    assert store.put(request).physical_offset != store.put(request).physical_offset


def test_same_key_on_another_stored_topic_is_a_new_message(store) -> None:  # type: ignore[no-untyped-def]
    delayed = store.put(
        PutRequest("T", b"x", properties={"UNIQ_KEY": "K", "DELAY": "1"}, idempotent=True)
    )
    redelivered = store.put(PutRequest("T", b"x", properties={"UNIQ_KEY": "K"}, idempotent=True))
    assert not redelivered.duplicate and redelivered.physical_offset > delayed.physical_offset


def test_window_forgets_the_oldest_key_past_its_capacity() -> None:
    window = IdempotencyWindow(2)
    for index in range(3):
        window.add("T", f"K{index}", (index * 100, 100, index, 0, 0))
    assert window.get("T", "K0") is None
    assert window.get("T", "K2") == WindowEntry(200, 100, 2, 0, 0)
    assert window.start_offset(-1) == 100
    assert len(window) == 2


def test_window_of_capacity_zero_remembers_nothing(tmp_path: Path) -> None:
    store = open_store(tmp_path, idempotency_window_messages=0)
    request = PutRequest("T", b"x", properties={"UNIQ_KEY": "K1"}, idempotent=True)
    assert not store.put(request).duplicate and not store.put(request).duplicate
    store.close()


# --- the common-case encoder is the codec, byte for byte ---------------------------------------

_ipv4_hosts = st.builds(HostAddress, st.ip_addresses(v=4).map(str), st.integers(0, (1 << 31) - 1))


@settings(max_examples=300, deadline=None)
@given(
    topic=st.text("abcXYZ019_-%|", min_size=1, max_size=127),
    body=st.binary(max_size=600),
    props=st.text(max_size=80).filter(lambda t: len(t.encode()) <= 32767),
    queue_id=st.integers(0, (1 << 31) - 1),
    flag=st.integers(-(1 << 31), (1 << 31) - 1),
    sys_flag=st.integers(-(1 << 31), (1 << 31) - 1),
    born_ts=st.integers(-(1 << 63), (1 << 63) - 1),
    store_ts=st.integers(-(1 << 63), (1 << 63) - 1),
    born=_ipv4_hosts,
    store=_ipv4_hosts,
    reconsume=st.integers(-(1 << 31), (1 << 31) - 1),
    prepared=st.integers(-(1 << 63), (1 << 63) - 1),
)
def test_fast_encoder_writes_the_same_bytes_as_the_codec(
    topic: str,
    body: bytes,
    props: str,
    queue_id: int,
    flag: int,
    sys_flag: int,
    born_ts: int,
    store_ts: int,
    born: HostAddress,
    store: HostAddress,
    reconsume: int,
    prepared: int,
) -> None:
    fast = encode_ipv4_v1(
        topic, body, props.encode(), queue_id, flag, sys_flag, born_ts, born, store_ts, store,
        reconsume, prepared,
    )  # fmt: skip
    record = MessageRecord(
        topic, body, props, queue_id, flag, 0, 0, sys_flag, born_ts, born, store_ts, store,
        reconsume, prepared,
    )  # fmt: skip
    assert fast == encode_record(record)


def test_fast_encoder_declines_ipv6_and_long_topics() -> None:
    v6 = HostAddress("::1", 1)
    args = (b"b", b"", 0, 0, 0, 0)
    assert encode_ipv4_v1("T", *args, v6, 0, LOCALHOST, 0, 0) is None
    assert encode_ipv4_v1("T" * 128, *args, LOCALHOST, 0, LOCALHOST, 0, 0) is None
    assert encode_ipv4_v1("T", b"b", b"", 1 << 40, 0, 0, 0, LOCALHOST, 0, LOCALHOST, 0, 0) is None


def test_ipv6_hosts_are_stored_through_the_codec(tmp_path: Path) -> None:
    store = open_store(tmp_path, store_host="[::1]:10911")
    request = PutRequest("T", b"x", born_host=HostAddress("fe80::1", 5))
    result = store.put(request)
    assert result.ok and len(result.msg_id) == 56
    record = store.read(result.physical_offset)
    assert (record.born_host, record.store_host) == (
        HostAddress("fe80::1", 5),
        HostAddress("::1", 10911),
    )
    assert record.sys_flag & 0x30 == 0x30
    store.close()


# --- the single-put fast path is the codec, byte for byte -------------------------------------


def _expected_record(request: PutRequest, result, store_host: HostAddress) -> MessageRecord:  # type: ignore[no-untyped-def]
    props = {"UNIQ_KEY": result.uniq_key}
    if request.tags:
        props["TAGS"] = request.tags
    if request.keys:
        props["KEYS"] = " ".join(request.keys)
    text = "".join(f"{key}\x01{props[key]}\x02" for key in order_properties(props))
    born = request.born_timestamp_ms
    return MessageRecord(
        request.topic, bytes(request.body), text, request.queue_id, request.flag,
        result.queue_offset, result.physical_offset, request.sys_flag,
        result.store_timestamp_ms if born is None else born, request.born_host,
        result.store_timestamp_ms, store_host, request.reconsume_times,
        request.prepared_transaction_offset,
    )  # fmt: skip


def _random_requests(seed: int, count: int) -> list[PutRequest]:
    rng = random.Random(seed)
    hosts = [LOCALHOST, HostAddress("10.1.2.3", 40_000), HostAddress("fe80::1", 7)]
    requests = []
    for _ in range(count):
        requests.append(
            PutRequest(
                rng.choice(["TopicA", "B", "%RETRY%g", "T" * 127]),
                rng.randbytes(rng.choice([0, 1, 100, 333])),
                queue_id=rng.choice([0, 1, 7, (1 << 31) - 1]),
                tags=rng.choice([None, "", "TagA", "étiquette"]),
                keys=rng.choice([(), (), ("k1", "k2")]),  # KEYS take the general path
                born_timestamp_ms=rng.choice([None, 0, 1_600_000_000_000, -5]),
                born_host=rng.choice(hosts),
                flag=rng.choice([0, 0, 0, 3]),  # a flag takes the general path
            )
        )
    return requests


@pytest.mark.parametrize("io_mode", [IoMode.MMAP, IoMode.PWRITE])
def test_single_puts_store_exactly_what_the_codec_encodes(tmp_path: Path, io_mode: IoMode) -> None:
    clock = ManualClock(1_700_000_000_000)
    host = HostAddress("192.168.0.1", 10911)
    store = open_store(tmp_path, clock=clock, io_mode=io_mode, store_host=str(host))
    general = []
    general_put = store._appender._append_general
    store._appender._append_general = lambda request: (
        general.append(request) or general_put(request)
    )
    queue_offsets: dict[tuple[str, int], int] = {}
    requests = _random_requests(seed=7, count=400)
    for index, request in enumerate(requests):
        clock.advance(index % 3)
        result = store.put(request)
        assert result.ok, result.detail
        key = (request.topic, request.queue_id)
        assert result.queue_offset == queue_offsets.get(key, 0)
        queue_offsets[key] = result.queue_offset + 1
        assert result.store_timestamp_ms == clock.now_ms()
        assert result.msg_id == offset_msg_id(host, result.physical_offset)
        stored = store.commitlog.read(result.physical_offset, result.total_size)
        assert stored == encode_record(_expected_record(request, result, host), record_crc=True)
    assert len(store.commitlog.segments) > 10  # 4 KiB segments: the puts rolled many times
    # The fast path took every message it can (no KEYS, flag or IPv6 host), the rest went
    # the general way, interleaved.
    assert general == [r for r in requests if r.keys or r.flag or r.born_host.is_ipv6]
    assert 50 < len(general) < 350
    store.close()


def test_fast_path_puts_survive_reopen_with_their_queue_offsets(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    results = [store.put(PutRequest("T", bytes([i]) * 50, queue_id=i % 2)) for i in range(100)]
    store.close()
    store = open_store(tmp_path)
    assert store.queue_offset("T", 0) == store.queue_offset("T", 1) == 50
    for result in results:
        assert store.read(result.physical_offset).body == bytes([results.index(result)]) * 50
    store.close()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("flag", None),
        ("flag", 0.0),
        ("reconsume_times", "0"),
        ("born_timestamp_ms", 1 << 63),
        ("born_timestamp_ms", 1.5),
        ("queue_id", 1 << 31),
        ("queue_id", True),
    ],
)
@pytest.mark.parametrize("batch", [False, True], ids=["put", "put_batch"])
def test_fields_of_the_wrong_type_or_range_are_illegal_not_coerced(
    store, field: str, value: object, batch: bool
) -> None:  # type: ignore[no-untyped-def]
    request = PutRequest("T", b"x", **{field: value})  # type: ignore[arg-type]
    if batch:
        results = store.put_batch([PutRequest("T", b"ok"), request])
        assert results[0].status is PutStatus.MESSAGE_ILLEGAL
        result = results[1]
    else:
        result = store.put(request)
    assert result.status is PutStatus.MESSAGE_ILLEGAL, result
    assert store.max_offset == 0


def test_fast_path_puts_fill_the_idempotency_window(store) -> None:  # type: ignore[no-untyped-def]
    first = store.put(PutRequest("T", b"x"))
    retry = store.put(
        PutRequest("T", b"x", properties={"UNIQ_KEY": first.uniq_key}, idempotent=True)
    )
    assert retry.duplicate and retry.physical_offset == first.physical_offset
    assert (retry.queue_offset, retry.total_size) == (first.queue_offset, first.total_size)
    assert store.max_offset == first.total_size


def test_window_ring_evicts_in_order_across_wraps_and_keeps_first_copies() -> None:
    window = IdempotencyWindow(3)
    assert window.start_offset(-1) == -1
    window.add("T", "K0", (0, 10, 0, 0, 0))
    window.add("T", "K0", (99, 10, 9, 0, 0))  # known: the first copy stays
    assert window.get("T", "K0") == WindowEntry(0, 10, 0, 0, 0)
    assert window.start_offset(-1) == 0
    for index in range(1, 8):
        window.add("T", f"K{index}", (index * 10, 10, index, 0, 0))
        expected = [f"K{i}" for i in range(max(0, index - 2), index + 1)]
        assert [k for k in (f"K{i}" for i in range(index + 1)) if window.get("T", k)] == expected
        assert window.start_offset(-1) == int(expected[0][1:]) * 10
        assert len(window) == len(expected)
    window.add("T", "K7", (1, 1, 1, 1, 1))  # still known
    assert window.get("T", "K7") == WindowEntry(70, 10, 7, 0, 0)


@pytest.mark.parametrize("io_mode", [IoMode.MMAP, IoMode.PWRITE])
def test_put_batches_store_exactly_what_the_codec_encodes(tmp_path: Path, io_mode: IoMode) -> None:
    clock = ManualClock(1_700_000_000_000)
    host = HostAddress("10.0.0.9", 10911)
    store = open_store(
        tmp_path, clock=clock, io_mode=io_mode, store_host=str(host), segment_size_bytes=8192
    )
    general = []
    general_put = store._appender._append_general
    store._appender._append_general = lambda request: (
        general.append(request) or general_put(request)
    )
    fast = []
    fast_batch = store._appender._put_packed
    store._appender._put_packed = lambda parts, *facts: (
        fast.append(parts) or fast_batch(parts, *facts)
    )
    requests = _random_requests(seed=11, count=600)
    rng = random.Random(3)
    queue_offsets: dict[tuple[str, int], int] = {}
    while requests:
        size = rng.choice([1, 2, 5, 9])
        batch = requests[:size]
        if rng.random() < 0.6:  # mostly batches the fast path may take whole
            eligible = [r for r in requests if not (r.keys or r.flag or r.born_host.is_ipv6)]
            batch = eligible[:size] or batch
        for request in batch:
            requests.remove(request)
        clock.advance(1)
        results = store.put_batch(batch)
        for request, result in zip(batch, results, strict=True):
            assert result.ok, result.detail
            key = (request.topic, request.queue_id)
            assert result.queue_offset == queue_offsets.get(key, 0)
            queue_offsets[key] = result.queue_offset + 1
            assert result.store_timestamp_ms == clock.now_ms()
            assert result.msg_id == offset_msg_id(host, result.physical_offset)
            stored = store.commitlog.read(result.physical_offset, result.total_size)
            assert stored == encode_record(_expected_record(request, result, host), record_crc=True)
        assert results[-1].physical_offset + results[-1].total_size == store.max_offset
    assert general == []  # put_batch never falls back to single puts
    assert len(fast) > 20 and len(store.commitlog.segments) > 10
    store.close()
