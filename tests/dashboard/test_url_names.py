"""Names from a URL are checked with the broker's topic rule before they touch a path: a
crafted ConsumeQueue outside the store is never rendered, however the ``..`` is spelled."""

from __future__ import annotations

import html
import re
import shutil

import pytest
from dashboard_world import World
from flask.testing import FlaskClient

from rmq_spark.cli.dashboard.app import DashboardSettings, create_app


@pytest.fixture(scope="module")
def client(world: World) -> FlaskClient:
    # A ConsumeQueue that only a path leaving <store>/consumequeue/ reaches: one copied
    # from the store's own "orders" topic, placed beside the store.
    outside = world.root.parent / "outside"
    shutil.copytree(world.root / "consumequeue" / "orders", outside, dirs_exist_ok=True)
    return create_app(DashboardSettings(store_dir=world.root)).test_client()


def _reason(page: str) -> str:
    found = re.search(r'<p class="error" id="reason">(.*?)</p>', page, re.S)
    assert found is not None, page
    return html.unescape(found.group(1))


@pytest.mark.parametrize(
    "path",
    [
        "/topics/../../outside",
        "/topics/..%2F..%2Foutside",
        "/topics/%2e%2e/%2e%2e/outside",
        "/topics/%2E%2E%2F%2E%2E%2Foutside",
        "/topics/orders/../../../outside",
        "/topics/..",
    ],
)
def test_a_topic_path_leaving_the_store_is_refused(client: FlaskClient, path: str) -> None:
    response = client.get(path)
    page = response.get_data(as_text=True)
    # werkzeug may normalise a literal ../ away (then no such topic: 404); never a render.
    assert response.status_code in (400, 404), (path, response.status_code)
    assert 'id="queues"' not in page
    line = _reason(page)
    assert "\n" not in line and "Traceback" not in line


@pytest.mark.parametrize("topic", ["../../outside", "..%2F..%2Foutside", "%2e%2e/outside"])
def test_a_lookup_topic_leaving_the_store_is_refused(client: FlaskClient, topic: str) -> None:
    response = client.get("/messages", query_string={"topic": topic, "begin": "0"})
    assert response.status_code == 400
    assert "outside [%|a-zA-Z0-9_-]" in _reason(response.get_data(as_text=True))


def test_encoded_dots_are_refused_with_the_topic_rule(client: FlaskClient) -> None:
    response = client.get("/topics/..%2F..%2Foutside")
    assert response.status_code == 400
    assert "outside [%|a-zA-Z0-9_-]" in _reason(response.get_data(as_text=True))


def test_a_topic_of_the_store_still_renders(client: FlaskClient) -> None:
    assert client.get("/topics/orders").status_code == 200


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/messages?topic=orders&queue=0&offset=-1", "offset: expected an integer in [0, "),
        ("/messages?topic=orders&queue=0&offset=1e3", "offset: expected an integer in [0, "),
        ("/messages?topic=orders&queue=0&offset=" + "9" * 40, "offset: expected an integer"),
        ("/messages?topic=orders&queue=x", "queue: expected an integer in [0, 2147483647]"),
        ("/messages?topic=orders&queue=0&limit=0", "limit: expected an integer in [1, 500]"),
        ("/messages?topic=orders&queue=0&limit=501", "limit: expected an integer in [1, 500]"),
        ("/messages?topic=orders&begin=0&skip=-2", "skip: expected an integer in [0, 100000]"),
        ("/messages?topic=orders&begin=%C2%B2", "begin: not epoch milliseconds nor ISO 8601"),
        ("/messages?topic=orders&begin=99999999999999999", "begin: a time between 1970 and 9999"),
        ("/messages?msg_id=" + "A" * 300, "msg_id: 300 characters long, the limit is 256"),
        ("/messages?topic=orders&key=a%0Ab", "key: has control characters"),
        ("/messages?queue=0", "topic: browsing a queue needs the topic"),
        ("/?minutes=abc", "minutes: expected an integer in [0, 1440]"),
        ("/?minutes=1441", "minutes: expected an integer in [0, 1440]"),
        ("/groups?refresh=-5", "refresh: expected an integer in [0, 3600]"),
        ("/dlq/strict?offset=x", "offset: expected an integer"),
        ("/dlq/..%7C..", "outside [%|a-zA-Z0-9_-]"),
        ("/dlq/%25DLQ%25x", "is a system group"),
    ],
)
def test_bad_url_parameters_get_a_one_line_400(client: FlaskClient, path: str, reason: str) -> None:
    response = client.get(path)
    assert response.status_code == 400, (path, response.status_code)
    line = _reason(response.get_data(as_text=True))
    assert reason in line and "\n" not in line and "Traceback" not in line, line


@pytest.mark.parametrize("group", ["..", "../../outside", "..%2F..%2Foutside"])
def test_a_dlq_group_leaving_the_store_is_refused(client: FlaskClient, group: str) -> None:
    response = client.get(f"/dlq/{group}")
    assert response.status_code in (400, 404) and 'class="dead-letter"' not in response.text
    posted = client.post(f"/dlq/{group}/resend", data={"offset": "0"})
    assert posted.status_code in (400, 403, 404, 405)
