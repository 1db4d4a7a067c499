"""The broker's own cost per send behind the native front, with no client and no HTTP/2.

``rmq-spark broker`` runs with ``broker.grpc_front=native`` (SYNC flush, a fresh store), but
its front is this script (``--front``, started by the broker through
``RMQ_SPARK_NATIVE_FRONT``): it speaks the relay (``broker/grpc/relay_wire.py``: one ``CALL``
frame a call, as the Go front sends them, or ``OPEN``, ``MSG`` and ``HALF_CLOSE`` to a tree
from before that frame) and keeps ``--inflight`` SendMessage calls open at once (one 100 B
message each, what the official Java client sends: a tag, a CRC32 digest, its metadata),
opening a new one as each answer comes. What it reports is the broker process's own CPU
(``/proc/<pid>/stat``, all its threads, not this front's) per send and the sends a second: the
Python work per send that the native front leaves, measured without a JVM or Go competing for
the cores. The relay frames of a wave of calls arrive in one read, as the Go front sends them.

Usage::

    flock /tmp/bench.lock .venv/bin/python bench/relay_cost.py [--inflight 512]
        [--seconds 10] [--warm-up 3] [--rounds 3] [--checkout DIR] [--set KEY=VALUE ...]

``--checkout``: another source tree (e.g. ``git archive REV | tar -x -C DIR``) whose broker
runs instead, for a before -> after in one run (each round runs both, baseline first).
``--py-spy PATH`` (e.g. ``.venv/bin/py-spy``): a sample of this checkout's broker in its last
round (250 Hz, inside the timed part), each sample of the event loop's thread put in one
layer by its innermost frame of ours, the layers' shares scaled to the CPU per send.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import shlex
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "peers"))
sys.path.insert(0, str(HERE.parent))

from rmq_spark_broker import REPO, RmqSparkBroker  # noqa: E402

from rmq_spark.broker.grpc import relay_wire as wire  # noqa: E402
from rmq_spark.broker.proto import definition_pb2 as pb  # noqa: E402
from rmq_spark.broker.proto import service_pb2 as spb  # noqa: E402

_METHOD = "/apache.rocketmq.v2.MessagingService/SendMessage"
_TICKS = os.sysconf("SC_CLK_TCK")
_RESULT_ENV = "RELAY_COST_RESULT"
_PLAN_ENV = "RELAY_COST_PLAN"
_FRONT_ENV = "RMQ_SPARK_NATIVE_FRONT"


def _open_payload(peer: str) -> bytes:
    metadata = [
        ("x-mq-language", b"JAVA"),
        ("x-mq-protocol", b"v2"),
        ("x-mq-client-version", b"5.0.8"),
        ("x-mq-client-id", b"relay-cost@1"),
        ("x-mq-request-id", b"00000000-0000-0000-0000-000000000000"),
    ]
    out = [struct.pack(">H", len(_METHOD)), _METHOD.encode(), struct.pack(">H", len(peer))]
    out += [peer.encode(), struct.pack(">qH", 10_000_000, len(metadata))]
    for key, value in metadata:
        out += [struct.pack(">H", len(key)), key.encode(), struct.pack(">I", len(value)), value]
    return b"".join(out)


def _request(topic: str, body: bytes, number: int) -> bytes:
    message = pb.Message(topic=pb.Resource(name=topic), body=body)
    props = message.system_properties
    props.tag = "bench"
    props.message_id = f"01{number:030X}"
    props.body_digest.type = pb.CRC32
    props.body_digest.checksum = f"{zlib.crc32(body):08X}"
    props.body_encoding = pb.IDENTITY
    props.message_type = pb.NORMAL
    props.born_timestamp.GetCurrentTime()
    props.born_host = "relay-cost"
    return spb.SendMessageRequest(messages=[message]).SerializeToString()


class _Front:
    """The fake front: ``inflight`` calls open at once over the relay socket."""

    def __init__(self, relay: socket.socket, plan: dict[str, float]) -> None:
        self.relay = relay
        self.plan = plan
        self.opened = _open_payload("ipv4:127.0.0.1:40000")
        self.body = os.urandom(100)
        self.next_id = 1
        self.answered = 0
        self.failed = 0
        self.buffer = bytearray()

    def calls(self, count: int) -> bytes:
        frames = []
        for _ in range(count):
            call_id, self.next_id = self.next_id, self.next_id + 1
            request = _request("BenchTopic", self.body, call_id)
            if self.plan["call_frames"]:
                size = struct.pack(">I", len(request))
                frames.append(wire.frame(wire.CALL, call_id, size + request + self.opened))
                continue
            frames.append(wire.frame(wire.OPEN, call_id, self.opened))
            frames.append(wire.frame(wire.MSG, call_id, request))
            frames.append(wire.frame(wire.HALF_CLOSE, call_id))
        return b"".join(frames)

    def answers(self, data: bytes) -> int:
        """How many calls ``data`` (with what came before) ended."""
        buffer = self.buffer
        buffer += data
        at, ended = 0, 0
        while len(buffer) - at >= 9:
            length, kind, _ = wire.HEADER.unpack_from(buffer, at)
            if len(buffer) - at < 4 + length:
                break
            if kind == wire.REPLY:
                response = spb.SendMessageResponse.FromString(
                    bytes(buffer[at + 9 : at + 4 + length])
                )
                self.failed += response.status.code != pb.OK
                ended += 1
            elif kind == wire.CLOSE:
                self.failed += 1
                ended += 1
            at += 4 + length
        del buffer[:at]
        return ended

    def run(self, seconds: float) -> tuple[int, float]:
        """Closed loop for ``seconds``: (calls answered, seconds)."""
        inflight = int(self.plan["inflight"])
        self.relay.sendall(self.calls(inflight))
        selector = selectors.DefaultSelector()
        selector.register(self.relay, selectors.EVENT_READ)
        answered, started = 0, time.monotonic()
        while time.monotonic() - started < seconds:
            if not selector.select(timeout=5):
                raise SystemExit("relay_cost: no answer from the broker in 5 s")
            data = self.relay.recv(1 << 20)
            if not data:
                raise SystemExit("relay_cost: the broker closed the relay")
            ended = self.answers(data)
            answered += ended
            if ended:
                self.relay.sendall(self.calls(ended))
        return answered, time.monotonic() - started


# The layers of a send on the loop, by the innermost frame of ours (first match wins).
LAYERS = (
    ("store: the pass's batch append (encode, CRC, write)", ("store/",), ("async_commit",
     "ring_commit", "durability", "uring.py", "flush.py", "checkpoint", "file_ops", "latency")),
    ("store: group commit, fdatasync submit and finish", ("store/",), ()),
    ("broker: validate, route, properties", ("broker/service.py", "broker/send_",
     "broker/topics.py", "broker/traffic.py", "broker/replication/"), ()),
    ("SendMessage RPC: prechecks, command, result entry", ("grpc/grpc_producer.py",
     "grpc/grpc_wire.py"), ()),
    ("auth gate, resource names, request-bytes booking", ("broker/security/",), ()),
    ("handler wrappers: timer, guard", ("grpc/rpc_timer.py", "grpc/grpc_api.py",
     "grpc/edge.py"), ()),
    ("relay: frames in and out, one task per call", ("grpc/native_calls.py",
     "grpc/relay_wire.py"), ()),
)  # fmt: skip
MACHINERY = "asyncio machinery (tasks, loop, sockets; no frame of ours)"


def layer_of(frames: list[str]) -> str:
    for frame in reversed(frames):
        for name, paths, not_in in LAYERS:
            if any(p in frame for p in paths) and not any(n in frame for n in not_in):
                return name
    return MACHINERY


def loop_layers(raw: Path) -> dict[str, int]:
    """Samples per layer of the event loop's thread (its stacks run ``GrpcEndpoint._run``)."""
    counts: dict[str, int] = {}
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if "GrpcEndpoint._run" in stack:
            name = layer_of(stack.split(";"))
            counts[name] = counts.get(name, 0) + int(count)
    return counts


