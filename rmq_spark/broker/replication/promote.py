"""``rmq-spark broker promote``: turn a stopped slave's store into a master's (manual
failover, docs/REPLICATION.md). Automatic failover (RocketMQ 5's controller) is not built.

The store must be a slave's (``config/replication.json``, ``state.py``), not open by any
process, and its log must verify (``verify_store``). The promotion then records
``role = PROMOTED`` and the end it promoted at, and says what may be lost:

* with the old master's store at hand (``old_master``, also stopped): the slave's log must be
  a byte-for-byte prefix of it (else refused: the two diverged), and the bytes past the
  slave's end are exactly what the promotion loses (0 for a caught-up slave; a SYNC_MASTER
  acknowledged none of them: each acknowledgement waited for this slave);
* without it: nothing acknowledged by a SYNC_MASTER is lost; an ASYNC_MASTER may have
  stored up to its replication lag at its death beyond what this slave saw (its
  ``rmq_replication_lag_bytes``, its last ``replication:`` log line).

The broker is then started over the store with ``broker.role = SYNC_MASTER`` or
``ASYNC_MASTER``: it recovers as any store and continues after the last replicated record.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rmq_spark.broker.replication.state import read_state, write_state
from rmq_spark.errors import BrokerError
from rmq_spark.store.layout import segment_name
from rmq_spark.store.reader import verify_store
from rmq_spark.store.view import broker_has_store_open

__all__ = ["Promotion", "promote"]

_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class Promotion:
    """What a promotion found (see the module docstring)."""

    store: Path
    end_offset: int  # where the promoted log ends: the new master continues here
    master: str  # the old master's HA address, as the slave knew it
    shown_offset: int  # the end of what the old master's transfers had shown this slave
    old_master_end: int | None = None  # the old master's log end, when its store was read
    lost_bytes: int | None = None  # exact when the old master's store was read

    def report(self) -> str:
        lines = [f"promoted {self.store}: its log ends at offset {self.end_offset}; start it "
                 f"with --set broker.role=SYNC_MASTER (or ASYNC_MASTER)"]  # fmt: skip
        unseen = max(0, self.shown_offset - self.end_offset)
        if self.lost_bytes is not None:
            lines.append(f"lost: {self.lost_bytes} bytes (the old master's log ends at "
                         f"{self.old_master_end}; none of them was acknowledged by a "
                         f"SYNC_MASTER)")  # fmt: skip
        else:
            lines.append(
                f"lost: nothing a SYNC_MASTER acknowledged; an ASYNC_MASTER may have stored up "
                f"to its replication lag at its death (rmq_replication_lag_bytes) past offset "
                f"{self.end_offset}; {unseen} bytes the slave was shown were not kept"
            )
        return "\n".join(lines)


def promote(store: Path, old_master: Path | None = None) -> Promotion:
    """Promote the stopped slave store ``store`` (see the module docstring).

    Raises
    ------
    BrokerError
        A process has either store open, ``store`` is not a slave's, a log does not verify,
        or the slave's log is not a prefix of the old master's.
    """
    store = Path(store)
    for path, who in ((store, "the slave"), (old_master, "the old master")):
        if path is not None and broker_has_store_open(Path(path)):
            raise BrokerError(f"{path}: {who}'s store is open by a running broker; stop it first")
    if not (store / "commitlog").is_dir():
        raise BrokerError(f"{store}: no store here (no commitlog/ directory)")
    state = read_state(store)
    if state is None:
        raise BrokerError(f"{store}: not a slave's store (no config/replication.json)")
    mine = verify_store(store)
    if mine.error is not None:
        raise BrokerError(f"{store}: the log does not verify: {mine.error}; not promoting")
    end = mine.end_offset
    old_end = lost = None
    if old_master is not None:
        old_end = verify_store(Path(old_master)).end_offset
        differs = _first_difference(store, Path(old_master), end)
        if differs is not None:
            raise BrokerError(
                f"{store}: its log differs from the old master's at offset {differs}: the two "
                f"diverged; not promoting"
            )
        lost = max(0, old_end - end)
    write_state(store, state["master"], state["masterShownOffset"], end, role="PROMOTED")
    return Promotion(store, end, state["master"], state["masterShownOffset"], old_end, lost)


def _first_difference(mine: Path, theirs: Path, end: int) -> int | None:
    """The first offset below ``end`` where the two logs' bytes differ (``None``: a prefix)."""
    names = sorted(p.name for p in (mine / "commitlog").iterdir() if p.name.isdigit())
    for name in names:
        base = int(name)
        if base >= end:
            break
        other = theirs / "commitlog" / segment_name(base)
        if not other.exists():
            return base
        with (mine / "commitlog" / name).open("rb") as a, other.open("rb") as b:
            at = base
            while at < end:
                left, right = a.read(min(_CHUNK, end - at)), b.read(min(_CHUNK, end - at))
                if not left:
                    break
                if left != right:
                    return at + _mismatch(left, right)
                at += len(left)
    return None


def _mismatch(left: bytes, right: bytes) -> int:
    for i, (x, y) in enumerate(zip(left, right, strict=False)):
        if x != y:
            return i
    return min(len(left), len(right))
