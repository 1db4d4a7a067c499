"""A harness run from an exported tree (``git archive`` of a baseline) times that tree's code.

The venv's editable install points at one checkout; a job or broker the harness starts with
plain ``python`` imports that one's ``rmq_spark`` unless the harness's own checkout comes first
on ``PYTHONPATH``: a "before" run then timed the "after" code.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from peer_common import checkout_env
from rmq_spark_broker import REPO, RmqSparkBroker


def _imported_from(env: dict[str, str], cwd: Path) -> str:
    return subprocess.run(
        [sys.executable, "-c", "import rmq_spark; print(rmq_spark.__file__)"],
        env=env, cwd=cwd, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


def test_a_job_started_from_another_checkout_imports_that_checkouts_code(tmp_path: Path) -> None:
    tree = tmp_path / "before"
    (tree / "rmq_spark").mkdir(parents=True)
    (tree / "rmq_spark" / "__init__.py").write_text("")
    assert _imported_from(checkout_env(tree), tmp_path) == str(tree / "rmq_spark" / "__init__.py")


def test_the_broker_puts_its_own_checkout_first_even_when_it_is_this_one() -> None:
    env = RmqSparkBroker(checkout=REPO)._environment()
    assert env["PYTHONPATH"].split(":")[0] == str(REPO)
