"""Put -> visible of the first message after a silence: ``rmq-spark broker`` and the reput job
(its defaults) beside it, one message sent and waited for until visible (the start's costs),
then ``--silence`` seconds with nothing sent, then one message, timed as visible.py times its
rows (the ``messages`` commit that made it visible minus its store time), ``--count`` times.

The job idles through the silence, so the benchmark lock (``--lock``) is held only while
something runs: the start and each timed message. One JSON line.

Usage::

    python bench/peers/visible_silence.py --silence 600 --lock /tmp/bench.lock
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))

from delta_log_tail import DeltaLogTail, following  # noqa: E402
from peer_common import PeerError, progress  # noqa: E402
from produce import import_client, make_producers  # noqa: E402
from rmq_spark_broker import RmqSparkBroker  # noqa: E402
from visible import (  # noqa: E402
    CATCH_UP_TIMEOUT_S,
    TOPIC,
    WARM_UP_TOPIC,
    _start_reput,
    _wait,
    paced_latencies_ms,
)


@contextlib.contextmanager
def _locked(path: str | None) -> Iterator[None]:
    if not path:
        yield
        return
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _send_one(producer, rocketmq, topic: str) -> None:  # noqa: ANN001
    message = rocketmq.Message()
    message.topic = topic
    message.body = b"after the silence"
    producer.send(message)


def run(args: argparse.Namespace, work: Path) -> dict[str, object]:
    tables, log_path = work / "tables", work / "reput.log"
    messages = DeltaLogTail(tables / "messages")
    rocketmq = import_client()
    with _locked(args.lock):
        broker = RmqSparkBroker().__enter__()
    try:
        assert broker.workdir is not None
        with _locked(args.lock):
            job = _start_reput(broker.workdir / "store", tables, log_path, args.reput_args)
            (producer,) = make_producers(rocketmq, broker.endpoint, 1)
            _send_one(producer, rocketmq, WARM_UP_TOPIC)
            _wait(lambda: messages.rows() >= 1, CATCH_UP_TIMEOUT_S, "the first message")
        try:
            with following(messages):
                for sent in range(1, args.count + 1):
                    progress(f"visible_silence: {args.silence} s of silence ({sent}/{args.count})")
                    time.sleep(args.silence)
                    with _locked(args.lock):
                        _send_one(producer, rocketmq, TOPIC)
                        _wait(lambda n=sent: messages.rows() >= 1 + n, CATCH_UP_TIMEOUT_S,
                              "the message after the silence")  # fmt: skip
                producer.shutdown()
        finally:
            os.killpg(job.pid, signal.SIGTERM)
            job.wait(120)
    finally:
        broker.__exit__(None, None, None)
    return {
        "system": "rmq-spark", "silence_s": args.silence,
        "visible_ms": paced_latencies_ms(messages),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--silence", type=float, default=600, help="seconds of silence (600)")
    parser.add_argument("--count", type=int, default=1, help="silences, one message after each")
    parser.add_argument("--lock", default=None, help="a lock file held while something runs")
    parser.add_argument("--reput-arg", dest="reput_args", action="append", default=[])
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-silence-"))
    try:
        print(json.dumps(run(args, work)), flush=True)
    except PeerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
