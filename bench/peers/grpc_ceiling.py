"""How much of the broker's cost per message is Python's gRPC server, whatever the store does.

The official Java client (``java/ProduceBench.java``: 2 Producers, 32 and then 256 async sends
in flight each, 100 B, a warm-up then ``--seconds`` timed) against, one after another:

* ``canned``: ``canned_broker.py``, the broker with sends answered without the service or the
  store (grpc.aio, request decoding and ``grpc_api.py``'s checks only): the ceiling;
* ``ASYNC`` and ``SYNC``: ``rmq-spark broker`` with that flush policy;

each on asyncio's loop and on uvloop (``--loops``; uvloop only where it is installed).
Printed per case: msgs/s, send p50/p99 and the broker's CPU per message (all its threads,
``/proc``). The RocketMQ 5.3.3 figures for the same client and cases are ``produce.py``'s.

Usage::

    flock /tmp/bench.lock python bench/peers/grpc_ceiling.py [--seconds 10] [--loops asyncio,uvloop]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

from java_client import java_case  # noqa: E402
from peer_common import PeerError, progress  # noqa: E402
from rmq_spark_broker import RmqSparkBroker  # noqa: E402

from rmq_spark.eventloop import uvloop_available  # noqa: E402

VARIANTS = {
    "canned": (("store.flush_policy=ASYNC",), (str(HERE / "canned_broker.py"),)),
    "ASYNC": (("store.flush_policy=ASYNC",), ("-m", "rmq_spark.cli.main")),
    "SYNC": (("store.flush_policy=SYNC",), ("-m", "rmq_spark.cli.main")),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="timed seconds a case (10)")
    parser.add_argument("--loops", default="asyncio,uvloop", help="event loops (asyncio,uvloop)")
    args = parser.parse_args(argv)
    loops = [loop for loop in args.loops.split(",") if loop != "uvloop" or uvloop_available()]
    print(f"load at start: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print("| broker | loop | in flight | msgs/s | send p50 / p99 ms | broker CPU us/msg |")
    print("|---|---|---|---|---|---|")
    try:
        for loop in loops:
            for name, (settings, entry) in VARIANTS.items():
                progress(f"grpc ceiling: {name} on {loop} ...")
                with RmqSparkBroker(
                    settings=(*settings, f"broker.event_loop={loop}"), entry=entry
                ) as broker:
                    assert broker.process is not None
                    for inflight in (32, 256):
                        case = java_case(
                            broker.endpoint, "BenchTopic", 2, inflight, args.seconds, 3.0, 100,
                            [broker.process.pid],
                        )  # fmt: skip
                        failed = f" ({case.failed} failed)" if case.failed else ""
                        print(
                            f"| {name} | {loop} | 2 x {inflight} | {case.rate:,.0f}{failed} | "
                            f"{case.p50_ms:.1f} / {case.p99_ms:.1f} | "
                            f"{case.broker_cpu_us_per_msg:.0f} |",
                            flush=True,
                        )
    except PeerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"load at end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
