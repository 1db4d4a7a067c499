"""PURE: a consumer's message filter (gRPC ``FilterExpression``), compiled once per subscription.

Owns ``compile_filter(expression_type, expression)`` for the two filter types of RocketMQ 5:

* ``TAG``: ``*`` or empty matches everything; otherwise ``a || b || c`` (split on ``||``,
  each tag trimmed, empty ones dropped), as ``FilterAPI.buildSubscriptionData``. The
  ConsumeQueue unit's tags code is checked first (``matches_tags_code``: the Java hash of a
  subscribed tag), as the broker's ``ExpressionMessageFilter.isMatchedByConsumeQueue``; then
  the record's ``TAGS`` confirms it (``matches``), as the proxy's ``FilterUtils.isTagMatched``,
  so two tags with one hash code are told apart.
* ``SQL92``: RocketMQ's selector grammar (``sql92.py``) over the message's user properties
  plus ``TAGS``. A message matches only when the expression is true: unknown (a missing
  property) and an evaluation RocketMQ would abort (``'abc' > 5``) do not match.

A bad expression raises ``FilterExpressionError`` (the gRPC layer's
``ILLEGAL_FILTER_EXPRESSION``), and so does one longer than ``EXPRESSION_LENGTH_MAX``
characters (RocketMQ states no limit; gRPC would admit 130 MiB, which the parser would hold
many times over) or nested deeper than ``sql92.SQL92_DEPTH_MAX``. Compiled filters are kept in
a bounded cache keyed by (type, expression): every ReceiveMessage names its filter, and a
compiled filter is immutable and depends on nothing else (not the group), so consumers with
one expression share it. Does not own where filtering happens (the consume path).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from rmq_spark.broker.filters.sql92 import compile_sql92
from rmq_spark.broker.filters.sql92_eval import EvaluationError, Evaluator
from rmq_spark.errors import FilterExpressionError
from rmq_spark.store.hashing import java_string_hash

__all__ = [
    "CACHED_FILTERS_MAX",
    "EXPRESSION_LENGTH_MAX",
    "EXPRESSION_TYPES",
    "MessageFilter",
    "Sql92Filter",
    "TagFilter",
    "compile_filter",
]

EXPRESSION_TYPES = ("TAG", "SQL", "SQL92", "FILTER_TYPE_UNSPECIFIED", "")
_TAG_TYPES = frozenset({"TAG", "FILTER_TYPE_UNSPECIFIED", ""})  # GrpcConverter: default TAG
_SQL_TYPES = frozenset({"SQL", "SQL92"})
SUB_ALL = "*"
EXPRESSION_LENGTH_MAX = 16 * 1024  # characters of one TAG or SQL92 expression
CACHED_FILTERS_MAX = 1024  # compiled filters kept (least recently used dropped first)
TAGS_PROPERTY = "TAGS"


class MessageFilter(Protocol):
    """A compiled filter: a cheap check on the ConsumeQueue tags code, then the full one."""

    expression_type: str
    expression: str

    def matches_tags_code(self, tags_code: int) -> bool:
        """Whether a unit with this tags code may match (``False``: skip without reading)."""
        ...

    def matches(self, tags: str | None, properties: Mapping[str, str]) -> bool:
        """Whether the message matches: ``tags`` is its ``TAGS``; ``properties`` its user
        properties (RocketMQ's broker evaluates SQL92 over all the record's properties, so
        passing the system ones too is closest to it)."""
        ...


@dataclass(frozen=True, slots=True)
class TagFilter:
    """``TAG`` filter: ``tags`` empty and ``subscribe_all`` for ``*``."""

    expression: str
    subscribe_all: bool
    tags: frozenset[str]
    tags_codes: frozenset[int]
    expression_type: str = field(default="TAG", init=False)

    @classmethod
    def parse(cls, expression: str) -> TagFilter:
        """``FilterAPI.buildSubscriptionData``: only ``""`` and ``"*"`` exactly mean all."""
        if not expression or expression == SUB_ALL:
            return cls(expression, True, frozenset(), frozenset())
        tags = frozenset(tag.strip() for tag in expression.split("||")) - {""}
        return cls(expression, False, tags, frozenset(java_string_hash(tag) for tag in tags))

    def matches_tags_code(self, tags_code: int) -> bool:
        # The ConsumeQueue stores the code as a signed 64-bit value; RocketMQ compares
        # its intValue() with the subscribed String.hashCode()s.
        code = (tags_code + (1 << 31)) % (1 << 32) - (1 << 31)
        return self.subscribe_all or code in self.tags_codes

    def matches(self, tags: str | None, properties: Mapping[str, str]) -> bool:
        if self.subscribe_all:
            return True
        return tags is not None and tags in self.tags


@dataclass(frozen=True, slots=True)
class Sql92Filter:
    """``SQL92`` filter; ``evaluator`` is the compiled expression."""

    expression: str
    evaluator: Evaluator
    expression_type: str = field(default="SQL92", init=False)

    def matches_tags_code(self, tags_code: int) -> bool:
        return True

    def matches(self, tags: str | None, properties: Mapping[str, str]) -> bool:
        def get(name: str) -> str | None:
            if name == TAGS_PROPERTY and tags is not None:
                return tags
            return properties.get(name)

        try:
            return self.evaluator(get) is True
        except EvaluationError:
            return False


def compile_filter(expression_type: str, expression: str) -> MessageFilter:
    """Compile a gRPC ``FilterExpression`` (or take it from the cache).

    ``expression_type`` is the gRPC ``FilterType`` name (``"TAG"``, ``"SQL"``, or
    ``"FILTER_TYPE_UNSPECIFIED"``, which the proxy treats as TAG) or RocketMQ's
    ``ExpressionType`` (``"TAG"``, ``"SQL92"``). Raises ``FilterExpressionError`` for another
    type, an expression over ``EXPRESSION_LENGTH_MAX`` or one that does not parse (errors are
    not cached: they cost a parse bounded by the length limit).
    """
    return _compile(expression_type, expression)


@functools.lru_cache(maxsize=CACHED_FILTERS_MAX)  # thread-safe; exceptions are not kept
def _compile(expression_type: str, expression: str) -> MessageFilter:
    if len(expression) > EXPRESSION_LENGTH_MAX:
        raise FilterExpressionError(
            expression_type,
            expression,
            None,
            f"the expression has {len(expression)} characters, more than the "
            f"{EXPRESSION_LENGTH_MAX} allowed",
        )
    if expression_type in _TAG_TYPES:
        return TagFilter.parse(expression)
    if expression_type in _SQL_TYPES:
        return Sql92Filter(expression, compile_sql92(expression))
    raise FilterExpressionError(
        expression_type,
        expression,
        None,
        f"unknown filter type; expected one of {EXPRESSION_TYPES}",
    )
