"""Subprocess for test_kill.py: put messages from several threads until killed.

Usage: python kill_worker.py ROOT SYNC|ASYNC THREADS [asyncio]

With ``asyncio``, THREADS coroutines on one event loop use ``put_async`` instead (under SYNC:
the loop's own fsyncs through io_uring where the kernel allows it, and staged segments).
Prints ``ACK <physical_offset> <total_size> <body>`` after each put returned PUT_OK, and in
ASYNC mode ``FLUSHED <offset>`` after each explicit flush, flushing stdout every line.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path

from rmq_spark.store.config import FlushPolicy, StoreConfig
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest


def main() -> None:
    root, mode, threads = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    config = StoreConfig(
        root_dir=root,
        segment_size_bytes=64 * 1024,
        flush_policy=FlushPolicy[mode],
        flush_interval_ms=20,
        clean_resource_interval_ms=0,
        snapshot_interval_ms=200,
    )
    store = MessageStore.open(config)
    out_lock = threading.Lock()

    def emit(line: str) -> None:
        with out_lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def producer(thread_index: int) -> None:
        for sequence in range(10**9):
            body = f"t{thread_index}-m{sequence}-" + "x" * (sequence % 300)
            result = store.put(PutRequest("KillTopic", body.encode(), queue_id=thread_index))
            if result.ok:
                emit(f"ACK {result.physical_offset} {result.total_size} {body}")

    def flusher() -> None:
        while True:
            emit(f"FLUSHED {store.flush()}")

    if len(sys.argv) > 4 and sys.argv[4] == "asyncio":

        async def coroutine(index: int) -> None:
            for sequence in range(10**9):
                body = f"c{index}-m{sequence}-" + "x" * (sequence % 300)
                result = await store.put_async(
                    PutRequest("KillTopic", body.encode(), queue_id=index)
                )
                if result.ok:
                    emit(f"ACK {result.physical_offset} {result.total_size} {body}")

        async def run() -> None:
            emit("READY")
            await asyncio.gather(*(coroutine(index) for index in range(threads)))

        asyncio.run(run())
        return
    workers = [threading.Thread(target=producer, args=(i,), daemon=True) for i in range(threads)]
    if mode == "ASYNC":
        workers.append(threading.Thread(target=flusher, daemon=True))
    for worker in workers:
        worker.start()
    emit("READY")
    threading.Event().wait()


if __name__ == "__main__":
    main()
