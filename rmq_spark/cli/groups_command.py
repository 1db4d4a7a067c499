"""``rmq-spark groups``: consumer groups' positions, lag, in-flight, retry and DLQ depth, and
``rmq-spark groups reset`` (``mqadmin resetOffsetByTime``'s job).

Owns reading a store's consumer progress without opening the store: ``config/
consumerOffset.json``, ``config/consumerInflight.json`` and the ConsumeQueue files (pending
transactions per queue: ``broker/transactions/ledger.py``) (through
``store.cq_view.CqView``: read-only, never recovered or truncated), so it
works while a broker runs (what it shows is as of the broker's last save, at most a second
old). The reset rewrites consumerOffset.json and drops the group's in-flight state for the
topic, and refuses while a process holds the store's lock (a running broker would overwrite
it within a second); with ``--broker`` it asks that running broker instead (UpdateOffset per
queue), which refuses while consumers of the group are connected.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from rmq_spark.broker.config_files.rocketmq_config import decode_subscription_groups
from rmq_spark.broker.config_files.rocketmq_config_files import (
    SUBSCRIPTION_GROUP_FILE,
    config_path,
    read_consumer_offsets,
    write_consumer_offsets,
)
from rmq_spark.broker.consumer.persist import INFLIGHT_FILE, offsets_file_lock
from rmq_spark.broker.consumer.revive import REVIVE_GROUP
from rmq_spark.broker.transactions.ledger import pending_counts
from rmq_spark.cli.common import operator_credentials, require_store
from rmq_spark.errors import ConfigError, StoreLockedError, StoreMetadataError
from rmq_spark.store.consume_queue import PRE_BLANK_SIZE
from rmq_spark.store.cq_view import CqView, queue_dirs
from rmq_spark.store.fileio import write_file_atomically
from rmq_spark.store.reader import read_record_at
from rmq_spark.store.view import StoreView, broker_has_store_open

__all__ = [
    "GroupQueueRow",
    "group_rows",
    "register",
    "reset_offsets",
    "reset_offsets_on_broker",
]


def _queues(root: Path, topic: str) -> dict[int, CqView]:
    return {queue_id: CqView.open(path) for queue_id, path in queue_dirs(root, topic).items()}


def _inflight(root: Path) -> dict[str, dict[str, dict[str, Any]]]:
    path = root / INFLIGHT_FILE
    try:
        table = json.loads(path.read_text())["inflightTable"]
    except FileNotFoundError:
        return {}
    except (ValueError, KeyError, TypeError) as err:
        raise StoreMetadataError(str(path), f"not a consumer in-flight file: {err}") from err
    assert isinstance(table, dict)
    return table


@dataclass(frozen=True, slots=True)
class GroupQueueRow:
    group: str
    topic: str
    queue_id: int
    offset: int  # committed: every message below it is consumed
    max_offset: int
    lag: int  # messages at or above the committed offset
    lag_bytes: int
    in_flight: int
    retry_depth: int  # copies in %RETRY%<group> the group has not consumed yet
    dlq_depth: int  # messages in %DLQ%<group>
    pending_tx: int = 0  # transactions of this topic and queue not committed nor rolled back


def group_rows(root: Path) -> list[GroupQueueRow]:
    """Every (group, topic, queue) of consumerOffset.json, with its lag and depths."""
    offsets = read_consumer_offsets(root)
    inflight = _inflight(root)
    pending = pending_counts(root)
    depth: dict[str, tuple[int, int]] = {}
    rows: list[GroupQueueRow] = []
    for (topic, group), queues in sorted(offsets.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        if group == REVIVE_GROUP or topic.startswith("%RETRY%"):
            continue
        if group not in depth:
            depth[group] = (_retry_depth(root, group, offsets), _dlq_depth(root, group))
        files = _queues(root, topic)
        for queue_id in sorted(set(queues) | set(files)):
            row = _row(group, topic, queue_id, queues, files, inflight, depth[group])
            rows.append(replace(row, pending_tx=pending.get((topic, queue_id), 0)))
    return rows


def _row(
    group: str,
    topic: str,
    queue_id: int,
    queues: dict[int, int],
    files: dict[int, CqView],
    inflight: dict[str, dict[str, dict[str, Any]]],
    depth: tuple[int, int],
) -> GroupQueueRow:
    queue = files.get(queue_id)
    max_offset = queue.max_offset if queue is not None else 0
    committed = queues.get(queue_id, queue.min_offset if queue is not None else 0)
    sizes = queue.units(committed, max_offset - committed)["size"] if queue is not None else []
    extra = inflight.get(f"{topic}@{group}", {}).get(str(queue_id), {})
    attempts = extra.get("attempts", {})
    return GroupQueueRow(
        group,
        topic,
        queue_id,
        committed,
        max_offset,
        max(0, max_offset - committed),
        sum(int(size) for size in sizes if size != PRE_BLANK_SIZE),
        sum(1 for a in attempts.values() if int(a) > 0),
        *depth,
    )


def _retry_depth(root: Path, group: str, offsets: dict[tuple[str, str], dict[int, int]]) -> int:
    topic = f"%RETRY%{group}"
    committed = offsets.get((topic, group), {})
    return sum(
        max(0, q.max_offset - committed.get(i, q.min_offset))
        for i, q in _queues(root, topic).items()
    )


def _dlq_depth(root: Path, group: str) -> int:
    return sum(q.max_offset - q.min_offset for q in _queues(root, f"%DLQ%{group}").values())


def _store_timestamp(view: StoreView, physical_offset: int) -> int:
    """The store time of the record at ``physical_offset``; -1 when it is gone (older than
    anything still there, for the search)."""
    span = view.span_at(physical_offset)
    if span is None:
        return -1  # deleted by retention: older than anything still there
    try:
        with view.segment(span) as segment:
            found = read_record_at(segment, physical_offset, check_crc=False)
    except FileNotFoundError:
        return -1
    return found.record.store_timestamp_ms if found is not None else -1


def reset_offsets(
    root: Path,
    group: str,
    topic: str,
    *,
    to_offset: int | None = None,
    to_time_ms: int | None,
    dry_run: bool = False,
) -> dict[int, int]:
    """Set ``group``'s committed offset in every queue of ``topic``, drop its in-flight state
    there; returns the new offsets (``dry_run``: only returns them). Raises
    ``StoreLockedError`` while a broker holds the store."""
    if broker_has_store_open(root):
        raise StoreLockedError(
            f"{root}: a broker has the store open; stop it first (it saves its own offsets)"
        )
    queues = _queues(root, topic)
    if not queues:
        raise ConfigError("--topic", f"topic {topic!r} has no ConsumeQueue in {root}")
    new: dict[int, int] = {}
    view = StoreView.open(root) if to_time_ms is not None else None
    for queue_id, queue in sorted(queues.items()):
        if view is not None and to_time_ms is not None:
            new[queue_id] = queue.offset_for_time(
                to_time_ms, lambda at, view=view: _store_timestamp(view, at)
            )
        else:
            wanted = to_offset if to_offset is not None else queue.min_offset
            new[queue_id] = max(queue.min_offset, min(wanted, queue.max_offset))
    if dry_run:
        return new
    with offsets_file_lock(root):  # a broker starting now loads the files after this
        if broker_has_store_open(root):
            raise StoreLockedError(f"{root}: a broker opened the store; use --broker")
        offsets = read_consumer_offsets(root)
        offsets[(topic, group)] = new
        inflight = _inflight(root)
        if inflight.pop(f"{topic}@{group}", None) is not None:
            data = json.dumps({"inflightTable": inflight}, sort_keys=True, separators=(",", ":"))
            write_file_atomically(root / INFLIGHT_FILE, data.encode("utf-8"))
        write_consumer_offsets(root, offsets)
    return new


def reset_offsets_on_broker(
    root: Path,
    address: str,
    group: str,
    topic: str,
    *,
    to_offset: int | None = None,
    to_time_ms: int | None = None,
    credentials: tuple[str, str] | None = None,
    dry_run: bool = False,
) -> dict[int, int]:
    """``reset_offsets`` through a running broker (UpdateOffset per queue, which drops the
    group's in-flight state there); the broker refuses while consumers of ``group`` are
    connected. Returns the offsets asked for (the broker clamps them to each queue)."""
    from rmq_spark.broker.offset_client import OffsetClient

    queues = _queues(root, topic)
    if not queues:
        raise ConfigError("--topic", f"topic {topic!r} has no ConsumeQueue in {root}")
    new: dict[int, int] = {}
    with OffsetClient(address, credentials=credentials) as client:
        for queue_id, queue in sorted(queues.items()):
            if to_time_ms is not None:
                wanted = client.offset_for_time(topic, queue_id, to_time_ms)
            else:
                wanted = to_offset if to_offset is not None else queue.min_offset
            new[queue_id] = max(queue.min_offset, min(wanted, queue.max_offset))
            if dry_run:
                continue
            if not client.update(group, topic, queue_id, new[queue_id]):
                raise ConfigError("--topic", f"{address} does not serve {topic!r} queue {queue_id}")
    return new


def _parse_time(text: str) -> int:
    if text.isdigit():
        return int(text)
    try:
        return int(datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise ConfigError("--to-time", f"not epoch ms nor ISO 8601: {text!r}") from None


_COLUMNS = ("group", "topic", "queue_id", "offset", "max_offset", "lag", "lag_bytes")
_COLUMNS += ("in_flight", "retry_depth", "dlq_depth", "pending_tx")


def _show(args: argparse.Namespace) -> int:
    if args.namesrv is not None:
        return _show_cluster(args)
    if args.store is None:
        raise ConfigError("--store", "required (or --namesrv HOST:PORT GROUP)")
    require_store(Path(args.store))
    rows = group_rows(Path(args.store))
    if args.json:
        for row in rows:
            print(json.dumps(asdict(row)))
        return 0
    _print_table(_COLUMNS, rows)
    _print_pending(Path(args.store))
    return 0


def _print_pending(root: Path) -> None:
    """Pending transactions of every topic, also of topics no group consumes."""
    pending = pending_counts(root)
    if pending:
        print("pending transactions (rmq-spark transactions --store DIR lists them):")
    for (topic, queue_id), count in sorted(pending.items()):
        print(f"  {topic} queue {queue_id}: {count}")


def _print_table(columns: tuple[str, ...], rows: list[Any]) -> None:
    table = [columns] + [tuple(str(getattr(r, c)) for c in columns) for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)))


_CLUSTER_COLUMNS = ("broker", "topic", "queue_id", "offset", "max_offset", "lag")


def _show_cluster(args: argparse.Namespace) -> int:
    """The group on every broker of the cluster; a broker that does not answer is named on
    stderr (exit 1) and the others are shown."""
    from rmq_spark.broker.cluster.group_view import group_across

    namesrv, group = args.namesrv
    if not args.timeout > 0:
        raise ConfigError("--timeout", f"must be > 0 seconds, got {args.timeout}")
    found = group_across(
        namesrv, group, timeout_s=args.timeout, credentials=operator_credentials(args.access_key)
    )
    if args.json:
        for row in found.rows:
            print(json.dumps({**asdict(row), "group": group, "lag": row.lag}))
    else:
        _print_table(_CLUSTER_COLUMNS, found.rows)
    sys.stdout.flush()
    for problem in found.problems:
        print(f"rmq-spark groups: broker {problem.broker} ({problem.addr}): {problem.reason}; "
              "its queues are not shown", file=sys.stderr)  # fmt: skip
    if not found.masters:
        print("rmq-spark groups: the name server lists no broker", file=sys.stderr)
    return 1 if found.problems else 0


def known_groups(root: Path) -> set[str]:
    """Groups the store knows: with committed offsets, or with settings of their own."""
    known = {group for _, group in read_consumer_offsets(root)}
    settings = config_path(root, SUBSCRIPTION_GROUP_FILE)
    if settings.is_file():
        text = settings.read_text(encoding="utf-8")
        known.update(decode_subscription_groups(text, str(settings))[0])
    return known


def _reset(args: argparse.Namespace) -> int:
    to_time = _parse_time(args.to_time) if args.to_time is not None else None
    root = Path(args.reset_store)
    require_store(root)
    # Offline only: a running broker knows groups it has not saved yet (it answers for them).
    if not args.broker and not args.create and args.group not in known_groups(root):
        raise ConfigError(
            "--group",
            f"{args.group!r} is not a group of {root} (no offsets, no settings); "
            "pass --create to start a new group at these offsets",
        )
    target = {"to_offset": args.to_offset, "to_time_ms": to_time}
    credentials = operator_credentials(args.access_key) if args.broker else None

    def reset(dry_run: bool) -> dict[int, int]:
        if args.broker:
            return reset_offsets_on_broker(
                root, args.broker, args.group, args.topic, credentials=credentials,
                dry_run=dry_run, **target,
            )  # fmt: skip
        return reset_offsets(root, args.group, args.topic, dry_run=dry_run, **target)

    if args.dry_run or (sys.stdin.isatty() and not args.yes):
        _print_reset(args, reset(dry_run=True), dry_run=True)
        if args.dry_run or not _confirmed(f"reset group {args.group!r} in {args.topic!r}?"):
            return 0 if args.dry_run else 1
    _print_reset(args, reset(dry_run=False), dry_run=False)
    return 0


def _print_reset(args: argparse.Namespace, new: dict[int, int], *, dry_run: bool) -> None:
    for queue_id, offset in sorted(new.items()):
        line = {"group": args.group, "topic": args.topic, "queue_id": queue_id, "offset": offset}
        print(json.dumps({**line, "dry_run": True} if dry_run else line))
    sys.stdout.flush()


def _confirmed(question: str) -> bool:
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "groups",
        help="consumer groups: position, lag, in-flight, retry and DLQ depth; reset",
        description=(
            "Print each consumer group's committed offset, lag (messages and bytes), messages "
            "in flight, retry and DLQ depth and pending transactions per queue, from "
            "config/consumerOffset.json, config/consumerInflight.json, the ConsumeQueue and "
            "the half messages, read-only (works while a broker runs; as of its last save). "
            "`groups reset` moves a group's offsets."
        ),
    )
    parser.add_argument("--store", metavar="DIR", help="store root directory")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument(
        "--namesrv",
        nargs=2,
        metavar=("HOST:PORT[;HOST:PORT]", "GROUP"),
        help="GROUP across a cluster: every broker the name servers list, asked over the "
        "network (per broker: queues, committed offsets, lag); a broker that does not answer "
        "is named on stderr (exit code 1), the others are shown",
    )
    parser.add_argument(
        "--timeout", type=float, default=3.0, metavar="S",
        help="with --namesrv: seconds to wait for each name server and broker (default 3)",
    )  # fmt: skip
    parser.add_argument(
        "--access-key",
        metavar="AK",
        help="with --namesrv and auth on: a user with the Sub right on the group and its topics "
        "(its secret key in the RMQ_SECRET_KEY variable)",
    )
    parser.set_defaults(handler=_show)
    actions = parser.add_subparsers(dest="groups_action", metavar="ACTION")
    reset = actions.add_parser(
        "reset",
        help="set a group's offsets in a topic (offline, or --broker with no consumer running)",
        description=(
            "Set GROUP's committed offset in every queue of TOPIC to an offset (clamped to "
            "each queue) or to the first message stored at or after a time (mqadmin "
            "resetOffsetByTime), and drop its in-flight state there. Offline it rewrites "
            "config/consumerOffset.json (refused while a broker holds the store); with "
            "--broker it goes through the running broker, which refuses while consumers of "
            "the group are connected. Offline, a group the store does not know is refused "
            "unless --create; on a terminal the change is shown and confirmed first (--yes "
            "skips the question, --dry-run only shows it)."
        ),
    )
    reset.add_argument("--store", dest="reset_store", metavar="DIR", required=True)
    reset.add_argument(
        "--broker",
        metavar="HOST:PORT",
        help="the broker that has the store open: reset through it (refused while consumers "
        "of the group are connected)",
    )
    reset.add_argument(
        "--access-key",
        metavar="AK",
        help="with --broker and auth on: a user with the Update right on the group (its secret "
        "key in the RMQ_SECRET_KEY variable)",
    )
    reset.add_argument("--group", required=True)
    reset.add_argument(
        "--create",
        action="store_true",
        help="the group may be new to the store (without it, an unknown group is refused: a "
        "typo must not create one)",
    )
    reset.add_argument(
        "--dry-run", action="store_true", help="print the offsets it would set, change nothing"
    )
    reset.add_argument("--yes", action="store_true", help="on a terminal, act without asking first")
    reset.add_argument("--topic", required=True)
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-offset", type=int, metavar="N", help="queue offset")
    target.add_argument("--to-time", metavar="TIME", help="ISO 8601 or epoch milliseconds")
    reset.set_defaults(handler=_reset)
