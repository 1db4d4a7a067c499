"""ReputConfig: the ``[reput]`` config section (the streaming job that builds the Delta tables).

Owns the reput job's settings, their defaults and their validation. Does not own the table
schemas (``tables.py``), the job logic (``reput.py``) nor loading TOML (``rmq_spark/config.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from rmq_spark.broker.config import parse_listen
from rmq_spark.spark.config import DRIVER_JITS

__all__ = ["ReputConfig", "check_metrics_settings"]

_MIB = 1 << 20
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True, slots=True)
class ReputConfig:
    tables_dir: Path = Path("tables")  # Delta tables: consume_queue/, message_index/, messages/
    stores: tuple[Path, ...] = ()  # stores to read without --store; several: a store column
    checkpoint_dir: Path | None = None  # stream checkpoint; None: <tables_dir>/_checkpoints/reput
    database: str = "rmq"  # catalog database the tables are registered in
    trigger_interval_ms: int = 500  # micro-batch interval of a continuous run
    available_now: bool = False  # process what the log holds now, then stop
    max_bytes_per_trigger: int = 512 * _MIB  # log bytes per micro-batch at most; 0: unlimited
    optimize_interval_batches: int = 1200  # OPTIMIZE (compact + cluster) every N batches; 0: never
    optimize_niceness: int = 19  # OPTIMIZE's process niceness, 0-19 (19: also the idle class)
    driver_jit: str = "quick"  # spark.driver_jit of the job's own session: quick (C1 only) or full
    checkpoint_interval_batches: int = 200  # Delta checkpoint of the tables every N batches
    log_retention_minutes: int = 10  # Delta log entries kept this long; 0: every version
    small_batch_bytes: int = 4 * _MIB  # a batch with fewer log bytes is written by the driver
    txn_app_id: str = "rmq-reput"  # Delta txnAppId of the idempotent writes
    lag_scan_messages_max: int = 100_000  # progress counts at most this many unread messages
    metrics_listen: str = ""  # Prometheus /metrics of the job on host:port; empty: off
    metrics_push_url: str = ""  # Pushgateway to push the job's metrics to; empty: off

    def __post_init__(self) -> None:
        if not str(self.tables_dir):
            raise ValueError("tables_dir: must not be empty")
        if not _NAME.fullmatch(self.database):
            raise ValueError(f"database: {self.database!r} is not a plain SQL identifier")
        if self.trigger_interval_ms <= 0:
            raise ValueError(f"trigger_interval_ms: must be > 0, got {self.trigger_interval_ms}")
        if self.checkpoint_interval_batches <= 0:
            raise ValueError(
                f"checkpoint_interval_batches: must be > 0, got {self.checkpoint_interval_batches}"
            )
        if not 0 <= self.optimize_niceness <= 19:
            raise ValueError(f"optimize_niceness: must be 0-19, got {self.optimize_niceness}")
        for name in (
            "max_bytes_per_trigger",
            "optimize_interval_batches",
            "small_batch_bytes",
            "lag_scan_messages_max",
            "log_retention_minutes",
        ):
            value = getattr(self, name)
            if value < 0:
                raise ValueError(f"{name}: must be >= 0, got {value}")
        if not self.txn_app_id.strip():
            raise ValueError("txn_app_id: must not be empty")
        if self.driver_jit not in DRIVER_JITS:
            raise ValueError(f"driver_jit: {self.driver_jit!r} is not one of {list(DRIVER_JITS)}")
        check_metrics_settings(self.metrics_listen, self.metrics_push_url)

    @property
    def reader_name(self) -> str:
        """The name this job publishes its progress under in the store
        (``store/reader_progress.py``): ``reput:<absolute tables_dir>``, one reader per set of
        tables."""
        return f"reput:{self.tables_dir.resolve()}"

    @property
    def resolved_checkpoint_dir(self) -> Path:
        """``checkpoint_dir``, or ``<tables_dir>/_checkpoints/reput`` when unset."""
        if self.checkpoint_dir is not None:
            return self.checkpoint_dir
        return self.tables_dir / "_checkpoints" / "reput"


def check_metrics_settings(listen: str, push_url: str) -> None:
    """The rule of a job's ``metrics_listen`` (``host:port``) and ``metrics_push_url`` (an
    http(s) URL), shared by the reput and schedule jobs' configs (raises ``ValueError``)."""
    if listen:
        try:
            parse_listen(listen)
        except ValueError as err:
            raise ValueError(f"metrics_listen: {err}") from None
    if push_url:
        parts = urlsplit(push_url if "://" in push_url else f"http://{push_url}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"metrics_push_url: expected http://host:port, got {push_url!r}")
