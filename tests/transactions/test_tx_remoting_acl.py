"""END_TRANSACTION over remoting with auth on: the 4.x header names no topic, so the broker
ends a transaction only for a caller with Pub on the half's real topic and only with the
half's producer group; an unsigned caller, a user with a wildcard grant on other topics and
a wrong group store nothing."""

from __future__ import annotations

import sys
from pathlib import Path

_REMOTING_TESTS = str(Path(__file__).resolve().parents[1] / "remoting")
if _REMOTING_TESTS not in sys.path:
    sys.path.insert(0, _REMOTING_TESTS)

from remoting_harness import FrameClient, start_remoting_broker  # noqa: E402
from tx_helpers import HALF, OP, records_of  # noqa: E402

from rmq_spark.broker.remoting.codec import RemotingCommand  # noqa: E402
from rmq_spark.broker.remoting.codes import RequestCode, ResponseCode  # noqa: E402
from rmq_spark.broker.remoting.gate import sign_request  # noqa: E402
from rmq_spark.store.msg_id import decode_offset_msg_id  # noqa: E402
from rmq_spark.store.properties import encode_properties  # noqa: E402

USERS = """
[users.alice]
secret_key = "alice-secret"
policies = [{ resource = "Topic:Orders", actions = ["Pub"] }]

[users.mallory]
secret_key = "mallory-secret"
policies = [{ resource = "Topic:pay*", actions = ["Pub"] }, { resource = "*", actions = ["Sub"] }]
"""
SECRETS = {"alice": "alice-secret", "mallory": "mallory-secret"}


def _call(
    port: int, code: int, fields: dict[str, str], user: str | None, body: bytes = b""
) -> RemotingCommand:
    signed = dict(fields)
    if user is not None:
        signed["AccessKey"] = user
        signed["Signature"] = sign_request(signed, body, SECRETS[user])
    client = FrameClient(port)
    try:
        return client.call(RemotingCommand(code=code, opaque=1, ext_fields=signed, body=body))
    finally:
        client.close()


def test_end_transaction_needs_pub_on_the_half_topic_and_its_group(tmp_path: Path) -> None:
    users = tmp_path / "users.toml"
    users.write_text(USERS, encoding="utf-8")
    users.chmod(0o600)
    broker, port = start_remoting_broker(
        tmp_path / "store", tmp_path / "work", "broker.auth_enabled=true",
        f"broker.auth_users_file={users}", "store.segment_size_bytes=16777216",
        "broker.transaction_check_interval_ms=3600000",
    )  # fmt: skip
    try:
        props = encode_properties({"UNIQ_KEY": "TXA", "TRAN_MSG": "true", "PGROUP": "pg"})
        send = {"a": "pg", "b": "Orders", "c": "TBW102", "d": "4", "e": "0", "f": "4",
                "g": "1700000000000", "h": "0", "i": props}  # fmt: skip
        sent = _call(port, RequestCode.SEND_MESSAGE_V2, send, "alice", b"paid")
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        fields = sent.ext_fields or {}
        end = {
            "producerGroup": "pg",
            "tranStateTableOffset": fields["queueOffset"],
            "commitLogOffset": str(decode_offset_msg_id(fields["msgId"])[1]),
            "commitOrRollback": "8",
            "fromTransactionCheck": "false",
            "msgId": "TXA",
            "transactionId": "TXA",
        }
        [half] = records_of(broker.store_dir, HALF)
        assert half.body == b"paid"
        unsigned = _call(port, RequestCode.END_TRANSACTION, end, None)
        assert unsigned.code == ResponseCode.NO_PERMISSION
        wildcard = _call(port, RequestCode.END_TRANSACTION, end, "mallory")
        assert wildcard.code == ResponseCode.SYSTEM_ERROR
        wrong_group = _call(
            port, RequestCode.END_TRANSACTION, end | {"producerGroup": "x"}, "alice"
        )
        assert wrong_group.code == ResponseCode.SYSTEM_ERROR
        assert records_of(broker.store_dir, "Orders") == []
        assert records_of(broker.store_dir, OP) == []
        ok = _call(port, RequestCode.END_TRANSACTION, end, "alice")
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        assert [r.body for r in records_of(broker.store_dir, "Orders")] == [b"paid"]
    finally:
        broker.kill()
