"""DelayConfig: the ``[delay]`` config section (the delay-level and timer redelivery job).

Owns the job's settings, their defaults and their validation. The delay levels themselves
are the store's (``store.message_delay_level``): they are fixed when a message is stored.
Does not own loading TOML (``rmq_spark/config.py``) nor the job (``redeliver.py``, ``job.py``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from rmq_spark.spark.reput_config import check_metrics_settings

__all__ = ["DelayConfig", "EntrySourceKind"]


class EntrySourceKind(enum.Enum):
    """Where the job finds schedule entries (docs/DELAY.md, "Where entries come from")."""

    AUTO = "AUTO"  # the consume_queue table when it exists, else the CommitLog (with a warning)
    CONSUME_QUEUE = "CONSUME_QUEUE"  # only the consume_queue Delta table (reput job required)
    COMMITLOG = "COMMITLOG"  # scan SCHEDULE_TOPIC_XXXX / rmq_sys_wheel_timer in the log


@dataclass(frozen=True, slots=True)
class DelayConfig:
    trigger_interval_ms: int = 1000  # a continuous run starts a pass this often (or sooner if due)
    batch_messages_max: int = 2000  # messages put between two journal writes
    pass_messages_max: int = 200_000  # messages one pass redelivers at most
    timer_enabled: bool = True  # also redeliver 5.x timer messages (rmq_sys_wheel_timer)
    entry_source: EntrySourceKind = EntrySourceKind.AUTO  # consume_queue table or CommitLog
    blocked_retry_interval_ms: int = 10_000  # wait before retrying a put the broker refused
    delay_offset_flush_interval_ms: int = 10_000  # delayOffset.json rewrite interval (RocketMQ)
    lag_warn_bytes: int = 1 << 20  # warn when consume_queue trails the log by more than this
    lateness_window_messages: int = 100_000  # lateness p50/p99 cover the last N deliveries
    lookahead_ms: int = 5000  # read messages due this soon ahead (>= trigger interval); 0: off
    metrics_listen: str = ""  # Prometheus /metrics of the job on host:port; empty: off
    metrics_push_url: str = ""  # Pushgateway to push the job's metrics to; empty: off

    def __post_init__(self) -> None:
        for name in (
            "trigger_interval_ms",
            "batch_messages_max",
            "pass_messages_max",
            "blocked_retry_interval_ms",
            "lateness_window_messages",
        ):
            value = getattr(self, name)
            if value <= 0:
                raise ValueError(f"{name}: must be > 0, got {value}")
        for name in ("delay_offset_flush_interval_ms", "lag_warn_bytes", "lookahead_ms"):
            value = getattr(self, name)
            if value < 0:
                raise ValueError(f"{name}: must be >= 0, got {value}")
        if self.pass_messages_max < self.batch_messages_max:
            raise ValueError(
                f"pass_messages_max: must be >= batch_messages_max ({self.batch_messages_max}), "
                f"got {self.pass_messages_max}"
            )
        check_metrics_settings(self.metrics_listen, self.metrics_push_url)
