"""``put_async``'s appends: the puts of one event-loop pass written as one batch.

Owns when an asyncio put's record is written. A put joins its loop's *pending batch* and
awaits its own future; the batch is written at the end of the loop pass in which it opened
(its first put schedules that with ``call_soon``, which runs after the tasks already made
ready), or at once when its records come to ``batch_bytes_max`` (a quarter of a segment at
most: a batch is written into one segment). One batch is one
``Appender.append_batch`` (one put lock, one write, the records packed as ``put_batch``
packs them) and, under SYNC, one wait for the fsync that covers it (``Durability``): a
crowd of producers resumed together costs the store one put and one wave instead of one
each. What each put sees is what ``put`` would have answered it:

* a batch is all or nothing for validity (``append_batch``); when the store refuses it, each
  put is written alone, so one illegal message refuses only its own put;
* idempotent repeats are written once, within the batch as across batches;
* a put cancelled while it waits leaves its record stored, unacknowledged, and the others
  of its batch untouched.

``put_batch`` is ``put_batch_async``'s: an all-or-nothing batch of its own, written at once.
Everything runs on the loop that made the puts; several loops keep a batch each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from rmq_spark.errors import StoreError
from rmq_spark.store.appender import Appender
from rmq_spark.store.put import PutRequest, PutResult, PutStatus

__all__ = ["AsyncPuts", "BATCH_BYTES_MAX"]

_PUT_OK = PutStatus.PUT_OK
_running_loop = asyncio.get_running_loop
BATCH_BYTES_MAX = 1 << 20
"""Record bytes after which a pending batch is written without waiting for the pass end (a
crowd of large messages must not become one oversized write)."""
_RECORD_HEAD_BYTES = 256  # a record's fixed fields and typical properties, for the bound

Settle = Callable[[list[PutResult], int], Awaitable[None]]
"""Awaits durability for ``results`` up to the end offset (applying a failure to them)."""


class _Batch:
    __slots__ = ("requests", "futures", "bytes")

    def __init__(self) -> None:
        self.requests: list[PutRequest] = []
        self.futures: list[asyncio.Future[PutResult]] = []
        self.bytes = 0


class AsyncPuts:
    """The pending batch of each loop (see the module docstring). ``settle`` is ``None``
    for an ASYNC store (nothing to wait for); ``after_write`` runs after each batch."""

    def __init__(
        self,
        appender: Appender,
        settle: Settle | None,
        after_write: Callable[[], Callable[[], None] | None],
        batch_bytes_max: int = BATCH_BYTES_MAX,
    ) -> None:
        self._appender = appender
        self._settle = settle
        self._after_write = after_write
        self._bytes_max = batch_bytes_max
        self._pending: dict[asyncio.AbstractEventLoop, _Batch] = {}
        self._settling: set[asyncio.Task[None]] = set()

    def put(self, request: PutRequest) -> asyncio.Future[PutResult]:
        """The future of ``request``'s result, resolved once written (and, under SYNC, once
        an fsync covers it)."""
        return self.put_many((request,))[0]

    def put_many(self, requests: Sequence[PutRequest]) -> list[asyncio.Future[PutResult]]:
        """``put`` of each request, in order, into the same pending batch (or the next, past
        the byte bound)."""
        loop = _running_loop()
        futures = []
        for request in requests:
            batch = self._pending.get(loop)
            if batch is None:
                batch = self._pending[loop] = _Batch()
                loop.call_soon(self._write, loop, batch)
            future = loop.create_future()
            batch.requests.append(request)
            batch.futures.append(future)
            batch.bytes += len(request.body) + _RECORD_HEAD_BYTES
            futures.append(future)
            if batch.bytes >= self._bytes_max:
                self._write(loop, batch)
        return futures

    async def put_all(self, requests: Sequence[PutRequest]) -> list[PutResult | StoreError]:
        """``put_many``, awaited: per request its result, or the ``StoreError`` its put
        raised (a batch the store could not write fails every put of it)."""
        futures = self.put_many(requests)
        outcomes: list[PutResult | StoreError] = []
        try:
            for future in futures:
                try:
                    outcomes.append(await future)
                except StoreError as err:
                    outcomes.append(err)
        except BaseException:
            for future in futures:  # retrieved: no "exception never retrieved" for the rest
                if future.done() and not future.cancelled():
                    future.exception()
            raise
        return outcomes

    async def put_batch(self, requests: Sequence[PutRequest]) -> list[PutResult]:
        """``requests`` as one all-or-nothing ``append_batch`` of their own, written now (not
        joined to the pending batch), then, under SYNC, the fsync that covers it."""
        results, end = self._appender.append_batch(requests)
        if end and self._settle is not None:
            await self._settle(results, end)
        else:
            wake = self._after_write()
            if wake is not None:
                wake()
        return results

    def _write(self, loop: asyncio.AbstractEventLoop, batch: _Batch) -> None:
        if self._pending.get(loop) is not batch:
            return  # written already (it grew past the byte bound)
        del self._pending[loop]
        try:
            results, end = self._append(batch.requests)
        except Exception as err:  # noqa: BLE001 - each put raises what append raised
            _fail(batch.futures, err)
            return
        wake = self._after_write()
        if wake is not None:
            wake()
        if end and self._settle is not None:
            task = loop.create_task(self._acknowledge(results, end, batch.futures))
            self._settling.add(task)  # the loop keeps only weak references to tasks
            task.add_done_callback(self._settling.discard)
        else:
            _resolve(batch.futures, results)

    def _append(self, requests: list[PutRequest]) -> tuple[list[PutResult], int]:
        """One ``append_batch``; each request alone when the store refused the batch."""
        appender = self._appender
        if len(requests) == 1:
            result = appender.append(requests[0])
            return [result], _end(result)
        results, end = appender.append_batch(requests)
        if all(result.status is _PUT_OK for result in results):
            return results, end
        results = [appender.append(request) for request in requests]
        return results, max(map(_end, results))

    async def _acknowledge(
        self, results: list[PutResult], end: int, futures: list[asyncio.Future[PutResult]]
    ) -> None:
        assert self._settle is not None
        try:
            await self._settle(results, end)
        except Exception as err:  # noqa: BLE001 - each put raises it, none is left waiting
            _fail(futures, err)
            return
        _resolve(futures, results)


def _end(result: PutResult) -> int:
    """The end offset an fsync must cover for ``result`` (0: nothing was written)."""
    if result.status is not _PUT_OK:
        return 0
    return result.physical_offset + result.total_size


def _resolve(futures: list[asyncio.Future[PutResult]], results: list[PutResult]) -> None:
    for future, result in zip(futures, results, strict=True):
        if not future.done():  # a cancelled put: its record stays, unacknowledged
            future.set_result(result)


def _fail(futures: list[asyncio.Future[PutResult]], err: Exception) -> None:
    for future in futures:
        if not future.done():
            future.set_exception(err)
