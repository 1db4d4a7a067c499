"""One redelivery pass on a real store, driven by a ManualClock (no Spark): due times,
restored records, exactly once across simulated crashes, refused and unknown puts."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
from delay_world import START_MS, DelayWorld

from rmq_spark.delay.job import run_once
from rmq_spark.delay.sink import PutOutcome, SinkResult, StoreSink
from rmq_spark.errors import RedeliveryFailedError
from rmq_spark.store.layout import RMQ_SYS_SCHEDULE_TOPIC, RMQ_SYS_WHEEL_TIMER_TOPIC
from rmq_spark.store.message import MessageRecord
from rmq_spark.store.properties import encode_properties, parse_properties
from rmq_spark.store.put import PutRequest


class Crash(BaseException):
    """Stands for SIGKILL at a chosen point: nothing after it runs, no cleanup either."""


class CrashingSink(StoreSink):
    """Puts the first ``put_count`` records of a call, then crashes (or crashes first)."""

    def __init__(self, store: object, put_count: int) -> None:
        super().__init__(store)
        self.put_count = put_count

    def put(
        self,
        records: Sequence[MessageRecord],
        message_ids: Sequence[str],
        refs: Sequence = (),
        requests: Sequence | None = None,
    ) -> list[SinkResult]:
        if self.put_count:
            super().put(records[: self.put_count], message_ids[: self.put_count])
        raise Crash


class UnknownSink(StoreSink):
    """Stores everything but answers UNKNOWN (a timeout after the write)."""

    def put(
        self,
        records: Sequence[MessageRecord],
        message_ids: Sequence[str],
        refs: Sequence = (),
        requests: Sequence | None = None,
    ) -> list[SinkResult]:
        super().put(records, message_ids)
        return [SinkResult(PutOutcome.UNKNOWN, reason="timeout")]


def bodies(world: DelayWorld, topic: str = "orders") -> list[bytes]:
    return sorted(r.body for r in world.records(topic))


def test_each_level_arrives_at_its_due_time_and_not_a_millisecond_before(world: DelayWorld) -> None:
    for level in (1, 2, 3):
        world.put_delayed("orders", f"level-{level}".encode(), level, queue_id=level)
    redeliverer = world.redeliverer()
    for step_ms, expected in [
        (999, []),
        (1, [b"level-1"]),
        (999, [b"level-1"]),
        (1, [b"level-1", b"level-2"]),
        (999, [b"level-1", b"level-2"]),
        (1, [b"level-1", b"level-2", b"level-3"]),
    ]:
        world.clock.advance(step_ms)
        redeliverer.run_pass()
        assert bodies(world) == expected
    for record in world.records("orders"):
        level = int(record.body.decode()[-1])
        assert record.store_timestamp_ms >= START_MS + level * 1000
        assert record.queue_id == level
    redeliverer.close()


def test_the_redelivered_record_keeps_the_schedule_records_properties(world: DelayWorld) -> None:
    world.put_delayed("orders", b"x", 2, queue_id=3, KEYS="k1 k2", TAGS="TagA", UNIQ_KEY="U1")
    (schedule,) = world.records(RMQ_SYS_SCHEDULE_TOPIC)
    redeliverer = world.redeliverer()
    world.clock.advance(2000)
    report = redeliverer.run_pass()
    (delivered,) = world.records("orders")
    assert delivered.properties == schedule.properties
    props = parse_properties(delivered.properties)
    assert (props["DELAY"], props["REAL_TOPIC"], props["REAL_QID"]) == ("2", "orders", "3")
    assert delivered.queue_id == 3
    assert delivered.born_timestamp_ms == schedule.born_timestamp_ms
    assert delivered.prepared_transaction_offset == 0
    assert report.delivered == 1 and report.early == 0
    assert report.lateness_ms == [0]
    redeliverer.close()
    offsets = (world.root / "config" / "delayOffset.json").read_text()
    assert '"offsetTable":{2:1\n\t}' in offsets


def test_timer_messages_arrive_after_their_delivery_time_with_timer_properties(
    world: DelayWorld,
) -> None:
    world.put_timer("orders", b"late", START_MS + 2500)
    world.put_timer("orders", b"early", START_MS + 1200)
    redeliverer = world.redeliverer()
    world.clock.advance(1199)
    redeliverer.run_pass()
    assert bodies(world) == []
    world.clock.advance(1)
    redeliverer.run_pass()
    assert bodies(world) == [b"early"]
    world.clock.advance(1299)
    redeliverer.run_pass()
    assert bodies(world) == [b"early"]
    world.clock.advance(1)
    redeliverer.run_pass()
    assert bodies(world) == [b"early", b"late"]
    late = next(r for r in world.records("orders") if r.body == b"late")
    props = parse_properties(late.properties)
    assert props["TIMER_DEQUEUE_MS"] == str(START_MS + 2500)
    assert props["TIMER_ENQUEUE_MS"] == str(START_MS)
    assert props["REAL_TOPIC"] == "orders"
    assert late.store_timestamp_ms >= int(props["TIMER_DELIVER_MS"])
    redeliverer.close()


def test_two_retries_of_one_message_are_both_delivered_by_the_broker(world: DelayWorld) -> None:
    """Retry records are the broker's (its RetryReviver); the job passes over them."""
    world.put_delayed("%RETRY%g", b"m", 1, UNIQ_KEY="SAME", RETRY_TOPIC="orders")
    world.put_delayed("%RETRY%g", b"m", 2, UNIQ_KEY="SAME", RETRY_TOPIC="orders")
    redeliverer = world.redeliverer()
    world.clock.advance(2000)
    assert redeliverer.run_pass().discarded == 2
    store = world.broker.store  # the reviver reads the ConsumeQueue, dispatched behind puts
    assert store.consume_queues.wait_dispatched(store.confirmed_offset, 30)
    world.broker.consume.reviver.revive_due()
    assert bodies(world, "%RETRY%g") == [b"m", b"m"]
    redeliverer.close()


