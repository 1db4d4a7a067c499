"""Smoke test of bench/peers/visible.py: the broker, the reput job beside it and a paced
producer; every message sent is read back from the tables with its put -> visible time."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.spark]


def test_every_message_sent_is_visible_and_timed(capsys: pytest.CaptureFixture[str]) -> None:
    import visible  # bench/peers is on sys.path (conftest.py)

    args = ["--systems", "rmq-spark", "--rate", "50", "--seconds", "2", "--threads", "1"]
    assert visible.main(args) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["failed"] == 0 and result["sent"] == 100
    assert result["rows"] == result["sent"], result
    assert 0 < result["visible_p50_ms"] <= result["visible_max_ms"]
