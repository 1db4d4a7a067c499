"""``rmq-spark send | dump | verify``: put messages into a store, print it, check it.

``send`` opens the store for writing (it takes the store's lock, so not while a broker runs on
it). ``dump`` and ``verify`` are read-only and take no lock: they work on a store another
process has open, reading up to the checkpoint's ``confirmPhyOffset`` while it runs.

Works inside ``rmq-spark`` (``register(subparsers)``) and standalone:
``python -m rmq_spark.cli.store_commands --help``.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rmq_spark.cli.common import add_config_arguments, config_from_args, print_json_line
from rmq_spark.errors import CorruptRecordError, RmqError
from rmq_spark.store.checkpoint import read_checkpoint
from rmq_spark.store.codec import DecodedRecord
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.layout import COMMITLOG_DIR
from rmq_spark.store.lockfile import abort_exists
from rmq_spark.store.msg_id import offset_msg_id
from rmq_spark.store.properties import DELAY, parse_properties

__all__ = ["build_parser", "main", "record_json", "register"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_ERROR = 2


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``send``, ``dump`` and ``verify`` to an ``rmq-spark`` subparsers object."""
    _register_send(subparsers)
    _register_dump(subparsers)
    _register_verify(subparsers)


def _store_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store", required=True, type=Path, metavar="DIR", help="store root directory"
    )


def _register_send(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "send",
        help="put messages into a store",
        description=(
            "Put one message (--body) or one message per input line (--stdin) into the store "
            "at --store, creating it if needed, and print one JSON object per message: "
            '{"status", "msg_id", "uniq_key", "topic", "queue_id", "queue_offset", '
            '"physical_offset"}. topic and queue_id are the stored ones: a delayed message '
            "is stored in SCHEDULE_TOPIC_XXXX, queue (delay level - 1). Exits 1 if any "
            "message was not stored. Takes the store's lock: not while a broker runs on it."
        ),
    )
    _store_argument(parser)
    parser.add_argument("--topic", required=True, help="topic ([%%|a-zA-Z0-9_-], <= 127 chars)")
    parser.add_argument("--tags", metavar="TAG", help="the TAGS property (filtering tag)")
    parser.add_argument(
        "--keys", nargs="+", default=[], metavar="K", help="message keys (the KEYS property)"
    )
    parser.add_argument(
        "--delay-level",
        type=int,
        default=0,
        metavar="N",
        help="delay level (1 = 1s ... 18 = 2h with the default levels); 0: no delay",
    )
    parser.add_argument("--queue-id", type=int, default=0, metavar="Q", help="queue id (default 0)")
    parser.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="K=V",
        help="a user property (repeatable)",
    )
    body = parser.add_mutually_exclusive_group(required=True)
    body.add_argument("--body", metavar="TEXT", help="the message body (UTF-8)")
    body.add_argument("--stdin", action="store_true", help="one message per line of standard input")
    add_config_arguments(parser)
    parser.set_defaults(handler=_handle_send)


def _register_dump(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "dump",
        help="print the stored messages as JSON lines",
        description=(
            "Print one JSON object per stored message, in log order: physical_offset, "
            "total_size, magic_version, body_crc, queue_id, flag, queue_offset, sys_flag, "
            "born_timestamp, born_host, store_timestamp, store_host, reconsume_times, "
            "prepared_transaction_offset, topic, properties (object), body_base64, msg_id "
            "(timestamps in epoch ms, hosts as ip:port). Read-only and lock-free: works on a "
            "store another process has open (then it stops at the checkpoint's confirmed "
            "offset)."
        ),
    )
    _store_argument(parser)
    parser.add_argument(
        "--from-offset",
        type=int,
        default=None,
        metavar="N",
        help="start at this physical offset (a record boundary; default: the oldest record)",
    )
    parser.add_argument(
        "--limit", type=int, default=None, metavar="N", help="print at most N messages"
    )
    parser.add_argument(
        "--no-crc", action="store_true", help="do not verify BODYCRC while reading (faster)"
    )
    parser.set_defaults(handler=_handle_dump)


def _register_verify(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "verify",
        help="check every record of a store (magic, length, CRC)",
        description=(
            "Read every record of every CommitLog segment and check its magic code, that "
            "TOTALSIZE matches the field lengths, its BODYCRC and that it names its own "
            "physical offset; every full segment must end in a BLANK record and nothing may "
            "follow the end of the data. Prints a summary; exits 1 naming the segment file "
            "and position of the first bad record. Read-only and lock-free."
        ),
    )
    _store_argument(parser)
    parser.set_defaults(handler=_handle_verify)


# --- send ---------------------------------------------------------------------------------------