def _broker_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def front_main(argv: list[str]) -> int:
    """The broker started us as its front: serve the plan, write the result, wait for TERM."""
    relay_fd = next(int(arg.split("=", 1)[1]) for arg in argv if arg.startswith("-relay-fd="))
    relay = socket.socket(fileno=relay_fd)
    plan = json.loads(os.environ[_PLAN_ENV])
    front = _Front(relay, plan)
    broker = os.getppid()
    front.run(plan["warm_up_s"])
    cpu0 = _broker_cpu_s(broker)
    answered, seconds = front.run(plan["seconds"])
    cpu1 = _broker_cpu_s(broker)
    result = {"sent": answered, "seconds": seconds, "cpu_s": cpu1 - cpu0, "failed": front.failed}
    Path(os.environ[_RESULT_ENV]).write_text(json.dumps(result))
    while relay.recv(1 << 20):  # answers still in flight, until the broker ends the relay
        pass
    return 0


def _speaks_call_frames(checkout: Path) -> bool:
    """Whether ``checkout``'s broker takes a call in one ``CALL`` frame (as the Go front sends
    every call with one request); an older one takes ``OPEN``, ``MSG`` and ``HALF_CLOSE``."""
    source = (checkout / "rmq_spark" / "broker" / "grpc" / "relay_wire.py").read_text()
    return "def parse_call(" in source


