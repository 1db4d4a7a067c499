"""spark-submit entry point of the reput job: log -> consume_queue, message_index, messages.

    spark-submit jobs/reput.py --store DIR [--store DIR ...] --tables DIR [--checkpoint DIR]
                               [--trigger 1s | --available-now]

(also ``python jobs/reput.py ...`` and ``rmq-spark reput ...``, same options). The session
builder adds the Delta jars through ``spark.jars``; Spark loads them into the driver at
session start, so no ``--jars`` is needed with a local master (docs/TABLES.md). Several
stores (``--store`` repeated or a comma list, or ``reput.stores``): one query over all of
them, tables with a ``store`` column (docs/TABLES.md, "Several stores"). ``--namesrv H:P``
(``--cluster``, ``--store-roots``) instead of ``--store``: every broker's store of a cluster
(docs/CLUSTER.md, "Spark over the cluster").
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

try:
    import rmq_spark  # noqa: F401
except ImportError:  # started from a checkout that is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _stop_on_sigterm(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    from rmq_spark.cli.common import setup_logging
    from rmq_spark.cli.reput_command import add_reput_arguments, run
    from rmq_spark.errors import RmqError

    parser = argparse.ArgumentParser(prog="jobs/reput.py", description=__doc__.split("\n")[0])
    add_reput_arguments(parser)
    args = parser.parse_args(argv)
    # Spark's Python workers (the source's readers) run the interpreter running this job.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    setup_logging("INFO")
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        return run(args)
    except RmqError as err:
        print(f"reput: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
