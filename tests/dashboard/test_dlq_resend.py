"""Dead letters on the dashboard: ``/dlq`` lists each group's DLQ, ``/dlq/<group>`` pages
through it, and its re-send button sends a dead letter back to its origin topic through a
real broker process (``rmq-spark broker``), whose ACL decides. A re-send is a POST that needs
the page's per-process token; the same dead letter re-sent twice is stored once."""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from broker.broker_harness import BrokerProcess, props, read_records, start_broker
from dashboard_world import DEAD, DLQ_GROUP, DLQ_TOPIC, build_dlq_world
from flask.testing import FlaskClient

from rmq_spark.cli.dashboard.app import DashboardSettings, create_app
from rmq_spark.cli.dashboard.dlq import dead_letter, resend_id

USERS = """
[users.ops]
secret_key = "ops-secret-1"
policies = [{ resource = "Topic:tasks", actions = ["Pub"] }]

[users.viewer]
secret_key = "viewer-secret-1"
policies = [{ resource = "Topic:tasks", actions = ["Sub"] }]
"""
OPS = ("ops", "ops-secret-1")
VIEWER = ("viewer", "viewer-secret-1")


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return build_dlq_world(tmp_path / "store")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    started: list[BrokerProcess] = []

    def start(store: Path, *settings: str) -> BrokerProcess:
        process = start_broker(store, tmp_path / "work", *settings)
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


def _client(store: Path, **settings: object) -> FlaskClient:
    return create_app(DashboardSettings(store_dir=store, **settings)).test_client()  # type: ignore[arg-type]


def _token(client: FlaskClient) -> str:
    page = client.get(f"/dlq/{DLQ_GROUP}").text
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None, page
    return found.group(1)


def _reason(page: str) -> str:
    found = re.search(r'<p class="error" id="reason">(.*?)</p>', page, re.S)
    assert found is not None, page
    return html.unescape(found.group(1))


def _resent(store: Path, offset: int) -> list[dict[str, str]]:
    """The properties of every record the re-send of dead letter ``offset`` stored."""
    wanted = resend_id(dead_letter(store, DLQ_GROUP, offset))
    found = [r for r in read_records(store) if props(r).get("UNIQ_KEY") == wanted]
    assert all(r.topic == DLQ_TOPIC for r in found), [r.topic for r in found]
    return [{**props(r), "body": r.body.decode()} for r in found]


def test_the_dlq_pages_list_and_page_through_dead_letters(store: Path) -> None:
    client = _client(store)
    listing = client.get("/dlq").text
    assert re.search(rf">{DLQ_GROUP}</a></td><td>%DLQ%{DLQ_GROUP}</td>", listing)
    assert f'<td class="num depth">{DEAD}</td>' in listing
    first = client.get(f"/dlq/{DLQ_GROUP}?limit=2")
    assert first.status_code == 200
    assert first.text.count('class="dead-letter"') == 2 and "task 0" in first.text
    assert '<b class="origin">tasks</b>' in first.text
    assert 'id="next-page"' in first.text and "offset=2" in first.text
    second = client.get(f"/dlq/{DLQ_GROUP}?limit=2&offset=2").text
    assert second.count('class="dead-letter"') == 1 and "task 2" in second
    assert 'id="previous-page"' in second


def test_without_a_broker_there_is_no_resend_button_and_the_page_says_why(store: Path) -> None:
    client = _client(store)
    page = client.get(f"/dlq/{DLQ_GROUP}").text
    assert 'id="no-resend"' in page and "--broker HOST:PORT" in page
    assert 'class="resend"' not in page and 'name="csrf"' not in page


def test_a_post_without_the_pages_token_is_refused(store: Path) -> None:
    client = _client(store, broker="127.0.0.1:1")  # never reached: refused before
    before = len(read_records(store))
    for form in ({"offset": "0"}, {"offset": "0", "csrf": "guessed"}):
        response = client.post(f"/dlq/{DLQ_GROUP}/resend", data=form)
        assert response.status_code == 403
        assert "must come from this dashboard's own page" in _reason(response.text)
    other = _client(store, broker="127.0.0.1:1")  # another process: another token
    response = other.post(f"/dlq/{DLQ_GROUP}/resend", data={"offset": "0", "csrf": _token(client)})
    assert response.status_code == 403
    assert len(read_records(store)) == before


@pytest.mark.slow
def test_a_resent_dead_letter_lands_in_its_origin_topic_once(
    store: Path, broker: Callable[..., BrokerProcess]
) -> None:
    running = broker(store)
    client = _client(store, broker=running.address)
    token = _token(client)
    for _ in range(2):  # a double click: the broker stores the same re-send once
        response = client.post(f"/dlq/{DLQ_GROUP}/resend", data={"offset": "1", "csrf": token})
        assert response.status_code == 200, _reason(response.text)
        assert f"to {DLQ_TOPIC} as message" in response.text
    [copy] = _resent(store, 1)
    assert copy["body"] == "task 1" and copy["TAGS"] == "T" and copy["KEYS"] == "task-1"
    assert copy["attempt"] == "1"  # user properties travel; the DLQ's bookkeeping does not
    assert "DLQ_ORIGIN_TOPIC" not in copy and "RECONSUME_TIME" not in copy
    assert _resent(store, 0) == [] and _resent(store, 2) == []


@pytest.mark.slow
def test_with_auth_on_a_user_without_pub_is_refused_with_a_clear_message(
    store: Path, broker: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    users = tmp_path / "users.toml"
    users.write_text(USERS, encoding="utf-8")
    users.chmod(0o600)
    running = broker(store, "broker.auth_enabled=true", f"broker.auth_users_file={users}")
    viewer = _client(store, broker=running.address, credentials=VIEWER)
    response = viewer.post(f"/dlq/{DLQ_GROUP}/resend", data={"offset": "0", "csrf": _token(viewer)})
    assert response.status_code == 403
    reason = _reason(response.text)
    assert reason.startswith(f"the broker at {running.address} refused the re-send: UNAUTHORIZED")
    assert "viewer" in reason and "Pub" in reason, reason
    assert _resent(store, 0) == []
    unsigned = _client(store, broker=running.address)
    response = unsigned.post(
        f"/dlq/{DLQ_GROUP}/resend", data={"offset": "0", "csrf": _token(unsigned)}
    )
    assert response.status_code == 403 and _resent(store, 0) == []
    ops = _client(store, broker=running.address, credentials=OPS)
    response = ops.post(f"/dlq/{DLQ_GROUP}/resend", data={"offset": "0", "csrf": _token(ops)})
    assert response.status_code == 200, _reason(response.text)
    assert [c["body"] for c in _resent(store, 0)] == ["task 0"]