@contextmanager
def _front_named(launcher: Path) -> Iterator[None]:
    """The brokers started meanwhile run ``launcher`` as their front (their environment is
    this process's)."""
    before = os.environ.get(_FRONT_ENV)
    os.environ[_FRONT_ENV] = str(launcher)
    try:
        yield
    finally:
        if before is None:
            del os.environ[_FRONT_ENV]
        else:
            os.environ[_FRONT_ENV] = before


def measure(
    checkout: Path, args: argparse.Namespace, work: Path, sample: Path | None = None
) -> tuple[float, float]:
    """(sends/s, broker CPU us per send) of one broker run; ``sample``: py-spy's output."""
    result = work / "result.json"
    result.unlink(missing_ok=True)
    launcher = work / "front.sh"
    plan = {"inflight": args.inflight, "seconds": args.seconds, "warm_up_s": args.warm_up,
            "call_frames": _speaks_call_frames(checkout)}  # fmt: skip
    variables = {_RESULT_ENV: str(result), _PLAN_ENV: json.dumps(plan)}
    assignments = " ".join(f"{key}={shlex.quote(value)}" for key, value in variables.items())
    command = f"{sys.executable} {Path(__file__).resolve()} --front"
    launcher.write_text(f'#!/bin/sh\nexec env {assignments} {command} "$@"\n')
    launcher.chmod(0o755)
    settings = ("store.flush_policy=SYNC", "broker.grpc_front=native", *args.set)
    with _front_named(launcher), RmqSparkBroker(checkout=checkout, settings=settings) as broker:
        spy = None
        if sample is not None:
            time.sleep(args.warm_up + 1)
            spy = subprocess.Popen(
                [str(args.py_spy), "record", "-r", "250", "--format", "raw", "-o", str(sample),
                 "--pid", str(broker.pid), "-d", str(max(1, int(args.seconds) - 2))],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
        deadline = time.monotonic() + args.warm_up + args.seconds + 60
        while not result.exists():
            if time.monotonic() > deadline:
                raise SystemExit("relay_cost: no result from the front")
            time.sleep(0.2)
        if spy is not None:
            spy.wait()
    outcome = json.loads(result.read_text())
    if outcome["failed"]:
        raise SystemExit(f"relay_cost: {outcome['failed']} sends failed")
    return outcome["sent"] / outcome["seconds"], outcome["cpu_s"] / outcome["sent"] * 1e6


def _print_layers(counts: dict[str, int], cpu_us: float) -> None:
    total = sum(counts.values()) or 1
    print(f"| event loop thread, by layer (py-spy, {total:,} samples) | share | us/send |")
    print("|---|---|---|")
    for name, count in sorted(counts.items(), key=lambda item: -item[1]):
        print(f"| {name} | {count / total:.0%} | {count / total * cpu_us:.0f} |")
    print()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--front":
        return front_main(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inflight", type=int, default=512, help="calls open at once (512)")
    parser.add_argument("--seconds", type=float, default=10.0, help="timed seconds a run (10)")
    parser.add_argument("--warm-up", type=float, default=3.0, help="untimed seconds first (3)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each broker (3)")
    parser.add_argument("--checkout", type=Path, help="a baseline source tree, run beside")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--py-spy", type=Path, help="py-spy executable: a layer profile")
    parser.add_argument("--keep-profile", type=Path, help="copy py-spy's raw stacks here")
    args = parser.parse_args(argv)
    brokers = (
        [("this", REPO)] if args.checkout is None else [("baseline", args.checkout), ("this", REPO)]
    )
    rows: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in brokers}
    print(
        f"load average at start: {' '.join(f'{v:.2f}' for v in os.getloadavg())}", file=sys.stderr
    )
    with tempfile.TemporaryDirectory(prefix="relay-cost-") as tmp:
        for round_no in range(1, args.rounds + 1):
            for name, checkout in brokers:
                last = round_no == args.rounds and name == "this"
                sample = Path(tmp) / "py-spy.txt" if args.py_spy and last else None
                rate, cpu_us = measure(checkout, args, Path(tmp), sample)
                rows[name].append((rate, cpu_us))
                print(
                    f"round {round_no} {name}: {rate:,.0f} sends/s, {cpu_us:.1f} us/send",
                    file=sys.stderr,
                )
        if args.py_spy:
            _print_layers(loop_layers(Path(tmp) / "py-spy.txt"), rows["this"][-1][1])
            if args.keep_profile:
                shutil.copyfile(Path(tmp) / "py-spy.txt", args.keep_profile)
    print(f"load average at end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}", file=sys.stderr)
    print(
        f"| broker ({args.inflight} in flight, median of {args.rounds}) "
        "| sends/s | broker CPU us/send |"
    )
    print("|---|---|---|")
    for name, values in rows.items():
        rate = statistics.median(v[0] for v in values)
        cpu = statistics.median(v[1] for v in values)
        print(f"| {name} | {rate:,.0f} | {cpu:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