@pytest.mark.parametrize("put_count", [0, 1, 3, 5])
def test_a_crash_around_the_put_neither_loses_nor_duplicates(
    world: DelayWorld, put_count: int
) -> None:
    for index in range(5):
        world.put_delayed("orders", f"m{index}".encode(), 1 + index % 2, UNIQ_KEY=f"U{index}")
    world.put_timer("orders", b"timer", START_MS + 1500)
    world.clock.advance(2000)
    crashing = world.redeliverer(CrashingSink(world.broker, put_count))
    with pytest.raises(Crash):
        crashing.run_pass()
    crashing.files.unlock()  # the process is gone: the kernel drops its lock
    journal = json.loads((world.root / "config" / "scheduleJournal.json").read_text())
    assert len(journal["intent"]["entries"]) == 6
    restarted = world.redeliverer()
    report = restarted.run_pass()
    expected = sorted([f"m{i}".encode() for i in range(5)] + [b"timer"])
    assert bodies(world) == expected
    assert report.settled_found == put_count
    assert report.settled_put == 6 - put_count
    world.clock.advance(5000)
    restarted.run_pass()
    assert bodies(world) == expected
    restarted.close()


def test_an_unknown_outcome_marks_nothing_done_and_the_next_pass_settles_it(
    world: DelayWorld,
) -> None:
    world.put_delayed("orders", b"a", 1)
    world.put_delayed("orders", b"b", 1)
    world.clock.advance(1000)
    unsure = world.redeliverer(UnknownSink(world.broker))
    report = unsure.run_pass()
    assert report.error is not None and "unknown" in report.error
    assert unsure.journal.levels.get(1) is None and unsure.journal.intent is not None
    unsure.close()
    again = world.redeliverer()
    report = again.run_pass()
    assert (report.settled_found, report.settled_put) == (2, 0)
    assert bodies(world) == [b"a", b"b"]
    assert again.journal.levels[1].low_water == 2
    again.close()


