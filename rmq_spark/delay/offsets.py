"""PURE: the text of ``config/delayOffset.json`` and of our schedule journal.

``delayOffset.json`` is RocketMQ's per-level progress file, written by fastjson (spec
docs/DELAY.md): integer map keys are *unquoted* (``{"offsetTable":{1:1,2:0}}``),
pretty-printed with tabs, and 5.x adds ``dataVersion``. ``format_delay_offsets`` writes
exactly what a 5.x broker writes; ``parse_delay_offsets`` reads that, strict JSON (quoted
keys) and the 4.x form without ``dataVersion``.

The journal (``config/scheduleJournal.json``, strict JSON, ours) holds everything the
redelivery job needs to resume exactly once: the progress of every level and of the timer
queue (``QueueProgress``) and the intent of the batch being put (``Intent``). See docs/DELAY.md.

Does not own files (``progress.py``) or deciding what is due (``schedule.py``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rmq_spark.delay.schedule import DueEntry, QueueProgress
from rmq_spark.errors import ProgressFormatError

__all__ = [
    "DataVersion",
    "DelayOffsets",
    "Intent",
    "IntentEntry",
    "JOURNAL_VERSION",
    "Journal",
    "format_delay_offsets",
    "format_journal",
    "parse_delay_offsets",
    "parse_fastjson",
    "parse_journal",
]

JOURNAL_VERSION = 1


@dataclass(frozen=True, slots=True)
class DataVersion:
    """RocketMQ's ``DataVersion``: bumped on every change of the file's content."""

    counter: int = 0
    state_version: int = 0
    timestamp_ms: int = 0

    def next(self, now_ms: int) -> DataVersion:
        return DataVersion(self.counter + 1, self.state_version, now_ms)


@dataclass(frozen=True, slots=True)
class DelayOffsets:
    """``offsetTable``: delay level -> next queue offset to deliver; plus ``dataVersion``."""

    offset_table: Mapping[int, int] = field(default_factory=dict)
    data_version: DataVersion | None = None


def format_delay_offsets(offsets: DelayOffsets) -> str:
    r"""The file text as a 5.x broker writes it (fastjson ``toJSONString(obj, true)``).

    Fields sorted by name, tabs, integer keys unquoted and on one line (fastjson prints a
    map with non-string keys without line breaks, then the closing brace on its own line).

    Examples
    --------
    >>> format_delay_offsets(DelayOffsets({1: 1, 2: 0}))
    '{\n\t"offsetTable":{1:1,2:0\n\t}\n}'
    """
    table = ",".join(f"{level}:{offset}" for level, offset in sorted(offsets.offset_table.items()))
    table_text = f"{{{table}\n\t}}" if table else "{}"
    parts = []
    if offsets.data_version is not None:
        dv = offsets.data_version
        parts.append(
            '\t"dataVersion":{\n'
            f'\t\t"counter":{dv.counter},\n'
            f'\t\t"stateVersion":{dv.state_version},\n'
            f'\t\t"timestamp":{dv.timestamp_ms}\n'
            "\t}"
        )
    parts.append(f'\t"offsetTable":{table_text}')
    return "{\n" + ",\n".join(parts) + "\n}"


def parse_delay_offsets(text: str) -> DelayOffsets:
    """Read ``delayOffset.json`` text (fastjson dialect or strict JSON).

    Raises
    ------
    ProgressFormatError
        Not an object, no ``offsetTable``, or keys/values that are not integers.
    """
    value = parse_fastjson(text)
    if not isinstance(value, dict) or not isinstance(value.get("offsetTable"), dict):
        raise ProgressFormatError("delayOffset.json: expected an object with an offsetTable")
    table: dict[int, int] = {}
    for key, offset in value["offsetTable"].items():
        level = _int(key, f"offsetTable key {key!r}")
        table[level] = _int(offset, f"offsetTable[{key}]")
    data_version = None
    raw_dv = value.get("dataVersion")
    if isinstance(raw_dv, dict):
        data_version = DataVersion(
            _int(raw_dv.get("counter", 0), "dataVersion.counter"),
            _int(raw_dv.get("stateVersion", 0), "dataVersion.stateVersion"),
            _int(raw_dv.get("timestamp", 0), "dataVersion.timestamp"),
        )
    return DelayOffsets(table, data_version)


# --- the journal ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IntentEntry:
    """One entry of the batch being put: where it came from (``kind`` "level" or "timer")."""

    kind: str
    entry: DueEntry


@dataclass(frozen=True, slots=True)
class Intent:
    """A batch about to be put, written down *before* the first put.

    ``log_offset_before`` is a CommitLog offset at or below the first byte any of these puts
    can land at; after a crash, the records from there on are compared with the batch.
    ``dequeue_ms`` is the pass time used for timer messages' TIMER_DEQUEUE_MS.
    """

    log_offset_before: int
    dequeue_ms: int
    entries: tuple[IntentEntry, ...]


@dataclass(frozen=True, slots=True)
class Journal:
    """Everything the job needs to resume exactly once (see module docstring)."""

    levels: Mapping[int, QueueProgress] = field(default_factory=dict)  # delay level -> progress
    timer: QueueProgress = QueueProgress()
    intent: Intent | None = None
    log_scan_from: int = 0  # CommitLog offset below which no schedule record is pending
    passes: int = 0  # committed batches so far (for humans)


def format_journal(journal: Journal) -> str:
    """Strict JSON, one line per top-level field."""
    intent = None
    if journal.intent is not None:
        intent = {
            "log_offset_before": journal.intent.log_offset_before,
            "dequeue_ms": journal.intent.dequeue_ms,
            "entries": [
                [
                    item.kind,
                    item.entry.queue_id,
                    item.entry.queue_offset,
                    item.entry.physical_offset,
                    item.entry.total_size,
                    item.entry.due_ms,
                    item.entry.store_timestamp_ms,
                ]
                for item in journal.intent.entries
            ],
        }
    doc: dict[str, Any] = {
        "version": JOURNAL_VERSION,
        "levels": {str(k): _queue_doc(v) for k, v in sorted(journal.levels.items())},
        "timer": _queue_doc(journal.timer),
        "log_scan_from": journal.log_scan_from,
        "passes": journal.passes,
        "intent": intent,
    }
    lines = [f"  {json.dumps(key)}: {json.dumps(value)}" for key, value in doc.items()]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def parse_journal(text: str) -> Journal:
    """Read the journal.

    Raises
    ------
    ProgressFormatError
        Not JSON, an unknown version, or a field of the wrong shape.
    """
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise ProgressFormatError(f"journal: not JSON: {err}") from None
    if not isinstance(doc, dict) or doc.get("version") != JOURNAL_VERSION:
        raise ProgressFormatError(f"journal: expected version {JOURNAL_VERSION}")
    try:
        levels = {_int(k, "level"): _queue_progress(v) for k, v in doc["levels"].items()}
        timer = _queue_progress(doc["timer"])
        intent = None
        if doc.get("intent") is not None:
            raw = doc["intent"]
            entries = tuple(
                IntentEntry(
                    str(kind),
                    DueEntry(
                        _int(qid, "queue_id"),
                        _int(qoff, "queue_offset"),
                        _int(phys, "physical_offset"),
                        _int(size, "total_size"),
                        _int(due, "due_ms"),
                        _int(store, "store_timestamp_ms"),
                    ),
                )
                for kind, qid, qoff, phys, size, due, store in raw["entries"]
            )
            intent = Intent(
                _int(raw["log_offset_before"], "log_offset_before"),
                _int(raw["dequeue_ms"], "dequeue_ms"),
                entries,
            )
        return Journal(
            levels,
            timer,
            intent,
            _int(doc.get("log_scan_from", 0), "log_scan_from"),
            _int(doc.get("passes", 0), "passes"),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ProgressFormatError(f"journal: bad field: {err!r}") from None


def _queue_doc(progress: QueueProgress) -> dict[str, Any]:
    return {"low_water": progress.low_water, "done_ranges": [list(r) for r in progress.done_ranges]}


def _queue_progress(doc: Any) -> QueueProgress:
    ranges = tuple((_int(a, "range"), _int(b, "range")) for a, b in doc["done_ranges"])
    for start, end in ranges:
        if end <= start:
            raise ProgressFormatError(f"journal: empty or reversed range [{start}, {end})")
    return QueueProgress(_int(doc["low_water"], "low_water"), ranges)


# --- a small fastjson-dialect reader ----------------------------------------------------------


def parse_fastjson(text: str) -> Any:
    """Parse JSON as fastjson writes and reads it: object keys may be unquoted numbers or
    identifiers, strings may use single quotes; otherwise strict JSON.

    Raises
    ------
    ProgressFormatError
        Anything else, with the character position.
    """
    parser = _Parser(text)
    value = parser.value()
    parser.skip_space()
    if parser.pos != len(text):
        raise parser.error("trailing characters")
    return value


_SPACE = " \t\r\n\ufeff"
_BARE_KEY = frozenset("0123456789+-_$abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.")


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def error(self, reason: str) -> ProgressFormatError:
        return ProgressFormatError(f"{reason} at character {self.pos}")

    def skip_space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in _SPACE:
            self.pos += 1

    def peek(self) -> str:
        self.skip_space()
        if self.pos >= len(self.text):
            raise self.error("unexpected end of text")
        return self.text[self.pos]

    def value(self) -> Any:
        ch = self.peek()
        if ch == "{":
            return self.obj()
        if ch == "[":
            return self.array()
        if ch in "\"'":
            return self.string()
        return self.scalar()

    def obj(self) -> dict[Any, Any]:
        self.pos += 1
        result: dict[Any, Any] = {}
        if self.peek() == "}":
            self.pos += 1
            return result
        while True:
            key = self.string() if self.peek() in "\"'" else self.bare()
            if self.peek() != ":":
                raise self.error("expected ':'")
            self.pos += 1
            result[key] = self.value()
            ch = self.peek()
            self.pos += 1
            if ch == "}":
                return result
            if ch != ",":
                raise self.error("expected ',' or '}'")

    def array(self) -> list[Any]:
        self.pos += 1
        result: list[Any] = []
        if self.peek() == "]":
            self.pos += 1
            return result
        while True:
            result.append(self.value())
            ch = self.peek()
            self.pos += 1
            if ch == "]":
                return result
            if ch != ",":
                raise self.error("expected ',' or ']'")

    def string(self) -> str:
        quote = self.text[self.pos]
        start = self.pos
        self.pos += 1
        escaped = False
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            self.pos += 1
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                body = self.text[start + 1 : self.pos - 1]
                if quote == "'":
                    body = body.replace('\\"', '"').replace('"', '\\"').replace("\\'", "'")
                try:
                    return str(json.loads(f'"{body}"'))
                except json.JSONDecodeError:
                    raise self.error("bad string escape") from None
        raise self.error("unterminated string")

    def bare(self) -> str:
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] in _BARE_KEY:
            self.pos += 1
        if self.pos == start:
            raise self.error("expected a key")
        return self.text[start : self.pos]

    def scalar(self) -> Any:
        token = self.bare()
        if token in ("true", "false"):
            return token == "true"
        if token == "null":
            return None
        try:
            return int(token)
        except ValueError:
            pass
        try:
            return float(token)
        except ValueError:
            raise self.error(f"bad value {token!r}") from None


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise ProgressFormatError(f"{what}: expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("+-").isdigit():
            return int(text)
    raise ProgressFormatError(f"{what}: expected an integer, got {value!r}")
