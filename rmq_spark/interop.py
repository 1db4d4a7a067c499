"""Build and run the Java interop harness (``interop/java``), which drives Apache RocketMQ's own
store code (``MessageExtEncoder``, ``MessageDecoder``, ``DefaultMessageStore``, 5.3.3) so that
our store can be checked byte for byte against it.

Owns: finding ``mvn`` and ``java``, building the harness once (skipped when its classpath file
is newer than every source), and running its subcommands with JSON lines in and out. Does not
own any comparison logic (``tests/interop/``) or the Java code itself (``interop/java/``).

The first build downloads RocketMQ and its dependencies from Maven's default central
repository into ``maven_repo`` (by default ``<repo>/.cache/m2``, ignored by git); later builds
run offline.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmq_spark.envcheck import check_java, repo_root
from rmq_spark.errors import EnvironmentCheckError, InteropError

__all__ = [
    "GOLDEN_CASES_FILE",
    "GOLDEN_EXPECTED_FILE",
    "Harness",
    "HarnessFlavor",
    "ROCKETMQ_4",
    "ROCKETMQ_5",
    "build_harness",
    "default_harness_dir",
    "default_maven_repo",
    "read_hex",
    "write_golden_vectors",
]

_CLASSPATH_FILE = "classpath.txt"
_BUILD_STAMP = "rmq-interop.built"
_BUILD_TIMEOUT_S = 1800
_RUN_TIMEOUT_S = 600


def default_harness_dir() -> Path:
    """``<repo>/interop/java``: the Maven project of the harness (5.x; 4.x in ``rmq4/``)."""
    return repo_root() / "interop" / "java"


@dataclass(frozen=True, slots=True)
class HarnessFlavor:
    """One RocketMQ version's harness: where its Maven project and build output live (relative
    to the harness dir), its main class and the JVM options it needs."""

    rocketmq_version: str
    project: str
    build: str
    main_class: str
    jvm_args: tuple[str, ...] = ()


ROCKETMQ_5 = HarnessFlavor("5.3.3", ".", "target", "org.rmqspark.interop.Main")
"""``encode``, ``write-store``, ``read-store``, ``version`` against RocketMQ 5.3.3."""

ROCKETMQ_4 = HarnessFlavor(
    "4.9.8",
    "rmq4",
    "target/rmq4",
    "org.rmqspark.interop4.Main4",
    # 4.x unmaps files through DirectByteBuffer internals, closed by default since Java 16.
    (
        "--add-opens=java.base/java.nio=ALL-UNNAMED",
        "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
        "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
    ),
)
"""``write-store``, ``read-store``, ``version`` against RocketMQ 4.9.8 (no ``encode``)."""


def default_maven_repo() -> Path:
    """``<repo>/.cache/m2``: the local Maven repository used for the harness (git-ignored)."""
    return repo_root() / ".cache" / "m2"


@dataclass(frozen=True, slots=True)
class Harness:
    """A built harness: ``java <jvm_args> -cp <classpath> <main_class> <command> ...``."""

    java: str
    classpath: str
    main_class: str = ROCKETMQ_5.main_class
    jvm_args: tuple[str, ...] = ()

    def run(self, args: Sequence[str], stdin_lines: Iterable[str] = ()) -> list[dict[str, Any]]:
        """Run one subcommand; its stdout JSON lines, parsed.

        Raises
        ------
        InteropError
            A non-zero exit (the message carries the tail of stderr) or a non-JSON line.
        """
        command = [self.java, *self.jvm_args, "-cp", self.classpath, self.main_class, *args]
        text_in = "".join(line + "\n" for line in stdin_lines)
        try:
            done = subprocess.run(
                command,
                input=text_in.encode("utf-8"),
                capture_output=True,
                timeout=_RUN_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise InteropError(f"harness {' '.join(args)!r} did not run: {err}") from err
        out = done.stdout.decode("utf-8")
        if done.returncode != 0:
            tail = done.stderr.decode("utf-8", "replace")[-4000:]
            raise InteropError(
                f"harness {' '.join(args)!r} exited with {done.returncode}; stderr tail:\n{tail}"
                f"\nstdout tail:\n{out[-2000:]}"
            )
        try:
            return [json.loads(line) for line in out.splitlines() if line.strip()]
        except json.JSONDecodeError as err:
            raise InteropError(f"harness {' '.join(args)!r} printed non-JSON: {err}") from err

    def encode(self, requests: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Answer ``encode`` requests (ops ``record``, ``string``, ``bytes``, ``msgid``,
        ``props``, ``decode``), one answer per request, in order."""
        answers = self.run(["encode"], (json.dumps(r) for r in requests))
        if len(answers) != len(requests):
            raise InteropError(f"{len(requests)} requests but {len(answers)} answers")
        return answers

    def version(self) -> str:
        """The RocketMQ version on the harness classpath, e.g. ``V5_3_3``."""
        (line,) = self.run(["version"])
        return str(line["rocketmq"])

    def write_store(
        self, root_dir: Path, message_count: int, segment_size_bytes: int = 64 * 1024
    ) -> list[dict[str, Any]]:
        """Let RocketMQ's DefaultMessageStore write ``message_count`` messages in ``root_dir``."""
        return self.run(["write-store", str(root_dir), str(message_count), str(segment_size_bytes)])

    def read_store(self, root_dir: Path) -> list[dict[str, Any]]:
        """Let RocketMQ's DefaultMessageStore load and read ``root_dir`` (which it modifies)."""
        return self.run(["read-store", str(root_dir)])


