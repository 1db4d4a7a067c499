"""The produce workload's Java-client case: ``java/ProduceBench.java`` with rocketmq-client-java.

``rocketmq-client-java`` (``java-client.pom.xml``) is fetched once into
``bench/peers/.cache/java-client`` and ``ProduceBench.java`` compiled there with ``javac``
(again only when the source is newer). ``java_case`` runs it against one endpoint: ``threads``
Producers, each with ``inflight`` async sends in flight, a warm-up, then ``seconds`` timed; the
broker's CPU is read when the program says the timed part starts and when it reports.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from peer_common import CACHE, PeerError, fetch_jars, java_command
from produce_cases import CaseResult, broker_cpu_s

__all__ = ["build", "compile_program", "java_case"]

HERE = Path(__file__).resolve().parent
POM = HERE / "java-client.pom.xml"
SOURCE = HERE / "java" / "ProduceBench.java"


def compile_program(source: Path, jars: Sequence[Path]) -> list[Path]:
    """The class path (``jars`` + ``source`` compiled into the cache), compiling when the
    source is newer than its class."""
    classes = CACHE / f"{source.stem}-classes"
    compiled = classes / f"{source.stem}.class"
    if not compiled.exists() or compiled.stat().st_mtime < source.stat().st_mtime:
        classes.mkdir(parents=True, exist_ok=True)
        classpath = ":".join(str(jar) for jar in jars)
        done = subprocess.run(
            ["javac", "-d", str(classes), "-cp", classpath, str(source)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise PeerError(f"{source.name}: javac failed: {done.stderr.strip()[:300]}")
    return [*jars, classes]


def build() -> list[Path]:
    """The class path of ProduceBench (rocketmq-client-java + the compiled program)."""
    return compile_program(SOURCE, fetch_jars("java-client", POM))


def java_case(
    endpoint: str,
    topic: str,
    threads: int,
    inflight: int,
    seconds: float,
    warm_up_s: float,
    body_bytes: int,
    pids: Sequence[int],
) -> CaseResult:
    classpath = build()
    with tempfile.TemporaryDirectory(prefix="peers-java-client-") as home:
        command = [
            *java_command("512m", classpath, f"-Duser.home={home}"),
            "ProduceBench", endpoint, topic, str(threads), str(inflight), str(seconds),
            str(warm_up_s), str(body_bytes),
        ]  # fmt: skip
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        try:
            assert process.stdout is not None
            cpu0 = client0 = None
            result = ""
            for line in process.stdout:
                if line.strip() == "timing":
                    cpu0, client0 = broker_cpu_s(pids), broker_cpu_s([process.pid])
                elif line.startswith("sent="):
                    result = line.strip()
                    break
            cpu1, client1 = broker_cpu_s(pids), broker_cpu_s([process.pid])
            _, err = process.communicate(timeout=120)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    if cpu0 is None or not result:
        raise PeerError(f"java client: no result (exit {process.returncode}): {err.strip()[-300:]}")
    fields = dict(item.split("=", 1) for item in result.split(" ", 5))
    return CaseResult(
        label=f"Java client, {threads} threads x {inflight} async in flight, {seconds:.0f} s",
        paced=False,
        sent=int(fields["sent"]),
        failed=int(fields["failed"]),
        seconds=float(fields["seconds"]),
        latencies_s=(),
        broker_cpu_s=cpu1 - cpu0,
        client_cpu_s=client1 - client0,
        first_error=fields.get("first_error", ""),
        quantiles_ms=(float(fields["p50_ms"]), float(fields["p99_ms"])),
    )
