"""The committed golden vectors against a live RocketMQ: tests/golden/java/*.hex are still what
RocketMQ 5.3.3 writes for cases.json, and the codec's own tests/golden/*.hex (made by our
encoder) are byte for byte what RocketMQ writes for the same fields."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace
from types import ModuleType

import pytest
from rmq_java import spec_for_record

from rmq_spark.envcheck import repo_root
from rmq_spark.interop import GOLDEN_CASES_FILE, GOLDEN_EXPECTED_FILE, Harness, read_hex
from rmq_spark.store.codec import encode_record
from rmq_spark.store.message import HostAddress

pytestmark = pytest.mark.slow

GOLDEN_DIR = repo_root() / "tests" / "golden"
JAVA_GOLDEN_DIR = GOLDEN_DIR / "java"


def _load_make_golden() -> ModuleType:
    path = GOLDEN_DIR / "make_golden.py"
    spec = importlib.util.spec_from_file_location("make_golden_for_interop", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_java_golden_files_are_what_rocketmq_writes_today(harness: Harness) -> None:
    assert harness.version() == "V5_3_3"
    cases = json.loads((JAVA_GOLDEN_DIR / GOLDEN_CASES_FILE).read_text())
    expected = json.loads((JAVA_GOLDEN_DIR / GOLDEN_EXPECTED_FILE).read_text())
    names = sorted(cases)
    answers = harness.encode([{**cases[name], "op": "record"} for name in names])
    for name, answer in zip(names, answers, strict=True):
        assert bytes.fromhex(answer["hex"]) == read_hex(JAVA_GOLDEN_DIR / f"{name}.hex"), name
        assert answer["decoded"] == expected[name], name


def _java_port(host: HostAddress) -> HostAddress:
    # java.net.InetSocketAddress holds ports 0..65535 only; the record field is an int32.
    return host if host.port <= 65535 else HostAddress(host.ip, 65535)


def test_codec_golden_files_are_what_rocketmq_writes_for_the_same_fields(
    harness: Harness,
) -> None:
    make_golden = _load_make_golden()
    names = sorted(make_golden.CASES)
    assert names, "tests/golden/make_golden.py has no CASES"
    records = {}
    for name in names:
        case = make_golden.CASES[name]
        records[name] = replace(
            case, born_host=_java_port(case.born_host), store_host=_java_port(case.store_host)
        )
    answers = harness.encode([spec_for_record(records[name]) for name in names])
    for name, answer in zip(names, answers, strict=True):
        assert "hex" in answer, f"{name}: {answer}"
        if records[name] == make_golden.CASES[name]:
            expected = read_hex(GOLDEN_DIR / f"{name}.hex")
        else:  # a port Java cannot express: compare our encoder on the Java-expressible twin
            expected = encode_record(records[name])
        assert answer["hex"] == expected.hex(), f"tests/golden/{name}.hex differs from RocketMQ"
