"""The official rocketmq-client-java signs with ``StaticSessionCredentialsProvider(ak, sk)``
and a broker with auth on serves it; with a wrong secret it is refused and nothing is stored.

``java/AuthCheck.java``; the jar comes from ``bench/peers`` (fetched once from Maven Central).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from broker_harness import REPO_ROOT, BrokerProcess, read_records

PEERS = REPO_ROOT / "bench" / "peers"
if str(PEERS) not in sys.path:
    sys.path.insert(0, str(PEERS))

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK (javac)"),
]
USERS = """
[users.javaapp]
secret_key = "java-secret-1"
policies = [
  { resource = "Topic:jorders", actions = ["Pub", "Sub"] },
  { resource = "Group:jgroup", actions = ["Sub"] },
]
"""


def test_the_java_client_signs_and_is_served_and_a_wrong_secret_is_refused(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    from java_client import POM, compile_program
    from peer_common import fetch_jars, java_command

    class_path = compile_program(
        Path(__file__).parent / "java" / "AuthCheck.java", fetch_jars("java-client", POM)
    )
    users = tmp_path / "users.toml"
    users.write_text(USERS, encoding="utf-8")
    users.chmod(0o600)  # the broker refuses a users file others may read
    settings = ("broker.auth_enabled=true", f"broker.auth_users_file={users}")
    broker = broker_factory(*settings, "store.segment_size_bytes=16777216")

    def run(secret: str) -> list[str]:
        args = [broker.address, "javaapp", secret, "jorders", "jgroup"]
        done = subprocess.run(
            [*java_command("256m", class_path), "AuthCheck", *args],
            capture_output=True,
            text=True,
            timeout=120,
            env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
            check=False,
        )
        lines = done.stdout.splitlines()
        assert lines and lines[-1] == "DONE", f"{done.stdout[-2000:]}\n{done.stderr[:2000]}"
        return lines

    refused = run("not-the-secret")
    assert refused[0].startswith("REFUSED"), refused
    assert [r for r in read_records(broker.store_dir) if r.topic == "jorders"] == []

    served = run("java-secret-1")
    assert served[0].startswith("SENT ") and served[1].startswith("RECEIVED "), served
    assert served[1].split()[1] == served[0].split()[1]
    assert [r.body for r in read_records(broker.store_dir) if r.topic == "jorders"] == [
        b"from java"
    ]
