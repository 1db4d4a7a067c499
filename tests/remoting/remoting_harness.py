"""Helpers for the remoting server tests: a broker process serving remoting on a known port,
and a blocking client socket speaking frames (``RemotingCommand``) to it."""

from __future__ import annotations

import socket
import struct
from pathlib import Path

from broker.broker_harness import BrokerProcess, start_broker
from namesrv_harness import free_port

from rmq_spark.broker.remoting.codec import (
    NeedMoreData,
    RemotingCommand,
    SerializeType,
    decode_frame,
    encode_frame,
)
from rmq_spark.store.properties import encode_properties


def start_remoting_broker(
    store_dir: Path, work_dir: Path, *settings: str
) -> tuple[BrokerProcess, int]:
    """A broker subprocess with its remoting server on a free loopback port: (broker, port)."""
    port = free_port()
    broker = start_broker(
        store_dir, work_dir, f"broker.remoting_listen=127.0.0.1:{port}", *settings
    )
    return broker, port


class FrameClient:
    """A plain TCP client of the remoting port: send frames or raw bytes, read frames."""

    def __init__(self, port: int, timeout_s: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self._buffer = bytearray()

    def send(self, command: RemotingCommand, kind: SerializeType | None = None) -> None:
        self.sock.sendall(encode_frame(command, kind))

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read(self) -> RemotingCommand:
        """The next frame; ``ConnectionError`` when the broker closed the connection."""
        while True:
            outcome = decode_frame(self._buffer)
            if not isinstance(outcome, NeedMoreData):
                command, used = outcome
                del self._buffer[:used]
                return command
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("the broker closed the connection")
            self._buffer += data

    def call(self, command: RemotingCommand, kind: SerializeType | None = None) -> RemotingCommand:
        self.send(command, kind)
        return self.read()

    def close(self) -> None:
        self.sock.close()


def raw_frame(
    header: bytes, body: bytes = b"", kind: int = 0, header_length: int | None = None
) -> bytes:
    """A frame built by hand (for malformed ones): length, type byte, 24-bit header length."""
    hl = len(header) if header_length is None else header_length
    return struct.pack(">ii", 4 + len(header) + len(body), (kind << 24) | hl) + header + body


def batch_body(messages: list[tuple[bytes, dict[str, str]]]) -> bytes:
    """A SEND_BATCH_MESSAGE body (RocketMQ's ``MessageDecoder.encodeMessages``): per message
    its total size, magic 0, body CRC 0, flag 0, the body, then its properties text."""
    out = bytearray()
    for body, properties in messages:
        text = encode_properties(properties).encode()
        total = 20 + len(body) + 2 + len(text)
        out += struct.pack(">iiiii", total, 0, 0, 0, len(body)) + body
        out += struct.pack(">h", len(text)) + text
    return bytes(out)
