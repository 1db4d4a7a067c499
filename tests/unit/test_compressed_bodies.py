"""Compressed bodies (sys_flag COMPRESSED, RocketMQ 4.x clients above 4 KiB) are returned as
a consumer gets them: inflated by the source (``decompressBody``, default true), ``dump``
(``--raw-body`` for the stored bytes) and hence the reput tables; a body that does not
inflate is reported with its position, never returned as if it were the body."""

from __future__ import annotations

import json
import zlib

import pyarrow as pa
import pytest
from source_support import LogWriter, make_record

from rmq_spark.cli.store_commands import main
from rmq_spark.errors import CorruptRecordError
from rmq_spark.spark.options import parse_options
from rmq_spark.spark.source import RocketMQBatchReader
from rmq_spark.store.compression import BodyCompressionError, compression_name, inflate_body

TEXT = ("a consumer reads this text; " * 300).encode()  # > 4 KiB, as clients compress


def _store(tmp_path, body=None, sys_flag=0x1):
    writer = LogWriter(tmp_path / "store", segment_size_bytes=64 * 1024)
    writer.append(make_record(1, topic="Plain", body=b"plain body"))
    writer.append(
        make_record(2, topic="Zipped", body=body or zlib.compress(TEXT, 5), sys_flag=sys_flag)
    )
    return tmp_path / "store"


def _bodies(store, **options):
    raw = {"path": str(store), **options}
    reader = RocketMQBatchReader(parse_options(raw, streaming=False))
    out = {}
    for partition in reader.partitions():
        for batch in reader.read(partition):
            assert isinstance(batch, pa.RecordBatch)
            for row in batch.to_pylist():
                out[row["topic"]] = row["body"]
    return out


def test_inflate_body_by_type():
    packed = zlib.compress(TEXT)
    assert inflate_body(packed, 0x1) == TEXT  # type 0: ZLIB (older clients)
    assert inflate_body(packed, 0x301) == TEXT  # type 3: ZLIB
    assert inflate_body(packed, 0x300) == packed  # not flagged compressed: as stored
    assert compression_name(0x101) == "LZ4" and compression_name(0x201) == "ZSTD"
    with pytest.raises(BodyCompressionError, match="not a valid ZLIB body"):
        inflate_body(b"not zlib at all", 0x1)
    with pytest.raises(BodyCompressionError, match="truncated"):
        inflate_body(packed[: len(packed) // 2], 0x1)
    with pytest.raises(BodyCompressionError, match="unknown compression type"):
        inflate_body(packed, 0x501)


def test_the_source_inflates_compressed_bodies_unless_told_not_to(tmp_path):
    store = _store(tmp_path)
    assert _bodies(store) == {"Plain": b"plain body", "Zipped": TEXT}
    raw = _bodies(store, decompressBody="false")
    assert raw["Zipped"] == zlib.compress(TEXT, 5)


def test_a_body_that_does_not_inflate_names_its_file_and_position(tmp_path):
    store = _store(tmp_path, body=b"garbage, not deflate")
    with pytest.raises(CorruptRecordError, match="compressed body: not a valid ZLIB body") as err:
        _bodies(store)
    assert err.value.path.endswith("00000000000000000000") and err.value.position > 0


def test_dump_prints_inflated_text_and_filters(tmp_path, capsys):
    store = _store(tmp_path)
    assert main(["dump", "--store", str(store)]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    zipped = next(line for line in lines if line["topic"] == "Zipped")
    assert zipped["body_text"] == TEXT.decode()
    assert (zipped["body_compression"], zipped["body_inflated"]) == ("ZLIB", True)
    assert main(["dump", "--store", str(store), "--topic", "Zipped", "--raw-body"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["topic"] for line in lines] == ["Zipped"]
    assert lines[0]["body_text"] is None and lines[0]["body_inflated"] is False
    assert main(["dump", "--store", str(store), "--topic", "Plain", "--queue", "9"]) == 0
    assert capsys.readouterr().out == ""
