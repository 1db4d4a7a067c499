"""The dashboard's dead-letter pages and their one write: re-sending a dead letter.

Owns ``/dlq`` (each group's DLQ depth), ``/dlq/<group>`` (its messages, paged by queue
offset, each with a re-send button when a broker is configured) and ``POST
/dlq/<group>/resend``, guarded by a per-process token in the form (a page of another site
cannot post one: it never sees the token). The re-send itself is ``dlq.resend``: through the
broker, whose ACL decides. Also the pieces every page shares: the one-line error page and
the auto-refresh links.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from flask import Flask, render_template, request

from rmq_spark.cli.dashboard import dlq, lookup, params
from rmq_spark.errors import BrokerError, ConfigError, SendRejectedError

if TYPE_CHECKING:
    from rmq_spark.cli.dashboard.app import DashboardSettings

__all__ = ["error_page", "refresh_links", "register_dlq_pages"]

_REFUSED_CODES = ("UNAUTHORIZED", "FORBIDDEN")


def error_page(status: int, reason: str) -> tuple[str, int]:
    """The page of a refusal or failure: ``reason`` on one line, whatever it held."""
    line = " ".join(str(reason).split())
    return render_template("error.html", status=status, reason=line), status


def refresh_links(default_s: int) -> dict[str, Any]:
    """This page's auto-refresh: its interval (``refresh=`` in the URL, else ``default_s``;
    0: off) and the URLs of this page with it switched off and on."""
    seconds = params.int_arg(request.args, "refresh", default_s, 0, params.REFRESH_MAX_S)
    args = {k: v for k, v in request.args.items() if k != "refresh"}

    def url(value: int) -> str:
        return f"{request.script_root}{request.path}?{urlencode({**args, 'refresh': str(value)})}"

    return {"seconds": seconds, "off": url(0), "on": url(default_s or 30)}


def register_dlq_pages(
    app: Flask, settings: DashboardSettings, refresh: Callable[[], dict[str, Any]]
) -> None:
    """Add the dead-letter pages to ``app``."""
    root = settings.store_dir
    token = secrets.token_urlsafe(32)  # per process: a restart invalidates open forms

    @app.get("/dlq")
    def dlq_list() -> str:
        return render_template("dlq.html", rows=dlq.dlq_rows(root), refresh=refresh())

    def group_page(group: str, notice: str = "") -> str:
        limit = params.int_arg(request.args, "limit", settings.page_size, 1, params.PAGE_SIZE_MAX)
        offset = params.int_arg(request.args, "offset", 0, 0, params.OFFSET_MAX)
        page = lookup.offset_page(root, dlq.dlq_topic(group), 0, offset, limit)
        return render_template(
            "dlq_group.html",
            group=group,
            page=page,
            broker=settings.broker,
            csrf_token=token,
            notice=notice,
        )

    @app.get("/dlq/<group>")
    def dlq_group(group: str) -> str:
        return group_page(params.url_group(group))

    @app.post("/dlq/<group>/resend")
    def dlq_resend(group: str) -> str | tuple[str, int]:
        sent = request.form.get("csrf", "")
        if not hmac.compare_digest(sent.encode(), token.encode()):
            return error_page(
                403,
                "refused: a re-send must come from this dashboard's own page (the form's "
                "token is missing or stale: reload the page and try again)",
            )
        group = params.url_group(group)
        if settings.broker is None:
            raise ConfigError(
                "--broker", "re-sending needs a broker: start with --broker HOST:PORT"
            )
        if not request.form.get("offset", "").strip():
            raise ConfigError("offset", "required: the dead letter's queue offset")
        offset = params.int_arg(request.form, "offset", 0, 0, params.OFFSET_MAX)
        try:
            resent = dlq.resend(root, group, offset, settings.broker, settings.credentials)
        except SendRejectedError as err:
            status = 403 if err.code_name in _REFUSED_CODES else 502
            return error_page(
                status,
                f"the broker at {settings.broker} refused the re-send: {err.code_name}: "
                f"{err.reason}",
            )
        except BrokerError as err:
            return error_page(502, f"the broker at {settings.broker} did not take it: {err}")
        notice = (
            f"Re-sent the dead letter at offset {offset} to {resent.topic} as message "
            f"{resent.message_id} (queue offset {resent.queue_offset})."
        )
        return group_page(group, notice)