def test_a_refused_message_waits_while_the_next_ones_go_on(world: DelayWorld) -> None:
    world.put_delayed("orders", b"first", 1)
    # A schedule record whose REAL_TOPIC the store refuses (written as raw properties).
    raw = encode_properties({"DELAY": "1", "REAL_TOPIC": "bad topic!", "REAL_QID": "0"})
    put = PutRequest(topic=RMQ_SYS_SCHEDULE_TOPIC, body=b"refused", raw_properties=raw)
    assert world.broker.store.put(put).ok
    world.put_delayed("orders", b"third", 1)
    world.clock.advance(1000)
    redeliverer = world.redeliverer()
    with pytest.raises(RedeliveryFailedError, match="refused 1"):
        run_once(redeliverer)
    assert bodies(world) == [b"first", b"third"]
    progress = redeliverer.journal.levels[1]
    assert progress.low_water == 1 and progress.is_done(2) and not progress.is_done(1)
    redeliverer.close()


def test_once_on_an_empty_store_and_on_nothing_due_delivers_nothing(world: DelayWorld) -> None:
    redeliverer = world.redeliverer()
    assert run_once(redeliverer).delivered == 0
    world.put_delayed("orders", b"later", 3)
    world.put_timer("orders", b"later", START_MS + 60_000)
    total = run_once(redeliverer)
    assert (total.delivered, total.next_due_ms) == (0, START_MS + 3000)
    assert bodies(world) == []
    redeliverer.close()


def test_progress_survives_a_restart(world: DelayWorld) -> None:
    for index in range(4):
        world.put_delayed("orders", f"m{index}".encode(), 1)
    world.clock.advance(1000)
    first = world.redeliverer(batch_messages_max=3, pass_messages_max=3)
    assert first.run_pass().delivered == 3
    first.close()
    second = world.redeliverer()
    assert second.run_pass().delivered == 1
    second.close()
    assert bodies(world) == [b"m0", b"m1", b"m2", b"m3"]


def test_timer_delete_marker_cancels_its_message(world: DelayWorld) -> None:
    world.put_timer("orders", b"cancel me", START_MS + 1500)
    (timer,) = world.records(RMQ_SYS_WHEEL_TIMER_TOPIC)
    uniq = parse_properties(timer.properties)["UNIQ_KEY"]
    marker = parse_properties(timer.properties) | {"TIMER_DEL_UNIQKEY": f"orders+{uniq}"}
    marker["UNIQ_KEY"] = "MARKER"
    result = world.broker.store.put(
        PutRequest(topic=RMQ_SYS_WHEEL_TIMER_TOPIC, body=b"-", properties=marker)
    )
    assert result.ok
    world.clock.advance(1500)
    redeliverer = world.redeliverer()
    report = redeliverer.run_pass()
    assert bodies(world) == [] and report.discarded == 2
    redeliverer.close()


def test_one_pass_delivers_many_batches_of_levels_and_timers(world: DelayWorld) -> None:
    for index in range(10):
        world.put_delayed("orders", f"level-{index}".encode(), 1 + index % 3)
        world.put_timer("orders", f"timer-{index}".encode(), START_MS + 100 * index + 1)
    world.clock.advance(3000)
    redeliverer = world.redeliverer(batch_messages_max=4, pass_messages_max=100)
    report = redeliverer.run_pass()
    assert (report.delivered, report.batches, report.exhausted) == (20, 5, True)
    assert len(bodies(world)) == 20 and len(set(bodies(world))) == 20
    assert redeliverer.run_pass().delivered == 0
    redeliverer.close()


class CrashOnCallSink(StoreSink):
    """Puts normally, then crashes at call number ``crash_call`` before putting anything."""

    def __init__(self, store: object, crash_call: int) -> None:
        super().__init__(store)
        self.crash_call, self.calls = crash_call, 0

    def put(
        self,
        records: Sequence[MessageRecord],
        message_ids: Sequence[str],
        refs: Sequence = (),
        requests: Sequence | None = None,
    ) -> list[SinkResult]:
        self.calls += 1
        if self.calls == self.crash_call:
            raise Crash
        return super().put(records, message_ids, refs, requests)


