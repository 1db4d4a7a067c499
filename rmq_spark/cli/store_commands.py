"""``rmq-spark send | dump | verify | recover``: put messages into a store, print it, check
it, cut it.

``send`` and ``recover`` open the store for writing (they take the store's lock, so not while
a broker runs on it). ``dump`` and ``verify`` are read-only and take no lock: they read up to
the end of the log decided by ``store/scan.py`` (a running broker of ours: its published
``confirmPhyOffset``; any other store: the real end of the valid records, checked against
what the checkpoint says is durable).

Works inside ``rmq-spark`` (``register(subparsers)``) and standalone:
``python -m rmq_spark.cli.store_commands --help``.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import logging
import sys
from collections.abc import Sequence
from typing import Any

from rmq_spark.cli.common import (
    add_config_arguments,
    check_store_path,
    config_from_args,
    local_path,
    print_json_line,
    require_store,
)
from rmq_spark.cli.recover_command import register_recover
from rmq_spark.errors import CorruptRecordError, RmqError
from rmq_spark.store.codec import DecodedRecord
from rmq_spark.store.compression import (
    BodyCompressionError,
    compression_name,
    inflate_body,
    is_compressed,
)
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.layout import COMMITLOG_DIR
from rmq_spark.store.msg_id import offset_msg_id
from rmq_spark.store.properties import DELAY, parse_properties

__all__ = ["build_parser", "main", "record_json", "register", "text_or_none"]

log = logging.getLogger("rmq_spark.cli")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_ERROR = 2


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``send``, ``dump``, ``verify`` and ``recover`` to an ``rmq-spark`` subparsers object."""
    _register_send(subparsers)
    _register_dump(subparsers)
    _register_verify(subparsers)
    register_recover(subparsers)


def _store_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store", required=True, type=local_path, metavar="DIR", help="store root directory"
    )


def _register_send(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "send",
        help="put messages into a store",
        description=(
            "Put one message (--body) or one message per input line (--stdin) into the store "
            "at --store (a new store only with --create), and print one JSON object per message: "
            '{"status", "msg_id", "uniq_key", "topic", "queue_id", "queue_offset", '
            '"physical_offset"}. topic and queue_id are the stored ones: a delayed message '
            "is stored in SCHEDULE_TOPIC_XXXX, queue (delay level - 1). Exits 1 if any "
            "message was not stored. Takes the store's lock: not while a broker runs on it."
        ),
    )
    _store_argument(parser)
    parser.add_argument(
        "--create",
        action="store_true",
        help="make a new store at --store if there is none (without it, a path that is not a "
        "store is refused: a typo must not create one)",
    )
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
            "prepared_transaction_offset, topic, properties (object), body_base64, body_text "
            "(the body when it is UTF-8 text, else null), msg_id (timestamps in epoch ms, hosts "
            "as ip:port); compressed bodies are inflated (body_compression names the codec) "
            "unless --raw-body. Read-only and lock-free: works on a "
            "store another process has open (ours: up to the checkpoint's confirmed offset; "
            "Apache RocketMQ's: up to the last complete record). Fails, naming the file and "
            "position, when data the checkpoint says is durable is missing or damaged."
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
        "--limit", type=int, default=None, metavar="N", help="print at most N (>= 0) messages"
    )
    parser.add_argument(
        "--no-crc", action="store_true", help="do not verify BODYCRC while reading (faster)"
    )
    parser.add_argument("--topic", metavar="NAME", help="only messages of this topic")
    parser.add_argument(
        "--queue", type=int, metavar="ID", help="only messages of this queue id (with --topic)"
    )
    parser.add_argument(
        "--raw-body",
        action="store_true",
        help="print compressed bodies as stored (default: inflated, as a consumer gets them)",
    )
    parser.set_defaults(handler=_handle_dump)


