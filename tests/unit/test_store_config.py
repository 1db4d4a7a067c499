from __future__ import annotations

from pathlib import Path

import pytest

from rmq_spark.config import load_config
from rmq_spark.errors import ConfigError
from rmq_spark.store.config import FlushPolicy, IoMode, StoreConfig
from rmq_spark.store.delay_levels import DEFAULT_MESSAGE_DELAY_LEVEL


def test_defaults_follow_rocketmq_message_store_config() -> None:
    config = StoreConfig()
    assert config.segment_size_bytes == 1 << 30
    assert config.flush_interval_ms == 500
    assert config.sync_flush_timeout_ms == 5000
    assert config.max_message_size_bytes == 4 * 1024 * 1024
    assert config.file_reserved_time_hours == 72
    assert config.disk_max_used_space_ratio == 0.75
    assert config.message_delay_level == DEFAULT_MESSAGE_DELAY_LEVEL
    assert config.commitlog_dir == Path("store") / "commitlog"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("segment_size_bytes", 100),
        ("flush_interval_ms", 0),
        ("sync_flush_timeout_ms", -1),
        ("max_message_size_bytes", 0),
        ("disk_max_used_space_ratio", 1.5),
        ("idempotency_window_messages", -1),
        ("message_delay_level", "1s 5x"),
        ("store_host", "localhost"),
    ],
)
def test_bad_values_name_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"^{field}: "):
        StoreConfig(**{field: value})  # type: ignore[arg-type]


def test_the_loader_reads_the_store_section(tmp_path: Path) -> None:
    path = tmp_path / "rmq.toml"
    path.write_text(
        '[store]\nflush_policy = "ASYNC"\nio_mode = "PWRITE"\nsegment_size_bytes = 4096\n'
    )
    store = load_config(path).store
    assert (store.flush_policy, store.io_mode, store.segment_size_bytes) == (
        FlushPolicy.ASYNC,
        IoMode.PWRITE,
        4096,
    )


def test_the_loader_names_a_bad_store_key(tmp_path: Path) -> None:
    path = tmp_path / "rmq.toml"
    path.write_text("[store]\nsegment_size_bytes = 3\n")
    with pytest.raises(ConfigError, match=r"store\.segment_size_bytes"):
        load_config(path)
