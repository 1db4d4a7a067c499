"""Input the broker used to accept and store: each is now refused with a typed status / error.

Over gRPC: a delivery time of -9e18 s (stored as TIMER_DELIVER_MS outside int64), negative or
too large nanos, a born timestamp outside Timestamp's range. On the CLI, ``send`` applies the
broker's own rules (``BrokerService.validate``): an empty body, a tag with ``|``, a delay level
past the last one (clamped before) or below 1 (stored with DELAY=-3 before), a reserved
property such as UNIQ_KEY. Nothing refused is stored; the broker keeps serving.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from broker_harness import BrokerProcess, props, read_records, start_broker

from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.proto import service_pb2_grpc as spb_grpc
from rmq_spark.cli.main import main as cli_main

_METADATA = (("x-mq-client-id", "input-rules"), ("x-mq-language", "PYTHON"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    work = tmp_path_factory.mktemp("input-rules")
    started = start_broker(work / "store", work)
    yield started
    assert started.stop() == 0
    assert "Traceback" not in started.log_text()


@pytest.fixture
def stub(broker: BrokerProcess) -> Iterator[Any]:
    with grpc.insecure_channel(broker.address) as channel:
        yield spb_grpc.MessagingServiceStub(channel)


def _delayed(message_id: str, seconds: int, nanos: int = 0) -> Any:
    message = pb.Message(body=b"x")
    message.topic.name = "rules"
    props_ = message.system_properties
    props_.message_id = message_id
    props_.message_type = pb.DELAY
    props_.delivery_timestamp.seconds = seconds
    props_.delivery_timestamp.nanos = nanos
    return message


def _send(stub: Any, message: Any) -> Any:
    request = spb.SendMessageRequest(messages=[message])
    return stub.SendMessage(request, timeout=10, metadata=_METADATA)


@pytest.mark.parametrize(
    ("seconds", "nanos"),
    [
        (-9 * 10**18, 0),  # was stored as TIMER_DELIVER_MS=-9000000000000000000000
        (-5, 0),  # before 1970
        (1_700_000_000, -1),  # negative nanos
        (1_700_000_000, 10**9),  # nanos past a second
        (253_402_300_799_999 + 1, 0),  # past 9999-12-31 (as milliseconds)
    ],
)
def test_bad_delivery_timestamps_are_refused_and_not_stored(
    broker: BrokerProcess, stub: Any, seconds: int, nanos: int
) -> None:
    message_id = f"01RULES{abs(seconds) % 10**6}N{nanos & 0xFFFF}"
    response = _send(stub, _delayed(message_id, seconds, nanos))
    assert response.status.code == pb.ILLEGAL_DELIVERY_TIME, response
    assert all(props(r).get("UNIQ_KEY") != message_id for r in read_records(broker.store_dir))
    fine = pb.Message(body=b"fine")
    fine.topic.name = "rules"
    fine.system_properties.message_id = message_id + "OK"
    fine.system_properties.message_type = pb.NORMAL
    assert _send(stub, fine).status.code == pb.OK


def test_born_timestamp_with_negative_nanos_is_bad_request(stub: Any) -> None:
    message = pb.Message(body=b"x")
    message.topic.name = "rules"
    message.system_properties.message_id = "01RULESBORN"
    message.system_properties.message_type = pb.NORMAL
    message.system_properties.born_timestamp.seconds = 1_700_000_000
    message.system_properties.born_timestamp.nanos = -5
    assert _send(stub, message).status.code == pb.BAD_REQUEST


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (["--body", ""], "--body: MESSAGE_BODY_EMPTY"),
        (["--body", "x", "--tags", "a|b"], "--tags: ILLEGAL_MESSAGE_TAG"),
        (["--body", "x", "--delay-level", "99"], "--delay-level: BAD_REQUEST"),
        (["--body", "x", "--delay-level", "-3"], "--delay-level: BAD_REQUEST"),
        (["--body", "x", "--property", "UNIQ_KEY=forged"], "--property: ILLEGAL_MESSAGE_PROP"),
        (["--body", "x", "--keys", " "], "--keys: ILLEGAL_MESSAGE_KEY"),
    ],
)
def test_cli_send_applies_the_broker_rules(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], arguments: list[str], expected: str
) -> None:
    store = tmp_path / "store"
    code = cli_main(["send", "--create", "--store", str(store), "--topic", "T", *arguments])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.count("\n") == 0, err
    assert f"rmq-spark send: error: {expected}" in err, err
    assert read_records(store) == []


def test_cli_send_still_stores_valid_messages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    argv = ["send", "--create", "--store", str(store), "--topic", "T", "--body", "x", "--tags", "t"]
    assert cli_main([*argv, "--delay-level", "18", "--property", "k=v"]) == 0
    capsys.readouterr()
    (record,) = read_records(store)
    assert props(record)["DELAY"] == "18"
    assert props(record)["k"] == "v"


def test_cli_send_stdin_reports_a_refused_line_and_stores_the_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    store = tmp_path / "store"
    monkeypatch.setattr("sys.stdin", io.StringIO("one\n\nthree\n"))
    assert cli_main(["send", "--create", "--store", str(store), "--topic", "T", "--stdin"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert [line.split('"')[3] for line in lines] == ["PUT_OK", "REFUSED", "PUT_OK"]
    assert "--body: MESSAGE_BODY_EMPTY" in lines[1]
    assert [bytes(r.body) for r in read_records(store)] == [b"one", b"three"]
