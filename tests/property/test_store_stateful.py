"""The store against a plain list: put, batch put, roll, flush, reopen, crash, torn tail."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from store_helpers import open_store, zero_from

from rmq_spark.clock import ManualClock
from rmq_spark.store.put import PutRequest

TOPICS = st.sampled_from(["TopicA", "TopicB", "%RETRY%group"])
QUEUES = st.integers(0, 2)
BODIES = st.binary(min_size=0, max_size=300)


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="store-machine-"))
        self.clock = ManualClock()
        self.store = open_store(self.root, clock=self.clock)
        # model: acknowledged records in log order
        self.records: list[tuple[int, int, str, int, bytes, int]] = []
        self.next_queue_offset: dict[tuple[str, int], int] = {}

    def _acknowledge(self, request: PutRequest, result) -> None:  # type: ignore[no-untyped-def]
        assert result.ok, result
        key = (request.topic, request.queue_id)
        expected = self.next_queue_offset.get(key, 0)
        assert result.queue_offset == expected
        self.next_queue_offset[key] = expected + 1
        if self.records:
            last = self.records[-1]
            assert result.physical_offset >= last[0] + last[1]
        self.records.append(
            (
                result.physical_offset,
                result.total_size,
                request.topic,
                request.queue_id,
                request.body,
                result.queue_offset,
            )
        )

    @rule(topic=TOPICS, queue_id=QUEUES, body=BODIES)
    def put(self, topic: str, queue_id: int, body: bytes) -> None:
        self.clock.advance(1)
        request = PutRequest(topic, body, queue_id=queue_id)
        self._acknowledge(request, self.store.put(request))

    @rule(messages=st.lists(st.tuples(TOPICS, QUEUES, BODIES), min_size=1, max_size=8))
    def put_batch(self, messages: list[tuple[str, int, bytes]]) -> None:
        requests = [PutRequest(t, b, queue_id=q) for t, q, b in messages]
        results = self.store.put_batch(requests)
        if sum(r.total_size for r in results if r.ok) + 8 > 4096 or not results[0].ok:
            assert all(not r.ok for r in results)
            return
        for request, result in zip(requests, results, strict=True):
            self._acknowledge(request, result)

    @rule()
    def roll(self) -> None:
        """A message too big for what is left of the segment starts the next one."""
        last = self.store.commitlog.last
        room = last.size_bytes - last.write_position if last else 0
        request = PutRequest("TopicA", b"r" * 1000)
        result = self.store.put(request)
        self._acknowledge(request, result)
        first_segment, last_segment = (
            result.physical_offset // 4096,
            (result.physical_offset + result.total_size - 1) // 4096,
        )
        assert first_segment == last_segment  # a record never spans two files
        if last is not None and result.total_size + 8 > room:
            assert result.physical_offset == last.base_offset + 4096

    @rule()
    def flush(self) -> None:
        assert self.store.flush() == self.store.max_offset

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = open_store(self.root, clock=self.clock)
        assert self.store.recovery_report.clean_shutdown
        assert self.store.recovery_report.truncated_bytes == 0

    @rule()
    def crash(self) -> None:
        self.store.abandon()
        self.store = open_store(self.root, clock=self.clock)
        assert not self.store.recovery_report.clean_shutdown
        assert self.store.recovery_report.truncated_bytes == 0

    @precondition(lambda self: self.records and self.records[-1][0] >= self.store.flushed_offset)
    @rule(data=st.data())
    def crash_with_torn_tail(self, data: st.DataObject) -> None:
        offset, size, topic, queue_id, _body, queue_offset = self.records[-1]
        cut = data.draw(st.integers(0, size - 1), label="cut")
        self.store.abandon()
        segment = self.root / "commitlog" / f"{offset - offset % 4096:020d}"
        zero_from(segment, offset % 4096 + cut)
        self.store = open_store(self.root, clock=self.clock)
        assert self.store.recovery_report.end_offset == offset
        self.records.pop()
        self.next_queue_offset[(topic, queue_id)] = queue_offset

    @invariant()
    def every_acknowledged_record_reads_back(self) -> None:
        for offset, size, topic, queue_id, body, queue_offset in self.records[-20:]:
            decoded = self.store.read_decoded(offset)
            record = decoded.record
            assert decoded.total_size == size
            assert (record.topic, record.queue_id, record.body) == (topic, queue_id, body)
            assert record.queue_offset == queue_offset

    @invariant()
    def offsets_match_the_model(self) -> None:
        if self.records:
            offset, size = self.records[-1][:2]
            end = offset + size
            # After a BLANK the log may already stand at the next segment's start.
            assert self.store.max_offset in (end, end + 4096 - end % 4096)
        for key, value in self.next_queue_offset.items():
            assert self.store.queue_offset(*key) == value

    def teardown(self) -> None:
        try:
            self.store.close()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


StoreMachine.TestCase.settings = settings(
    max_examples=15,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_store_matches_a_list_model = StoreMachine.TestCase
