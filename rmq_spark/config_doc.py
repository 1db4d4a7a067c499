"""Renders ``conf/rmq.toml``: every config key with its default and its one-line comment.

The comments are read from the section dataclasses' source (the ``# ...`` after each field), so
the shipped file cannot drift from the code; ``rmq-spark config --defaults`` prints the same.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import re
from pathlib import Path
from typing import Any

from rmq_spark.config import SECTIONS, load_config

__all__ = ["render_default_toml"]

_HEADER = """\
# rmq-spark configuration: every key, its default, and what it does.
# Generated from the config dataclasses (rmq-spark config --defaults); a test keeps it in sync.
# To change a setting, copy this file (e.g. conf/rmq.local.toml), edit it and pass
# --config FILE, or override one key on the command line: --set store.flush_policy=SYNC
"""

_FIELD_COMMENT = re.compile(r"^\s+(\w+)\s*:[^#]*#\s*(.+)$")


def _comments(cls: type) -> dict[str, str]:
    comments: dict[str, str] = {}
    for line in inspect.getsource(cls).splitlines():
        match = _FIELD_COMMENT.match(line)
        if match:
            comments[match.group(1)] = match.group(2).strip()
    return comments


def _toml_value(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return f'"{value.name}"'
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, Path | str):
        text = str(value).replace("\\", "\\\\").replace('"', '\\"')
        return f'"{text}"'
    if isinstance(value, tuple):
        return "[" + ", ".join(_toml_value(item) or '""' for item in value) + "]"
    raise TypeError(f"cannot render {value!r} as TOML")


def render_default_toml() -> str:
    """The text of ``conf/rmq.toml``."""
    config = load_config(None)
    parts = [_HEADER]
    for section in SECTIONS:
        value = getattr(config, section)
        comments = _comments(type(value))
        doc = (type(value).__doc__ or "").strip().splitlines()
        if doc and doc[0].startswith(f"{type(value).__name__}("):
            doc = []  # the dataclass's generated signature, not a description
        parts.append("")
        parts.append(f"[{section}]" + (f"  # {doc[0]}" if doc else ""))
        for field in dataclasses.fields(value):
            comment = comments.get(field.name, "")
            rendered = _toml_value(getattr(value, field.name))
            if rendered is None:
                parts.append(f"# {field.name} =  # unset by default. {comment}".rstrip())
            else:
                parts.append(f"{field.name} = {rendered}" + (f"  # {comment}" if comment else ""))
    return "\n".join(parts) + "\n"
