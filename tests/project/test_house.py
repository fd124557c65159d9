"""The house's rules, read from the code itself rather than from a description of it:

* what ships is the product: the wheel ``pip wheel .`` builds holds ``del_plugin`` modules only (no experiment
  runner, no test-asset downloader, no test or benchmark module) and none of them imports what is not shipped;
* small parts: no module (in ``del_plugin``, ``experiments``, ``tools`` and ``bench``) over :data:`MAX_MODULE_LINES`
  lines, no function there over :data:`MAX_FUNCTION_LINES`;
* floors: no import circle among ``del_plugin``'s modules, and no module importing one that stands above it
  (:data:`FLOORS`); imports are read statically, function-level ones included, so a lazy import counts;
* del-eval in parts: ``del_plugin/evaluation/`` keeps at most :data:`MAX_EVALUATION_TOP_MODULES` modules at its top
  (the CLI, the public API, what every part shares) and its parts (sub-packages, and those top modules) import one
  another one way, never in a circle;
* validating a config loads only what it checks (tests/axolotl/test_light_validation.py, which imports the
  validator and validates the ``del_eval_*`` keys in a fresh process);
* the tests' helpers live in one place: no test file imports another test file (what they share is in
  ``tests/helpers/`` or ``tests/conftest.py``).
* words that name code name what exists: a docstring (in ``del_plugin``, ``experiments``, ``tools``, ``bench``,
  ``tests``) that names ``del_plugin.<module>`` or ``del_plugin.<module>.<attribute>`` names a module, or a name
  that module (or its class) defines.

Each rule's reader is tested on a small made-up case first, so that a rule cannot pass by reading nothing.
"""

from __future__ import annotations

import ast
import re
import zipfile
from pathlib import Path

import pytest

from repo import REPO

PACKAGE = "del_plugin"
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60
# where no module may grow past MAX_MODULE_LINES nor a function past MAX_FUNCTION_LINES: the product and the code
# beside it that runs from a clone
SIZE_RULE_FOLDERS = ("del_plugin", "experiments", "tools", "bench")
# the test-asset downloader's modules (tools/assets.py and the two it builds on), which no shipped module may copy
DOWNLOADER_MODULES = ("assets.py", "downloads.py", "rank_tokenizers.py")
# A room's floor: a module may import from its own room and from rooms on lower floors only, never sideways (hf and
# evaluation stand on the same floor and do not import each other) nor up. The ground is del_plugin's top-level
# modules (host_notices, examples). del_plugin/__init__.py is the package's front door: it stands on no floor, and
# only its module-level imports count (its ``__getattr__`` imports the plugin for Axolotl's ``del_plugin.DELPlugin``
# when that attribute is read, not when a module of the package is imported). The two hosts with a room of their own,
# axolotl and llamafactory, share the top floor and do not import each other (the rules both apply live below them).
FLOORS = {"ground": 0, "core": 1, "hf": 2, "evaluation": 2, "axolotl": 3, "llamafactory": 3}
FRONT_DOOR = PACKAGE
# del-eval's folder: its parts are its sub-packages (one a verb's worth: run, scoring, reports, compare, ...) and the
# few modules at its top
EVALUATION = f"{PACKAGE}.evaluation"
MAX_EVALUATION_TOP_MODULES = 10


# ---------------------------------------------------------------------------------------------- readers
def module_name(path: Path, root: Path) -> str:
    """``del_plugin/core/places.py`` -> ``del_plugin.core.places``; a package's ``__init__.py`` -> the package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules(root: Path, package: str = PACKAGE) -> dict[str, Path]:
    """Every module of ``package`` under ``root``: {dotted name: file}."""
    return {module_name(p, root): p for p in sorted((root / package).rglob("*.py"))}


def import_nodes(tree: ast.AST, *, in_functions: bool) -> list[ast.Import | ast.ImportFrom]:
    """The import statements of ``tree``: all of them, or those outside function bodies."""
    found = []
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            found.append(child)
        elif in_functions or not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found += import_nodes(child, in_functions=in_functions)
    return found


def imported_modules(name: str, path: Path, known: set[str], *, in_functions: bool = True) -> set[str]:
    """The modules of ``known`` that the module ``name`` (file ``path``) imports anywhere in its code (top level,
    ``TYPE_CHECKING`` blocks, function bodies unless ``in_functions`` is false): ``from a import b`` counts as
    ``a.b`` where that is a module, else as ``a``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    top = name.split(".")[0]
    found = set()
    for node in import_nodes(ast.parse(path.read_text(encoding="utf-8")), in_functions=in_functions):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            targets = [
                f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else source for alias in node.names
            ]
        for target in targets:
            # `import a.b.c` loads a.b.c; a name that is no module of ours (a class, a third-party module) is skipped
            while target and target not in known:
                target = target.rpartition(".")[0] if target.startswith(top + ".") else ""
            if target and target != name:
                found.add(target)
    return found


