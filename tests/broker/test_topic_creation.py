"""Topic auto-creation (issue 25, item 6): a creation costs memory only, topics.json follows
from a writer thread that coalesces creations; each client address has a creation budget."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from broker_harness import start_broker

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.config_files.rocketmq_config import decode_topics
from rmq_spark.broker.config_files.rocketmq_config_files import config_path, read_topics
from rmq_spark.broker.producer import Producer
from rmq_spark.broker.topics import CreationBudget, TopicStatus, TopicTable
from rmq_spark.clock import ManualClock
from rmq_spark.errors import SendRejectedError

_HANG_GUARD_S = 60  # the creations return at once; this only keeps a regression from hanging


def test_creations_never_wait_for_topics_json_and_are_written_together(tmp_path: Path) -> None:
    table = TopicTable(auto_create=True, default_queue_count=2)
    table.use_config_file(tmp_path)
    # topics.json becomes a FIFO: whoever writes the file next blocks reading the old content
    # until the test opens the other end, as a write stuck on a slow disk would.
    path = config_path(tmp_path, "topics.json")
    path.unlink()
    os.mkfifo(path)
    done = threading.Event()

    def create() -> None:
        for index in range(500):
            assert table.lookup(f"T{index}").status is TopicStatus.OK
        done.set()

    creator = threading.Thread(target=create, daemon=True)
    creator.start()
    finished = done.wait(_HANG_GUARD_S)
    release = os.open(path, os.O_WRONLY)  # the blocked reader gets EOF: the write goes on
    os.close(release)
    assert finished, "a topic creation waited for the topics.json write"
    assert table.flush(timeout_s=_HANG_GUARD_S)
    text = path.read_text()
    topics, version = decode_topics(text)
    assert {f"T{index}" for index in range(500)} <= set(topics)
    # one write at start, the one that blocked, and the rest together: not one per topic
    assert version is not None and version.counter <= 4
    table.close()


def test_each_client_address_has_a_creation_budget() -> None:
    clock = ManualClock(1_000)
    table = TopicTable(
        auto_create=True, default_queue_count=1, budget=CreationBudget(1.0, 3, clock)
    )
    assert [table.lookup(f"a{i}", client="10.0.0.1").status for i in range(3)] == [
        TopicStatus.OK
    ] * 3
    refused = table.lookup("a3", client="10.0.0.1")
    assert refused.status is TopicStatus.NOT_FOUND
    assert "10.0.0.1 may auto-create no more topics now" in refused.reason
    assert "broker.auto_create_topics_per_s = 1" in refused.reason
    assert table.lookup("a0", client="10.0.0.1").status is TopicStatus.OK  # existing: fine
    assert table.lookup("b0", client="10.0.0.2").status is TopicStatus.OK  # another client
    clock.advance(1_000)
    assert table.lookup("a3", client="10.0.0.1").status is TopicStatus.OK
    assert table.lookup("a4", client="10.0.0.1").status is TopicStatus.NOT_FOUND


def test_topics_the_log_holds_join_a_topics_json_that_lacks_them(tmp_path: Path) -> None:
    table = TopicTable(auto_create=False, default_queue_count=4)
    seen = [("Lost", 5), ("Lost", 0), ("%RETRY%g", 0), ("SCHEDULE_TOPIC_XXXX", 2)]
    table.use_config_file(tmp_path, seen=seen)
    stored = read_topics(tmp_path)
    assert stored["Lost"].write_queue_nums == 6 and stored["%RETRY%g"].write_queue_nums == 1
    assert "SCHEDULE_TOPIC_XXXX" not in stored
    assert table.lookup("Lost").queue_count == 6
    table.close()


def test_the_default_listen_address_is_loopback() -> None:
    defaults = BrokerConfig()
    assert defaults.listen.startswith("127.0.0.1:") and defaults.auto_create_topics
    assert (defaults.auto_create_topics_per_s, defaults.auto_create_topics_burst) == (10.0, 100)


def test_a_broker_refuses_creations_over_the_budget_in_one_line(tmp_path: Path) -> None:
    broker = start_broker(
        tmp_path / "store",
        tmp_path,
        "broker.auto_create_topics_burst=2",
        "broker.auto_create_topics_per_s=0.001",
    )
    try:
        with Producer(broker.address, max_attempts=1) as producer:
            producer.send("first", b"1")
            producer.send("second", b"2")
            with pytest.raises(SendRejectedError) as refused:
                producer.send("third", b"3")
            assert refused.value.code_name == "TOPIC_NOT_FOUND"
            assert "auto-create no more topics" in str(refused.value)
            assert "\n" not in str(refused.value)
            producer.send("first", b"again")  # topics that exist take sends as before
    finally:
        assert broker.stop() == 0
    assert {"first", "second"} <= set(read_topics(tmp_path / "store"))
    assert "third" not in read_topics(tmp_path / "store")


def test_clients_beyond_those_tracked_share_one_budget() -> None:
    clock = ManualClock(1_000)
    budget = CreationBudget(1.0, 2, clock)
    budget._MAX_CLIENTS = 2  # what 10,000 addresses at once would do
    assert budget.take("a") and budget.take("b")
    assert budget.take("c") and budget.take("d")  # the shared bucket: burst 2
    assert not budget.take("e")
    clock.advance(10_000)  # every bucket full again: forgotten, new clients tracked
    assert budget.take("e")
