"""Every import arrow between rmq_spark's packages points down: store <- broker <- spark <-
delay/txcheck <- cli/demo (the rocketmq sink and consumer groups talk to the broker), with no cycle.

Reads the source with ``ast`` (so imports inside functions count too) instead of importing
it. Modules directly under ``rmq_spark/`` (errors, clock, config, ...) are the foundation:
anyone may import them, and they import no package. Inside one package, modules import each
other without a cycle either (``spark/reput`` -> ``spark/reput_multi`` -> ``spark/reput`` was
one): an import in a function counts; one under ``if TYPE_CHECKING:`` does not there (a
type named in an annotation, as ``ring_commit`` names ``async_commit``'s wave).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import rmq_spark

LAYERS = {"store": 0, "broker": 1, "spark": 2, "delay": 3, "txcheck": 3, "cli": 4, "demo": 4}
PEERS_APART: set[frozenset[str]] = {frozenset({"delay", "txcheck"})}  # same layer, apart
FOUNDATION = "(foundation)"
ROOT = Path(rmq_spark.__file__).parent


def _package_of(module: str) -> str:
    """``rmq_spark.store.codec`` -> ``store``; ``rmq_spark.errors`` -> the foundation."""
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in LAYERS:
        return parts[1]
    return FOUNDATION


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_only(tree: ast.AST) -> set[int]:
    """``id`` of every node under an ``if TYPE_CHECKING:``."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        test = node.test if isinstance(node, ast.If) else None
        name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
        if name == "TYPE_CHECKING":
            for statement in node.body:  # type: ignore[attr-defined]
                inside.update(id(child) for child in ast.walk(statement))
    return inside


def _imports(
    path: Path, module: str, modules: frozenset[str] | None = None
) -> Iterator[tuple[int, str]]:
    """``(line, imported module)`` of every ``rmq_spark`` import in the file, at any depth.
    With ``modules`` (the module check): ``from package import name`` names
    ``package.name`` when that is one of them, and ``TYPE_CHECKING`` imports are left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    skipped = _type_checking_only(tree) if modules is not None else set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from rmq_spark import spark`` imports the package ``rmq_spark.spark``
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
            if base != "rmq_spark":
                submodules = [name for name in targets[1:] if name in (modules or ())]
                targets = submodules if len(submodules) == len(node.names) else [base]
        else:
            continue
        for target in targets:
            if target == "rmq_spark" or target.startswith("rmq_spark."):
                yield node.lineno, target


def package_arrows(root: Path) -> list[tuple[str, str, str]]:
    """``(from package, to package, "file:line imports module")`` for every cross-package
    import under ``root`` (generated protobuf code excluded)."""
    arrows = []
    for path in sorted(root.rglob("*.py")):
        if "proto" in path.relative_to(root).parts:
            continue
        module = _module_name(path, root)
        source = _package_of(module)
        for line, target in _imports(path, module):
            destination = _package_of(target)
            if destination != source and target != "rmq_spark":
                where = f"{path.relative_to(root.parent)}:{line} imports {target}"
                arrows.append((source, destination, where))
    return arrows


def upward_arrows(arrows: list[tuple[str, str, str]]) -> list[str]:
    bad = []
    for source, destination, where in arrows:
        if destination == FOUNDATION:
            continue
        if source == FOUNDATION:
            bad.append(f"the foundation imports a package: {where}")
        elif LAYERS[destination] > LAYERS[source]:
            bad.append(f"{source} -> {destination} points up: {where}")
        elif frozenset({source, destination}) in PEERS_APART:
            bad.append(f"{source} -> {destination} joins two peers: {where}")
    return bad


def package_cycles(arrows: list[tuple[str, str, str]]) -> list[list[str]]:
    graph: dict[str, set[str]] = {}
    for source, destination, _ in arrows:
        graph.setdefault(source, set()).add(destination)
    cycles = []
    for start in sorted(graph):
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in sorted(graph.get(node, ())):
                if nxt == start:
                    cycles.append([*path, start])
                elif nxt not in path and nxt > start:  # each cycle once, from its least node
                    stack.append((nxt, [*path, nxt]))
    return cycles


def _modules(root: Path) -> dict[str, Path]:
    return {
        _module_name(path, root): path
        for path in sorted(root.rglob("*.py"))
        if "proto" not in path.relative_to(root).parts
    }


def module_arrows(root: Path) -> dict[str, set[str]]:
    """``module -> modules of the same package it imports`` (the package's ``__init__``
    excluded: importing a module runs it)."""
    modules = _modules(root)
    names = frozenset(modules)
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        package = _package_of(module)
        for _line, target in _imports(path, module, names):
            if target in names and target != module and _package_of(target) == package:
                if package != FOUNDATION and target != f"rmq_spark.{package}":
                    graph.setdefault(module, set()).add(target)
    return graph


def module_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_cycle_between_modules_of_a_package() -> None:
    assert module_cycles(module_arrows(ROOT)) == []


def test_the_check_sees_a_cycle_inside_a_package(tmp_path: Path) -> None:
    root = tmp_path / "rmq_spark"
    (root / "spark").mkdir(parents=True)
    (root / "spark" / "__init__.py").write_text("from rmq_spark.spark import a\n")
    (root / "spark" / "a.py").write_text("from rmq_spark.spark.b import g\n")
    (root / "spark" / "b.py").write_text("from . import c\n")
    (root / "spark" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .d import x\n"
        "def f():\n    from rmq_spark.spark import a\n"
    )
    (root / "spark" / "d.py").write_text("from rmq_spark.spark import a, b\n")
    assert module_cycles(module_arrows(root)) == [
        ["rmq_spark.spark.a", "rmq_spark.spark.b", "rmq_spark.spark.c"]
    ]


def test_every_arrow_between_packages_points_down() -> None:
    assert upward_arrows(package_arrows(ROOT)) == []


def test_no_cycle_between_packages() -> None:
    assert package_cycles(package_arrows(ROOT)) == []


def test_the_check_sees_upward_arrows_inside_functions_and_relative_imports(
    tmp_path: Path,
) -> None:
    root = tmp_path / "rmq_spark"
    for package in ("store", "broker", "delay"):
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
    (root / "errors.py").write_text("")
    (root / "store" / "a.py").write_text("def f():\n    from rmq_spark.broker import b\n")
    (root / "broker" / "b.py").write_text("from ..delay import c\nfrom rmq_spark import errors\n")
    (root / "delay" / "c.py").write_text("from rmq_spark.store.a import f\n")
    arrows = package_arrows(root)
    assert upward_arrows(arrows) == [
        "broker -> delay points up: rmq_spark/broker/b.py:1 imports rmq_spark.delay",
        "store -> broker points up: rmq_spark/store/a.py:2 imports rmq_spark.broker",
    ]
    assert package_cycles(arrows) == [["broker", "delay", "store", "broker"]]
