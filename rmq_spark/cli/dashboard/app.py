"""The dashboard's web app (Flask): pages over ``data.py`` and ``lookup.py``, read-only.

Owns the routes, turning query parameters into calls, and turning our errors into a page
with one line and a 4xx status (bad input: 400; nothing there: 404); any other failure is
a 500 page with one line, never a traceback. Owns serving it (``serve``: werkzeug's
threaded server, bound to loopback unless told otherwise). Gathers nothing itself.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from flask import Flask, render_template, request
from markupsafe import Markup
from werkzeug.exceptions import HTTPException
from werkzeug.serving import BaseWSGIServer, make_server

from rmq_spark.broker.topics import stored_topic_problem
from rmq_spark.cli.dashboard import data, lookup
from rmq_spark.cli.dashboard.chart import COLORS, traffic_svg
from rmq_spark.errors import (
    ConfigError,
    InvalidMessageError,
    MessageNotFoundError,
    OffsetOutOfRangeError,
    RmqError,
)

__all__ = ["DashboardSettings", "create_app", "serve"]

_NOT_FOUND = (MessageNotFoundError, OffsetOutOfRangeError)
_BAD_INPUT = (ConfigError, InvalidMessageError)


@dataclass(frozen=True, slots=True)
class DashboardSettings:
    store_dir: Path
    tables_dir: Path | None = None
    chart_minutes: int = 60
    lookup_limit: int = 50


def _utc(ms: int | None) -> str:
    if ms is None or ms < 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _size(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def create_app(settings: DashboardSettings) -> Flask:
    """The Flask app over one store (and optionally its reput tables)."""
    app = Flask(__name__)
    app.jinja_env.filters["utc"] = _utc
    app.jinja_env.filters["size"] = _size
    root = settings.store_dir

    @app.context_processor
    def _common() -> dict[str, Any]:
        return {"store_dir": root, "tables_dir": settings.tables_dir}

    def _chart(counts: dict[str, list[int]], start_ms: int) -> dict[str, Any]:
        legend = [(t, COLORS[i % len(COLORS)]) for i, t in enumerate(sorted(counts))]
        return {"svg": Markup(traffic_svg(start_ms, counts)), "legend": legend}

    @app.get("/")
    def overview() -> str:
        traffic = lookup.traffic(root, _now_ms(), settings.chart_minutes)
        return render_template(
            "overview.html",
            summary=data.store_summary(root),
            topics=data.topic_rows(root),
            chart=_chart(traffic.counts, traffic.start_ms),
            traffic=traffic,
            per_minute=_rates(traffic),
        )

    @app.get("/topics/<path:topic>")
    def topic(topic: str) -> str:
        queues = data.topic_queues(root, _url_topic(topic))
        if not queues:
            raise MessageNotFoundError(f"no topic {topic!r} in {root / 'consumequeue'}")
        traffic = lookup.traffic(root, _now_ms(), settings.chart_minutes)
        counts = {topic: traffic.counts[topic]} if topic in traffic.counts else {}
        return render_template(
            "topic.html",
            topic=topic,
            queues=queues,
            chart=_chart(counts, traffic.start_ms),
            traffic=traffic,
        )

    @app.get("/groups")
    def groups() -> str:
        rows = data.group_rows(root)
        totals: dict[str, int] = {}
        for row in rows:
            totals[row.group] = totals.get(row.group, 0) + row.lag
        return render_template("groups.html", rows=rows, totals=sorted(totals.items()))

    @app.get("/jobs")
    def jobs() -> str:
        delay, passes = data.delay_rows(root)
        return render_template(
            "jobs.html",
            readers=data.reader_rows(root),
            delay=delay,
            passes=passes,
            end=data.store_summary(root).end_offset,
        )

    @app.get("/messages")
    def messages() -> str:
        args = {k: v.strip() for k, v in request.args.items()}
        found, total, what = _lookup(settings, args)
        return render_template(
            "messages.html",
            args=args,
            topics=lookup.application_topics(root),
            found=found,
            total=total,
            what=what,
        )

    @app.errorhandler(RmqError)
    def _our_error(err: RmqError) -> tuple[str, int]:
        status = 404 if isinstance(err, _NOT_FOUND) else 400 if isinstance(err, _BAD_INPUT) else 500
        reason = " ".join(str(err).split())  # one line, whatever the error held
        return render_template("error.html", status=status, reason=reason), status

    @app.errorhandler(Exception)
    def _other_error(err: Exception) -> tuple[str, int]:
        if isinstance(err, HTTPException):
            status = err.code or 500
            return render_template("error.html", status=status, reason=err.description), status
        app.logger.error("dashboard: %s", err, exc_info=err)
        reason = f"{type(err).__name__}: {' '.join(str(err).split())}"
        return render_template("error.html", status=500, reason=reason), 500

    return app


def _url_topic(name: str) -> str:
    """A topic name from the URL, checked with the broker's rule before it becomes part of a
    path under the store (``..``, ``/`` and their encodings are refused, not followed)."""
    problem = stored_topic_problem(name)
    if problem is not None:
        raise ConfigError("topic", problem)
    return name


def _rates(traffic: lookup.Traffic) -> dict[str, float]:
    """Messages per minute of each topic over the chart's window."""
    return {topic: sum(row) / traffic.minutes for topic, row in traffic.counts.items()}


def _lookup(
    settings: DashboardSettings, args: dict[str, str]
) -> tuple[list[dict[str, Any]], int | None, str]:
    """The lookup the form asked for: (messages, how many in all when known, a title)."""
    root, limit = settings.store_dir, settings.lookup_limit
    if args.get("msg_id"):
        return [lookup.message_by_msg_id(root, args["msg_id"])], 1, f"message id {args['msg_id']}"
    topic = _url_topic(args["topic"]) if args.get("topic") else ""
    if args.get("key"):
        if not topic:
            raise ConfigError("topic", "a key lookup needs the topic")
        found = lookup.messages_by_key(settings.tables_dir, topic, args["key"], limit)
        if not found:
            raise MessageNotFoundError(f"no message of topic {topic!r} has key {args['key']!r}")
        return found, None, f"key {args['key']} in {topic}"
    if args.get("begin") or args.get("end"):
        if not topic:
            raise ConfigError("topic", "a time lookup needs the topic")
        begin = lookup.parse_time_ms(args.get("begin") or "0", "begin")
        end = lookup.parse_time_ms(args["end"], "end") if args.get("end") else _now_ms() + 1
        found, total = lookup.messages_by_time(root, topic, begin, end, limit)
        return found, total, f"{topic} stored in [{_utc(begin)}, {_utc(end)})"
    return [], None, ""


def _now_ms() -> int:
    return int(time.time() * 1000)


def serve(app: Flask, host: str, port: int) -> BaseWSGIServer:
    """A threaded HTTP server for ``app`` on ``host:port`` (0: a free port); call
    ``serve_forever()`` on it, ``shutdown()`` from another thread to stop it."""
    return make_server(host, port, app, threaded=True)
