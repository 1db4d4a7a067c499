"""Every runtime dependency in pyproject.toml is one the package imports: a library only the
tests use is a dev dependency, not something every install of rmq-spark pulls in."""

from __future__ import annotations

import ast
import re
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("rmq_spark", "pyspark_rocketmq")


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _runtime_dependencies() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {
        _normal(re.split(r"[\s\[<>=!~;]", spec, maxsplit=1)[0]) for spec in project["dependencies"]
    }


def _is_import_module_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "import_module"
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    )


def _imported_distributions() -> set[str]:
    tops: set[str] = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    tops.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    tops.add(node.module.split(".")[0])
                elif _is_import_module_call(node):  # an optional import, e.g. uvloop's
                    tops.add(node.args[0].value.split(".")[0])
    owners = packages_distributions()
    return {_normal(dist) for top in tops for dist in owners.get(top, [])}


def test_every_runtime_dependency_is_imported_by_the_package() -> None:
    unused = _runtime_dependencies() - _imported_distributions()
    assert unused == set(), f"runtime dependencies rmq_spark never imports: {sorted(unused)}"
