"""The dashboard over every broker of a cluster (``rmq-spark dashboard --namesrv``).

``/`` lists the brokers the name servers know, one row each (address, store, log offsets,
topics, messages, whether a broker holds the store); ``/brokers/<name>/`` is the one-store
dashboard (``app.create_app``) of that broker's store, mounted under that prefix (the pages'
links carry it). The brokers and stores are the ones found at start (``--namesrv``): a broker
that joins later needs a restart of the dashboard. Read-only: no dead-letter re-send.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flask import Flask, render_template
from werkzeug.middleware.dispatcher import DispatcherMiddleware

from rmq_spark.cli.dashboard import data
from rmq_spark.cli.dashboard.app import DashboardSettings, create_app, guard_host
from rmq_spark.errors import RmqError

__all__ = ["BrokerRow", "broker_rows", "create_cluster_app"]

PREFIX = "/brokers/"


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerRow:
    name: str
    addr: str
    store_dir: str
    min_offset: int = -1
    end_offset: int = -1
    topics: int = 0
    messages: int = 0
    broker_open: bool = False
    problem: str = ""  # why the store could not be read here


def broker_rows(brokers: Mapping[str, Any]) -> list[BrokerRow]:
    """One row per broker (``BrokerStore``s by name), application topics only counted."""
    rows = []
    for name, broker in sorted(brokers.items()):
        root = Path(broker.path)
        try:
            summary = data.store_summary(root)
            topics = [t for t in data.topic_rows(root) if not t.system]
        except (RmqError, OSError) as err:
            rows.append(BrokerRow(name, broker.addr, broker.path, problem=str(err)[:200]))
            continue
        rows.append(BrokerRow(
            name, broker.addr, broker.path, summary.min_offset, summary.end_offset,
            len(topics), sum(t.message_count for t in topics), summary.broker_open,
        ))  # fmt: skip
    return rows


def create_cluster_app(brokers: Mapping[str, Any], settings: DashboardSettings) -> Any:
    """A WSGI app: the brokers' list at ``/``, each broker's dashboard under ``/brokers/NAME``."""
    root = Flask(__name__)
    guard_host(root, settings)

    @root.errorhandler(RmqError)
    def _our_error(err: RmqError) -> tuple[str, int]:
        return f"rmq-spark dashboard: {err}", 400

    @root.get("/")
    def cluster() -> str:
        return render_template("cluster.html", brokers=broker_rows(brokers), prefix=PREFIX)

    mounts = {
        f"{PREFIX}{name}": create_app(
            dataclasses.replace(settings, store_dir=Path(b.path), broker=None, credentials=None)
        )
        for name, b in brokers.items()
    }
    return DispatcherMiddleware(root, mounts)
