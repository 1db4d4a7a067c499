"""RocketMQ 4.9.8's ``DefaultMQProducer`` (the Java client from Maven Central) through a real
name server (``rmq-spark namesrv``) against a real broker process: sync, async (many in
flight), oneway and batch sends, each message then found in the store's CommitLog; with auth
on, a signed producer is served and an unsigned one, a wrong secret and a user without Pub are
refused with nothing stored; a TLS producer (``useTLS``)."""

from __future__ import annotations

import json
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker.broker_harness import BrokerProcess, by_uniq_key, props, read_records, wait_for
from java4 import compile_check, run_check
from namesrv_harness import Namesrv
from remoting_harness import start_remoting_broker

from rmq_spark.broker.remoting.codec import RemotingCommand, decode_frame, encode_frame
from rmq_spark.broker.remoting.codes import RequestCode, ResponseCode
from rmq_spark.store.msg_id import decode_offset_msg_id

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK (javac)"),
]

USERS = """
[users.writer4]
secret_key = "writer4-secret"
policies = [{ resource = "Topic:Secured", actions = ["Pub"] }]

[users.reader4]
secret_key = "reader4-secret"
policies = [{ resource = "Topic:Secured", actions = ["Sub"] }]
"""


@pytest.fixture(scope="module")
def class_path(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return compile_check("Producer4Check", tmp_path_factory.mktemp("classes"))


def _route(namesrv: Namesrv, topic: str) -> dict | None:
    """GET_ROUTEINFO_BY_TOPIC from the name server: the route, or ``None``."""
    request = RemotingCommand(code=RequestCode.GET_ROUTEINFO_BY_TOPIC, opaque=1,
                              version=409, ext_fields={"topic": topic})  # fmt: skip
    with socket.create_connection(("127.0.0.1", namesrv.port), timeout=10) as sock:
        sock.sendall(encode_frame(request))
        data = b""
        while True:
            outcome = decode_frame(data)
            if isinstance(outcome, tuple):
                break
            chunk = sock.recv(65536)
            assert chunk, "the name server closed the connection"
            data += chunk
    answer, _ = outcome
    return json.loads(answer.body) if answer.code == ResponseCode.SUCCESS else None


def _registered(namesrv: Namesrv, port: int) -> None:
    def announced() -> bool:
        route = _route(namesrv, "TBW102")
        return route is not None and any(
            address == f"127.0.0.1:{port}"
            for broker in route["brokerDatas"]
            for address in broker["brokerAddrs"].values()
        )

    wait_for(announced, 60, "the broker's remoting address at the name server")


def _start(
    namesrv: Namesrv, root: Path, *settings: str, name: str = "broker-a"
) -> tuple[BrokerProcess, int]:
    broker, port = start_remoting_broker(
        root / "store", root / "work", f"broker.namesrv_addr={namesrv.addr}",
        f"broker.broker_name={name}", *settings,
    )  # fmt: skip
    try:
        _registered(namesrv, port)
    except BaseException:
        broker.kill()  # a fixture that fails before its yield is not torn down
        raise
    return broker, port


@pytest.fixture(scope="module")
def plain(
    namesrv: Namesrv, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[BrokerProcess, int]]:
    broker, port = _start(namesrv, tmp_path_factory.mktemp("plain"))
    yield broker, port
    assert broker.stop() == 0


def _sent(lines: list[str]) -> list[tuple[str, str, int, int]]:
    sent = []
    for line in lines:
        assert line.startswith("SENT ") and line.endswith(" SEND_OK"), lines
        _, msg_id, offset_id, queue_id, queue_offset, _ = line.split()
        sent.append((msg_id, offset_id, int(queue_id), int(queue_offset)))
    return sent


def _check_stored(broker: BrokerProcess, topic: str, mode: str, ids: list[str]) -> None:
    stored = by_uniq_key(read_records(broker.store_dir))
    for i, uniq in enumerate(ids):
        [record] = stored[uniq]
        assert record.topic == topic
        assert record.body == f"{mode}-body-{i}".encode()
        assert props(record)["TAGS"] == f"Tag{mode}"
        assert props(record)["KEYS"] == f"{mode}-key-{i}"


def test_the_broker_registers_its_remoting_address(plain, namesrv: Namesrv) -> None:
    _, port = plain
    route = _route(namesrv, "TBW102")
    assert route is not None
    assert {a for b in route["brokerDatas"] for a in b["brokerAddrs"].values()} == {
        f"127.0.0.1:{port}"
    }


def test_sync_sends_are_stored_where_the_answers_say(plain, class_path, namesrv, tmp_path) -> None:
    broker, _ = plain
    lines = run_check(class_path, "Producer4Check", tmp_path, namesrv.addr, "Sync4", "sync", "20")
    sent = _sent(lines)
    assert len(sent) == 20
    _check_stored(broker, "Sync4", "sync", [s[0] for s in sent])
    records = by_uniq_key(read_records(broker.store_dir))
    for msg_id, offset_id, queue_id, queue_offset in sent:
        [record] = records[msg_id]
        assert (record.queue_id, record.queue_offset) == (queue_id, queue_offset)
        assert decode_offset_msg_id(offset_id)[1] == record.physical_offset
    assert len({s[2] for s in sent}) > 1  # the client spread them over queues


def test_async_sends_many_in_flight_are_all_stored(plain, class_path, namesrv, tmp_path) -> None:
    broker, _ = plain
    lines = run_check(
        class_path, "Producer4Check", tmp_path, namesrv.addr, "Async4", "async", "500"
    )
    sent = _sent(lines)
    assert len(sent) == 500 and len({s[0] for s in sent}) == 500
    stored = by_uniq_key(read_records(broker.store_dir))
    assert all(len(stored[s[0]]) == 1 for s in sent)


def test_oneway_sends_are_stored(plain, class_path, namesrv, tmp_path) -> None:
    broker, _ = plain
    lines = run_check(
        class_path, "Producer4Check", tmp_path, namesrv.addr, "Oneway4", "oneway", "10"
    )
    ids = [line.split()[1] for line in lines]
    assert len(ids) == 10 and all(line.startswith("ONEWAY ") for line in lines)
    wait_for(
        lambda: all(i in by_uniq_key(read_records(broker.store_dir)) for i in ids),
        30,
        "the oneway messages in the store",
    )
    _check_stored(broker, "Oneway4", "oneway", ids)


def test_a_batch_is_stored_as_its_messages(plain, class_path, namesrv, tmp_path) -> None:
    broker, _ = plain
    lines = run_check(class_path, "Producer4Check", tmp_path, namesrv.addr, "Batch4", "batch", "32")
    [(msg_ids, offset_ids, queue_id, first_offset)] = _sent(lines)
    ids = msg_ids.split(",")
    assert len(ids) == 32
    _check_stored(broker, "Batch4", "batch", ids)
    stored = by_uniq_key(read_records(broker.store_dir))
    assert [stored[i][0].queue_offset for i in ids] == list(range(first_offset, first_offset + 32))
    assert {stored[i][0].queue_id for i in ids} == {queue_id}
    assert len(offset_ids.split(",")) == 32


@pytest.fixture(scope="module")
def secured(
    namesrv: Namesrv, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[BrokerProcess, int]]:
    root = tmp_path_factory.mktemp("secured")
    users = root / "users.toml"
    users.write_text(USERS, encoding="utf-8")
    users.chmod(0o600)
    broker, port = _start(
        namesrv, root, "broker.auth_enabled=true", f"broker.auth_users_file={users}",
        "broker.tls_mode=enforcing", "broker.topics=Secured:4", name="broker-s",
    )  # fmt: skip
    yield broker, port
    assert broker.stop() == 0


def test_with_auth_a_signed_tls_producer_is_served(secured, class_path, namesrv, tmp_path) -> None:
    broker, _ = secured
    lines = run_check(
        class_path, "Producer4Check", tmp_path, namesrv.addr, "Secured", "sync", "3",
        "writer4", "writer4-secret", "tls",
    )  # fmt: skip
    sent = _sent(lines)
    _check_stored(broker, "Secured", "sync", [s[0] for s in sent])


@pytest.mark.parametrize(
    ("who", "credentials"),
    [
        ("unsigned", ("-", "-")),
        ("wrong secret", ("writer4", "not-the-secret")),
        ("no Pub right", ("reader4", "reader4-secret")),
    ],
)
def test_with_auth_refused_producers_store_nothing(
    secured, class_path, namesrv, tmp_path, who: str, credentials: tuple[str, str]
) -> None:
    broker, _ = secured
    before = len(read_records(broker.store_dir))
    lines = run_check(
        class_path, "Producer4Check", tmp_path, namesrv.addr, "Secured", "sync", "1",
        *credentials, "tls",
    )  # fmt: skip
    assert lines and lines[-1].startswith("ERROR MQBrokerException"), (who, lines)
    assert "CODE: 16" in lines[-1], lines
    assert len(read_records(broker.store_dir)) == before


def test_a_plaintext_producer_is_refused_by_an_enforcing_port(
    secured, class_path, namesrv, tmp_path
) -> None:
    broker, _ = secured
    before = len(read_records(broker.store_dir))
    lines = run_check(
        class_path, "Producer4Check", tmp_path, namesrv.addr, "Secured", "sync", "1",
        "writer4", "writer4-secret",
    )  # fmt: skip
    assert lines and lines[-1].startswith("ERROR "), lines
    assert len(read_records(broker.store_dir)) == before
