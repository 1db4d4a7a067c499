"""Helpers of the replication tests (a module of its own: ``conftest`` names clash across
test folders)."""

from __future__ import annotations

import socket

from rmq_spark.broker.remoting.codec import (
    NeedMoreData,
    RemotingCommand,
    decode_frame,
    encode_frame,
)
from rmq_spark.broker.remoting.gate import sign_request

SEGMENT_BYTES = 65536  # small segments: the stream crosses files
SEGMENT = f"store.segment_size_bytes={SEGMENT_BYTES}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def remoting_call(
    port: int,
    code: int,
    fields: dict[str, str] | None = None,
    body: bytes = b"",
    user: tuple[str, str] | None = None,
) -> RemotingCommand:
    """One request on a fresh connection to a remoting port; ``user`` (access key, secret)
    signs it as RocketMQ's ``AclClientRPCHook`` does."""
    fields = dict(fields or {})
    if user is not None:
        fields["AccessKey"] = user[0]
        fields["Signature"] = sign_request(fields, body, user[1])
    request = RemotingCommand(code=code, opaque=1, ext_fields=fields, body=body)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(encode_frame(request))
        buffer = b""
        while True:
            outcome = decode_frame(buffer)
            if not isinstance(outcome, NeedMoreData):
                return outcome[0]
            data = sock.recv(65536)
            if not data:
                raise ConnectionError("the broker closed the connection")
            buffer += data
