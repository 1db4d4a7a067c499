"""The dashboard's web app (Flask): pages over ``data.py`` and ``lookup.py``, read-only
(the dead-letter pages and their re-send through a broker are ``dlq_pages.py``'s).

Owns the routes, turning query parameters (typed and bounded by ``params.py``) into calls,
and turning our errors into a page with one line and a 4xx status (bad input: 400; nothing
there: 404); any other failure is a 500 page with one line, never a traceback. Refuses a
request whose ``Host`` is not the dashboard's own when it serves loopback (another site
reaching it through DNS rebinding). Owns serving it (``serve``: werkzeug's threaded server,
bound to loopback unless told otherwise). Gathers nothing itself.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from flask import Flask, render_template, request
from markupsafe import Markup
from werkzeug.exceptions import HTTPException
from werkzeug.serving import BaseWSGIServer, make_server

from rmq_spark.cli.dashboard import data, lookup, params
from rmq_spark.cli.dashboard.chart import COLORS, traffic_svg
from rmq_spark.cli.dashboard.dlq_pages import error_page, refresh_links, register_dlq_pages
from rmq_spark.cli.dashboard.transactions_page import register_transactions_page
from rmq_spark.errors import (
    ConfigError,
    InvalidMessageError,
    MessageNotFoundError,
    OffsetOutOfRangeError,
    RmqError,
)

__all__ = ["DashboardSettings", "LOOPBACK_HOSTS", "create_app", "guard_host", "serve"]

_NOT_FOUND = (MessageNotFoundError, OffsetOutOfRangeError)
_BAD_INPUT = (ConfigError, InvalidMessageError)


LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True, slots=True)
class DashboardSettings:
    """``chart_minutes``: the chart's default window (``None``: the data's span);
    ``page_size``: messages per page unless the URL asks; ``refresh_s``: pages reload after
    that many seconds (0: never) unless the URL says ``refresh=``; ``broker`` (``host:port``)
    and ``credentials``: where a dead letter is re-sent (``None``: no re-send);
    ``allowed_hosts``: the ``Host`` names a request may use (``None``: any), so a page of a
    loopback dashboard cannot be read by another site through DNS rebinding."""

    store_dir: Path
    tables_dir: Path | None = None
    chart_minutes: int | None = None
    page_size: int = 50
    refresh_s: int = 30
    broker: str | None = None
    credentials: tuple[str, str] | None = None
    allowed_hosts: tuple[str, ...] | None = LOOPBACK_HOSTS


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
    app.config["MAX_CONTENT_LENGTH"] = 64 * 1024  # the one form posted is two short fields
    app.jinja_env.filters["utc"] = _utc
    app.jinja_env.filters["size"] = _size
    root = settings.store_dir
    guard_host(app, settings)

    @app.context_processor
    def _common() -> dict[str, Any]:
        return {"store_dir": root, "tables_dir": settings.tables_dir, "refresh": None}

    def _refresh() -> dict[str, Any]:
        return refresh_links(settings.refresh_s)

    def _chart(traffic: lookup.Traffic) -> dict[str, Any]:
        counts = traffic.counts
        legend = [(t, COLORS[i % len(COLORS)]) for i, t in enumerate(sorted(counts))]
        svg = Markup(traffic_svg(traffic.start_ms, counts))
        return {"svg": svg, "legend": legend, "choices": _WINDOW_CHOICES}

    def _minutes() -> int | None:
        if "minutes" not in request.args:
            return settings.chart_minutes
        return params.int_arg(request.args, "minutes", 0, 0, lookup.MINUTES_MAX) or None

    @app.get("/")
    def overview() -> str:
        traffic = lookup.traffic(root, _now_ms(), _minutes())
        return render_template(
            "overview.html",
            summary=data.store_summary(root),
            topics=data.topic_rows(root),
            chart=_chart(traffic),
            traffic=traffic,
            refresh=_refresh(),
        )

    @app.get("/topics/<path:topic>")
    def topic(topic: str) -> str:
        queues = data.topic_queues(root, params.url_topic(topic))
        if not queues:
            raise MessageNotFoundError(f"no topic {topic!r} in {root / 'consumequeue'}")
        traffic = lookup.traffic(root, _now_ms(), _minutes(), [topic])
        return render_template(
            "topic.html",
            topic=topic,
            queues=queues,
            chart=_chart(traffic),
            traffic=traffic,
            refresh=_refresh(),
        )

    @app.get("/groups")
    def groups() -> str:
        rows = data.group_rows(root)
        totals: dict[str, int] = {}
        for row in rows:
            totals[row.group] = totals.get(row.group, 0) + row.lag
        return render_template(
            "groups.html", rows=rows, totals=sorted(totals.items()), refresh=_refresh()
        )

    @app.get("/jobs")
    def jobs() -> str:
        delay, passes = data.delay_rows(root)
        return render_template(
            "jobs.html",
            readers=data.reader_rows(root),
            delay=delay,
            passes=passes,
            end=data.store_summary(root).end_offset,
            refresh=_refresh(),
        )

    @app.get("/messages")
    def messages() -> str:
        page, what = _lookup(settings, request.args)
        return render_template(
            "messages.html",
            args={k: v.strip() for k, v in request.args.items()},
            topics=lookup.application_topics(root),
            page=page,
            what=what,
        )

    register_dlq_pages(app, settings, _refresh)
    register_transactions_page(app, settings, _refresh)

    @app.errorhandler(RmqError)
    def _our_error(err: RmqError) -> tuple[str, int]:
        status = 404 if isinstance(err, _NOT_FOUND) else 400 if isinstance(err, _BAD_INPUT) else 500
        return error_page(status, str(err))

    @app.errorhandler(Exception)
    def _other_error(err: Exception) -> tuple[str, int]:
        if isinstance(err, HTTPException):
            return error_page(err.code or 500, err.description or err.name)
        app.logger.error("dashboard: %s", err, exc_info=err)
        return error_page(500, f"{type(err).__name__}: {err}")

    return app


_WINDOW_CHOICES = (("", "the data's span"), ("15", "15 minutes"), ("60", "1 hour"))
_WINDOW_CHOICES += (("360", "6 hours"), ("1440", "24 hours"))


def guard_host(app: Flask, settings: DashboardSettings) -> None:
    """Refuse a request whose ``Host`` is not one of ``settings.allowed_hosts``."""

    @app.before_request
    def _known_host() -> None:
        allowed = settings.allowed_hosts
        if allowed is not None and _host_name(request.host) not in allowed:
            raise ConfigError(
                "Host",
                f"{request.host[:80]!r} is not this dashboard's address: use {allowed[1]}",
            )


def _host_name(host: str) -> str:
    """The name part of a ``Host`` header (``[::1]:8088`` -> ``::1``)."""
    if host.startswith("["):
        return host[1:].partition("]")[0]
    name, sep, port = host.rpartition(":")
    return name if sep and port.isdigit() else host


def _lookup(settings: DashboardSettings, args: Mapping[str, str]) -> tuple[lookup.Page | None, str]:
    """The lookup the form asked for: (a page of messages, a title)."""
    root = settings.store_dir
    limit = params.int_arg(args, "limit", settings.page_size, 1, params.PAGE_SIZE_MAX)
    msg_id = params.text_arg(args, "msg_id")
    if msg_id:
        return lookup.Page([lookup.message_by_msg_id(root, msg_id)], 1), f"message id {msg_id}"
    named = params.text_arg(args, "topic")
    topic = params.url_topic(named) if named else ""
    key = params.text_arg(args, "key")
    if key:
        if not topic:
            raise ConfigError("topic", "a key lookup needs the topic")
        found = lookup.messages_by_key(settings.tables_dir, topic, key, limit)
        if not found:
            raise MessageNotFoundError(f"no message of topic {topic!r} has key {key!r}")
        return lookup.Page(found, len(found)), f"key {key} in {topic}"
    if args.get("queue", "").strip():
        if not topic:
            raise ConfigError("topic", "browsing a queue needs the topic")
        queue = params.int_arg(args, "queue", 0, 0, QUEUE_ID_MAX)
        offset = params.int_arg(args, "offset", 0, 0, params.OFFSET_MAX)
        page = lookup.offset_page(root, topic, queue, offset, limit)
        return page, f"{topic} queue {queue} from offset {offset}"
    if args.get("begin", "").strip() or args.get("end", "").strip():
        if not topic:
            raise ConfigError("topic", "a time lookup needs the topic")
        begin = params.time_arg(args, "begin", 0)
        end = params.time_arg(args, "end", _now_ms() + 1)
        skip = params.int_arg(args, "skip", 0, 0, params.SKIP_MAX)
        page = lookup.time_page(root, topic, begin, end, limit, skip)
        return page, f"{topic} stored in [{_utc(begin)}, {_utc(end)})"
    return None, ""


QUEUE_ID_MAX = 2**31 - 1


def _now_ms() -> int:
    return int(time.time() * 1000)


def serve(app: Any, host: str, port: int) -> BaseWSGIServer:
    """A threaded HTTP server for ``app`` on ``host:port`` (0: a free port); call
    ``serve_forever()`` on it, ``shutdown()`` from another thread to stop it."""
    return make_server(host, port, app, threaded=True)
