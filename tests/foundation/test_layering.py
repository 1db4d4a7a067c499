"""Every import arrow between rmq_spark's packages points down: store <- broker <- spark <-
delay <- cli/demo (the rocketmq sink and consumer groups talk to the broker), with no cycle.

Reads the source with ``ast`` (so imports inside functions count too) instead of importing
it. Modules directly under ``rmq_spark/`` (errors, clock, config, ...) are the foundation:
anyone may import them, and they import no package. Modules inside one package (e.g.
``spark/driver_read`` and ``spark/source``) are not checked against each other here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import rmq_spark

LAYERS = {"store": 0, "broker": 1, "spark": 2, "delay": 3, "cli": 4, "demo": 4}
PEERS_APART: set[frozenset[str]] = set()  # same layer, and they must not meet
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


def _imports(path: Path, module: str) -> Iterator[tuple[int, str]]:
    """``(line, imported module)`` of every ``rmq_spark`` import in the file, at any depth."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
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
                targets = [base]
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
