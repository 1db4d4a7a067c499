"""The official rocketmq-clients Go v5 client (5.1.4) signs with ``SessionCredentials`` and a
broker with auth on serves it; with a wrong secret it is refused and nothing is stored.

``go/authcheck`` (its go.sum pins the module, as ``go/consumecheck``'s does).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from broker_harness import REPO_ROOT, BrokerProcess, read_records

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("go") is None, reason="needs a Go toolchain (go)"),
]

PROGRAM = Path(__file__).parent / "go" / "authcheck"
USERS = """
[users.goapp]
secret_key = "go-secret-12"
policies = [
  { resource = "Topic:gorders", actions = ["Pub", "Sub"] },
  { resource = "Group:ggroup", actions = ["Sub"] },
]
"""


def _build() -> Path:
    binary = REPO_ROOT / ".cache" / "go" / "authcheck"
    binary.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly"}
    built = subprocess.run(
        ["go", "build", "-o", str(binary), "."],
        cwd=PROGRAM,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    return binary


def test_the_go_client_signs_and_is_served_and_a_wrong_secret_is_refused(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    binary = _build()
    users = tmp_path / "users.toml"
    users.write_text(USERS, encoding="utf-8")
    users.chmod(0o600)  # the broker refuses a users file others may read
    settings = ("broker.auth_enabled=true", f"broker.auth_users_file={users}")
    broker = broker_factory(*settings, "store.segment_size_bytes=16777216")

    def run(secret: str) -> list[str]:
        done = subprocess.run(
            [str(binary), broker.address, "goapp", secret, "gorders", "ggroup"],
            capture_output=True,
            text=True,
            timeout=120,
            env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
            check=False,
        )
        lines = [line for line in done.stdout.splitlines() if line.split(" ")[0].isupper()]
        assert lines and lines[-1] == "DONE", f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        return lines

    refused = run("not-the-secret")
    assert refused[0].startswith("REFUSED"), refused
    assert [r for r in read_records(broker.store_dir) if r.topic == "gorders"] == []

    served = run("go-secret-12")
    assert served[0].startswith("SENT ") and served[1].startswith("RECEIVED "), served
    assert served[1].split()[1] == served[0].split()[1]
    assert [r.body for r in read_records(broker.store_dir) if r.topic == "gorders"] == [b"from go"]
