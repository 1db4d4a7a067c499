"""The dashboard's pending-transactions page, ``/transactions``: per real topic and producer
group, how many transactional half messages wait for a commit or rollback, how old the oldest
is and how often the broker's check-back asked about the most-asked one. Read-only: the rows
are ``transactions.ledger.pending_by_group`` over the store's files (also while a broker runs).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from flask import Flask, render_template

from rmq_spark.broker.transactions.ledger import pending_by_group

if TYPE_CHECKING:
    from rmq_spark.cli.dashboard.app import DashboardSettings

__all__ = ["age_text", "register_transactions_page"]


def age_text(age_ms: int) -> str:
    """``age_ms`` as people read it: ``42 s``, ``3 min 5 s``, ``2 h 7 min``, ``3 d 4 h``."""
    seconds = max(0, age_ms) // 1000
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if days:
        return f"{days} d {hours % 24} h"
    if hours:
        return f"{hours} h {minutes % 60} min"
    if minutes:
        return f"{minutes} min {seconds % 60} s"
    return f"{seconds} s"


def register_transactions_page(
    app: Flask, settings: DashboardSettings, refresh: Callable[[], dict[str, Any]]
) -> None:
    """Add ``/transactions`` to ``app``."""
    root = settings.store_dir

    @app.get("/transactions")
    def transactions() -> str:
        now_ms = int(time.time() * 1000)
        rows = [
            (row, age_text(now_ms - row.oldest_born_timestamp)) for row in pending_by_group(root)
        ]
        return render_template("transactions.html", rows=rows, refresh=refresh())
