"""``rmq-spark query``: look messages up by key, by offset message id or by store time.

Prints one JSON object per message (JSON lines), with the field names of ``rmq-spark dump``.
By key and by time it reads the reput tables (``--tables``); by message id it reads the one
record straight from the CommitLog (``--store``), without Spark; by key with ``--store`` and
no ``--tables`` it looks the key up in the store's ``index/`` (RocketMQ's IndexFiles) and
reads the records it names, keeping those that really have the key (a hash match is not).
The lookups themselves are ``rmq_spark/spark/query.py`` (and ``store/index_files.py``).
"""

from __future__ import annotations

import argparse
import base64
import sys
import textwrap
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from rmq_spark.cli.common import HELP_WIDTH, local_path
from rmq_spark.cli.store_commands import text_or_none
from rmq_spark.errors import ConfigError

__all__ = ["record_json", "register", "row_json", "run"]


def register(subparsers: Any) -> None:
    """Add the ``query`` subcommand to the ``rmq-spark`` parser."""
    from rmq_spark.cli.common import add_config_arguments

    parser = subparsers.add_parser(
        "query",
        help="find messages by key, by message id or by store time (JSON lines)",
        description=textwrap.fill(  # pre-wrapped: the formatter keeps lines as they are
            "Look messages up like RocketMQ's queryMessage / viewMessage: by key (UNIQ_KEY or "
            "a KEYS token) or by store-time range from the reput tables, or by offset message "
            "id straight from the CommitLog. Prints JSON lines with rmq-spark dump's fields.",
            HELP_WIDTH,
        ),
        epilog=(
            "examples: rmq-spark query --tables ./tables --topic orders --key order-1\n"
            "          rmq-spark query --store ./store --topic orders --key order-1\n"
            "          rmq-spark query --store ./store --msg-id 7F00000100002A9F0000000000000000"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--tables", type=local_path, default=None, help="reput tables directory")
    parser.add_argument(
        "--store", type=local_path, default=None, help="store directory (--msg-id, --key)"
    )
    parser.add_argument("--topic", default=None, help="topic (with --key or a time range)")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--key", default=None, help="a UNIQ_KEY or one KEYS token")
    what.add_argument("--msg-id", default=None, help="an offset message id (32 or 56 hex)")
    parser.add_argument("--begin", type=int, default=None, help="store time >= this (epoch ms)")
    parser.add_argument("--end", type=int, default=None, help="store time < this (epoch ms)")
    parser.add_argument("--no-body", action="store_true", help="leave the body out of the output")
    from rmq_spark.cli.cluster_args import add_cluster_arguments

    add_cluster_arguments(parser, "--msg-id, --key without --tables: look in")
    add_config_arguments(parser)
    parser.set_defaults(handler=run)


def _ms(value: datetime) -> int:
    return round(value.timestamp() * 1000)


def _magic_version(topic: str) -> int:
    # Writers pick v2 exactly when the topic is longer than 127 UTF-16 code units (FORMAT.md 2).
    return 2 if len(topic.encode("utf-16-le")) // 2 > 127 else 1


def row_json(row: Mapping[str, Any], *, with_body: bool = True) -> dict[str, Any]:
    """A ``messages`` row (the source's schema) as the object ``rmq-spark dump`` prints."""
    out: dict[str, Any] = {
        "physical_offset": row["physical_offset"],
        "total_size": row["total_size"],
        "magic_version": _magic_version(row["topic"]),
        "body_crc": row["body_crc"],
        "queue_id": row["queue_id"],
        "flag": row["flag"],
        "queue_offset": row["queue_offset"],
        "sys_flag": row["sys_flag"],
        "born_timestamp": _ms(row["born_timestamp"]),
        "born_host": row["born_host"],
        "store_timestamp": _ms(row["store_timestamp"]),
        "store_host": row["store_host"],
        "reconsume_times": row["reconsume_times"],
        "prepared_transaction_offset": row["prepared_transaction_offset"],
        "topic": row["topic"],
        "properties": dict(row["properties"] or {}),
        "body_base64": base64.b64encode(bytes(row["body"] or b"")).decode("ascii"),
        "body_text": text_or_none(bytes(row["body"] or b"")),
        "msg_id": row["msg_id"],
    }
    if "store" in row:  # tables built from several stores
        out["store"] = row["store"]
    if not with_body:
        del out["body_base64"]
    return out


def record_json(decoded: Any, *, with_body: bool = True) -> dict[str, Any]:
    """A record read from the log: exactly ``rmq-spark dump``'s object."""
    from rmq_spark.cli.store_commands import record_json as dump_json

    out = dump_json(decoded)
    if not with_body:
        del out["body_base64"]
    return out


def run(args: argparse.Namespace) -> int:
    """Run the lookup the arguments ask for and print JSON lines; 1 when nothing was found."""
    from rmq_spark.cli.cluster_args import cluster_brokers
    from rmq_spark.cli.common import print_json_line, require_store

    brokers = cluster_brokers(args)
    if brokers:
        return _over_brokers(args, brokers)
    if args.store is not None:
        require_store(args.store)  # a typo is one line, never a traceback or a new store
    if args.msg_id is not None:
        if args.store is None:
            raise ConfigError("--store", "--msg-id reads the CommitLog: give the store directory")
        from rmq_spark.spark.query import record_at
        from rmq_spark.store.msg_id import decode_offset_msg_id

        _host, physical_offset = decode_offset_msg_id(args.msg_id)
        decoded = record_at(args.store, physical_offset)
        print_json_line(record_json(decoded, with_body=not args.no_body))
        return 0
    if args.key is not None and args.store is not None and args.tables is None:
        return _by_key_from_index(args)
    if args.tables is None or args.topic is None:
        raise ConfigError("--tables", "by key or by time: give --tables and --topic")
    from rmq_spark.spark import query_local

    if args.key is not None:
        found = query_local.local_messages_by_key(
            args.tables, args.topic, args.key, begin_ms=args.begin, end_ms=args.end
        )
    else:
        found = query_local.local_messages_by_time(args.tables, args.topic, args.begin, args.end)
    for row in found.to_pylist():
        print_json_line(row_json(row, with_body=not args.no_body))
    if not found.num_rows:
        what = f"key {args.key!r}" if args.key is not None else "the time range"
        print(f"rmq-spark query: no message of topic {args.topic!r} for {what}", file=sys.stderr)
        return 1
    return 0


def _over_brokers(args: argparse.Namespace, brokers: Mapping[str, Any]) -> int:
    """``--namesrv``: ``--msg-id`` or ``--key`` in every broker's store, each line with the
    ``broker_name`` that holds it."""
    from pathlib import Path

    from rmq_spark.cli.common import print_json_line
    from rmq_spark.errors import CorruptRecordError, MessageNotFoundError, OffsetOutOfRangeError
    from rmq_spark.spark.query import record_at
    from rmq_spark.store.msg_id import decode_offset_msg_id

    lookup = args.msg_id is not None or args.key is not None
    if args.store is not None or args.tables is not None or not lookup:
        raise ConfigError(
            "--namesrv",
            "reads every broker's store: give --msg-id, or --key and --topic, without "
            "--store or --tables (tables of a reput over --namesrv already hold every broker)",
        )
    found = 0
    for name, broker in sorted(brokers.items()):
        store = Path(broker.path)
        if args.msg_id is not None:
            try:
                decoded = [record_at(store, decode_offset_msg_id(args.msg_id)[1])]
            except (OffsetOutOfRangeError, MessageNotFoundError, CorruptRecordError):
                decoded = []  # another broker's offset: not a record boundary here
        else:
            decoded = _index_matches(args, store)
        for each in decoded:
            line = record_json(each, with_body=not args.no_body)
            if args.msg_id is None or line["msg_id"].upper() == args.msg_id.upper():
                print_json_line({**line, "broker_name": name})
                found += 1
    if not found:
        what = f"message id {args.msg_id}" if args.msg_id else f"key {args.key!r}"
        print(f"rmq-spark query: no broker of {len(brokers)} holds {what}", file=sys.stderr)
        return 1
    return 0


def _by_key_from_index(args: argparse.Namespace) -> int:
    """``--store --key``: the records ``index/`` names for the key, checked one by one."""
    from rmq_spark.cli.common import print_json_line

    found = 0
    for decoded in _index_matches(args, args.store):
        print_json_line(record_json(decoded, with_body=not args.no_body))
        found += 1
    if not found:
        print(f"rmq-spark query: no message of topic {args.topic!r} for key {args.key!r} in "
              f"{args.store}/index", file=sys.stderr)  # fmt: skip
        return 1
    return 0


def _index_matches(args: argparse.Namespace, store: Any) -> list[Any]:
    """The records of ``store`` whose ``index/`` entries name the key and that really have it."""
    from rmq_spark.cli.common import config_from_args
    from rmq_spark.errors import MessageNotFoundError, OffsetOutOfRangeError
    from rmq_spark.spark.query import record_at
    from rmq_spark.store.index_files import IndexFiles
    from rmq_spark.store.properties import KEY_SEPARATOR, KEYS, UNIQ_KEY, parse_properties

    if args.topic is None:
        raise ConfigError("--topic", "--key looks a key up in one topic: give --topic")
    config = config_from_args(args).store
    index = IndexFiles.load(
        store, config.index_hash_slots, config.index_entries, _ignore, _now,
        read_only=True,
    )  # fmt: skip
    try:
        begin = 0 if args.begin is None else args.begin
        end = (1 << 63) - 1 if args.end is None else args.end - 1  # --end is exclusive
        offsets = sorted(set(index.query(args.topic, args.key, 64, begin, end)))
    finally:
        index.close()
    found = []
    for offset in offsets:
        try:
            decoded = record_at(store, offset)
        except (OffsetOutOfRangeError, MessageNotFoundError):
            continue  # deleted by retention, or not readable yet
        record = decoded.record
        props = parse_properties(record.properties)
        keys = (props.get(KEYS) or "").split(KEY_SEPARATOR)
        if record.topic == args.topic and (props.get(UNIQ_KEY) == args.key or args.key in keys):
            found.append(decoded)
    return found


def _ignore(_timestamp: int) -> None:
    return None


def _now() -> int:
    return 0
