"""The 4.x ACL signature on the remoting port (``AccessKey``/``Signature`` as RocketMQ's
``AclClientRPCHook`` signs) against the gRPC port's users file: a real broker process with
auth on, requests signed (or not) frame by frame, every refusal checked in the store."""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker.broker_harness import BrokerProcess, by_uniq_key, read_records
from remoting_harness import FrameClient, start_remoting_broker

from rmq_spark.broker.remoting.codec import RemotingCommand, encode_frame
from rmq_spark.broker.remoting.codes import RequestCode, ResponseCode
from rmq_spark.broker.remoting.gate import sign_request
from rmq_spark.store.properties import encode_properties

pytestmark = pytest.mark.slow

USERS = """
[users.writer]
secret_key = "writer-secret-0123456789"
policies = [{ resource = "Topic:Orders", actions = ["Pub"] }]

[users.reader]
secret_key = "reader-secret-0123456789"
policies = [{ resource = "Topic:Orders", actions = ["Sub"] }]

[users.everything]
secret_key = "wildcard-secret-0123456789"
policies = [{ resource = "*", actions = ["All"] }]

[users.root]
secret_key = "root-secret-0123456789"
user_type = "Super"
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, int]]:
    root = tmp_path_factory.mktemp("auth")
    users = root / "users.toml"
    users.write_text(USERS, encoding="utf-8")
    users.chmod(0o600)
    broker, port = start_remoting_broker(
        root / "store", root / "work", "broker.auth_enabled=true",
        f"broker.auth_users_file={users}", "broker.log_repeat_interval_ms=1",
    )  # fmt: skip
    yield broker, port
    assert broker.stop() == 0


def _send_fields(uniq: str, topic: str = "Orders") -> dict[str, str]:
    return {"a": "pg", "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0",
            "g": "1700000000000", "h": "0", "i": encode_properties({"UNIQ_KEY": uniq})}  # fmt: skip


def _signed(fields: dict[str, str], body: bytes, user: str | None, secret: str) -> dict:
    signed = dict(fields)
    if user is not None:
        signed["AccessKey"] = user
        signed["Signature"] = sign_request(signed, body, secret)
    return signed


def _call(port: int, code: int, fields: dict[str, str], body: bytes = b"") -> RemotingCommand:
    client = FrameClient(port)
    try:
        return client.call(RemotingCommand(code=code, opaque=1, ext_fields=fields, body=body))
    finally:
        client.close()


def _stored(broker: BrokerProcess) -> dict:
    return by_uniq_key(read_records(broker.store_dir))


def test_the_signature_is_aclclientrpchooks() -> None:
    fields = {"b": "T", "a": "g", "AccessKey": "u"}
    content = b"u" + b"g" + b"T" + b"body"  # values in key order: AccessKey, a, b
    expected = base64.b64encode(hmac.new(b"s", content, hashlib.sha1).digest()).decode()
    assert sign_request(fields, b"body", "s") == expected
    assert sign_request({**fields, "Signature": "old"}, b"body", "s") == expected


def test_a_signed_writer_sends(served) -> None:
    broker, port = served
    fields = _signed(_send_fields("SIGNED-1"), b"hi", "writer", "writer-secret-0123456789")
    answer = _call(port, RequestCode.SEND_MESSAGE_V2, fields, b"hi")
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    assert "SIGNED-1" in _stored(broker)


@pytest.mark.parametrize(
    ("why", "user", "secret", "topic", "body_sent"),
    [
        ("unsigned", None, "", "Orders", b"hi"),
        ("wrong secret", "writer", "not-the-secret", "Orders", b"hi"),
        ("unknown user", "mallory", "writer-secret-0123456789", "Orders", b"hi"),
        ("body changed after signing", "writer", "writer-secret-0123456789", "Orders", b"HI"),
        ("no Pub right", "reader", "reader-secret-0123456789", "Orders", b"hi"),
        ("other topic", "writer", "writer-secret-0123456789", "Payments", b"hi"),
    ],
)
def test_a_refused_send_gets_no_permission_and_stores_nothing(
    served, why: str, user: str | None, secret: str, topic: str, body_sent: bytes
) -> None:
    broker, port = served
    uniq = f"REFUSED-{why.replace(' ', '-')}"
    fields = _signed(_send_fields(uniq, topic), b"hi", user, secret)
    answer = _call(port, RequestCode.SEND_MESSAGE_V2, fields, body_sent)
    assert answer.code == ResponseCode.NO_PERMISSION, why
    assert "secret" not in (answer.remark or "")
    assert uniq not in _stored(broker)


def test_privileged_codes_need_a_super_user_even_with_a_wildcard_grant(served) -> None:
    _, port = served
    code = RequestCode.GET_BROKER_RUNTIME_INFO
    wildcard = _signed({}, b"", "everything", "wildcard-secret-0123456789")
    refused = _call(port, code, wildcard)
    assert refused.code == ResponseCode.NO_PERMISSION and "super user" in (refused.remark or "")
    root = _signed({}, b"", "root", "root-secret-0123456789")
    assert _call(port, code, root).code != ResponseCode.NO_PERMISSION  # passes the gate


def test_a_code_without_a_permission_row_is_refused_to_users(served) -> None:
    _, port = served
    fields = _signed({}, b"", "everything", "wildcard-secret-0123456789")
    answer = _call(port, 12345, fields)
    assert answer.code == ResponseCode.NO_PERMISSION


def test_the_refusal_log_names_no_secret(served) -> None:
    broker, _ = served
    text = broker.log_text()
    assert "remoting: refused reader" in text
    assert "secret-0123456789" not in text
    assert Path(broker.store_dir).exists()


def test_sends_written_together_are_each_judged_on_their_own_signature(served) -> None:
    # Sends of one read are served as one wave (``produce.py``): the gate must still judge
    # each one alone, and a refused one must neither store nor hold up the others.
    broker, port = served
    writer, reader = ("writer", "writer-secret-0123456789"), ("reader", "reader-secret-0123456789")
    wildcard = ("everything", "wildcard-secret-0123456789")
    plan = [
        ("WAVE-ok-1", "Orders", writer, ResponseCode.SUCCESS),
        ("WAVE-unsigned", "Orders", (None, ""), ResponseCode.NO_PERMISSION),
        ("WAVE-reader", "Orders", reader, ResponseCode.NO_PERMISSION),
        ("WAVE-other-topic", "Payments", writer, ResponseCode.NO_PERMISSION),
        ("WAVE-wildcard", "Payments", wildcard, ResponseCode.SUCCESS),
        ("WAVE-ok-2", "Orders", writer, ResponseCode.SUCCESS),
    ]
    client = FrameClient(port)
    try:
        frames = []
        for opaque, (uniq, topic, (user, secret), _) in enumerate(plan, start=1):
            fields = _signed(_send_fields(uniq, topic), b"hi", user, secret)
            frames.append(RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, opaque=opaque,
                                          ext_fields=fields, body=b"hi"))  # fmt: skip
        client.send_raw(b"".join(encode_frame(frame) for frame in frames))
        answers = {answer.opaque: answer for answer in (client.read() for _ in plan)}
    finally:
        client.close()
    stored = _stored(broker)
    for opaque, (uniq, _, _, code) in enumerate(plan, start=1):
        assert answers[opaque].code == code, (uniq, answers[opaque].remark)
        assert (uniq in stored) == (code == ResponseCode.SUCCESS), uniq
