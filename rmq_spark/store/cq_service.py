"""``ConsumeQueueService``: a store's ConsumeQueues from open to close.

Owns the life cycle the store drives: load ``consumequeue/``, recover it against the
recovered CommitLog (``cq_recovery.py``), run the dispatch thread (``cq_dispatch.py``),
flush periodically, delete what retention made useless, and stop (a last dispatch round,
then a flush on a clean close). With ``store.message_index`` the same for RocketMQ's
``index/`` (``index_files.py``, ``index_recovery.py``): the dispatch round feeds it the same
facts. ``MessageStore`` holds one when ``store.consume_queue`` is on and calls ``wake`` when
its acknowledged end moves. Does not own the files or the rules.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from rmq_spark.store.checkpoint import Checkpoint
from rmq_spark.store.commitlog import CommitLog
from rmq_spark.store.config import FlushPolicy, StoreConfig
from rmq_spark.store.consume_queues import ConsumeQueues
from rmq_spark.store.cq_dispatch import CqDispatcher
from rmq_spark.store.cq_facts import PendingUnits
from rmq_spark.store.cq_recovery import CqRecovery, recover_consume_queues
from rmq_spark.store.delay_levels import parse_message_delay_level
from rmq_spark.store.index_dispatch import IndexDispatch
from rmq_spark.store.index_files import IndexFiles
from rmq_spark.store.index_recovery import IndexRecovery, recover_index
from rmq_spark.store.recovery import RecoveredState

__all__ = ["ConsumeQueueService"]


class ConsumeQueueService:
    """The ConsumeQueues of an open store and their dispatch thread (use ``start``).

    ``wake`` is the dispatcher's wake-up and ``pending`` its facts (``cq_facts.py``), both
    for the store's put path; ``recovery`` says what opening did."""

    def __init__(
        self,
        queues: ConsumeQueues,
        dispatcher: CqDispatcher,
        recovery: CqRecovery,
        *,
        async_puts: bool = False,
        index: IndexFiles | None = None,
        index_recovery: IndexRecovery | None = None,
    ) -> None:
        self.queues = queues
        self.recovery = recovery
        self.index = index
        """The store's ``index/`` files (``None``: ``store.message_index`` is off)."""
        self.index_recovery = index_recovery
        self._dispatcher = dispatcher
        self.wake: Callable[[], None] = dispatcher.after_write if async_puts else dispatcher.wake
        """The acknowledged end moved: under SYNC (the group commit's fsync) a wake-up for
        the thread; under ASYNC (a put thread after its write) ``CqDispatcher.after_write``,
        which dispatches a large batch in that thread."""
        self.pending: PendingUnits = dispatcher.pending
        """Where the put path hands over the facts of each record it writes."""

    @classmethod
    def start(
        cls,
        config: StoreConfig,
        commitlog: CommitLog,
        state: RecoveredState,
        acknowledged_end: Callable[[], int],
        checkpoint: Checkpoint,
    ) -> ConsumeQueueService:
        """Load and recover ``<root>/consumequeue`` (and ``index/``) against the CommitLog
        recovery left in ``state``, and start dispatching from its end.

        Raises
        ------
        ConsumeQueueCorruptError
            ``cq_recovery.recover_consume_queues`` found damage it must not repair.
        StoreMetadataError
            An index file of another size than ``store.index_*`` make.
        OSError
            A file operation failed.
        """
        end_offset = state.report.end_offset
        levels = parse_message_delay_level(config.message_delay_level)
        queues = ConsumeQueues.load(config.root_dir, config.consume_queue_file_units)
        index: IndexFiles | None = None
        try:
            recovery = recover_consume_queues(
                queues,
                commitlog.segments,
                min_offset=commitlog.min_offset,
                end_offset=end_offset,
                next_queue_offsets=state.queue_offsets.copy(),
                delay_levels_ms=levels,
            )
            index_dispatch: IndexDispatch | None = None
            index_recovery: IndexRecovery | None = None
            if config.message_index:
                index = IndexFiles.load(
                    config.root_dir, config.index_hash_slots, config.index_entries,
                    checkpoint.set_index_timestamp, lambda: int(time.time() * 1000),
                )  # fmt: skip
                index_dispatch, index_recovery = recover_index(
                    index, commitlog.segments, min_offset=commitlog.min_offset,
                    end_offset=end_offset, clean_shutdown=state.report.clean_shutdown,
                    index_msg_timestamp=checkpoint.values.index_msg_timestamp_ms,
                )  # fmt: skip
        except BaseException:
            queues.close()
            if index is not None:
                index.close()
            raise
        dispatcher = CqDispatcher(
            queues, commitlog, acknowledged_end, levels, end_offset, index_dispatch
        )
        dispatcher.start()
        async_puts = config.flush_policy is not FlushPolicy.SYNC
        return cls(
            queues, dispatcher, recovery, async_puts=async_puts, index=index,
            index_recovery=index_recovery,
        )  # fmt: skip

    def flush(self) -> None:
        """fsync what was dispatched and record it (the housekeeper's task; raises
        ``OSError``)."""
        self.queues.flush()

    def delete_below(self, min_physical_offset: int) -> None:
        """After retention: delete the files whose units all point below the log."""
        self.queues.delete_below(min_physical_offset)
        if self.index is not None:
            self.index.delete_below(min_physical_offset)

    def stop(self, *, flush: bool) -> None:
        """End the dispatch thread after a last round; then flush (a clean close, raises
        ``OSError``) or not (a crash-like stop), and close the files."""
        self._dispatcher.stop()
        try:
            if flush:
                self.queues.flush()
                if self.index is not None:
                    self.index.flush()
        finally:
            self.queues.close()
            if self.index is not None:
                self.index.close()
