"""The dashboard's pages through Flask's test client: each renders the store's data, and bad
input gets a 4xx page with a one-line reason (never a traceback)."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from dashboard_world import ACKED, PAYMENTS, World
from flask.testing import FlaskClient

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.embedded import Broker
from rmq_spark.cli.dashboard.app import DashboardSettings, create_app
from rmq_spark.cli.dashboard_command import parse_listen
from rmq_spark.cli.main import EXIT_ERROR, main
from rmq_spark.clock import ManualClock
from rmq_spark.errors import ConfigError
from rmq_spark.store.view import broker_has_store_open


@pytest.fixture(scope="module")
def client(world: World) -> FlaskClient:
    return create_app(DashboardSettings(store_dir=world.root)).test_client()


def _reason(page: str) -> str:
    found = re.search(r'<p class="error" id="reason">(.*?)</p>', page, re.S)
    assert found is not None, page
    return html.unescape(found.group(1))


def test_every_page_renders_the_store(client: FlaskClient, world: World) -> None:
    overview = client.get("/").get_data(as_text=True)
    assert "orders" in overview and "payments" in overview and "<svg" in overview
    topic = client.get("/topics/orders").get_data(as_text=True)
    assert 'id="queues"' in topic and "<polyline" in topic
    groups = client.get("/groups").get_data(as_text=True)
    assert re.search(rf'<td class="num lag">{PAYMENTS - ACKED}</td>', groups)
    jobs = client.get("/jobs").get_data(as_text=True)
    assert "reput:/data/tables" in jobs and "level 2" in jobs
    found = client.get("/messages", query_string={"msg_id": world.msg_id})
    assert found.status_code == 200 and world.body in found.get_data(as_text=True)
    browse = client.get("/messages", query_string={"topic": "orders", "begin": "0"})
    assert "12 message(s)" in browse.get_data(as_text=True)


@pytest.mark.parametrize(
    ("query", "status", "reason"),
    [
        ({"msg_id": "zz-not-hex"}, 400, "msg_id: 'zz-not-hex'"),
        ({"msg_id": "7F00000100002A9F00000000FFFFFFFF"}, 404, "outside the readable range"),
        ({"topic": "orders", "begin": "yesterday"}, 400, "begin: not epoch milliseconds"),
        ({"topic": "orders", "key": "order-1"}, 400, "start the dashboard with --tables"),
        ({"key": "order-1"}, 400, "topic: a key lookup needs the topic"),
    ],
)
def test_bad_lookups_get_a_4xx_page_with_one_line(
    client: FlaskClient, query: dict[str, str], status: int, reason: str
) -> None:
    response = client.get("/messages", query_string=query)
    assert response.status_code == status
    line = _reason(response.get_data(as_text=True))
    assert reason in line and "\n" not in line and "Traceback" not in line


def test_unknown_topic_and_page_get_404(client: FlaskClient) -> None:
    response = client.get("/topics/nope")
    assert response.status_code == 404 and "no topic 'nope'" in _reason(response.text)
    assert client.get("/nowhere").status_code == 404


def test_listen_address_parsing() -> None:
    assert parse_listen("127.0.0.1:8088") == ("127.0.0.1", 8088)
    assert parse_listen("[::1]:0") == ("::1", 0)
    with pytest.raises(ConfigError, match="--listen: expected HOST:PORT"):
        parse_listen("8088")


def test_pages_work_while_a_broker_has_the_store_open(tmp_path: Path) -> None:
    root = tmp_path / "store"
    config = BrokerConfig(default_queue_count=2)
    with Broker(root, broker_config=config, clock=ManualClock()) as broker:
        for i in range(6):
            assert broker.send("live", f"live {i}".encode()).ok
        assert broker.store.consume_queues.wait_dispatched(broker.store.confirmed_offset, 10)
        client = create_app(DashboardSettings(store_dir=root)).test_client()
        page = client.get("/")
        assert page.status_code == 200 and "a broker has the store open" in page.text
        assert re.search(r"live</a></td>\s*<td class=\"num\">2</td>", page.text)
        assert client.get("/groups").status_code == 200
        assert client.get("/jobs").status_code == 200
        assert "live 3" in client.get("/messages?topic=live&begin=0").text
        # The store's lock is a POSIX lock, dropped when any descriptor of the lock file in
        # the broker's process closes: the dashboard (here in that process) never opens it.
        assert broker_has_store_open(root)


def test_cli_refuses_a_missing_store_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["dashboard", "--store", str(tmp_path / "nope")]) == EXIT_ERROR
    err = capsys.readouterr().err.strip()
    assert (
        err == f"rmq-spark dashboard: error: {tmp_path / 'nope'} is not a store: it does not exist"
    )


def test_overview_shows_the_rate_now_and_the_average_over_the_datas_window(
    client: FlaskClient,
) -> None:
    page = client.get("/").text
    # 12 orders over the 3 minutes the data spans (not over a fixed hour: 0.2).
    assert re.search(r'orders</a></td>.*?<td class="num avg">4\.0</td>', page, re.S)
    assert '<td class="num now">0</td>' in page  # the store is long quiet
    assert "3 minute(s) from 2025-11-24 16:00:00.000Z (the span of the stored messages" in page
    chosen = client.get("/?minutes=60").text
    assert "60 minute(s) from" in chosen and '<option value="60" selected>' in chosen
    assert re.search(r'orders</a></td>.*?<td class="num avg">0\.2</td>', chosen, re.S)
    topic = client.get("/topics/orders").text
    assert 'id="rates"' in topic and "window average: 4.0 msgs/min" in topic


def test_pages_reload_on_an_interval_with_an_off_switch(world: World) -> None:
    client = create_app(DashboardSettings(store_dir=world.root, refresh_s=15)).test_client()
    for path in ("/", "/topics/orders", "/groups", "/jobs", "/dlq"):
        page = client.get(path).text
        assert '<meta http-equiv="refresh" content="15">' in page, path
        assert 'id="refresh-off"' in page, path
    off = client.get("/?refresh=0").text
    assert 'http-equiv="refresh"' not in off and 'id="refresh-on"' in off
    assert 'http-equiv="refresh"' not in client.get("/messages?topic=orders&begin=0").text
    quiet = create_app(DashboardSettings(store_dir=world.root, refresh_s=0)).test_client()
    assert 'http-equiv="refresh"' not in quiet.get("/groups").text


def test_messages_page_through_by_offset_and_by_time(client: FlaskClient) -> None:
    first = client.get("/messages?topic=orders&queue=0&offset=0&limit=2").text
    assert first.count('class="message"') == 2 and 'id="next-page"' in first
    assert "topic=orders&amp;queue=0&amp;limit=2&amp;offset=2" in first
    by_time = client.get("/messages?topic=payments&begin=0&limit=4").text
    assert "9 message(s), 4 on this page" in by_time and 'id="next-page"' in by_time
    assert "skip=4" in by_time


def test_a_request_naming_another_host_is_refused(client: FlaskClient) -> None:
    # A page of another site reaching a loopback dashboard through DNS rebinding.
    response = client.get("/", headers={"Host": "evil.example:8088"})
    assert response.status_code == 400
    assert "'evil.example:8088' is not this dashboard's address" in _reason(response.text)
    assert client.get("/", headers={"Host": "127.0.0.1:8088"}).status_code == 200
    assert client.get("/", headers={"Host": "[::1]:8088"}).status_code == 200


@pytest.mark.parametrize(
    ("options", "line"),
    [
        (["--refresh", "-1"], "--refresh: expected 0..3600 seconds, got -1"),
        (["--page-size", "501"], "--page-size: expected 1..500, got 501"),
        (["--broker", "nowhere"], "--broker: expected HOST:PORT, got 'nowhere'"),
        (["--access-key", "ops"], "--access-key: signs re-sends: it needs --broker"),
        (["--broker", "127.0.0.1:1", "--access-key", "ops"], "RMQ_SECRET_KEY"),
    ],
)
def test_cli_refuses_bad_options_in_one_line(
    world: World,
    options: list[str],
    line: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RMQ_SECRET_KEY", raising=False)
    assert (
        main(["dashboard", "--store", str(world.root), "--listen", "127.0.0.1:0", *options])
        == EXIT_ERROR
    )
    err = capsys.readouterr().err.strip()
    assert line in err and len(err.splitlines()) == 1, err
