"""When the reput's OPTIMIZE process may run: paused through each batch and from just before
each trigger, running again after a trigger interval without a batch (an idle stream).

A real process group (``sleep``) stands for the OPTIMIZE process and its JVM; states are read
from ``/proc``.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from rmq_spark.spark.optimize_process import PauseSwitch
from rmq_spark.spark.reput_maintenance import _OptimizeWindows

INTERVAL_MS = 400


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _becomes(pid: int, stopped: bool, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if (_state(pid) == "T") == stopped:
            return True
        time.sleep(0.005)
    return False


@pytest.fixture
def process():  # noqa: ANN201
    child = subprocess.Popen(["sleep", "60"], process_group=0, text=True)
    yield child
    child.kill()
    child.wait()


@pytest.fixture
def switch(process: subprocess.Popen[str]) -> PauseSwitch:
    switch = PauseSwitch()
    switch.attach(process)
    return switch


def test_paused_through_a_batch_and_from_the_next_trigger_until_an_interval_passes(
    process: subprocess.Popen[str], switch: PauseSwitch
) -> None:
    windows = _OptimizeWindows(switch, INTERVAL_MS)

    windows.batch_started()
    assert _becomes(process.pid, stopped=True)
    _just_after_a_trigger()
    windows.batch_ended(optimizing=True)
    ended_ms = time.time() * 1000
    assert _becomes(process.pid, stopped=False)
    assert _becomes(process.pid, stopped=True)  # the next trigger is due
    paused_ms = time.time() * 1000
    due_ms = (ended_ms // INTERVAL_MS + 1) * INTERVAL_MS
    assert paused_ms >= due_ms - _OptimizeWindows.MARGIN_MS - 5  # not before (timers run late)
    assert _becomes(process.pid, stopped=False)  # no batch came: an idle stream
    assert time.time() * 1000 - paused_ms >= INTERVAL_MS - 5
    windows.stop()


def _just_after_a_trigger() -> None:
    """Sleep to 10 ms past a multiple of the interval (a trigger's time), so the next one is
    most of an interval away."""
    now_ms = time.time() * 1000
    time.sleep(((now_ms // INTERVAL_MS + 1) * INTERVAL_MS + 10 - now_ms) / 1000)


def test_a_batch_that_starts_keeps_it_paused_and_stop_lets_it_run(
    process: subprocess.Popen[str], switch: PauseSwitch
) -> None:
    windows = _OptimizeWindows(switch, INTERVAL_MS)
    windows.batch_started()
    windows.batch_ended(optimizing=True)
    windows.batch_started()  # before the timers fire: theirs is an earlier turn
    time.sleep(3 * INTERVAL_MS / 1000)
    assert _state(process.pid) == "T"
    windows.stop()
    assert _becomes(process.pid, stopped=False)


def test_no_windows_without_an_optimize_running_or_between_back_to_back_batches(
    process: subprocess.Popen[str], switch: PauseSwitch
) -> None:
    for windows, optimizing in ((_OptimizeWindows(switch, INTERVAL_MS), False),
                                (_OptimizeWindows(switch, 0), True)):  # fmt: skip
        windows.batch_started()
        windows.batch_ended(optimizing=optimizing)
        time.sleep(2 * INTERVAL_MS / 1000)
        assert _state(process.pid) != "T"


def test_the_switch_leaves_a_process_that_ended_alone() -> None:
    ended = subprocess.Popen(["true"], process_group=0)
    ended.wait()
    switch = PauseSwitch()
    switch.attach(ended)
    switch.pause()  # its group id may belong to another process by now: no signal
    switch.resume()
