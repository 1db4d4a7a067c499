"""``rmq-spark recover``: the operator's decision on a store that does not open.

Recovery refuses a store it cannot open safely and names the command that accepts the
state; this module turns that command into a call of ``store/repair.py`` or
``store/quarantine.py``. Nothing is deleted: what is cut or replaced goes to
``<store>/quarantine/``. The segment size is the store's own (its segment files), so no
``--config`` is needed. Registered by ``store_commands.register``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rmq_spark.cli.common import add_config_arguments, local_path, require_store

__all__ = ["register_recover"]

_DESCRIPTION = (
    "A store that does not open safely is refused, naming the file, the cause and one of "
    "these decisions. After looking (`rmq-spark verify`, `rmq-spark dump`): "
    "--truncate-at OFFSET cuts the log at a record boundary: every byte from OFFSET on is "
    "gone from the log, so messages stored there are lost to readers; the rest of OFFSET's "
    "segment is copied and every later segment file is moved to "
    "<store>/quarantine/cut-<time>-at-<offset>/ with a manifest.json. --reset-checkpoint "
    "moves a damaged checkpoint to <store>/quarantine/checkpoint-<time>/ and writes one with "
    "zero offsets: the next open finds the real end of the data. --accept-missing records "
    "in config/retention.json that the offsets below the oldest segment file are lost. The "
    "next open recovers from there (and refuses again if the store is still not clean). "
    "Takes the store's lock: stop the broker first."
)


def register_recover(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "recover",
        help="accept a damaged store's state: cut the log, reset the checkpoint, accept loss",
        description=_DESCRIPTION,
        epilog="example: rmq-spark recover --store ./store --truncate-at 1073741824",
    )
    parser.add_argument(
        "--store", required=True, type=local_path, metavar="DIR", help="store root directory"
    )
    decision = parser.add_mutually_exclusive_group(required=True)
    decision.add_argument(
        "--truncate-at",
        type=int,
        metavar="OFFSET",
        help="physical offset that becomes the end of the log (a record boundary)",
    )
    decision.add_argument(
        "--reset-checkpoint",
        action="store_true",
        help="replace a damaged checkpoint (the old one is quarantined)",
    )
    decision.add_argument(
        "--accept-missing",
        action="store_true",
        help="record the lost oldest segments in config/retention.json",
    )
    add_config_arguments(parser)  # accepted as by every command; the files give the size
    parser.set_defaults(handler=_handle_recover)


def _handle_recover(args: argparse.Namespace) -> int:
    from rmq_spark.errors import ConfigError
    from rmq_spark.store.lockfile import StoreLock
    from rmq_spark.store.repair import accept_missing, reset_checkpoint

    require_store(args.store)
    if args.truncate_at is not None and args.truncate_at < 0:
        raise ConfigError("recover", f"--truncate-at {args.truncate_at}: must be >= 0")
    lock = StoreLock.acquire(args.store)
    try:
        if args.reset_checkpoint:
            moved = reset_checkpoint(args.store)
            print(f"moved the checkpoint to {moved}; the next open finds the end of the data")
        elif args.accept_missing:
            floor, first = accept_missing(args.store)
            print(
                f"recorded physical offsets [{floor}, {first}) as lost in "
                "config/retention.json; the log now starts at the oldest segment file"
            )
        else:
            _truncate(args.store, args.truncate_at)
    finally:
        lock.release()
    return 0


def _truncate(store: Path, offset: int) -> None:
    from rmq_spark.store.commitlog import CommitLog
    from rmq_spark.store.fileio import OsOpener
    from rmq_spark.store.layout import COMMITLOG_DIR
    from rmq_spark.store.quarantine import truncate_store
    from rmq_spark.store.view import StoreView

    # The segment size the store's own files show: a store written with another size than
    # the configured one is cut as it is, without a --config naming its size.
    size = StoreView.open(store).segment_size
    commitlog = CommitLog.load(store / COMMITLOG_DIR, size, OsOpener())
    try:
        result = truncate_store(commitlog, offset, "rmq-spark recover")
    finally:
        commitlog.close()
    print(
        f"cut the log at physical offset {offset}: {result.copied_bytes} bytes copied and "
        f"{len(result.moved_segments)} segment files moved to {result.directory}; the next "
        "open recovers from there"
    )
