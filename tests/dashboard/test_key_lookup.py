"""The dashboard over real reput tables: the reput job (Spark) builds them from the
dashboard's store; the Jobs page shows the job's progress and the key lookup page answers
from the tables without a JVM (``spark/query_local.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from dashboard_world import World
from flask.testing import FlaskClient

from rmq_spark.cli.dashboard.app import DashboardSettings, create_app
from rmq_spark.spark.reput import run_reput
from rmq_spark.spark.reput_config import ReputConfig
from rmq_spark.store.delay_levels import DEFAULT_MESSAGE_DELAY_LEVEL, parse_message_delay_level

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def tables(spark: object, world: World, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tables = tmp_path_factory.mktemp("dashboard-tables") / "tables"
    levels_ms = parse_message_delay_level(DEFAULT_MESSAGE_DELAY_LEVEL)
    run_reput(spark, world.root, ReputConfig(tables_dir=tables, available_now=True), levels_ms)
    return tables


@pytest.fixture(scope="module")
def client(world: World, tables: Path) -> FlaskClient:
    return create_app(DashboardSettings(store_dir=world.root, tables_dir=tables)).test_client()


def test_jobs_page_shows_the_reput_job_caught_up(client: FlaskClient, tables: Path) -> None:
    jobs = client.get("/jobs").text
    assert f"reput:{tables}</td>" in jobs


def test_key_lookup_answers_from_the_tables(client: FlaskClient) -> None:
    page = client.get("/messages", query_string={"topic": "orders", "key": "order-7"})
    assert page.status_code == 200, page.text
    assert "order body 7" in page.text and "order body 6" not in page.text
    missing = client.get("/messages", query_string={"topic": "orders", "key": "no-such-key"})
    assert missing.status_code == 404 and "has key &#39;no-such-key&#39;" in missing.text
