"""The broker's ConsumeQueue against the CommitLog: puts of every kind, CQ flushes, clean
reopens, crashes and power losses that take the units the CQ had not fsynced; after each
step every queue holds exactly the units its records say."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from cq_helpers import actual_units, expected_units
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from store_helpers import open_store

from rmq_spark.clock import ManualClock
from rmq_spark.store.cq_files import CONSUME_QUEUE_DIR, read_flushed_record
from rmq_spark.store.put import PutRequest

FILE_UNITS = 4
REQUESTS = st.builds(
    PutRequest,
    topic=st.sampled_from(["TopicA", "TopicB", "%RETRY%group"]),
    body=st.binary(max_size=200),
    queue_id=st.integers(0, 2),
    tags=st.sampled_from([None, "TagA", "TagA || TagB", "中文"]),
    sys_flag=st.sampled_from([0, 0, 0, 0x4, 0x8, 0xC]),
    properties=st.sampled_from([None, {"DELAY": "2"}, {"DELAY": "40"}]),
)


class ConsumeQueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="cq-machine-"))
        self.clock = ManualClock()
        self.store = open_store(self.root, clock=self.clock, consume_queue_file_units=FILE_UNITS)

    def _reopen(self) -> None:
        self.store = open_store(self.root, clock=self.clock, consume_queue_file_units=FILE_UNITS)

    @rule(requests=st.lists(REQUESTS, min_size=1, max_size=6), batch=st.booleans())
    def put(self, requests: list[PutRequest], batch: bool) -> None:
        self.clock.advance(7)
        results = self.store.put_batch(requests) if batch else map(self.store.put, requests)
        assert all(result.ok for result in results)

    @rule()
    def flush_consume_queues(self) -> None:
        queues = self.store.consume_queues
        assert queues.wait_dispatched(self.store.confirmed_offset, 10)
        queues.flush()

    @rule()
    def close_and_reopen(self) -> None:
        self.store.close()
        self._reopen()
        assert self.store.consume_queue_recovery.start_offset == self.store.max_offset

    @rule(lose_unflushed=st.booleans())
    def crash_and_reopen(self, lose_unflushed: bool) -> None:
        self.store.flush()
        self.store.abandon()
        if lose_unflushed:  # the page cache went with the power: units not fsynced are lost
            self._lose_units_from(read_flushed_record(self.root) or 0)
        self._reopen()

    def _lose_units_from(self, flushed: int) -> None:
        for path in sorted((self.root / CONSUME_QUEUE_DIR).glob("*/*/*")):
            data = bytearray(path.read_bytes())
            for position in range(0, len(data), 20):
                if int.from_bytes(data[position : position + 8], "big") >= flushed:
                    data[position:] = bytes(len(data) - position)
                    break
            path.write_bytes(bytes(data))

    @invariant()
    def units_are_what_the_records_say(self) -> None:
        assert self.store.consume_queues.wait_dispatched(self.store.confirmed_offset, 10)
        assert actual_units(self.store) == expected_units(self.store)

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.root, ignore_errors=True)


TestConsumeQueueMachine = ConsumeQueueMachine.TestCase
TestConsumeQueueMachine.settings = settings(
    max_examples=25,
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
