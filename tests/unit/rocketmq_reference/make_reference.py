"""Write the reference answers of the real RocketMQ / Guava jars that the unit tests compare with.

Usage (needs Java 17 and the RocketMQ 5.3.3 jars that ``bench/peers/rocketmq_peer.py``
fetches from Maven Central into ``bench/peers/.cache/rocketmq``)::

    .venv/bin/python tests/unit/rocketmq_reference/make_reference.py [--jars DIR]

* ``filter_cases.json``: every SQL92 expression of ``FILTER_EXPRESSIONS`` parsed by
  ``org.apache.rocketmq.filter.parser.SelectorParser`` and evaluated over each property map of
  ``FILTER_CONTEXTS``: ``ERROR`` (does not parse), ``TRUE``/``FALSE``/``NULL``, ``EXCEPTION``.
* ``consistent_hash.json``: Guava's ``Hashing.consistentHash(group.hashCode(), n)``, the
  queue RocketMQ 5.3.3's proxy picks for a FIFO message group (``SendMessageActivity``).
* ``config/rocketmq/*.json``: topics.json, subscriptionGroup.json, consumerOffset.json and
  delayOffset.json as the broker's own classes write them (``ConfigSamples.java``);
  ``config/ours/*.json``: the same tables encoded by
  ``rmq_spark.broker.config_files.rocketmq_config``, and ``config/rocketmq_read.txt``: what
  the broker's decoders read from each directory
  (the script stops unless RocketMQ reads ours exactly as its own).

The tests read the committed JSON; they never run Java.
"""

from __future__ import annotations

import argparse
import base64
import json
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
CONFIG_FILES = ("topics.json", "subscriptionGroup.json", "consumerOffset.json", "delayOffset.json")

FILTER_CONTEXTS: list[dict[str, str]] = [
    {},
    {"a": "3", "b": "5", "c": "6", "d": "1"},
    {"a": "4", "b": "4", "c": "3", "d": "10"},
    {"a": "hello"},
    {"a": "abc", "b": "x"},
    {"a": "3.14", "b": "3.141"},
    {"a": "true", "b": "false"},
    {"a": "-0", "b": "0.0", "c": "NaN", "d": "Infinity"},
    {"a": "2147483648", "b": "-2147483649", "c": "9223372036854775807"},
    {"a": " 5 ", "b": "+5", "c": "5L", "d": "0x1p3", "e": "1e3", "f": "5d"},
    {"TAGS": "TagA", "a": "axb", "key": "con"},
    {"a": "", "b": "it's", "c": "TAGS"},
    {"a": "TRUE", "b": "yes", "up": "up", "low": "low"},
    {"a": "\u0663", "b": "\uff15", "c": "1_000"},
]

