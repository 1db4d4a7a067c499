"""Every --help reads well in a terminal: no line over 100 characters, no word split across
two lines, pre-formatted examples kept one per line."""

from __future__ import annotations

import pytest

from rmq_spark.cli.main import build_parser, main

WIDTH = 100


def _subcommands() -> list[str]:
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return sorted(action.choices)  # type: ignore[arg-type]


def _help(name: str, columns: int, capsys, monkeypatch) -> str:  # noqa: ANN001
    monkeypatch.setenv("COLUMNS", str(columns))
    with pytest.raises(SystemExit):
        main([name, "--help"])
    return capsys.readouterr().out


@pytest.mark.parametrize("name", _subcommands())
def test_help_lines_are_short_and_words_whole(name: str, capsys, monkeypatch) -> None:  # noqa: ANN001
    unwrapped = set(_help(name, 100_000, capsys, monkeypatch).split())
    for columns in (WIDTH, 80):
        out = _help(name, columns, capsys, monkeypatch)
        lines = out.splitlines()
        assert max(len(line) for line in lines) <= WIDTH, out
        # argparse breaks a word longer than the room left (a message id, a path) in two:
        # pieces that the unwrapped text does not have.
        split = set(out.split()) - unwrapped
        assert not split, f"{name} --help at {columns} columns splits words: {sorted(split)}"
        # The examples of an epilog stay one per line (a re-wrapping formatter joins them).
        examples = [line for line in lines if line.lstrip().startswith(("example", "rmq-spark "))]
        assert all(line.count("rmq-spark ") <= 1 for line in examples), out
