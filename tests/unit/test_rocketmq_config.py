"""RocketMQ's config files (rmq_spark/broker/config_files/rocketmq_config*.py,
TopicTable.use_config_file).

``rocketmq_reference/config/rocketmq/`` holds the four files as RocketMQ 5.3.3's own classes
write them (``ConfigSamples.java``); ``config/ours/`` the same tables encoded by us, which
the broker's decoders read exactly as their own (``config/rocketmq_read.txt``, checked by
``make_reference.py`` with the real jars).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rmq_spark.broker.config_files import rocketmq_config as rc
from rmq_spark.broker.config_files.rocketmq_config_files import (
    SubscriptionGroups,
    config_path,
    read_consumer_offsets,
    read_topics,
    write_consumer_offsets,
    write_topics,
)
from rmq_spark.broker.topics import TopicStatus, TopicTable
from rmq_spark.clock import ManualClock
from rmq_spark.errors import StoreMetadataError

CONFIG = Path(__file__).parent / "rocketmq_reference" / "config"
VERSION = rc.DataVersion  # counter, stateVersion, timestamp


def _rocketmq(name: str) -> str:
    return (CONFIG / "rocketmq" / name).read_text("utf-8")


def _ours(name: str) -> str:
    return (CONFIG / "ours" / name).read_text("utf-8")


# --- the formats against RocketMQ's own files ------------------------------------------------


def test_topics_json_from_rocketmq_decodes_and_reencodes() -> None:
    topics, version = rc.decode_topics(_rocketmq("topics.json"))
    assert version == VERSION(3, 0, 1764115200000)
    assert topics["TopicTest"] == rc.TopicConfig("TopicTest", 4, 4, perm=6)
    assert topics["ns%Orders"] == rc.TopicConfig("ns%Orders", 8, 8, order=True)
    assert topics["ns%Orders"].extra == {"attributes": {"message.type": "FIFO"}}
    assert set(topics) == {"TopicTest", "ns%Orders", "%RETRY%group-a"}
    assert rc.encode_topics(topics, version) == _ours("topics.json")


def test_subscription_group_json_from_rocketmq_decodes_and_reencodes() -> None:
    groups, version, forbidden = rc.decode_subscription_groups(_rocketmq("subscriptionGroup.json"))
    assert version == VERSION(2, 0, 1764115200000) and forbidden == {}
    assert groups["group-a"] == rc.GroupSettings(retry_max_times=16, fifo=False)
    assert groups["fifo-group"] == rc.GroupSettings(retry_max_times=5, fifo=True)
    assert "TOOLS_CONSUMER" in groups  # RocketMQ's own groups are kept
    assert groups["group-a"].extra["consumeTimeoutMinute"] == 15
    assert rc.encode_subscription_groups(groups, version, forbidden) == _ours(
        "subscriptionGroup.json"
    )


def test_a_new_group_is_written_with_rocketmqs_defaults() -> None:
    text = rc.encode_subscription_groups({"group-a": rc.GroupSettings()})
    ours, _, _ = rc.decode_subscription_groups(text)
    theirs, _, _ = rc.decode_subscription_groups(_rocketmq("subscriptionGroup.json"))
    assert dict(ours["group-a"].extra) == dict(theirs["group-a"].extra)


def test_consumer_offset_json_from_rocketmq_decodes_and_reencodes() -> None:
    table, version = rc.decode_consumer_offsets(_rocketmq("consumerOffset.json"))
    assert version == VERSION(5, 0, 1764115200000)
    assert table == {
        ("TopicTest", "group-a"): {0: 12, 1: 3, 10: 70000000000},
        ("%RETRY%group-a", "group-a"): {0: 0},
    }
    assert rc.encode_consumer_offsets(table, version) == _ours("consumerOffset.json")
    assert '"TopicTest@group-a":{0:12,1:3,10:70000000000\n\t\t}' in _ours("consumerOffset.json")


def test_delay_offset_json_from_rocketmq_decodes_and_reencodes_as_the_schedule_job() -> None:
    table, version = rc.decode_delay_offsets(_rocketmq("delayOffset.json"))
    assert table == {1: 1, 3: 11, 18: 0} and version == VERSION(7, 0, 1764115200000)
    text = rc.encode_delay_offsets(table, version)
    assert text == _ours("delayOffset.json")


def test_rocketmq_read_our_files_as_its_own() -> None:
    read = (CONFIG / "rocketmq_read.txt").read_text("utf-8").splitlines()
    assert [line.split(" ", 1)[0] for line in read] == ["topics", "groups", "offsets", "delay"]
    assert "ns%Orders=ns%Orders,8,8,6,SINGLE_TAG,0,true,{message.type=FIFO}" in read[0]
    assert "fifo-group=fifo-group,5,true,true,1" in read[1]


def test_strict_json_with_quoted_keys_is_read_too() -> None:
    table, version = rc.decode_consumer_offsets('{"offsetTable": {"T@g": {"0": 5}}}')
    assert table == {("T", "g"): {0: 5}} and version is None


@pytest.mark.parametrize(
    ("decode", "text", "words"),
    [
        (rc.decode_topics, "{", "not JSON"),
        (rc.decode_topics, "[]", "expected a JSON object"),
        (rc.decode_topics, '{"topicConfigTable":{"T":{"readQueueNums":"x"}}}', "readQueueNums"),
        (rc.decode_consumer_offsets, '{"offsetTable":{"no-separator":{0:1}}}', "topic@group"),
        (rc.decode_consumer_offsets, '{"offsetTable":{"T@g":{0:true}}}', "expected an integer"),
        (rc.decode_subscription_groups, '{"subscriptionGroupTable":{"g":[]}}', "not an object"),
        (rc.decode_delay_offsets, '{"offsetTable":{x:1}}', "expected an integer"),
    ],
)
def test_bad_text_is_a_one_line_error_naming_the_file(decode, text: str, words: str) -> None:
    with pytest.raises(StoreMetadataError) as info:
        decode(text, "/store/config/some.json")
    message = str(info.value)
    assert message.startswith("/store/config/some.json: ")
    assert words in message and "\n" not in message


# --- files -------------------------------------------------------------------------------------


def test_consumer_offsets_round_trip_through_the_file_with_a_backup(tmp_path: Path) -> None:
    clock = ManualClock(1_000)
    write_consumer_offsets(tmp_path, {("T", "g"): {0: 1}}, clock=clock)
    write_consumer_offsets(tmp_path, {("T", "g"): {0: 7, 1: 2}}, clock=clock)
    path = config_path(tmp_path, "consumerOffset.json")
    assert read_consumer_offsets(tmp_path) == {("T", "g"): {0: 7, 1: 2}}
    assert rc.decode_consumer_offsets(path.read_text())[1] == VERSION(2, 0, 1_000)
    assert rc.decode_consumer_offsets(Path(f"{path}.bak").read_text())[0] == {("T", "g"): {0: 1}}


def test_a_damaged_file_falls_back_to_its_backup_as_rocketmq(tmp_path: Path) -> None:
    write_consumer_offsets(tmp_path, {("T", "g"): {0: 1}})
    write_consumer_offsets(tmp_path, {("T", "g"): {0: 2}})
    config_path(tmp_path, "consumerOffset.json").write_text("{torn")
    assert read_consumer_offsets(tmp_path) == {("T", "g"): {0: 1}}


def test_a_damaged_file_without_backup_names_the_file(tmp_path: Path) -> None:
    path = config_path(tmp_path, "consumerOffset.json")
    path.parent.mkdir()
    path.write_text('{"offsetTable":{"T@g":{0:')
    with pytest.raises(StoreMetadataError, match=r"consumerOffset\.json: not JSON"):
        read_consumer_offsets(tmp_path)


def test_missing_files_read_as_empty(tmp_path: Path) -> None:
    assert read_consumer_offsets(tmp_path) == {} and read_topics(tmp_path) == {}
    assert SubscriptionGroups(tmp_path).get("any") == rc.GroupSettings(16, False)


def test_subscription_groups_update_persists_and_keeps_other_fields(tmp_path: Path) -> None:
    path = config_path(tmp_path, "subscriptionGroup.json")
    path.parent.mkdir()
    path.write_text(_rocketmq("subscriptionGroup.json"))
    groups = SubscriptionGroups(tmp_path, clock=ManualClock(5_000))
    assert groups.get("fifo-group") == rc.GroupSettings(retry_max_times=5, fifo=True)
    assert groups.update("group-a", retry_max_times=3).retry_max_times == 3
    groups.update("new-fifo", fifo=True)
    reopened = SubscriptionGroups(tmp_path)
    assert reopened.get("group-a") == rc.GroupSettings(retry_max_times=3, fifo=False)
    assert reopened.get("new-fifo") == rc.GroupSettings(retry_max_times=16, fifo=True)
    assert reopened.get("fifo-group").fifo and "TOOLS_CONSUMER" in reopened.snapshot()
    assert rc.decode_subscription_groups(path.read_text())[1] == VERSION(4, 0, 5_000)
    with pytest.raises(ValueError, match="retry_max_times"):
        groups.update("g", retry_max_times=-1)


# --- TopicTable -> topics.json -----------------------------------------------------------------


def test_topic_table_writes_configured_and_auto_created_topics(tmp_path: Path) -> None:
    table = TopicTable(auto_create=True, default_queue_count=4, initial=[("Orders", 8)])
    table.use_config_file(tmp_path, clock=ManualClock(9_000))
    assert read_topics(tmp_path) == {"Orders": rc.TopicConfig("Orders", 8, 8)}
    assert table.lookup("Fresh").status is TopicStatus.OK
    table.add_internal("%RETRY%g")
    assert table.flush(timeout_s=30)  # written by the table's writer thread
    assert read_topics(tmp_path) == {
        "Orders": rc.TopicConfig("Orders", 8, 8),
        "Fresh": rc.TopicConfig("Fresh", 4, 4),
        "%RETRY%g": rc.TopicConfig("%RETRY%g", 1, 1),
    }
    assert table.lookup("%RETRY%g").status is TopicStatus.ILLEGAL  # still not for producers
    # NORMAL, FIFO and DELAY sends all stay legal on a RocketMQ 5 proxy: message.type MIXED
    mixed = {"attributes": {"message.type": "MIXED"}}
    assert read_topics(tmp_path)["Fresh"].extra == read_topics(tmp_path)["Orders"].extra == mixed
    assert read_topics(tmp_path)["%RETRY%g"].extra == {"attributes": {}}


def test_topic_table_loads_topics_json_and_keeps_rocketmq_fields(tmp_path: Path) -> None:
    path = config_path(tmp_path, "topics.json")
    path.parent.mkdir()
    path.write_text(_rocketmq("topics.json"))
    table = TopicTable(auto_create=False, default_queue_count=4, initial=[("TopicTest", 2)])
    table.use_config_file(tmp_path)
    assert table.lookup("Orders", "ns").queue_count == 8  # from the file, not the default
    assert table.lookup("TopicTest").queue_count == 2  # this start's config wins
    stored = read_topics(tmp_path)
    assert stored["TopicTest"] == rc.TopicConfig("TopicTest", 2, 2)
    assert stored["ns%Orders"].extra == {"attributes": {"message.type": "FIFO"}}
    assert "%RETRY%group-a" in stored


def test_topics_json_survives_a_restart(tmp_path: Path) -> None:
    first = TopicTable(auto_create=True, default_queue_count=4)
    first.use_config_file(tmp_path)
    first.lookup("A")
    first.close()  # a clean stop writes what the file lacks
    second = TopicTable(auto_create=False, default_queue_count=16)
    second.use_config_file(tmp_path)
    assert second.lookup("A").queue_count == 4


def test_write_topics_bumps_the_data_version(tmp_path: Path) -> None:
    clock = ManualClock(1)
    write_topics(tmp_path, {"A": rc.TopicConfig("A", 1, 1)}, clock=clock)
    clock.advance(5)
    write_topics(tmp_path, {"A": rc.TopicConfig("A", 2, 2)}, clock=clock)
    text = config_path(tmp_path, "topics.json").read_text()
    assert rc.decode_topics(text)[1] == VERSION(2, 0, 6)