def _register_verify(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "verify",
        help="check every record of a store (magic, length, CRC)",
        description=(
            "Read every record of every CommitLog segment and check its magic code, that "
            "TOTALSIZE matches the field lengths, its BODYCRC and that it names its own "
            "physical offset; every full segment must end in a BLANK record; the data must "
            "reach what the checkpoint says is durable; after its end there may be at most "
            "one torn write (which recovery cuts) and all-zero preallocated files. Prints a "
            "summary; exits 1 naming the segment file and position of the first problem. "
            "Read-only and lock-free."
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
    bodies = (
        (line.rstrip("\n").encode() for line in sys.stdin) if args.stdin else [args.body.encode()]
    )
    failures = 0
    check_store_path(args.store)
    if args.create:
        if not (args.store / COMMITLOG_DIR).is_dir():
            log.info("send: creating a new store at %s", args.store)
    else:
        require_store(args.store, hint="pass --create to make a new store there")
    with MessageStore.open(_store_config(args)) as store:
        rules = _broker_rules(args, store)
        for body in bodies:
            refused = _refusal(rules, args, body, properties)
            if refused is not None and not args.stdin:
                raise refused
            if refused is not None:  # one bad line of many: reported like a refused put
                failures += 1
                print_json_line({"status": "REFUSED", "detail": str(refused)})
                continue
            stored = dict(properties)
            if args.delay_level:
                stored[DELAY] = str(args.delay_level)
            request = PutRequest(
                args.topic,
                body,
                queue_id=args.queue_id,
                properties=stored or None,
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


# Which option a broker refusal is about, for the one-line error.
_OPTION_OF_CODE = {
    "MESSAGE_BODY_EMPTY": "--body",
    "MESSAGE_BODY_TOO_LARGE": "--body",
    "ILLEGAL_MESSAGE_TAG": "--tags",
    "ILLEGAL_MESSAGE_KEY": "--keys",
    "ILLEGAL_MESSAGE_PROPERTY_KEY": "--property",
    "MESSAGE_PROPERTIES_TOO_LARGE": "--property",
    "BAD_REQUEST": "--delay-level",
}


def _broker_rules(args: argparse.Namespace, store: Any) -> Any:
    """The broker's validation over this store: one owner of the rules (``service.py``)."""
    from rmq_spark.broker.service import BrokerService

    return BrokerService(
        store,
        config_from_args(args).broker,
        max_message_size_bytes=store.config.max_message_size_bytes,
    )


def _refusal(
    rules: Any, args: argparse.Namespace, body: bytes, properties: dict[str, str]
) -> RmqError | None:
    """``InvalidMessageError`` naming the option when the broker would refuse this message."""
    from rmq_spark.broker.service import SendCommand
    from rmq_spark.errors import InvalidMessageError

    command = SendCommand(
        topic=args.topic,
        body=body,
        message_id="rmq-spark-send",  # the store assigns UNIQ_KEY; the id is not checked here
        tag=args.tags,
        keys=tuple(args.keys),
        user_properties=properties,
        delay_level=args.delay_level or None,
    )
    outcome = rules.validate(command)
    if outcome is None:
        return None
    option = _OPTION_OF_CODE.get(outcome.code.name, "message")
    return InvalidMessageError(option, f"{outcome.code.name}: {outcome.reason}")


def _usage_error(message: str, command: str = "send") -> RmqError:
    from rmq_spark.errors import ConfigError

    return ConfigError(command, message)


# --- dump and verify ----------------------------------------------------------------------------


def record_json(decoded: DecodedRecord, *, raw_body: bool = False) -> dict[str, Any]:
    """The ``dump`` JSON object of one record (``decoded.position`` = its physical offset):
    the body as a consumer gets it (inflated) unless ``raw_body``, as base64 and, when it is
    UTF-8 text, as text.

    Raises
    ------
    CorruptRecordError
        A compressed body that does not inflate (naming the segment file and position).
    """
    record = decoded.record
    body = record.body
    compressed = is_compressed(record.sys_flag)
    if compressed and not raw_body:
        try:
            body = inflate_body(body, record.sys_flag)
        except BodyCompressionError as err:
            raise CorruptRecordError(
                f"{COMMITLOG_DIR}/",
                decoded.position,
                f"the compressed body of the record at physical offset {decoded.position}: {err}",
            ) from None
    out = {
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
        "body_base64": base64.b64encode(body).decode("ascii"),
        "body_text": text_or_none(body),
        "msg_id": offset_msg_id(record.store_host, decoded.position),
    }
    if compressed:
        out["body_compression"] = compression_name(record.sys_flag)
        out["body_inflated"] = not raw_body
    return out


def text_or_none(body: bytes) -> str | None:
    """A body as text when it is UTF-8, else ``None`` (``body_text`` of dump and query)."""
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _handle_dump(args: argparse.Namespace) -> int:
    from rmq_spark.store.reader import read_store

    require_store(args.store)
    if args.limit is not None and args.limit < 0:
        raise _usage_error(f"--limit {args.limit}: must be >= 0", "dump")
    if args.from_offset is not None and args.from_offset < 0:
        raise _usage_error(f"--from-offset {args.from_offset}: must be >= 0", "dump")
    if args.limit == 0:
        return EXIT_OK
    if args.queue is not None and args.topic is None:
        raise _usage_error("--queue needs --topic (queue ids are per topic)", "dump")
    records = read_store(args.store, args.from_offset, check_crc=not args.no_crc)
    count = 0
    for decoded in records:
        record = decoded.record
        if args.topic is not None and record.topic != args.topic:
            continue
        if args.queue is not None and record.queue_id != args.queue:
            continue
        print_json_line(record_json(decoded, raw_body=args.raw_body))
        count += 1
        if args.limit is not None and count >= args.limit:
            break
    return EXIT_OK


def _handle_verify(args: argparse.Namespace) -> int:
    from rmq_spark.store.reader import verify_store

    require_store(args.store)
    result = verify_store(args.store)
    if result.error is not None:
        error: CorruptRecordError = result.error
        print(
            f"BAD {error.path} position {error.position} "
            f"(physical offset {result.end_offset}): {error.reason}; "
            f"{result.record_count} good records before it",
            file=sys.stdout,
        )
        return EXIT_FAILED
    torn = (
        f"; {result.torn_bytes} bytes of one torn write follow it (recovery cuts them)"
        if result.torn_bytes
        else ""
    )
    print(
        f"OK {result.record_count} records, {result.checked_bytes} bytes in "
        f"{result.segment_count} segments; the log ends at physical offset "
        f"{result.end_offset}{torn}"
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
