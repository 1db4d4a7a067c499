"""How ``make test`` (``pytest -n 2 --dist loadfile``) hands modules to its workers.

Each module is one unit of work, as with xdist's ``loadfile``, except the modules marked
``bench_lock``: they are one unit together, so one worker runs them one after another instead
of one worker idling on the machine-wide lock the other holds. Units go out longest first (by
``module_durations.json``, made by ``scripts/module_durations.py``), so no long module starts
last while the other worker runs out of work: the workers sort their collection
(``longest_first``) and the controller keeps that order (``ModulesInOrder``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from xdist.scheduler import LoadScopeScheduling

BENCH_LOCK_GROUP = "bench-lock"
BENCH_LOCK_MARK = "pytest.mark.bench_lock"
DURATIONS = Path(__file__).with_name("module_durations.json")
UNKNOWN_SLOW_S, UNKNOWN_S = 30.0, 2.0  # a module not in the file yet


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


@functools.cache
def _source(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return ""


def group_of(nodeid: str, root: Path) -> str:
    """The unit a test belongs to: its module, or the bench-lock group (by the module's mark;
    the controller collects nothing, so it reads the module's text)."""
    module = module_of(nodeid)
    return BENCH_LOCK_GROUP if BENCH_LOCK_MARK in _source(root / module) else module


@functools.cache
def _known() -> dict[str, float]:
    return json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}


def _seconds(module: str, root: Path, known: Mapping[str, float]) -> float:
    guess = UNKNOWN_SLOW_S if "pytest.mark.slow" in _source(root / module) else UNKNOWN_S
    return float(known.get(module, guess))


def longest_first(
    nodeids: Sequence[str], root: Path, known: Mapping[str, float] | None = None
) -> list[str]:
    """``nodeids`` with their units longest first (a unit's modules' seconds summed, from
    ``known``, by default ``module_durations.json``); stable inside a unit and between units
    of equal length."""
    known = _known() if known is None else known
    seconds: dict[str, float] = {}
    first: dict[str, int] = {}
    for at, nodeid in enumerate(nodeids):
        group, module = group_of(nodeid, root), module_of(nodeid)
        if module not in first:
            seconds[group] = seconds.get(group, 0.0) + _seconds(module, root, known)
        first.setdefault(module, at)
        first.setdefault(group, at)
    return sorted(nodeids, key=lambda n: (-seconds[group_of(n, root)], first[group_of(n, root)]))


class ModulesInOrder(LoadScopeScheduling):
    """xdist's scope scheduling with ``group_of`` as the scope, in the workers' order."""

    def __init__(self, config: Any, log: Any = None) -> None:
        super().__init__(config, log)
        config.option.loadscopereorder = False  # keep the workers' longest-first order

    def _split_scope(self, nodeid: str) -> str:
        return group_of(nodeid, Path(self.config.rootpath))
