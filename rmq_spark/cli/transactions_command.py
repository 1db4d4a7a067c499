"""``rmq-spark transactions``: the transactions of a store and their state, read-only.

One line per transaction (real topic, UNIQ_KEY): its first half's CommitLog offset, born time,
check count and state (pending, committed, rolled_back, discarded), as the Spark
``transactions`` view shows them, from the ConsumeQueue and CommitLog files without opening
the store (works while a broker runs). The rule is ``broker/transactions/ledger.py``'s.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from rmq_spark.broker.transactions.ledger import TxRow, transaction_rows
from rmq_spark.cli.common import local_path, require_store
from rmq_spark.store.tx_states import STATES

__all__ = ["register"]

_COLUMNS = ("topic", "uniq_key", "queue_id", "half_offset", "born_timestamp", "check_count")
_COLUMNS += ("state", "commit_offset")


def _line(row: TxRow) -> dict[str, Any]:
    return {k: v for k, v in asdict(row).items() if not k.startswith("_")}


def _show(args: argparse.Namespace) -> int:
    require_store(args.store)
    rows = [
        r
        for r in transaction_rows(args.store)
        if (args.state is None or r.state == args.state)
        and (args.topic is None or r.topic == args.topic)
    ]
    if args.json:
        for row in rows:
            print(json.dumps(_line(row)))
        return 0
    table = [_COLUMNS] + [tuple(str(_line(r)[c]) for c in _COLUMNS) for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(_COLUMNS))]
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)))
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "transactions",
        help="transactional messages of a store: pending, committed, rolled back, discarded",
        description=(
            "Print each transaction of a store (real topic and message id) with its first "
            "half message's CommitLog offset, born time, how often the broker's check-back "
            "asked about it and its state (pending, committed, rolled_back, discarded), from "
            "the ConsumeQueue and CommitLog files, read-only (works while a broker runs). The "
            "check-back runs inside the broker, or as rmq-spark txcheck."
        ),
    )
    parser.add_argument("--store", metavar="DIR", type=local_path, required=True)
    parser.add_argument("--state", choices=STATES, help="only transactions in this state")
    parser.add_argument("--topic", metavar="TOPIC", help="only this topic's transactions")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.set_defaults(handler=_show)
