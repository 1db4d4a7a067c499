"""RmqConfig: one typed, frozen config object, loaded once from TOML and passed down.

Owns the loader (``load_config``) and the composition of the per-area sections. Each area
declares its own frozen dataclass next to its code (``store/config.py: StoreConfig``,
``broker/config.py: BrokerConfig``, ``spark/config.py: SparkConfig``, ...); this module only
maps TOML tables onto them. Unknown keys and bad values raise ``ConfigError`` naming the key
path (``store.segment_size_bytes``). ``conf/rmq.toml`` lists every key with its default.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rmq_spark.errors import ConfigError

__all__ = ["RmqConfig", "SECTIONS", "default_config_path", "load_config", "parse_override"]

# section name -> "module:Class"; imported lazily so that importing config stays cheap.
SECTIONS: dict[str, str] = {
    "store": "rmq_spark.store.config:StoreConfig",
    "broker": "rmq_spark.broker.config:BrokerConfig",
    "spark": "rmq_spark.spark.config:SparkConfig",
    "reput": "rmq_spark.spark.reput_config:ReputConfig",
    "delay": "rmq_spark.delay.config:DelayConfig",
}


def _section_class(name: str) -> type:
    module_name, _, class_name = SECTIONS[name].partition(":")
    return getattr(importlib.import_module(module_name), class_name)  # type: ignore[no-any-return]


class RmqConfig:
    """The whole configuration: one attribute per section (``config.store``, ...)."""

    __slots__ = ("_sections", "source_path")

    def __init__(self, sections: Mapping[str, Any], source_path: Path | None = None) -> None:
        self._sections = dict(sections)
        self.source_path = source_path

    def __getattr__(self, name: str) -> Any:
        try:
            return self._sections[name]
        except KeyError:
            raise AttributeError(f"no config section {name!r}") from None

    def replace(self, section: str, **changes: Any) -> RmqConfig:
        """A copy with some fields of one section changed (validated again)."""
        current = self._sections[section]
        try:
            updated = dataclasses.replace(current, **changes)
        except (TypeError, ValueError) as err:
            raise _config_error(section, err) from err
        return RmqConfig({**self._sections, section: updated}, self.source_path)

    def as_dict(self) -> dict[str, dict[str, Any]]:
        return {
            name: {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
            for name, value in self._sections.items()
        }

    def __repr__(self) -> str:
        return f"RmqConfig({self._sections!r})"


def default_config_path() -> Path | None:
    """``conf/rmq.toml`` of the source checkout, when running from one."""
    candidate = Path(__file__).resolve().parent.parent / "conf" / "rmq.toml"
    return candidate if candidate.is_file() else None


def load_config(
    path: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> RmqConfig:
    """Load the configuration.

    Parameters
    ----------
    path
        A TOML file. ``None`` uses the built-in defaults only (no file is read).
    overrides
        ``{"store.segment_size_bytes": 4096, ...}``: applied after the file; values may be
        strings as typed on a command line (``"4096"``, ``"true"``, ``"SYNC"``).

    Returns
    -------
    RmqConfig

    Raises
    ------
    ConfigError
        Unreadable file, unknown section or key, wrong type or out-of-range value; the message
        names the key path.
    """
    tables: dict[str, dict[str, Any]] = {}
    source_path = Path(path) if path is not None else None
    if source_path is not None:
        try:
            with source_path.open("rb") as handle:
                raw = tomllib.load(handle)
        except FileNotFoundError as err:
            raise ConfigError(str(source_path), "config file not found") from err
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(str(source_path), f"not valid TOML: {err}") from err
        for section, table in raw.items():
            if section not in SECTIONS:
                raise ConfigError(section, f"unknown section; valid sections: {sorted(SECTIONS)}")
            if not isinstance(table, dict):
                raise ConfigError(section, "must be a table ([section])")
            tables[section] = dict(table)
    for key_path, value in (overrides or {}).items():
        section, _, key = key_path.partition(".")
        if section not in SECTIONS or not key:
            raise ConfigError(key_path, f"not a section.key path; sections: {sorted(SECTIONS)}")
        tables.setdefault(section, {})[key] = value
    sections = {name: _build_section(name, tables.get(name, {})) for name in SECTIONS}
    return RmqConfig(sections, source_path)


def parse_override(text: str) -> tuple[str, str]:
    """Split ``section.key=value`` as typed after ``--set``."""
    key_path, sep, value = text.partition("=")
    if not sep or "." not in key_path:
        raise ConfigError(text, "expected section.key=value")
    return key_path.strip(), value.strip()


def _build_section(name: str, table: Mapping[str, Any]) -> Any:
    cls = _section_class(name)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for key, value in table.items():
        if key not in fields:
            raise ConfigError(f"{name}.{key}", f"unknown key; valid keys: {sorted(fields)}")
        kwargs[key] = _coerce(f"{name}.{key}", hints[key], value)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as err:
        raise _config_error(name, err) from err


def _config_error(section: str, err: Exception) -> ConfigError:
    text = str(err)
    field, sep, reason = text.partition(": ")
    if sep and field.isidentifier():
        return ConfigError(f"{section}.{field}", reason)
    return ConfigError(section, text)


_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def _coerce(key_path: str, hint: Any, value: Any) -> Any:
    """Convert a TOML (or command-line string) value to the field's declared type."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if value is None or (isinstance(value, str) and value.lower() in {"none", ""}):
            return None
        return _coerce(key_path, options[0], value)
    if origin is tuple:
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        if not isinstance(value, list):
            raise ConfigError(key_path, f"expected a list, got {value!r}")
        (item_type, *_rest) = typing.get_args(hint)
        return tuple(_coerce(key_path, item_type, item) for item in value)
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
            return value.lower() in _TRUE
        raise ConfigError(key_path, f"expected true or false, got {value!r}")
    if hint is int:
        if isinstance(value, bool):
            raise ConfigError(key_path, f"expected an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            try:
                return int(value.replace("_", ""), 0)
            except ValueError:
                pass
        raise ConfigError(key_path, f"expected an integer, got {value!r}")
    if hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(key_path, f"expected a number, got {value!r}")
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(key_path, f"expected a string, got {value!r}")
        return value
    if hint is Path:
        if not isinstance(value, str):
            raise ConfigError(key_path, f"expected a path string, got {value!r}")
        return Path(value).expanduser()
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        if isinstance(value, hint):
            return value
        names = [member.name for member in hint]
        if isinstance(value, str):
            for member in hint:
                if value.upper() in (member.name, str(member.value).upper()):
                    return member
        raise ConfigError(key_path, f"expected one of {names}, got {value!r}")
    raise ConfigError(key_path, f"unsupported config type {hint!r}")