def _store_config(args: argparse.Namespace) -> StoreConfig:
    # The configured segment size, never guessed from the files: a store written with another
    # size is refused by MessageStore.open (SegmentSizeMismatchError says which setting fits).
    config: StoreConfig = config_from_args(args).store
    return dataclasses.replace(config, root_dir=args.store)


def _handle_send(args: argparse.Namespace) -> int:
    from rmq_spark.store.message_store import MessageStore
    from rmq_spark.store.put import PutRequest

    properties: dict[str, str] = {}
    for item in args.property:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise _usage_error(f"--property {item!r}: expected K=V")
        properties[key] = value
    if args.delay_level:
        properties[DELAY] = str(args.delay_level)
    bodies = (
        (line.rstrip("\n").encode() for line in sys.stdin) if args.stdin else [args.body.encode()]
    )
    failures = 0
    with MessageStore.open(_store_config(args)) as store:
        for body in bodies:
            request = PutRequest(
                args.topic,
                body,
                queue_id=args.queue_id,
                properties=properties or None,
                tags=args.tags,
                keys=tuple(args.keys),
            )
            result = store.put(request)
            if not result.ok:
                failures += 1
                print_json_line({"status": result.status.name, "detail": result.detail})
                continue
            print_json_line(
                {
                    "status": result.status.name,
                    "msg_id": result.msg_id,
                    "uniq_key": result.uniq_key,
                    "topic": result.topic,
                    "queue_id": result.queue_id,
                    "queue_offset": result.queue_offset,
                    "physical_offset": result.physical_offset,
                }
            )
    return EXIT_FAILED if failures else EXIT_OK


def _usage_error(message: str) -> RmqError:
    from rmq_spark.errors import ConfigError

    return ConfigError("send", message)


# --- dump and verify ----------------------------------------------------------------------------


def record_json(decoded: DecodedRecord) -> dict[str, Any]:
    """The ``dump`` JSON object of one record (``decoded.position`` = its physical offset)."""
    record = decoded.record
    return {
        "physical_offset": decoded.position,
        "total_size": decoded.total_size,
        "magic_version": decoded.magic_version,
        "body_crc": record.body_crc,
        "queue_id": record.queue_id,
        "flag": record.flag,
        "queue_offset": record.queue_offset,
        "sys_flag": record.sys_flag,
        "born_timestamp": record.born_timestamp_ms,
        "born_host": str(record.born_host),
        "store_timestamp": record.store_timestamp_ms,
        "store_host": str(record.store_host),
        "reconsume_times": record.reconsume_times,
        "prepared_transaction_offset": record.prepared_transaction_offset,
        "topic": record.topic,
        "properties": parse_properties(record.properties),
        "body_base64": base64.b64encode(record.body).decode("ascii"),
        "msg_id": offset_msg_id(record.store_host, decoded.position),
    }


def _readable_end(root: Path) -> int | None:
    """While the store is open elsewhere (``abort`` present), stop at its confirmed offset."""
    if not abort_exists(root):
        return None
    values = read_checkpoint(root)
    return values.confirm_phy_offset if values is not None else None


def _check_store_dir(root: Path) -> None:
    if not (root / COMMITLOG_DIR).is_dir():
        from rmq_spark.errors import StoreError

        raise StoreError(f"{root} is not a store: no {COMMITLOG_DIR}/ directory")


def _handle_dump(args: argparse.Namespace) -> int:
    from rmq_spark.store.reader import iter_records, open_read_only

    _check_store_dir(args.store)
    commitlog = open_read_only(args.store)
    try:
        end = _readable_end(args.store)
        records = iter_records(commitlog, args.from_offset, end, check_crc=not args.no_crc)
        for count, decoded in enumerate(records):
            if args.limit is not None and count >= args.limit:
                break
            print_json_line(record_json(decoded))
    finally:
        commitlog.close()
    return EXIT_OK


def _handle_verify(args: argparse.Namespace) -> int:
    from rmq_spark.store.reader import open_read_only, verify_log

    _check_store_dir(args.store)
    commitlog = open_read_only(args.store)
    try:
        result = verify_log(commitlog, _readable_end(args.store))
    finally:
        commitlog.close()
    if result.error is not None:
        error: CorruptRecordError = result.error
        print(
            f"BAD {error.path} position {error.position} "
            f"(physical offset {result.end_offset}): {error.reason}; "
            f"{result.record_count} good records before it",
            file=sys.stdout,
        )
        return EXIT_FAILED
    print(
        f"OK {result.record_count} records, {result.checked_bytes} bytes in "
        f"{result.segment_count} segments; the log ends at physical offset {result.end_offset}"
    )
    return EXIT_OK


# --- standalone ---------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rmq-spark",
        description="Store tools: put messages into a CommitLog store, dump it, verify it.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except RmqError as err:
        print(f"rmq-spark {args.command}: error: {err}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:  # e.g. `dump | head`
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
