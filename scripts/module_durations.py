#!/usr/bin/env python3
"""Seconds per test module from a pytest log run with ``--durations=0`` (setup, call and
teardown summed), as JSON for ``tests/module_durations.json``, which orders the modules of a
parallel run longest first (tests/conftest.py).

    make test PYTEST_ARGS=--durations=0 > run.log
    python scripts/module_durations.py run.log > tests/module_durations.json

Time a test waited for the machine-wide bench lock counts as its own; ``--cap`` bounds such
figures (the bench-lock modules run one after another on one worker anyway).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter

LINE = re.compile(r"^([\d.]+)s (?:call|setup|teardown)\s+(tests/\S+?\.py)::")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", help="pytest output with --durations=0")
    parser.add_argument("--cap", type=float, default=160.0, help="most seconds per module")
    args = parser.parse_args()
    seconds: Counter[str] = Counter()
    with open(args.log, encoding="utf-8", errors="replace") as log:
        for line in log:
            if match := LINE.match(line):
                seconds[match.group(2)] += float(match.group(1))
    if not seconds:
        print(f"{args.log}: no --durations=0 lines", file=sys.stderr)
        return 1
    table = {name: round(min(s, args.cap), 1) for name, s in sorted(seconds.items())}
    json.dump(table, sys.stdout, indent=0)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
