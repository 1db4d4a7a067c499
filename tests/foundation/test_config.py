from __future__ import annotations

from pathlib import Path

import pytest

from rmq_spark.config import default_config_path, load_config, parse_override
from rmq_spark.errors import ConfigError
from rmq_spark.spark.config import SparkConfig


def test_defaults_load_without_a_file() -> None:
    config = load_config(None)
    assert config.spark == SparkConfig()


def test_shipped_config_file_loads_and_matches_the_defaults() -> None:
    path = default_config_path()
    assert path is not None and path.name == "rmq.toml"
    assert load_config(path).as_dict() == load_config(None).as_dict()


def test_shipped_config_file_lists_every_key() -> None:
    import tomllib

    path = default_config_path()
    assert path is not None
    text = path.read_text()
    listed = {f"{section}.{key}" for section, table in tomllib.loads(text).items() for key in table}
    section = ""
    for line in text.splitlines():  # keys unset by default are listed commented out
        if line.startswith("["):
            section = line[1 : line.index("]")]
        elif line.startswith("# ") and " =  # unset by default" in line:
            listed.add(f"{section}.{line[2:].split(' ')[0]}")
    known = {
        f"{section}.{key}"
        for section, table in load_config(None).as_dict().items()
        for key in table
    }
    assert known - listed == set(), "keys missing from conf/rmq.toml"


def test_unknown_key_is_named_in_the_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[spark]\nmastre = 'local[1]'\n")
    with pytest.raises(ConfigError, match=r"spark\.mastre: unknown key") as info:
        load_config(path)
    assert info.value.key_path == "spark.mastre"


def test_unknown_section_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[sparkk]\nmaster = 'local[1]'\n")
    with pytest.raises(ConfigError, match="unknown section"):
        load_config(path)


def test_wrong_type_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[spark]\nshuffle_partitions = 'many'\n")
    with pytest.raises(ConfigError, match=r"spark\.shuffle_partitions: expected an integer"):
        load_config(path)


def test_out_of_range_value_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"spark\.shuffle_partitions: must be >= 1"):
        load_config(None, {"spark.shuffle_partitions": "0"})


def test_overrides_are_parsed_from_command_line_strings() -> None:
    config = load_config(None, dict([parse_override("spark.ui_enabled=true")]))
    assert config.spark.ui_enabled is True


def test_bad_toml_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[spark\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(path)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.toml")


def test_shipped_config_file_is_the_rendered_defaults() -> None:
    from rmq_spark.config_doc import render_default_toml

    path = default_config_path()
    assert path is not None
    assert path.read_text() == render_default_toml(), (
        "run: rmq-spark config --defaults > conf/rmq.toml"
    )
