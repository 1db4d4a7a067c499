"""The dashboard's pages through Flask's test client: each renders the store's data, and bad
input gets a 4xx page with a one-line reason (never a traceback)."""

from __future__ import annotations

import html
import re

import pytest
from dashboard_world import ACKED, PAYMENTS, World
from flask.testing import FlaskClient

from rmq_spark.cli.dashboard_command import parse_listen
from rmq_spark.dashboard.app import DashboardSettings, create_app
from rmq_spark.errors import ConfigError


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
