"""Fast checks of the reput/query command lines and config (no Spark): argument parsing, the
[reput] config rules, and the message-id lookup, which reads the CommitLog directly."""

from __future__ import annotations

import argparse
import base64
import json
from pathlib import Path

import pytest

from rmq_spark.cli import query_command, reput_command
from rmq_spark.errors import (
    ConfigError,
    CorruptRecordError,
    MessageNotFoundError,
    OffsetOutOfRangeError,
)
from rmq_spark.spark.query import message_by_msg_id, record_at
from rmq_spark.spark.reput_config import ReputConfig
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.put import PutRequest


def _parser(module) -> argparse.ArgumentParser:  # noqa: ANN001
    parser = argparse.ArgumentParser()
    module.register(parser.add_subparsers(dest="command"))
    return parser


@pytest.mark.parametrize(
    ("text", "ms"), [("1s", 1000), ("500ms", 500), ("2m", 120_000), ("3", 3000), ("1h", 3_600_000)]
)
def test_trigger_intervals_parse_to_milliseconds(text: str, ms: int) -> None:
    assert reput_command.parse_trigger_ms(text) == ms


@pytest.mark.parametrize("text", ["", "0s", "fast", "1.5s", "-1s"])
def test_bad_trigger_intervals_are_refused_with_the_option_named(text: str) -> None:
    with pytest.raises(ConfigError, match="--trigger"):
        reput_command.parse_trigger_ms(text)


def test_reput_options_override_the_config_section(tmp_path: Path) -> None:
    args = _parser(reput_command).parse_args(
        ["reput", "--store", "s", "--tables", str(tmp_path), "--trigger", "250ms"]
    )
    config = reput_command.reput_config(args, None)
    assert (config.tables_dir, config.trigger_interval_ms, config.available_now) == (
        tmp_path,
        250,
        False,
    )
    assert config.resolved_checkpoint_dir == tmp_path / "_checkpoints" / "reput"
    args = _parser(reput_command).parse_args(["reput", "--store", "s", "--available-now"])
    assert reput_command.reput_config(args, None).available_now


def test_trigger_and_available_now_exclude_each_other() -> None:
    with pytest.raises(SystemExit):
        _parser(reput_command).parse_args(
            ["reput", "--store", "s", "--trigger", "1s", "--available-now"]
        )


@pytest.mark.parametrize(
    ("field", "value"),
    [("database", "rmq; DROP"), ("trigger_interval_ms", 0), ("max_bytes_per_trigger", -1)],
)
def test_reput_config_names_the_bad_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"^{field}: "):
        ReputConfig(**{field: value})


def _store_with_messages(root: Path) -> list:
    with MessageStore.open(StoreConfig(root_dir=root, segment_size_bytes=1024)) as store:
        return [store.put(PutRequest("T", f"body {i}".encode(), keys=(f"k{i}",))) for i in range(8)]


def test_query_by_msg_id_prints_the_record_read_from_the_commitlog(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = _store_with_messages(tmp_path / "store")
    target = results[5]  # past a segment roll (1 KiB segments)
    args = _parser(query_command).parse_args(
        ["query", "--store", str(tmp_path / "store"), "--msg-id", target.msg_id]
    )
    assert query_command.run(args) == 0
    line = json.loads(capsys.readouterr().out)
    assert line["physical_offset"] == target.physical_offset
    assert line["msg_id"] == target.msg_id
    assert base64.b64decode(line["body_base64"]) == b"body 5"
    assert line["properties"]["KEYS"] == "k5"


def test_msg_id_lookups_of_no_message_raise_typed_errors(tmp_path: Path) -> None:
    results = _store_with_messages(tmp_path / "store")
    with pytest.raises(MessageNotFoundError, match="no message starts at physical offset"):
        record_at(tmp_path / "store", results[1].physical_offset + 4)
    beyond = results[-1].msg_id[:-16] + f"{10**9:016X}"
    with pytest.raises(OffsetOutOfRangeError):
        message_by_msg_id(tmp_path / "store", beyond)


def test_msg_id_lookup_in_a_closed_store_reads_the_record_without_validating_the_segment(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    with MessageStore.open(StoreConfig(root_dir=root, segment_size_bytes=4096)) as store:
        results = [store.put(PutRequest("T", f"body {i}".encode())) for i in range(6)]
    segment = root / "commitlog" / f"{0:020d}"
    data = bytearray(segment.read_bytes())
    data[results[1].physical_offset + 4] ^= 0xFF  # damage the magic code of an earlier record
    segment.write_bytes(bytes(data))
    # The damaged record is reported with its position; the intact one after it is returned.
    with pytest.raises(CorruptRecordError) as caught:
        record_at(root, results[1].physical_offset)
    assert str(results[1].physical_offset) in str(caught.value)
    assert message_by_msg_id(root, results[4].msg_id).body == b"body 4"
    # A torn tail is still out of range, not a message.
    data[results[5].physical_offset + 30 :] = bytes(len(data) - results[5].physical_offset - 30)
    segment.write_bytes(bytes(data))
    with pytest.raises((OffsetOutOfRangeError, CorruptRecordError)):
        record_at(root, results[5].physical_offset)


def test_unregister_removes_the_jobs_reader_so_retention_stops_waiting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rmq_spark.cli.main import main as cli_main
    from rmq_spark.store.reader_progress import publish_reader_progress, read_reader_progress

    store, tables = tmp_path / "store", tmp_path / "tables"
    name = ReputConfig(tables_dir=tables).reader_name
    assert name == f"reput:{tables.resolve()}"
    publish_reader_progress(store, name, 4096, 0)
    publish_reader_progress(store, "group:other", 0, 0)
    argv = ["reput", "--store", str(store), "--tables", str(tables), "--unregister"]
    assert cli_main(argv) == 0
    assert "removed reader" in capsys.readouterr().out
    assert [r.name for r in read_reader_progress(store)] == ["group:other"]
    assert cli_main(argv) == 0
    assert "was not registered" in capsys.readouterr().out


def test_reput_on_a_missing_store_fails_in_one_line_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rmq_spark.cli.main import main

    tables = tmp_path / "tables"
    code = main(["reput", "--store", str(tmp_path / "nope"), "--tables", str(tables)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0
    assert err == [f"rmq-spark reput: error: {tmp_path / 'nope'} is not a store: it does not exist"]
    assert not tables.exists()