FILTER_EXPRESSIONS: list[str] = [
    # ParserTest and ExpressionTest (apache/rocketmq filter module)
    "a=3 and b<>4 And c>5 AND d<=4",
    "a=3  and    b<>4 And c>5 AND d<=4",
    "a=3 or b<>4 Or c>5 OR d<=4",
    "a in ('3', '4', '5')",
    "(a not in ('6', '4', '5')) or (b in ('3', '4', '5'))",
    "a not in ('3', '4', '5')",
    "(a between 2 and 10) AND (b not between 6 and 9)",
    "a between 2 and 10",
    "a not between 2 and 10",
    "a is null",
    "a is not null",
    "a <= now",
    "a=3 and b contains 'xxx' and c not contains 'xxx'",
    "a and between 2 and 10",
    " a between 10 and 0",
    "a > 100000000000000000000000",
    "a is not null and a='hello'",
    "a=TRUE OR b=FALSE",
    "a is null OR a='hello'",
    "TAGS is not null and TAGS='''''tag'''''",
    "a contains 'x'",
    "a startswith 'ax'",
    "a endswith 'xb'",
    "a not contains 'x'",
    "a not startswith 'ax'",
    "a not endswith 'xb'",
    "a contains ''",
    "a not contains ''",
    "value contains x",
    "value contains 123",
    "'axb' contains 'x'",
    "'axb' not endswith 'u'",
    "' ' startswith ' '",
    "'axb' contains ",
    "'s' contains '\\'",
    "a not in ('4', '4', '5') and b between 3 and 10 and c not contains 'axbc'",
    "a between up and low",
    "key is not null and key between 0 and 100",
    "a between 0 and 100",
    "a=b",
    "a<>b",
    "a > 3.1E10",
    "a > 3.14",
    "a > b",
    # literals and coercion
    "a = 3",
    "a = 3.0",
    "a = '3'",
    "a > '3'",
    "a > 3",
    "a > 3.0",
    "a >= 2147483648",
    "a = 2147483648",
    "b < -2147483648",
    "a < -1",
    "3 = a",
    "3 < a",
    "3.0 < a",
    "a = TRUE",
    "a = FALSE",
    "b = FALSE",
    "TRUE = a",
    "a = true",
    "TRUE = FALSE",
    "TRUE = 1",
    "1 = TRUE",
    "a > TRUE",
    "a = NULL",
    "NULL = a",
    "a <> NULL",
    "c = 9223372036854775807",
    "c > 9223372036854775806",
    "a = 9223372036854775808",
    "a = 5L",
    "a = 0L",
    "a = 05",
    "a = 0.0",
    "a > 1e-400",
    "a > 1e400",
    "a = 0.5E1",
    "a > .5",
    "a > 5.",
    "a > 5e",
    "a = -3",
    "a = - -3",
    "-a > 0",
    "-a IS NULL",
    "+a = 3",
    "- 3 = a",
    "a > -2147483648",
    "a > -9223372036854775807",
    "a < b",
    "c > 1",
    "c = c",
    "d > 1000000",
    "a = 2147483647",
    "b = 5",
    "a = 5",
    "c = 5",
    "d = 8",
    "d > 7.5",
    "e = 1000",
    "e > 999.5",
    "f > 4",
    "f > 4.5",
    "c > 999",
    # booleans and logic
    "a",
    "NOT a",
    "a AND b",
    "a OR z",
    "z OR a = 'hello'",
    "TRUE",
    "FALSE",
    "NULL",
    "3",
    "'x'",
    "a = 1 AND 5",
    "NOT 5",
    "NOT (a = 3)",
    "NOT a = 3",
    "NOT a IS NULL",
    "NOT NOT a IS NULL",
    "a = 1 and b = 2 or c = 3",
    "a or b and c",
    "(a = 3) = TRUE",
    "a = 3 = TRUE",
    "((a = 3) or (b = 5)) and c > 5",
    "a <> 3 OR b <> 5",
    "a = 3 OR a = 'x'",
    "a = 'x' OR a = 3",
    "a = 3 AND z = 1",
    "z = 1 AND a = 3",
    "NOT a contains 'x'",
    "NOT z contains 'x'",
    "z not contains 'x'",
    # IN / BETWEEN
    "a in ('3')",
    "a in ('3', 'x')",
    "a not in ('3')",
    "z not in ('3')",
    "3 in ('3')",
    "-a in ('3')",
    "a in (3)",
    "a in ()",
    "a in ('1','2','3','4','5','6')",
    "TAGS in ('TagA', 'TagB')",
    "a between 1 and 5",
    "a between 5 and 1",
    "a between 1.5 and 2",
    "a between 2 and 1.5",
    "a between -5 and -10",
    "a not between 5 and 1",
    "a between 'a' and 'b'",
    "a between NULL and 1",
    "a between TRUE and FALSE",
    "a between b and c",
    "a between 3 and 3",
    # syntax: keywords, comments, strings, trailing input
    "A = 3",
    "a Between 1 And 5",
    "a IS not NULL",
    "a is x",
    "a = 3 and",
    "a = 3 or or",
    "(a = 3",
    "a = 3)",
    "a = 1 xyz",
    "a = 1 )",
    "a = 1 #",
    "a = 1 x #",
    "a = 1 not x",
    "a = 1 not #",
    "a = 3 -- comment\n",
    "a = 3 --c",
    "/* c */ a = 3",
    "a /* x */ = 3",
    "a = 'it''s'",
    "b = 'it''s'",
    "a = 'x",
    "$a = 1 OR _a = 1 OR a1 = 1",
    "a.b = 1",
    "a = 1e3",
    "TAGS = 'TagA'",
    "TAGS IS NULL",
    "c = 'TAGS'",
    "a = ''",
    "a contains 'xb' AND a startswith 'a' AND a endswith 'b'",
    "",
    "   ",
    "a = \u00e9",
    "a\t=\n3",
]


def _json_lines(data: dict[str, object]) -> str:
    """JSON with one line per element of each top-level list or object (diffs stay small)."""

    def dump(value: object) -> str:
        return json.dumps(value, ensure_ascii=False)

    parts = []
    for key, value in data.items():
        if isinstance(value, list):
            inner = ",\n  ".join(dump(item) for item in value)
            parts.append(f"{dump(key)}: [\n  {inner}\n ]")
        elif isinstance(value, dict):
            inner = ",\n  ".join(f"{dump(k)}: {dump(v)}" for k, v in value.items())
            parts.append(f"{dump(key)}: {{\n  {inner}\n }}")
        else:
            parts.append(f"{dump(key)}: {dump(value)}")
    return "{\n " + ",\n ".join(parts) + "\n}\n"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def _run_java(jars: Path, program: str, lines: list[str]) -> list[str]:
    classpath = ":".join(str(path) for path in sorted(jars.glob("*.jar")))
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(
            ["javac", "-cp", classpath, "-d", out, str(HERE / f"{program}.java")], check=True
        )
        result = subprocess.run(
            ["java", "-cp", f"{out}:{classpath}", program],
            input="\n".join(lines) + "\n",
            capture_output=True,
            text=True,
            check=True,
        )
    answers = result.stdout.splitlines()
    assert len(answers) == len(lines), result.stderr
    return answers