def test_a_crash_in_a_later_batch_keeps_the_earlier_batches_done_exactly_once(
    world: DelayWorld,
) -> None:
    for index in range(6):
        world.put_delayed("orders", f"m{index}".encode(), 1, UNIQ_KEY=f"U{index}")
    world.clock.advance(1000)
    crashing = world.redeliverer(CrashOnCallSink(world.broker, 3), batch_messages_max=2)
    with pytest.raises(Crash):
        crashing.run_pass()
    crashing.files.unlock()
    journal = json.loads((world.root / "config" / "scheduleJournal.json").read_text())
    # One write holds batch 2's commit and batch 3's intent.
    assert journal["levels"]["1"]["low_water"] == 4 and len(journal["intent"]["entries"]) == 2
    restarted = world.redeliverer()
    report = restarted.run_pass()
    assert bodies(world) == [f"m{i}".encode() for i in range(6)]
    assert (report.settled_found, report.settled_put) == (0, 2)
    restarted.close()


class CountingReader:
    """The job's LogReader, counting the messages it reads by physical offset."""

    def __init__(self, reader: object) -> None:
        self._reader, self.read_count = reader, 0

    def read_many(self, spans: Sequence[tuple[int, int]]) -> list[object]:
        self.read_count += len(spans)
        return self._reader.read_many(spans)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self._reader, name)


def test_messages_read_ahead_are_put_when_due_with_the_dequeue_time_of_their_put(
    world: DelayWorld,
) -> None:
    world.put_delayed("orders", b"level", 1, UNIQ_KEY="UL")
    world.put_timer("orders", b"timer", START_MS + 1500)
    redeliverer = world.redeliverer(lookahead_ms=3000)
    reader = CountingReader(redeliverer.reader)
    redeliverer.reader = reader  # type: ignore[assignment]

    report = redeliverer.run_pass()
    assert report.delivered == 0 and report.next_due_ms == START_MS + 1000
    assert reader.read_count == 2  # both read ahead, before they are due

    world.clock.advance(1000)
    assert redeliverer.run_pass().delivered == 1
    world.clock.advance(499)
    assert redeliverer.run_pass().delivered == 0  # never early
    world.clock.advance(101)
    assert redeliverer.run_pass().delivered == 1
    assert reader.read_count == 2  # nothing read at due time

    by_body = {r.body: r for r in world.records("orders")}
    assert by_body[b"level"].store_timestamp_ms == START_MS + 1000
    timer = parse_properties(by_body[b"timer"].properties)
    assert timer["TIMER_DEQUEUE_MS"] == str(START_MS + 1600)  # the put's pass, not the read's
    assert by_body[b"timer"].store_timestamp_ms == START_MS + 1600
    redeliverer.close()


class CountingSource:
    """The job's entry source, counting how often it is asked for candidates."""

    def __init__(self, source: object) -> None:
        self._source, self.calls = source, 0

    def candidates(self, *args: object, **kwargs: object) -> object:
        self.calls += 1
        return self._source.candidates(*args, **kwargs)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self._source, name)


def test_entries_read_ahead_are_put_when_due_without_asking_the_source_again(
    world: DelayWorld,
) -> None:
    world.put_timer("orders", b"timer", START_MS + 1500)
    redeliverer = world.redeliverer(lookahead_ms=3000)
    source = CountingSource(redeliverer.source)
    redeliverer.source = source  # type: ignore[assignment]
    assert redeliverer.run_pass().delivered == 0
    asked = source.calls
    world.clock.advance(1500)  # past the answer's reuse window (half a trigger interval)
    assert redeliverer.run_pass().delivered == 1
    assert source.calls == asked  # a table source would have cost a Spark query here
    world.clock.advance(2000)  # past the look-ahead horizon: the source is asked again
    redeliverer.run_pass()
    assert source.calls > asked
    assert [r.body for r in world.records("orders")] == [b"timer"]
    redeliverer.close()
