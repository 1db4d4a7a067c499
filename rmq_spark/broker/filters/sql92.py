"""PURE: RocketMQ's SQL92 filter grammar (``filter/.../SelectorParser.jj``, 5.3.3), compiled once.

Owns the lexer (JavaCC's longest match, keywords case-insensitive, ``--`` and ``/* */``
comments), the recursive-descent parser that mirrors the grammar's productions one for one,
and the checks ``ComparisonExpression.create*`` make while building (``a = NULL``, ``a > 'x'``,
``BETWEEN 10 AND 0``, ``IN`` on a non-property are errors). As in RocketMQ, the parser stops
at the first token that cannot continue the expression and ignores the rest
(``JmsSelector`` does not require end of input), and tokens are scanned only as the parser
asks for them. ``compile_sql92(text)`` returns an evaluator over a property getter; the
value semantics live in ``sql92_eval.py``. Errors are ``FilterExpressionError`` with the
position of the offending token.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass

from rmq_spark.broker.filters import sql92_eval as ev
from rmq_spark.errors import FilterExpressionError

__all__ = ["SQL92_DEPTH_MAX", "compile_sql92"]

# How deeply an expression may nest: parentheses, NOT and signs, and operators applied to the
# result of another (an AND/OR chain counts once). RocketMQ's JavaCC parser has no limit but
# Java's stack; Python's stack would end near 160 parentheses as an internal error.
SQL92_DEPTH_MAX = 100

_KEYWORDS = frozenset(
    {"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS"}
    | {"CONTAINS", "STARTSWITH", "ENDSWITH"}
)
_SKIP = re.compile(r"(?:[ \t\n\r\f]+|--[^\n\r]*(?:\r\n|\n|\r)|/\*[^*]*\*+(?:[^/*][^*]*\*+)*/)+")
# Alternatives ordered so that the first match is JavaCC's longest match.
_TOKEN = re.compile(
    r"(?P<FLOAT>[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?"
    r"|[0-9]+[eE][+-]?[0-9]+)"
    r"|(?P<DECIMAL>0|[1-9][0-9]*[lL]?)"
    # Unrolled (no repeated group per character): 1 MB in a literal used 190 MB of re stack.
    r"|(?P<STRING>'[^']*(?:''[^']*)*')"
    r"|(?P<ID>[a-zA-Z_$][a-zA-Z0-9_$]*)"
    r"|(?P<PUNCT><>|<=|>=|[=<>(),+-])"
)
_ORDERINGS: dict[str, Callable[[int], bool]] = {
    ">": lambda answer: answer > 0,
    ">=": lambda answer: answer >= 0,
    "<": lambda answer: answer < 0,
    "<=": lambda answer: answer <= 0,
}
_STRING_TESTS: dict[str, Callable[[str, str], bool]] = {
    "CONTAINS": operator.contains,
    "STARTSWITH": str.startswith,
    "ENDSWITH": str.endswith,
}


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # a keyword, "DECIMAL", "FLOAT", "STRING", "ID", the punctuation itself, "EOF"
    text: str
    position: int


@dataclass(frozen=True, slots=True)
class _Node:
    """An expression being built. ``kind`` is what RocketMQ's checks look at: ``constant``,
    ``boolean_constant`` (TRUE/FALSE/NULL), ``property``, ``negate`` or ``boolean``."""

    kind: str
    evaluate: ev.Evaluator
    value: object = None
    height: int = 1  # closures nested in ``evaluate``: what evaluating it costs in stack

    @property
    def is_boolean(self) -> bool:  # Java: instanceof BooleanExpression
        return self.kind in ("boolean", "boolean_constant")

    @property
    def is_constant(self) -> bool:  # Java: instanceof ConstantExpression
        return self.kind in ("constant", "boolean_constant")


def _constant(value: object, kind: str = "constant") -> _Node:
    return _Node(kind, lambda get: value, value)


def _property(name: str) -> _Node:
    return _Node("property", lambda get: get(name))


def _boolean(evaluate: ev.Evaluator, *parts: _Node) -> _Node:
    return _Node("boolean", evaluate, height=1 + max((part.height for part in parts), default=0))


class _Parser:
    """One parse of one expression; ``_fail`` raises ``FilterExpressionError``."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._scan_position = 0
        self._lookahead: list[_Token] = []
        self._depth = 0  # productions entered through "(", NOT, "+" or "-"

    # -- tokens ---------------------------------------------------------------------------

    def _fail(self, position: int | None, reason: str) -> FilterExpressionError:
        return FilterExpressionError("SQL92", self._text, position, reason)

    def _scan(self) -> _Token:
        text, position = self._text, self._scan_position
        skipped = _SKIP.match(text, position)
        if skipped is not None:
            position = skipped.end()
        if position >= len(text):
            self._scan_position = position
            return _Token("EOF", "", position)
        match = _TOKEN.match(text, position)
        if match is None:
            raise self._fail(position, f"unexpected character {text[position]!r}")
        self._scan_position = match.end()
        kind, image = match.lastgroup or "", match.group()
        if kind == "ID" and image.upper() in _KEYWORDS:
            kind = image.upper()
        elif kind == "PUNCT":
            kind = image
        return _Token(kind, image, position)

    def _peek(self, ahead: int = 0) -> _Token:
        while len(self._lookahead) <= ahead:
            self._lookahead.append(self._scan())
        return self._lookahead[ahead]

    def _next(self) -> _Token:
        token = self._peek()
        del self._lookahead[0]
        return token

    def _expect(self, kind: str) -> _Token:
        token = self._next()
        if token.kind != kind:
            raise self._fail(token.position, f"expected {kind}, found {_describe(token)}")
        return token

    # -- productions ----------------------------------------------------------------------

    def selector(self) -> ev.Evaluator:
        start = self._peek()
        return self._as_boolean(self._or_expression(), start).evaluate

    def _or_expression(self) -> _Node:
        start = self._peek()
        first = self._and_expression()
        if self._peek().kind != "OR":
            return first
        parts = [self._as_boolean(first, start)]
        while self._peek().kind == "OR":
            token = self._next()
            parts.append(self._as_boolean(self._and_expression(), token))
        return self._bounded(_boolean(ev.logic_any([p.evaluate for p in parts]), *parts), start)

    def _and_expression(self) -> _Node:
        start = self._peek()
        first = self._equality_expression()
        if self._peek().kind != "AND":
            return first
        parts = [self._as_boolean(first, start)]
        while self._peek().kind == "AND":
            token = self._next()
            parts.append(self._as_boolean(self._equality_expression(), token))
        return self._bounded(_boolean(ev.logic_all([p.evaluate for p in parts]), *parts), start)

    def _bounded(self, node: _Node, token: _Token) -> _Node:
        if node.height > SQL92_DEPTH_MAX:
            raise self._fail(
                token.position, f"the expression nests deeper than {SQL92_DEPTH_MAX} levels"
            )
        return node

    def _nested(self, token: _Token) -> None:
        """Entering a nested production: fail past the depth limit instead of the stack's."""
        self._depth += 1
        if self._depth > SQL92_DEPTH_MAX:
            raise self._fail(
                token.position, f"the expression nests deeper than {SQL92_DEPTH_MAX} levels"
            )

    def _equality_expression(self) -> _Node:
        left = self._comparison_expression()
        while True:
            token = self._peek()
            if token.kind in ("=", "<>"):
                self._next()
                equal = self._equal(left, self._comparison_expression(), token)
                if token.kind == "<>":
                    equal = _boolean(ev.logic_not(equal.evaluate), equal)
                left = self._bounded(equal, token)
            elif token.kind == "IS":
                self._next()
                negated = self._peek().kind != "NULL"
                if negated:
                    self._expect("NOT")
                self._expect("NULL")
                is_null = _boolean(ev.equal(left.evaluate, lambda get: None), left)
                if negated:
                    is_null = _boolean(ev.logic_not(is_null.evaluate), is_null)
                left = self._bounded(is_null, token)
            else:
                return left

    def _comparison_expression(self) -> _Node:
        left = self._unary_expression()
        while True:
            token = self._peek()
            negated = token.kind == "NOT"
            if negated:
                follower = self._peek(1)
                if follower.kind not in ("CONTAINS", "STARTSWITH", "ENDSWITH", "BETWEEN", "IN"):
                    raise self._fail(
                        follower.position,
                        "expected CONTAINS, STARTSWITH, ENDSWITH, BETWEEN or IN after NOT, "
                        f"found {_describe(follower)}",
                    )
                self._next()
                token = self._peek()
            if token.kind in _ORDERINGS:
                self._next()
                left = self._ordering(left, self._unary_expression(), token)
            elif token.kind in _STRING_TESTS:
                self._next()
                left = self._string_test(left, self._string_literal(), token.kind, negated)
            elif token.kind == "BETWEEN":
                self._next()
                low = self._unary_expression()
                self._expect("AND")
                left = self._between(left, low, self._unary_expression(), token, negated)
            elif token.kind == "IN":
                self._next()
                left = self._in(left, self._string_list(), token, negated)
            else:
                return left
            left = self._bounded(left, token)

    def _unary_expression(self) -> _Node:
        token = self._peek()
        if token.kind not in ("+", "-", "NOT"):
            return self._primary_expression()
        self._next()
        self._nested(token)
        operand = self._unary_expression()
        self._depth -= 1
        if token.kind == "+":
            return operand
        if token.kind == "-":
            negated = ev.negate(operand.evaluate)
            return self._bounded(_Node("negate", negated, height=operand.height + 1), token)
        operand = self._as_boolean(operand, token)
        return self._bounded(_boolean(ev.logic_not(operand.evaluate), operand), token)

    def _primary_expression(self) -> _Node:
        token = self._next()
        kind = token.kind
        try:
            if kind == "STRING":
                return _constant(_unquote(token.text))
            if kind == "DECIMAL":
                return _constant(ev.decimal_literal(token.text))
            if kind == "FLOAT":
                return _constant(ev.float_literal(token.text))
        except ValueError as err:
            raise self._fail(token.position, str(err)) from err
        if kind in ("TRUE", "FALSE", "NULL"):
            return _constant({"TRUE": True, "FALSE": False}.get(kind), "boolean_constant")
        if kind == "ID":
            return _property(token.text)
        if kind == "(":
            self._nested(token)
            inner = self._or_expression()
            self._expect(")")
            self._depth -= 1
            return inner
        raise self._fail(token.position, f"expected a value, found {_describe(token)}")

    def _string_literal(self) -> str:
        return _unquote(self._expect("STRING").text)

    def _string_list(self) -> list[str]:
        self._expect("(")
        items = [self._string_literal()]
        while self._peek().kind == ",":
            self._next()
            items.append(self._string_literal())
        self._expect(")")
        return items

    # -- the checks of ComparisonExpression.create* --------------------------------------

    def _as_boolean(self, node: _Node, token: _Token) -> _Node:
        if node.is_boolean:
            return node
        if node.kind == "property":
            return _boolean(ev.boolean_cast(node.evaluate), node)
        raise self._fail(token.position, "expression will not result in a boolean value")

    def _equal(self, left: _Node, right: _Node, token: _Token) -> _Node:
        for side in (left, right):
            if side.is_constant and side.value is None:
                raise self._fail(token.position, "NULL cannot be compared (use IS NULL)")
        if left.is_constant and right.is_constant and left.is_boolean and not right.is_boolean:
            raise self._fail(token.position, "a boolean cannot be compared with a non-boolean")
        return _boolean(ev.equal(left.evaluate, right.evaluate), left, right)

    def _ordering(self, left: _Node, right: _Node, token: _Token) -> _Node:
        for side in (left, right):
            numeric = type(side.value) in (int, ev.JavaLong, float)
            if (side.is_constant and not numeric) or side.is_boolean:
                raise self._fail(token.position, f"only numbers can be compared by {token.text!r}")
        return _boolean(
            ev.ordering(left.evaluate, right.evaluate, _ORDERINGS[token.kind]), left, right
        )

    def _between(
        self, value: _Node, low: _Node, high: _Node, token: _Token, negated: bool
    ) -> _Node:
        if negated:
            below = self._ordering(value, low, _Token("<", "<", token.position))
            above = self._ordering(value, high, _Token(">", ">", token.position))
            return _boolean(ev.logic_or(below.evaluate, above.evaluate), below, above)
        if low.is_constant and high.is_constant:
            if low.value is None or high.value is None:
                raise self._fail(token.position, "the values of BETWEEN cannot be NULL")
            try:
                out_of_order = ev.java_compare(high.value, low.value) < 0
            except ev.EvaluationError as err:
                raise self._fail(token.position, str(err)) from err
            if out_of_order:
                raise self._fail(
                    token.position,
                    f"the low value of BETWEEN ({low.value}) is above the high ({high.value})",
                )
        at_least = self._ordering(value, low, _Token(">=", ">=", token.position))
        at_most = self._ordering(value, high, _Token("<=", "<=", token.position))
        return _boolean(ev.logic_and(at_least.evaluate, at_most.evaluate), at_least, at_most)

    def _in(self, left: _Node, items: list[str], token: _Token, negated: bool) -> _Node:
        if left.kind != "property":
            raise self._fail(token.position, "IN needs a property on its left")
        return _boolean(ev.in_list(left.evaluate, items, negated), left)

    def _string_test(self, left: _Node, search: str, kind: str, negated: bool) -> _Node:
        test = _STRING_TESTS[kind]
        if negated:
            return _boolean(
                ev.string_test(left.evaluate, lambda v: not test(v, search), search), left
            )
        return _boolean(ev.string_test(left.evaluate, lambda v: test(v, search), search), left)


def _unquote(image: str) -> str:
    return image[1:-1].replace("''", "'")


def _describe(token: _Token) -> str:
    return "the end of the expression" if token.kind == "EOF" else repr(token.text)


def compile_sql92(text: str) -> ev.Evaluator:
    """Parse ``text`` once into an evaluator (``Getter -> True | False | None``).

    Raises ``FilterExpressionError`` naming the position where ``SelectorParser`` fails.
    """
    if not text.strip():
        raise FilterExpressionError("SQL92", text, None, "the expression is empty")
    return _Parser(text).selector()