def make_filter_cases(jars: Path) -> dict[str, object]:
    lines = []
    for expression in FILTER_EXPRESSIONS:
        for context in FILTER_CONTEXTS:
            fields = [_b64(expression)] + [f"{_b64(k)}:{_b64(v)}" for k, v in context.items()]
            lines.append("\t".join(fields))
    answers = iter(_run_java(jars, "FilterCases", lines))
    cases = []
    for expression in FILTER_EXPRESSIONS:
        results = [next(answers) for _ in FILTER_CONTEXTS]
        if all(result == "ERROR" for result in results):
            cases.append({"expression": expression, "parses": False})
        else:
            cases.append({"expression": expression, "parses": True, "results": results})
    return {"contexts": FILTER_CONTEXTS, "cases": cases}


def consistent_hash_groups() -> list[str]:
    groups = [f"group-{index}" for index in range(1000)]
    groups += ["", "a", "order-42", "订单-7", "emoji-\U0001f600", "polygenelubricants"]
    return groups


def make_consistent_hash(jars: Path) -> dict[str, object]:
    groups = consistent_hash_groups()
    bucket_counts = [1, 2, 3, 4, 7, 8, 16, 100, 1024]
    lines = [f"{_b64(group)}\t{count}" for group in groups for count in bucket_counts]
    answers = iter(_run_java(jars, "ConsistentHashCases", lines))
    table = {group: [int(next(answers)) for _ in bucket_counts] for group in groups}
    return {"bucket_counts": bucket_counts, "queues": table}


def _java_classpath(jars: Path, program: str, out: str) -> str:
    classpath = ":".join(str(path) for path in sorted(jars.glob("*.jar")))
    subprocess.run(
        ["javac", "-cp", classpath, "-d", out, str(HERE / f"{program}.java")], check=True
    )
    return f"{out}:{classpath}"


def _encode_ours(source: Path, target: Path) -> None:
    from rmq_spark.broker.config_files import rocketmq_config as rc

    target.mkdir(parents=True, exist_ok=True)
    text = {name: (source / name).read_text("utf-8") for name in CONFIG_FILES}
    topics, version = rc.decode_topics(text["topics.json"])
    out = {"topics.json": rc.encode_topics(topics, version)}
    groups, version, forbidden = rc.decode_subscription_groups(text["subscriptionGroup.json"])
    out["subscriptionGroup.json"] = rc.encode_subscription_groups(groups, version, forbidden)
    offsets, version = rc.decode_consumer_offsets(text["consumerOffset.json"])
    out["consumerOffset.json"] = rc.encode_consumer_offsets(offsets, version)
    levels, version = rc.decode_delay_offsets(text["delayOffset.json"])
    out["delayOffset.json"] = rc.encode_delay_offsets(levels, version)
    for name, content in out.items():
        (target / name).write_text(content, "utf-8")


def make_config_samples(jars: Path) -> None:
    base = HERE / "config"
    with tempfile.TemporaryDirectory() as out:
        classpath = _java_classpath(jars, "ConfigSamples", out)
        java = ["java", "-Drocketmq.log.level=ERROR", "-cp", classpath, "ConfigSamples"]
        subprocess.run([*java, "write", str(base / "rocketmq")], check=True, capture_output=True)
        _encode_ours(base / "rocketmq", base / "ours")
        reads = {}
        for side in ("rocketmq", "ours"):
            result = subprocess.run(
                [*java, "read", str(base / side)], check=True, capture_output=True, text=True
            )
            reads[side] = [
                line
                for line in result.stdout.splitlines()
                if line.startswith(("topics ", "groups ", "offsets ", "delay "))
            ]
    if reads["rocketmq"] != reads["ours"]:
        raise SystemExit(f"RocketMQ reads our files differently:\n{reads}")
    (base / "rocketmq_read.txt").write_text("\n".join(reads["ours"]) + "\n", "utf-8")
    print(f"wrote {base}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jars", type=Path, default=ROOT / "bench/peers/.cache/rocketmq")
    args = parser.parse_args()
    for name, data in (
        ("filter_cases.json", make_filter_cases(args.jars)),
        ("consistent_hash.json", make_consistent_hash(args.jars)),
    ):
        text = _json_lines(data)
        (HERE / name).write_text(text, encoding="utf-8")
        print(f"wrote {HERE / name}")
    make_config_samples(args.jars)


if __name__ == "__main__":
    main()
