"""PURE: the values and operators of RocketMQ's SQL92 filter, as its Java classes compute them.

Owns the Java value model of ``org.apache.rocketmq.filter.expression`` (5.3.3): literals are
Java ``Integer``/``Long``/``Double``/``String``/``Boolean``, property values are ``String`` or
absent (``None``, SQL's unknown), and comparisons coerce as ``ComparisonExpression.__compare``
does with ``CONVERT_STRING_EXPRESSIONS`` on (a string property compared with an integer
literal goes through ``Integer.valueOf``, and so on). Every operator is a closure built once
(``Evaluator``), so evaluating a message re-parses nothing. Where RocketMQ's evaluation
throws (``NumberFormatException``, ``ClassCastException``), ``EvaluationError`` is raised;
the broker then treats the message as not matching, as ``ExpressionMessageFilter`` does.
Does not own the grammar (``sql92.py``) or tag filters (``filters.py``).
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "EvaluationError",
    "Evaluator",
    "Getter",
    "JavaLong",
    "boolean_cast",
    "decimal_literal",
    "equal",
    "float_literal",
    "in_list",
    "java_compare",
    "logic_all",
    "logic_and",
    "logic_any",
    "logic_not",
    "logic_or",
    "negate",
    "ordering",
    "string_test",
]

Getter = Callable[[str], "str | None"]
Evaluator = Callable[[Getter], object]


class JavaLong(int):
    """A Java ``long`` literal (outside the ``int`` range): coercion then uses ``Long.valueOf``."""


class EvaluationError(Exception):
    """RocketMQ's evaluator would throw here; the message does not match."""


_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_DOUBLE_MIN_VALUE = 5e-324  # Java Double.MIN_VALUE, the smallest positive double
_JAVA_INTEGER = re.compile(r"[+-]?\d+")
# Java's FloatingDecimal.readJavaFormatString, after String.trim().
_JAVA_DOUBLE = re.compile(
    r"([+-]?)(?:(NaN)|(Infinity)|((?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)[fFdD]?"
    r"|(0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)[fFdD]?)"
)
_JAVA_TRIM = "".join(chr(code) for code in range(0x21))

_BOOL, _INT, _LONG, _DOUBLE, _STR = range(5)
_KINDS: dict[type, int] = {bool: _BOOL, int: _INT, JavaLong: _LONG, float: _DOUBLE, str: _STR}


def decimal_literal(text: str) -> int:
    """``ConstantExpression.createFromDecimal``: an ``int`` in the int32 range, else a Long."""
    digits = text[:-1] if text[-1] in "lL" else text
    value = int(digits)
    if value > _LONG_MAX:
        raise ValueError(f"{text} does not fit in a Java long")
    return value if value <= _INT_MAX else JavaLong(value)


def float_literal(text: str) -> float:
    """``ConstantExpression.createFloat``: rejects infinity and (as RocketMQ) zero."""
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text} is greater than Double.MAX_VALUE")
    if value < _DOUBLE_MIN_VALUE:
        raise ValueError(f"{text} is less than Double.MIN_VALUE (4.9E-324)")
    return value


def _parse_integer(text: str, low: int, high: int) -> int:
    """``Integer.valueOf`` / ``Long.valueOf``: optional sign, decimal digits, in range."""
    if _JAVA_INTEGER.fullmatch(text) is None:
        raise EvaluationError(f"NumberFormatException: {text!r}")
    value = int(text)
    if not low <= value <= high:
        raise EvaluationError(f"NumberFormatException: {text!r} is out of range")
    return value


def _parse_double(text: str) -> float:
    """``Double.valueOf(String)``: Java's syntax (``NaN``, ``Infinity``, hex, ``d``/``f``)."""
    match = _JAVA_DOUBLE.fullmatch(text.strip(_JAVA_TRIM))
    if match is None:
        raise EvaluationError(f"NumberFormatException: {text!r}")
    sign, nan, infinity, decimal, hexadecimal = match.groups()
    if nan:
        return math.nan
    if infinity:
        value = math.inf
    elif decimal:
        value = float(decimal)
    else:
        value = float.fromhex(hexadecimal)
    return -value if sign == "-" else value


def _double_bits(value: float) -> int:
    """``Double.doubleToLongBits``: one NaN, signed zeros apart."""
    if value != value:
        return 0x7FF8000000000000
    return int(struct.unpack(">q", struct.pack(">d", value))[0])


def _compare_doubles(left: float, right: float) -> int:
    """``Double.compareTo``: -0.0 < 0.0, NaN equals NaN and is above everything."""
    if left < right:
        return -1
    if left > right:
        return 1
    left_bits, right_bits = _double_bits(left), _double_bits(right)
    return (left_bits > right_bits) - (left_bits < right_bits)


def _coerce(lv: Any, rv: Any) -> tuple[Any, Any] | None:
    """Both sides brought to one Java type, or ``None`` when Java answers ``-1`` unconverted."""
    lc, rc = _KINDS[type(lv)], _KINDS[type(rv)]
    if lc == _BOOL:
        if rc == _STR:  # RocketMQ casts the Boolean to String here
            raise EvaluationError("ClassCastException: Boolean compared with String")
        return None
    if lc in (_INT, _LONG):
        if rc in (_INT, _LONG):
            return lv, rv
        if rc == _DOUBLE:
            return float(lv), rv
        if rc == _STR:
            low, high = (_INT_MIN, _INT_MAX) if lc == _INT else (_LONG_MIN, _LONG_MAX)
            return lv, _parse_integer(rv, low, high)
        return None
    if lc == _DOUBLE:
        if rc in (_INT, _LONG):
            return lv, float(rv)
        if rc == _STR:
            return lv, _parse_double(rv)
        return None
    text: str = lv
    if rc == _BOOL:
        return text.lower() == "true", rv
    if rc == _INT:
        return _parse_integer(text, _INT_MIN, _INT_MAX), rv
    if rc == _LONG:
        return _parse_integer(text, _LONG_MIN, _LONG_MAX), rv
    return _parse_double(text), rv


