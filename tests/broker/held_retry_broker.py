"""A broker process whose puts into ``%RETRY%`` topics wait while a hold file exists.

For ``test_consumer_isolation.py`` only: ``python tests/broker/held_retry_broker.py HOLD HELD
<rmq-spark broker arguments>``. A retry copy's put (a group's message that came back
unacknowledged) touches ``HELD`` and waits until ``HOLD`` is removed, then stores as usual:
a SYNC put stuck behind a slow fsync, made deterministic. Everything else is the real broker.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from rmq_spark.broker import server
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest


def hold_retry_puts(hold: Path, held: Path) -> None:
    real_put = MessageStore.put

    def put(self: MessageStore, request: PutRequest, *args: Any, **kwargs: Any) -> Any:
        if request.topic.startswith("%RETRY%"):
            while hold.exists():
                held.touch()
                time.sleep(0.01)
        return real_put(self, request, *args, **kwargs)

    MessageStore.put = put  # type: ignore[method-assign]


if __name__ == "__main__":
    hold_retry_puts(Path(sys.argv[1]), Path(sys.argv[2]))
    sys.exit(server.main(sys.argv[3:]))
