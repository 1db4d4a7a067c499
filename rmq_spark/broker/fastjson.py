"""PURE: reading JSON as fastjson writes and reads it (RocketMQ's config files).

RocketMQ's ``ConfigManager`` files (``topics.json``, ``consumerOffset.json``,
``delayOffset.json``, ...) are fastjson text: map keys that are integers are written unquoted
(``{0:12,1:3}``), and fastjson's reader also takes single-quoted strings and bare keys. Strict
JSON parsers refuse both. Writing the dialect is in ``rocketmq_config.py``.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["FastjsonError", "parse_fastjson"]


class FastjsonError(ValueError):
    """Text that is not fastjson-dialect JSON; says at which character."""


def parse_fastjson(text: str) -> Any:
    """Parse JSON as fastjson writes and reads it: object keys may be unquoted numbers or
    identifiers, strings may use single quotes; otherwise strict JSON.

    Raises
    ------
    FastjsonError
        Anything else, with the character position (the caller adds the file).
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

    def error(self, reason: str) -> FastjsonError:
        return FastjsonError(f"{reason} at character {self.pos}")

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
