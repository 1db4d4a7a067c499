"""Run every benchmark in bench/ with its default (short) settings, one after the other.

Usage: python bench/run_all.py [--only NAME ...] [--list]
Each bench_*.py prints its own table with the baseline measured in the same run; this script
adds a header with the machine facts, so the output can be pasted into BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def machine_facts() -> str:
    cpu = "unknown cpu"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{platform.node()}: {os.cpu_count()} cores ({cpu}), {mem_gib:.0f} GiB RAM, "
        f"Python {platform.python_version()}, {platform.system()} {platform.release()}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="bench names, e.g. put source")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = parser.parse_args(argv)
    scripts = sorted(HERE.glob("bench_*.py"))
    if args.list:
        for script in scripts:
            print(script.stem.removeprefix("bench_"))
        return 0
    if args.only:
        scripts = [s for s in scripts if s.stem.removeprefix("bench_") in set(args.only)]
    print(f"# machine: {machine_facts()}")
    failed = []
    for script in scripts:
        print(f"\n## {script.name}", flush=True)
        started = time.monotonic()
        done = subprocess.run([sys.executable, str(script)], check=False)
        print(f"({script.name}: exit {done.returncode}, {time.monotonic() - started:.0f} s)")
        if done.returncode != 0:
            failed.append(script.name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
