"""The redelivery job as a plain Python process, for the SIGKILL chaos test.

It runs the same pass as ``jobs/schedule.py`` in embedded mode (``open_redeliverer`` +
``StoreSink`` + ``run_continuous``, CommitLog entry source, the system clock) but with a
small batch so that a kill often lands inside one. SIGTERM stops it cleanly.

    python tests/delay/chaos_job.py STORE_DIR "1s 2s 3s" BATCH TRIGGER_MS
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

from rmq_spark.broker.embedded import Broker
from rmq_spark.clock import SystemClock
from rmq_spark.delay.config import DelayConfig, EntrySourceKind
from rmq_spark.delay.job import open_redeliverer, run_continuous
from rmq_spark.delay.sink import StoreSink
from rmq_spark.store.config import FlushPolicy, StoreConfig
from rmq_spark.store.delay_levels import parse_message_delay_level


def main(argv: list[str]) -> int:
    store_dir, levels, batch, trigger_ms = Path(argv[0]), argv[1], int(argv[2]), int(argv[3])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    store = StoreConfig(
        root_dir=store_dir,
        segment_size_bytes=1 << 20,
        flush_policy=FlushPolicy.ASYNC,
        message_delay_level=levels,
    )
    clock = SystemClock()
    with Broker(store_dir, store_config=store, clock=clock) as broker:
        config = DelayConfig(
            batch_messages_max=batch,
            pass_messages_max=max(batch, 100_000),
            trigger_interval_ms=trigger_ms,
            entry_source=EntrySourceKind.COMMITLOG,
        )
        redeliverer = open_redeliverer(
            store_dir,
            StoreSink(broker),
            config=config,
            delay_levels_ms=parse_message_delay_level(levels),
            clock=clock,
        )
        print("ready", flush=True)
        try:
            run_continuous(redeliverer, trigger_interval_ms=trigger_ms, stop=stop)
        finally:
            redeliverer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
