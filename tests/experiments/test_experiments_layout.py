"""The layout of experiments/, read from its source (nothing imported, so nothing heavy loads): the commands are
imported by nothing but ``__main__`` (the lazy imports inside functions count too), and every name a module takes
from another one is defined there. The house's rules that hold everywhere (no import circle, the module and function
size limits) are checked for experiments/ with the rest in tests/project/test_house.py."""

from __future__ import annotations

import ast

from repo import REPO

FOLDER = REPO / "experiments"
# a parser and a ``main`` run by ``python -m``: what they share lives in the other modules
COMMANDS = {"pipeline", "sweep", "paper", "digit_logit_levels"}


def _trees() -> dict[str, ast.Module]:
    return {path.stem: ast.parse(path.read_text(encoding="utf-8")) for path in sorted(FOLDER.glob("*.py"))}


def _imports(tree: ast.Module) -> list[tuple[str, list[str], int]]:
    """(module of experiments, names taken from it, line) of every import of the package, at any depth."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level == 1:
            module = node.module
        elif node.level == 0 and (node.module or "").startswith("experiments."):
            module = node.module.split(".", 1)[1]
        else:
            continue
        found.append((module, [alias.name for alias in node.names], node.lineno))
    return found


def _defined(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names


def test_the_reader_sees_what_it_checks():
    """The checks below read the real tree: the package's parts and their imports are there to be read."""
    trees = _trees()
    assert COMMANDS | {"__main__", "runs", "jobs"} <= set(trees)
    taken = [(module, names) for module, names, _ in _imports(trees["digit_logit_levels"])]
    assert ("runs", ["parse_setting"]) in taken
    assert {"main", "build_parser"} <= _defined(trees["sweep"])


def test_only_main_imports_a_command():
    offenders = [
        f"{name}.py:{line} imports {module}"
        for name, tree in _trees().items()
        if name != "__main__"
        for module, _, line in _imports(tree)
        if module in COMMANDS
    ]
    assert not offenders, offenders


def test_every_imported_name_is_defined_where_it_is_taken_from():
    trees = _trees()
    missing = [
        f"{name}.py:{line}: {module} has no {what}"
        for name, tree in trees.items()
        for module, names, line in _imports(tree)
        for what in names
        if module in trees and what not in _defined(trees[module])
    ]
    assert not missing, missing
