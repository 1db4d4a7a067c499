"""``spark.readStream.format("rocketmq")``: the streaming reader (micro-batches).

Offsets and admission control as ``source.py`` describes; the store is looked at once per
trigger: ``latestOffset`` opens the view and finds the readable end, and the
``reportLatestOffset`` and ``partitions`` calls of the same trigger reuse that view.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from rmq_spark.errors import DataLossError
from rmq_spark.spark import group_offsets, planner
from rmq_spark.spark.offsets import offset_dict, parse_offset
from rmq_spark.spark.options import SourceOptions, StartingMode
from rmq_spark.spark.partitions import (
    LogPartition,
    open_view,
    plan,
    read_partition,
    resolve_start,
)
from rmq_spark.spark.schema import ARROW_SCHEMA
from rmq_spark.store.view import StoreView

__all__ = ["BACKLOG_COUNT_MAX", "PROGRESS_COUNT_MAX", "RocketMQStreamReader"]

BACKLOG_COUNT_MAX = 1_000_000  # metrics(): count at most this many messages, then estimate
PROGRESS_COUNT_MAX = 20_000  # reportLatestOffset (every trigger): ~4 ms of header hops at most


class RocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("rocketmq")``: micro-batches over the growing log.

    Offsets are ``{"physical_offset": N}`` (N is always a record boundary); a batch reads
    every record starting in ``[start, end)``. Admission control: ``maxBytesPerTrigger`` /
    ``maxMessagesPerTrigger`` (also under ``Trigger.AvailableNow``, which stops at the end
    seen when the query started).
    """

    def __init__(self, options: SourceOptions, schema: pa.Schema = ARROW_SCHEMA) -> None:
        self.options = options
        self.schema = schema
        self._tail = planner.TailCache()
        self._available_now_end: int | None = None
        self._planned_end: int | None = None  # what the last latestOffset(start, limit) gave
        # The view latestOffset opened and its readable end: reportLatestOffset and
        # partitions of the same trigger reuse them (one look at the store per trigger).
        self._trigger: tuple[StoreView, int] | None = None
        self.skipped_ranges: list[tuple[int, int]] = []
        self._last_trigger_ms = 0  # minMessagesPerTrigger: when the last batch was admitted
        self._group = group_offsets.GroupSync(options) if options.consumer_group else None

    def _look(self) -> tuple[StoreView, int]:
        """A fresh view of the store and its readable end (not capped by AvailableNow)."""
        view = open_view(self.options)
        return view, planner.readable_end(view, self._tail)

    def _capped(self, end: int) -> int:
        if self._available_now_end is not None:
            end = min(end, self._available_now_end)
        return end

    def initialOffset(self) -> dict:
        view, end = self._look()
        if self.options.starting_mode is StartingMode.GROUP:
            return offset_dict(group_offsets.start_of_group(view, self.options, self._capped(end)))
        return offset_dict(resolve_start(view, self.options, self._capped(end)))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_messages_per_trigger:
            return ReadMaxRows(self.options.max_messages_per_trigger)
        if self.options.max_bytes_per_trigger:
            return ReadMaxBytes(self.options.max_bytes_per_trigger)
        if self.options.min_messages_per_trigger:  # with a maximum, latestOffset applies it
            return ReadMinRows(self.options.min_messages_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        if self._group is not None:  # every batch before ``start`` is in the commit log
            self._group.advance(parse_offset(start, what="start offset"))
        self._trigger = self._look()
        begin = parse_offset(start, what="start offset")
        planned = self._batch_end(begin, limit)
        if planned > begin and self._delays(begin, limit):
            planned = begin
        self._planned_end = planned
        return offset_dict(planned)

    def _delays(self, begin: int, limit: ReadLimit) -> bool:
        """``minMessagesPerTrigger`` as Kafka's ``minOffsetsPerTrigger``: no batch (the
        start is returned, Spark skips the trigger) while fewer messages of the subscribed
        topics wait and ``maxTriggerDelay`` has not passed since the last batch. Not under
        ``Trigger.AvailableNow`` or ``ReadAllAvailable`` (they must reach their end)."""
        wanted = self.options.min_messages_per_trigger
        if isinstance(limit, ReadMinRows):
            wanted = limit.min_rows
        if not wanted or isinstance(limit, ReadAllAvailable):
            return False
        if self._available_now_end is not None:
            return False
        now = int(time.time() * 1000)
        if now - self._last_trigger_ms >= self.options.max_trigger_delay_ms:
            self._last_trigger_ms = now
            return False
        assert self._trigger is not None
        view, end = self._trigger
        first = min(max(begin, view.min_offset), end)
        count_max = max(wanted, PROGRESS_COUNT_MAX)
        waiting = planner.lag(view, first, end, count_max, *self._topic_filter())
        if waiting.messages < wanted:
            return True
        self._last_trigger_ms = now
        return False

    def _topic_filter(self) -> tuple[tuple[str, ...], str]:
        return self.options.topics, self.options.topic_pattern

    def _batch_end(self, begin: int, limit: ReadLimit) -> int:
        assert self._trigger is not None
        view, readable = self._trigger
        end = self._capped(readable)
        if end <= begin:
            return begin
        if isinstance(limit, ReadAllAvailable | ReadMinRows):
            return end
        records_max = self.options.max_messages_per_trigger
        bytes_max = self.options.max_bytes_per_trigger
        if isinstance(limit, ReadMaxRows):
            records_max = limit.max_rows
        elif isinstance(limit, ReadMaxBytes):
            bytes_max = limit.max_bytes
        first = begin
        if begin < view.min_offset:
            if self.options.fail_on_data_loss:
                raise DataLossError(begin, view.min_offset, "the next batch starts there")
            first = view.min_offset
        batch_end = planner.advance(
            view,
            first,
            end,
            records_max=records_max,
            bytes_max=bytes_max,
            topics=self.options.topics,
            topic_pattern=self.options.topic_pattern,
        )
        return max(batch_end, begin)

    def reportLatestOffset(self) -> dict:
        """The durable end and the backlog behind the batch just planned, for the progress.

        Spark calls this right after ``latestOffset(start, limit)`` and uses the answer only
        for ``SourceProgress.latestOffset`` (it never deserializes, compares or checkpoints
        it), so next to the canonical ``physical_offset`` it carries ``backlogBytes`` and
        ``backlogMessages`` (``backlogMessagesExact`` false: an estimate past
        ``PROGRESS_COUNT_MAX`` messages) behind the end of that batch, and the query's lag
        (``lag_keys``: subscribed topics only, with the age of the oldest unread message).
        """
        view, end = self._trigger if self._trigger is not None else self._look()
        reported: dict = offset_dict(end)
        if self._planned_end is not None:
            first = min(max(self._planned_end, view.min_offset), end)
            found = planner.backlog(view, first, end, PROGRESS_COUNT_MAX)
            reported["backlogBytes"] = max(0, end - self._planned_end)
            reported["backlogMessages"] = found.messages
            reported["backlogMessagesExact"] = found.exact
            reported.update(self._lag_keys(view, first, end, PROGRESS_COUNT_MAX, found))
        return reported

    def _lag_keys(
        self, view: StoreView, first: int, end: int, count_max: int, log: planner.Backlog
    ) -> dict:
        """``lagMessages``, ``lagBytes``, ``lagSeconds`` (now minus the store time of the
        oldest unread message, 0 when none) and ``lagExact`` of the subscribed topics."""
        if self.options.wants_topic_filter():
            found = planner.lag(view, first, end, count_max, *self._topic_filter())
        else:  # the log's backlog is the lag: only the oldest store time is missing
            oldest = planner.first_store_time(view, first, end) if log.messages else -1
            found = planner.Lag(log.messages, log.bytes, log.exact, oldest)
        age_ms = max(0, int(time.time() * 1000) - found.oldest_store_ms)
        return {
            "lagMessages": found.messages,
            "lagBytes": found.bytes,
            "lagSeconds": round(age_ms / 1000, 3) if found.oldest_store_ms >= 0 else 0.0,
            "lagExact": found.exact,
        }

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now_end = self._look()[1]

    def _view_for(self, stop: int) -> StoreView:
        """The trigger's view if it saw ``stop`` (else a fresh one: a replayed batch)."""
        trigger, self._trigger = self._trigger, None
        if trigger is not None and stop <= trigger[1]:
            return trigger[0]
        return open_view(self.options)

    def partitions(self, start: dict, end: dict) -> list[LogPartition]:
        begin = parse_offset(start, what="start offset")
        stop = parse_offset(end, what="end offset")
        return plan(self._view_for(stop), self.options, begin, stop, self.skipped_ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition, self.options, self.schema)

    def commit(self, end: dict) -> None:
        """Spark committed the batch ending at ``end`` (Spark calls this only when it plans
        the batch after): with ``consumerGroup``, so does the group (forward only)."""
        stop = parse_offset(end, what="committed offset")
        if self._group is not None:
            self._group.advance(stop)

    def metrics(self, latest_consumed_offset: dict | None = None) -> dict[str, str]:
        """Backlog behind the durable end, in the shape of Spark's ``ReportsSourceMetrics``.

        Spark 4.2 does not call this for Python sources; ``reportLatestOffset`` (shown as
        ``latestOffset`` in the query progress) carries the durable end, the backlog and the
        lag, and this method serves jobs and tests that want them (or the skipped ranges)
        directly. With ``latest_consumed_offset``: ``backlog*`` (the whole log behind it) and
        ``lag*`` (the subscribed topics: messages, bytes, seconds), counted up to
        ``BACKLOG_COUNT_MAX`` messages then estimated.
        """
        view, end = self._look()
        result = {
            "latestDurableOffset": str(end),
            "dataLossSkippedRanges": json.dumps(self.skipped_ranges),
        }
        if latest_consumed_offset is not None:
            consumed = parse_offset(latest_consumed_offset, what="consumed offset")
            first = min(max(consumed, view.min_offset), end)
            found = planner.backlog(view, first, end, BACKLOG_COUNT_MAX)
            result["backlogBytes"] = str(max(0, end - consumed))
            result["backlogMessages"] = str(found.messages)
            result["backlogMessagesExact"] = str(found.exact).lower()
            lag = self._lag_keys(view, first, end, BACKLOG_COUNT_MAX, found)
            result.update({key: json.dumps(value) for key, value in lag.items()})
        return result