def import_graph(root: Path, package: str = PACKAGE) -> dict[str, set[str]]:
    """{module of ``package``: the modules of ``package`` it imports}."""
    modules = package_modules(root, package)
    return {
        name: imported_modules(name, path, set(modules), in_functions=name != FRONT_DOOR)
        for name, path in modules.items()
    }


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(circles)


def assert_no_circle(graph: dict[str, set[str]]) -> None:
    circles = import_circles(graph)
    edges = [f"{m} -> {sorted(graph[m] & set(circle))}" for circle in circles for m in circle]
    assert not circles, "import circles:\n" + "\n".join(edges)


def part_graph(graph: dict[str, set[str]], package: str) -> dict[str, set[str]]:
    """The import graph between ``package``'s parts: each sub-package, and each module at its top, is one node
    (``package.run.runner`` counts as ``package.run``); imports within a part, and of ``package`` itself (its lazy
    front door), are left out."""

    def part(name: str) -> str:
        return f"{package}.{name[len(package) + 1 :].split('.')[0]}"

    parts: dict[str, set[str]] = {}
    for importer, targets in graph.items():
        if importer.startswith(package + "."):
            here = part(importer)
            inside = {part(t) for t in targets if t.startswith(package + ".")}
            parts.setdefault(here, set()).update(inside - {here})
    return parts


def room(name: str) -> str | None:
    """The room a module of del_plugin stands in; None for the front door."""
    parts = name.split(".")
    if name == FRONT_DOOR:
        return None
    return parts[1] if len(parts) > 2 or parts[1] in FLOORS else "ground"


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """``importer -> imported`` for every import of a module on the same floor in another room, or on a higher floor."""
    found = []
    for importer, targets in sorted(graph.items()):
        for target in sorted(targets):
            here, there = room(importer), room(target)
            if here is None or there is None or here == there:
                continue
            if FLOORS[there] >= FLOORS[here]:
                found.append(f"{importer} ({here}) -> {target} ({there})")
    return found


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int]]:
    """(qualified name, lines from ``def`` to its last line) of each function over ``limit`` lines, nested ones
    included (a nested function's lines count in its parent's too)."""
    found = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = child.end_lineno - child.lineno + 1
                if lines > limit:
                    found.append((prefix + child.name, lines))
                walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")
            else:
                walk(child, prefix)

    walk(ast.parse(path.read_text(encoding="utf-8")), "")
    return found


def write_package(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text, encoding="utf-8")
    return root