def java_compare(lv: Any, rv: Any) -> int:
    """``ComparisonExpression.__compare(lv, rv, true)``: both non-null; sign of the result."""
    if type(lv) is not type(rv):
        coerced = _coerce(lv, rv)
        if coerced is None:
            return -1
        lv, rv = coerced
    if type(lv) is float:
        return _compare_doubles(lv, rv)
    return (lv > rv) - (lv < rv)


def equal(left: Evaluator, right: Evaluator) -> Evaluator:
    """``doCreateEqual``: both null is true, one null is unknown (left) or false (right)."""

    def evaluate(get: Getter) -> object:
        lv, rv = left(get), right(get)
        if lv is None or rv is None:
            if lv is None and rv is None:
                return True
            return None if lv is None else False
        return java_compare(lv, rv) == 0

    return evaluate


def ordering(left: Evaluator, right: Evaluator, accept: Callable[[int], bool]) -> Evaluator:
    """``>``, ``>=``, ``<``, ``<=``: null is unknown; two strings compare as doubles."""

    def evaluate(get: Getter) -> object:
        lv = left(get)
        if lv is None:
            return None
        rv = right(get)
        if rv is None:
            return None
        if type(lv) is str and type(rv) is str:
            return accept(_compare_doubles(_parse_double(lv), _parse_double(rv)))
        return accept(java_compare(lv, rv))

    return evaluate


def _as_boolean(value: object) -> bool | None:
    """The ``(Boolean)`` cast of LogicExpression and NOT."""
    if value is None or isinstance(value, bool):
        return value
    raise EvaluationError(f"ClassCastException: {value!r} is not a Boolean")


def logic_and(left: Evaluator, right: Evaluator) -> Evaluator:
    """Three-valued AND; the right side is not evaluated once the left is false."""
    return logic_all((left, right))


def logic_or(left: Evaluator, right: Evaluator) -> Evaluator:
    """Three-valued OR; the right side is not evaluated once the left is true."""
    return logic_any((left, right))


def logic_all(operands: Sequence[Evaluator]) -> Evaluator:
    """``a AND b AND c ...`` in one closure (a chain of 20,000 ANDs evaluates without
    nesting 20,000 calls); left to right, stopping at the first false, as the Java chain."""
    parts = tuple(operands)

    def evaluate(get: Getter) -> object:
        unknown = False
        for part in parts:
            value = _as_boolean(part(get))
            if value is False:
                return False
            unknown = unknown or value is None
        return None if unknown else True

    return evaluate


def logic_any(operands: Sequence[Evaluator]) -> Evaluator:
    """``a OR b OR c ...`` in one closure; stops at the first true (three-valued OR is
    associative, so this is the Java left-nested chain's value)."""
    parts = tuple(operands)

    def evaluate(get: Getter) -> object:
        unknown = False
        for part in parts:
            value = _as_boolean(part(get))
            if value is True:
                return True
            unknown = unknown or value is None
        return None if unknown else False

    return evaluate


def logic_not(operand: Evaluator) -> Evaluator:
    """NOT: unknown stays unknown."""

    def evaluate(get: Getter) -> object:
        value = _as_boolean(operand(get))
        return None if value is None else not value

    return evaluate


def boolean_cast(operand: Evaluator) -> Evaluator:
    """A property used as a condition: only a Java Boolean is true; a string is false."""

    def evaluate(get: Getter) -> object:
        value = operand(get)
        if value is None:
            return None
        return value if type(value) is bool else False

    return evaluate


def _wrap(value: int, bits: int) -> int:
    """Two's-complement wrap-around, as Java's ``-x`` on an int or long."""
    half = 1 << (bits - 1)
    return (value + half) % (1 << bits) - half


def negate(operand: Evaluator) -> Evaluator:
    """Unary minus: numbers keep their Java type; anything else (a string) is null."""

    def evaluate(get: Getter) -> object:
        value: Any = operand(get)
        kind = type(value)
        if kind is int:
            return _wrap(-value, 32)
        if kind is JavaLong:
            return JavaLong(_wrap(-value, 64))
        if kind is float:
            return -value
        return None

    return evaluate


def in_list(operand: Evaluator, items: Sequence[str], negated: bool) -> Evaluator:
    """``[NOT] IN ('a', ...)``: only a string value is tested; null or non-string is unknown."""
    members = frozenset(items)

    def evaluate(get: Getter) -> object:
        value = operand(get)
        if type(value) is not str:
            return None
        return (value in members) != negated

    return evaluate


def string_test(operand: Evaluator, test: Callable[[str], bool], search: str) -> Evaluator:
    """CONTAINS / STARTSWITH / ENDSWITH and their NOT forms: false (never unknown) when the
    search string is empty or the value is null or not a string."""

    def evaluate(get: Getter) -> object:
        if not search:
            return False
        value = operand(get)
        if type(value) is not str:
            return False
        return test(value)

    return evaluate
