from __future__ import annotations

import importlib
import pkgutil

import rmq_spark


def _modules() -> list[str]:
    return [
        info.name
        for info in pkgutil.walk_packages(rmq_spark.__path__, prefix="rmq_spark.")
        if ".proto" not in info.name
    ]


def test_all_is_sorted_in_every_module() -> None:
    for name in ["rmq_spark", *_modules()]:
        module = importlib.import_module(name)
        exported = getattr(module, "__all__", None)
        if exported is None:
            continue
        assert list(exported) == sorted(exported), f"{name}.__all__ is not sorted"


def test_every_module_has_a_docstring() -> None:
    missing = [
        name for name in _modules() if not (importlib.import_module(name).__doc__ or "").strip()
    ]
    assert missing == []


def test_public_names_resolve_lazily() -> None:
    import subprocess
    import sys

    code = (
        "import sys, rmq_spark; assert 'pyspark' not in sys.modules; "
        "[getattr(rmq_spark, n) for n in rmq_spark.__all__]; print('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "ok", done.stderr