def _newest_source_mtime_ns(project_dir: Path) -> int:
    paths = [project_dir / "pom.xml", *(project_dir / "src").rglob("*")]
    return max(p.stat().st_mtime_ns for p in paths if p.is_file())


def _is_up_to_date(project_dir: Path, build_dir: Path) -> bool:
    # The stamp, not classpath.txt: Maven leaves an unchanged classpath file untouched.
    stamp = build_dir / _BUILD_STAMP
    if not stamp.is_file() or not (build_dir / _CLASSPATH_FILE).is_file():
        return False
    return stamp.stat().st_mtime_ns > _newest_source_mtime_ns(project_dir)


def _maven(mvn: str, harness_dir: Path, maven_repo: Path, offline: bool) -> subprocess.Popen[str]:
    command = [mvn, "-q", "-B", f"-Dmaven.repo.local={maven_repo}", "compile"]
    if offline:
        command.insert(1, "-o")
    return subprocess.Popen(
        command, cwd=harness_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _run_maven(mvn: str, harness_dir: Path, maven_repo: Path, offline: bool) -> tuple[int, str]:
    process = _maven(mvn, harness_dir, maven_repo, offline)
    try:
        output, _ = process.communicate(timeout=_BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired as err:
        process.kill()
        process.communicate()
        raise InteropError(f"mvn compile in {harness_dir} took over {_BUILD_TIMEOUT_S} s") from err
    return process.returncode, output


def build_harness(
    flavor: HarnessFlavor = ROCKETMQ_5,
    *,
    harness_dir: Path | None = None,
    maven_repo: Path | None = None,
    force: bool = False,
) -> Harness:
    """Build the harness of ``flavor`` if needed and return it.

    Parameters
    ----------
    flavor
        ``ROCKETMQ_5`` (5.3.3, the default) or ``ROCKETMQ_4`` (4.9.8).
    harness_dir
        The harness root; default ``<repo>/interop/java``.
    maven_repo
        Local Maven repository; default ``<repo>/.cache/m2``.
    force
        Build even if the build output is newer than every source file.

    Raises
    ------
    EnvironmentCheckError
        ``java`` (17+) or ``mvn`` is missing: says what to install.
    InteropError
        The Maven build failed (its output is in the message).
    """
    harness_dir = harness_dir or default_harness_dir()
    maven_repo = maven_repo or default_maven_repo()
    project_dir = harness_dir / flavor.project
    build_dir = harness_dir / flavor.build
    java = check_java().executable
    if force or not _is_up_to_date(project_dir, build_dir):
        mvn = shutil.which("mvn")
        if mvn is None:
            raise EnvironmentCheckError(
                "Maven (`mvn`) is not on PATH; the RocketMQ interop harness needs it to build "
                "(Debian: apt-get install maven)."
            )
        maven_repo.mkdir(parents=True, exist_ok=True)
        # Offline first: after the first resolve everything is in maven_repo.
        returncode, output = _run_maven(mvn, project_dir, maven_repo, offline=True)
        if returncode != 0:
            returncode, output = _run_maven(mvn, project_dir, maven_repo, offline=False)
        if returncode != 0:
            raise InteropError(f"mvn compile failed in {project_dir}:\n{output[-6000:]}")
        (build_dir / _BUILD_STAMP).write_text(f"built for RocketMQ {flavor.rocketmq_version}\n")
    classpath = (build_dir / _CLASSPATH_FILE).read_text().strip()
    return Harness(java, f"{build_dir / 'classes'}:{classpath}", flavor.main_class, flavor.jvm_args)


GOLDEN_CASES_FILE = "cases.json"
GOLDEN_EXPECTED_FILE = "expected.json"
_HEX_LINE_CHARS = 64


def read_hex(path: Path) -> bytes:
    """The bytes of a golden ``*.hex`` file: ``#`` starts a comment, whitespace is ignored."""
    digits = "".join(line.split("#", 1)[0] for line in path.read_text().splitlines())
    return bytes.fromhex("".join(digits.split()))


def write_golden_vectors(harness: Harness, directory: Path, rocketmq_version: str) -> list[str]:
    """(Re)write ``<name>.hex`` and ``expected.json`` in ``directory`` from ``cases.json``.

    ``cases.json`` maps a case name to an ``encode`` request of op ``record``. Each answer's
    bytes go to ``<name>.hex`` (64 hex digits a line, under a comment naming the RocketMQ
    version); ``expected.json`` maps the name to the fields RocketMQ's MessageDecoder reads
    back from those bytes. Returns the case names written.

    Raises
    ------
    InteropError
        RocketMQ refused to encode a case, or could not decode its own record.
    """
    cases: dict[str, dict[str, Any]] = json.loads((directory / GOLDEN_CASES_FILE).read_text())
    names = sorted(cases)
    answers = harness.encode([{**cases[name], "op": "record"} for name in names])
    expected = {}
    for name, answer in zip(names, answers, strict=True):
        if "hex" not in answer or answer.get("decoded") is None:
            raise InteropError(f"golden case {name!r}: RocketMQ answered {answer}")
        hex_text = answer["hex"]
        lines = [
            f"# {name}: a CommitLog record written by Apache RocketMQ {rocketmq_version}",
            "# (MessageExtEncoder + doAppend patches; see README.md). Do not edit by hand.",
        ]
        lines += [
            hex_text[i : i + _HEX_LINE_CHARS] for i in range(0, len(hex_text), _HEX_LINE_CHARS)
        ]
        (directory / f"{name}.hex").write_text("\n".join(lines) + "\n")
        expected[name] = answer["decoded"]
    (directory / GOLDEN_EXPECTED_FILE).write_text(
        json.dumps(expected, indent=1, sort_keys=True, ensure_ascii=True) + "\n"
    )
    return names


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rmq_spark.interop <command> ...``: build if needed, run, print JSON lines.

    ``golden DIR`` rewrites the Java golden vectors in DIR (see ``write_golden_vectors``).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    harness = build_harness()
    if args[:1] == ["golden"]:
        version = harness.version()
        for name in write_golden_vectors(harness, Path(args[1]), version):
            print(name)
        return 0
    stdin_lines = sys.stdin.read().splitlines() if args[:1] == ["encode"] else []
    for line in harness.run(args, stdin_lines):
        print(json.dumps(line, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