# ------------------------------------------------------------------------------------ the readers, tested
def test_the_import_reader_sees_every_form_of_import(tmp_path):
    root = write_package(
        tmp_path,
        {
            "del_plugin/__init__.py": "def __getattr__(name):\n    from .axolotl.plugin import DELPlugin\n",
            "del_plugin/examples.py": "from del_plugin import __version__\n",
            "del_plugin/host_notices.py": "import os\n",
            "del_plugin/core/__init__.py": "from .places import number_places\n",
            "del_plugin/core/places.py": "import torch\nfrom del_plugin.core import number_places\n",
            "del_plugin/core/vocab.py": "def f():\n    from del_plugin.hf import settings\n",
            "del_plugin/hf/__init__.py": "",
            "del_plugin/hf/settings.py": "import del_plugin.core.places\nfrom .. import host_notices\n",
            "del_plugin/evaluation/__init__.py": "",
            "del_plugin/evaluation/cli.py": "from del_plugin.hf.settings import DEFAULT\nfrom del_plugin import core\n",
            "del_plugin/axolotl/__init__.py": "",
            "del_plugin/axolotl/plugin.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from del_plugin.evaluation import cli\n",
        },
    )
    graph = import_graph(root)
    assert graph == {
        "del_plugin": set(),
        "del_plugin.examples": {"del_plugin"},
        "del_plugin.host_notices": set(),
        "del_plugin.core": {"del_plugin.core.places"},
        "del_plugin.core.places": {"del_plugin.core"},
        "del_plugin.core.vocab": {"del_plugin.hf.settings"},
        "del_plugin.hf": set(),
        "del_plugin.hf.settings": {"del_plugin.core.places", "del_plugin.host_notices"},
        "del_plugin.evaluation": set(),
        "del_plugin.evaluation.cli": {"del_plugin.hf.settings", "del_plugin.core"},
        "del_plugin.axolotl": set(),
        "del_plugin.axolotl.plugin": {"del_plugin.evaluation.cli"},
    }
    assert import_circles(graph) == [["del_plugin.core", "del_plugin.core.places"]]
    # the front door and downward imports pass; the lazy import of core.vocab goes up, evaluation's goes sideways
    assert upward_imports(graph) == [
        "del_plugin.core.vocab (core) -> del_plugin.hf.settings (hf)",
        "del_plugin.evaluation.cli (evaluation) -> del_plugin.hf.settings (hf)",
    ]
    assert import_circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_part_reader_sees_a_circle_between_sub_packages(tmp_path):
    """Two sub-packages whose modules import each other's (no module circle: a.x -> b.y, b.z -> a.w) are a circle
    of parts; a top module importing both is not in it."""
    root = write_package(
        tmp_path,
        {
            "del_plugin/__init__.py": "",
            "del_plugin/evaluation/__init__.py": "",
            "del_plugin/evaluation/cli.py": "from .a import x\nfrom .b import z\n",
            "del_plugin/evaluation/a/__init__.py": "",
            "del_plugin/evaluation/a/x.py": "from ..b.y import Y\n",
            "del_plugin/evaluation/a/w.py": "",
            "del_plugin/evaluation/b/__init__.py": "",
            "del_plugin/evaluation/b/y.py": "Y = 1\n",
            "del_plugin/evaluation/b/z.py": "def f():\n    from ..a.w import W\n",
        },
    )
    graph = import_graph(root)
    assert import_circles(graph) == []
    parts = part_graph(graph, EVALUATION)
    assert parts == {
        "del_plugin.evaluation.cli": {"del_plugin.evaluation.a", "del_plugin.evaluation.b"},
        "del_plugin.evaluation.a": {"del_plugin.evaluation.b"},
        "del_plugin.evaluation.b": {"del_plugin.evaluation.a"},
    }
    assert import_circles(parts) == [["del_plugin.evaluation.a", "del_plugin.evaluation.b"]]


def test_the_function_reader_measures_from_def_to_the_last_line(tmp_path):
    def body(indent: int, lines: int) -> str:
        return "".join(" " * indent + f"x{i} = {i}\n" for i in range(lines))

    path = tmp_path / "m.py"
    path.write_text(
        "def fits():\n"
        + body(4, 59)  # 60 lines: at the limit
        + "class C:\n    def method(self):\n"
        + body(8, 60)  # 61
        + "async def outer():\n    def inner():\n"
        + body(8, 60),  # inner 61, outer 62
        encoding="utf-8",
    )
    assert long_functions(path) == [("C.method", 61), ("outer", 62), ("outer.inner", 61)]


# ---------------------------------------------------------------------------------------------- the wheel
def wheel_modules(wheel: Path) -> dict[str, str]:
    """The wheel's Python modules: {path in the wheel: source}; its metadata and data files (the examples) aside."""
    with zipfile.ZipFile(wheel) as archive:
        return {
            name: archive.read(name).decode("utf-8")
            for name in archive.namelist()
            if name.endswith(".py") and ".dist-info/" not in name and ".data/" not in name
        }


@pytest.mark.e2e  # the wheel (tests/helpers/wheel_build.py, built once per run)
def test_the_wheel_holds_only_del_plugin_modules(wheel):
    modules = wheel_modules(wheel)
    assert "del_plugin/__init__.py" in modules and "del_plugin/core/places.py" in modules
    assert [name for name in modules if not name.startswith(PACKAGE + "/")] == []  # no experiments/, tools/, tests/
    shipped = {module_name(REPO / name, REPO) for name in modules}
    assert shipped == set(package_modules(REPO)), "the wheel and del_plugin/ hold different modules"


@pytest.mark.e2e  # the wheel (tests/helpers/wheel_build.py, built once per run)
def test_the_wheel_ships_scoring_data_only_and_no_test_extra(wheel):
    """Under 2 MB: the evaluation sets del-eval scores, not GSM8K's train split (tools/data/gsm8k/, the clone's);
    the metadata offers users no extra of the suite's tools (requirements-dev.txt holds them)."""
    assert wheel.stat().st_size < 2_000_000
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = archive.read(meta).decode()
    data = sorted(n for n in names if n.startswith(PACKAGE + "/evaluation/data/"))
    assert PACKAGE + "/evaluation/data/gsm8k/test.jsonl.gz" in data
    assert not [n for n in names if "train" in Path(n).name and n.endswith((".gz", ".jsonl", ".json"))], data
    extras = re.findall(r"^Provides-Extra: (.+)$", metadata, re.M)
    assert "eval" in extras and "test" not in extras, extras
    assert not re.search(r"^Requires-Dist: (pytest|ruff|hypothesis)\b", metadata, re.M)


