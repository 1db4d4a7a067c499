from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from store_helpers import open_store, put_many, segment_paths

from rmq_spark.cli.store_commands import main
from rmq_spark.store.put import PutRequest


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str], str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


def test_send_prints_one_json_object_with_the_stored_position(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(
        ["send", "--create", "--store", str(tmp_path), "--topic", "T", "--tags", "TagA",
         "--keys", "k1", "k2", "--queue-id", "3", "--property", "color=red", "--body", "hello"],
        capsys,
    )  # fmt: skip
    assert code == 0
    (line,) = out
    result = json.loads(line)
    assert result["status"] == "PUT_OK"
    assert (result["topic"], result["queue_id"], result["queue_offset"]) == ("T", 3, 0)
    assert result["physical_offset"] == 0 and len(result["msg_id"]) == 32
    assert len(result["uniq_key"]) == 32


def test_send_with_delay_level_reports_the_schedule_topic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(
        [
            "send",
            "--create",
            "--store",
            str(tmp_path),
            "--topic",
            "T",
            "--delay-level",
            "3",
            "--body",
            "x",
        ],  # fmt: skip
        capsys,
    )
    result = json.loads(out[0])
    assert code == 0 and (result["topic"], result["queue_id"]) == ("SCHEDULE_TOPIC_XXXX", 2)


def test_send_stdin_puts_one_message_per_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("one\ntwo\nthree\n"))
    send = ["send", "--create", "--store", str(tmp_path), "--topic", "T", "--stdin"]
    code, out, _ = _run(send, capsys)
    assert code == 0
    assert [json.loads(line)["queue_offset"] for line in out] == [0, 1, 2]
    code, out, _ = _run(["dump", "--store", str(tmp_path)], capsys)
    assert [base64.b64decode(json.loads(line)["body_base64"]) for line in out] == [
        b"one",
        b"two",
        b"three",
    ]


def test_send_of_an_illegal_topic_exits_1_with_the_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    send = ["send", "--create", "--store", str(tmp_path), "--topic", "a b", "--body", "x"]
    code, out, _ = _run(send, capsys)
    assert code == 1 and json.loads(out[0])["status"] == "MESSAGE_ILLEGAL"


def test_dump_prints_every_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = open_store(tmp_path, store_host="10.0.0.7:10911")
    result = store.put(PutRequest("TopicA", b"\x00\xffbody", queue_id=1, flag=7, tags="t"))
    store.close()
    code, out, _ = _run(["dump", "--store", str(tmp_path)], capsys)
    assert code == 0
    row = json.loads(out[0])
    assert set(row) == {
        "physical_offset", "total_size", "magic_version", "body_crc", "queue_id", "flag",
        "queue_offset", "sys_flag", "born_timestamp", "born_host", "store_timestamp",
        "store_host", "reconsume_times", "prepared_transaction_offset", "topic", "properties",
        "body_base64", "body_text", "msg_id",
    }  # fmt: skip
    assert row["msg_id"] == result.msg_id and row["store_host"] == "10.0.0.7:10911"
    assert row["properties"]["TAGS"] == "t" and row["flag"] == 7
    assert base64.b64decode(row["body_base64"]) == b"\x00\xffbody"
    assert row["store_timestamp"] == result.store_timestamp_ms


def test_dump_from_offset_and_limit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = open_store(tmp_path)
    results = put_many(store, 40)
    store.close()
    code, out, _ = _run(
        ["dump", "--store", str(tmp_path), "--from-offset", str(results[30].physical_offset),
         "--limit", "3"],
        capsys,
    )  # fmt: skip
    assert code == 0
    assert [json.loads(line)["physical_offset"] for line in out] == [
        r.physical_offset for r in results[30:33]
    ]
    code, _, err = _run(
        ["dump", "--store", str(tmp_path), "--from-offset", str(results[1].physical_offset + 1)],
        capsys,
    )
    assert code == 2 and "position" in err


def test_dump_works_on_a_store_another_writer_has_open(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = open_store(tmp_path, confirm_publish_interval_ms=1)
    results = put_many(store, 25)
    store.flush()
    code, out, _ = _run(["dump", "--store", str(tmp_path)], capsys)
    assert code == 0 and len(out) == 25
    assert json.loads(out[-1])["physical_offset"] == results[-1].physical_offset
    store.close()


def test_verify_passes_a_good_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = open_store(tmp_path)
    put_many(store, 50)
    store.close()
    code, out, _ = _run(["verify", "--store", str(tmp_path)], capsys)
    assert code == 0 and out[0].startswith("OK 50 records")


def test_verify_names_the_first_bad_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = open_store(tmp_path)
    results = put_many(store, 50)
    store.close()
    victim = results[33]
    segment = next(p for p in segment_paths(tmp_path) if int(p.name) <= victim.physical_offset)
    segment = [p for p in segment_paths(tmp_path) if int(p.name) <= victim.physical_offset][-1]
    data = bytearray(segment.read_bytes())
    data[victim.physical_offset - int(segment.name) + 120] ^= 1
    segment.write_bytes(bytes(data))
    code, out, _ = _run(["verify", "--store", str(tmp_path)], capsys)
    assert code == 1
    position = victim.physical_offset - int(segment.name)
    assert out[0].startswith(f"BAD {segment} position {position}")
    assert "BODYCRC" in out[0] and "33 good records" in out[0]


def test_verify_of_a_directory_that_is_not_a_store_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(["verify", "--store", str(tmp_path)], capsys)
    assert code == 2 and "not a store" in err


def test_module_runs_standalone_with_help() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rmq_spark.cli.store_commands", "verify", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "BLANK" in done.stdout and "--store" in done.stdout


def test_send_to_a_path_that_is_not_a_store_creates_nothing_without_create(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    typo = tmp_path / "stroe"
    code, out, err = _run(["send", "--store", str(typo), "--topic", "T", "--body", "x"], capsys)
    assert code == 2 and out == []
    assert err.strip() == (
        f"rmq-spark send: error: {typo} is not a store: it does not exist; "
        "pass --create to make a new store there"
    )
    assert not typo.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = _run(["send", "--store", str(empty), "--topic", "T", "--body", "x"], capsys)
    assert code == 2 and "has no commitlog/ directory" in err and list(empty.iterdir()) == []