@pytest.mark.e2e  # the wheel (tests/helpers/wheel_build.py, built once per run)
def test_no_shipped_module_is_an_asset_downloader_or_imports_what_is_not_shipped(wheel):
    """The test-asset downloader (tools/assets.py: tiny models, tokenizers, GGUF headers, sdists) stays in the
    clone: no shipped module defines its functions, and none imports a module the wheel does not hold (which would
    fail for every user)."""
    downloader = set()
    for module in DOWNLOADER_MODULES:
        tree = ast.parse((REPO / "tools" / module).read_text(encoding="utf-8"))
        downloader |= {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")}
    downloader.discard("main")  # its command line: a name every command has
    assert {"tiny_model_dir", "load_tokenizer", "gguf_vocab_dir", "cache_root", "rank_vocabulary"} <= downloader
    defines, imports = [], []
    for name, text in sorted(wheel_modules(wheel).items()):
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in downloader:
                defines.append(f"{name}: {node.name}")
            if isinstance(node, ast.ImportFrom) and not node.level:
                targets = [node.module or ""]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            top = {t.split(".")[0] for t in targets}
            imports += [f"{name}: {t}" for t in sorted(top & {"experiments", "tools", "tests", "bench", "scripts"})]
    assert not defines, "\n".join(defines)
    assert not imports, "\n".join(imports)


# ------------------------------------------------------------------------------------------------ sizes
def test_no_module_is_over_the_line_limit():
    """del_plugin's modules and those beside it that run from a clone (experiments, tools, bench)."""
    files = [p for folder in SIZE_RULE_FOLDERS for p in sorted((REPO / folder).rglob("*.py"))]
    sizes = {str(p.relative_to(REPO)): len(p.read_text(encoding="utf-8").splitlines()) for p in files}
    assert len(sizes) > 20
    assert {name.split("/")[0] for name in sizes} == set(SIZE_RULE_FOLDERS)  # every folder was read
    over = [f"{name}: {n} lines" for name, n in sorted(sizes.items()) if n > MAX_MODULE_LINES]
    assert not over, "over the limit:\n" + "\n".join(over)


def test_no_function_is_over_the_line_limit():
    files = [p for folder in SIZE_RULE_FOLDERS for p in sorted((REPO / folder).rglob("*.py"))]
    assert {folder for folder in SIZE_RULE_FOLDERS if (REPO / folder).is_dir()} == set(SIZE_RULE_FOLDERS)
    long = [f"{p.relative_to(REPO)}:{name} ({n} lines)" for p in files for name, n in long_functions(p)]
    assert not long, "over the limit:\n" + "\n".join(long)


# ------------------------------------------------------------------------------------------------ floors
def test_no_import_circle_in_del_plugin():
    graph = import_graph(REPO)
    assert sum(map(len, graph.values())) > 100  # the reader reads the real imports
    assert_no_circle(graph)


def test_no_import_circle_in_experiments():
    graph = import_graph(REPO, "experiments")
    assert sum(map(len, graph.values())) > 10
    assert_no_circle(graph)


def test_no_module_imports_one_that_stands_above_it():
    graph = import_graph(REPO)
    assert {room(name) for name in graph} == {None, *FLOORS}
    upward = upward_imports(graph)
    assert not upward, "\n".join(upward)


def test_evaluation_parts_import_one_another_one_way():
    parts = part_graph(import_graph(REPO), EVALUATION)
    sub_packages = [p for p in parts if (REPO / p.replace(".", "/")).is_dir()]
    assert len(sub_packages) >= 5 and sum(map(len, parts.values())) > 20  # the reader sees the parts and their imports
    assert_no_circle(parts)


def test_evaluation_top_holds_few_modules():
    top = sorted(p.name for p in (REPO / EVALUATION.replace(".", "/")).glob("*.py"))
    assert "cli.py" in top and "__init__.py" in top
    assert len(top) <= MAX_EVALUATION_TOP_MODULES, f"{len(top)} modules at the top of del_plugin/evaluation: {top}"


# ----------------------------------------------------------------------------------------- light validation
def test_no_test_file_imports_another_test_file():
    tests = REPO / "tests"
    modules = {path.stem for path in tests.rglob("test_*.py")}
    found = []
    for path in sorted(tests.rglob("*.py")):
        for node in import_nodes(ast.parse(path.read_text(encoding="utf-8")), in_functions=True):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found += [f"{path.relative_to(REPO)} imports {n}" for n in names if n.split(".")[0] in modules]
    assert len(modules) > 40  # the reader sees the test files
    assert not found, "\n".join(found)


# ---------------------------------------------------------------------------------------------- docstrings' names
DOCSTRING_FOLDERS = ("del_plugin", "experiments", "tools", "bench", "tests")
# a dotted name that starts at del_plugin (not a logger's ``axolotl.integrations.del_plugin``)
_NAMED = re.compile(r"(?<![\w.])del_plugin(?:\.[A-Za-z_]\w*)+")


def docstrings(tree: ast.AST) -> list[str]:
    """The docstrings of a module and of each of its classes and functions."""
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return [text for node in ast.walk(tree) if isinstance(node, kinds) if (text := ast.get_docstring(node))]


def defined_names(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """What a module's or a class's body defines at its top: functions, classes, assignments, imports, and the
    names of a literal ``__all__`` or ``_HOMES`` (a package's lazy ``__getattr__`` hands those out)."""
    names: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        names[name.id] = node
                        if name.id in ("__all__", "_HOMES") and node.value is not None:
                            for item in ast.walk(node.value):
                                if isinstance(item, ast.Constant) and isinstance(item.value, str):
                                    names.setdefault(item.value, node)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names[alias.asname or alias.name.split(".")[0]] = node
        elif isinstance(node, (ast.If, ast.Try)):
            names.update(defined_names(node.body))
    return names


def missing_name(dotted: str, root: Path) -> str | None:
    """``dotted`` (``del_plugin.core.places.PlaceWeighting``) if no module, or no attribute of its longest module
    prefix, has that name, else None. Read from the source: the longest prefix that is a module or package of
    ``root``, then each further part a name its body (or its class's body) defines; a part after something that is
    not a class of that module (an imported object, a constant) is taken as it is."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        base = root.joinpath(*parts[:cut])
        path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if path.is_file():
            break
    else:
        return dotted
    if cut < len(parts) and (root.joinpath(*parts[:cut]) / parts[cut]).with_suffix(".py").exists():
        return None  # a module of the package
    names = module_names(path)
    for part in parts[cut:]:
        if names is None:
            return None
        node = names.get(part)
        if node is None:
            return dotted
        names = defined_names(node.body) if isinstance(node, ast.ClassDef) else None
    return None


def module_names(path: Path) -> dict[str, ast.AST]:
    """:func:`defined_names` of a module, with those its ``from .sibling import *`` lines bring."""
    body = ast.parse(path.read_text(encoding="utf-8")).body
    names = defined_names(body)
    for node in body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and [a.name for a in node.names] == ["*"]:
            names.update(module_names(path.parent / f"{node.module.replace('.', '/')}.py"))
    return names


def stale_names(path: Path, root: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    named = {m.group(0) for text in docstrings(tree) for m in _NAMED.finditer(text)}
    return sorted(f"{path.relative_to(root)}: {name}" for name in named if missing_name(name, root))


def test_the_docstring_reader_finds_names_that_do_not_exist(tmp_path):
    write_package(
        tmp_path,
        {
            "del_plugin/core/__init__.py": '"""See :mod:`del_plugin.core.places` and ``del_plugin.core.losses``."""\n',
            "del_plugin/core/places.py": (
                '"""``del_plugin.core.places.PlaceWeighting.check``, ``del_plugin.core.places.gone``."""\n'
                "class PlaceWeighting:\n    def check(self):\n        pass\n"
            ),
            "del_plugin/hf/__init__.py": (
                "def f():\n"
                '    """``del_plugin.hf.f`` and ``del_plugin.hf.kernels.fold``; a logger '
                'axolotl.integrations.del_plugin."""\n'
            ),
        },
    )
    found = [hit for path in sorted((tmp_path / PACKAGE).rglob("*.py")) for hit in stale_names(path, tmp_path)]
    assert found == [
        "del_plugin/core/__init__.py: del_plugin.core.losses",
        "del_plugin/core/places.py: del_plugin.core.places.gone",
        "del_plugin/hf/__init__.py: del_plugin.hf.kernels.fold",
    ]


def test_docstrings_name_del_plugin_modules_and_attributes_that_exist():
    files = [p for folder in DOCSTRING_FOLDERS for p in sorted((REPO / folder).rglob("*.py"))]
    assert len(files) > 100  # the scan really ran over the tree
    stale = [hit for path in files for hit in stale_names(path, REPO)]
    assert not stale, "docstrings name what does not exist:\n" + "\n".join(stale)
