"""The house's rules, read from the code itself rather than from a description of it:

* what ships is the product: the wheel ``pip wheel .`` builds holds ``del_plugin`` modules only (no experiment
  runner, no test-asset downloader, no test or benchmark module) and none of them imports what is not shipped;
* small parts: no module (in ``del_plugin``, ``experiments``, ``tools`` and ``bench``) over :data:`MAX_MODULE_LINES`
  lines, no function there over :data:`MAX_FUNCTION_LINES`;
* floors: no import circle among ``del_plugin``'s modules, and no module importing one that stands above it
  (:data:`FLOORS`); imports are read statically, function-level ones included, so a lazy import counts;
* validating a config loads only what it checks (tests/axolotl/test_light_validation.py, which imports the
  validator and validates the ``del_eval_*`` keys in a fresh process);
* the tests' helpers live in one place: no test file imports another test file (what they share is in
  ``tests/helpers/`` or ``tests/conftest.py``).

Each rule's reader is tested on a small made-up case first, so that a rule cannot pass by reading nothing.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
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
@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """``pip wheel . --no-deps`` of a copy of the clone's files (tracked and new, less what git ignores), built in a
    temporary folder so that the build leaves nothing in the tree; offline, with this environment's setuptools.
    (tests/project/test_install.py installs a wheel built from del_plugin/ and examples/ alone, which cannot show
    what the packaging configuration would add from the rest of the clone.)"""
    work = tmp_path_factory.mktemp("wheel")
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.decode()
    source = work / "clone"
    for name in filter(None, listed.split("\0")):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w"]
    done = subprocess.run([*command, str(work / "dist"), "."], cwd=source, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (built,) = (work / "dist").glob("del_plugin-*.whl")
    return built


def wheel_modules(wheel: Path) -> dict[str, str]:
    """The wheel's Python modules: {path in the wheel: source}; its metadata and data files (the examples) aside."""
    with zipfile.ZipFile(wheel) as archive:
        return {
            name: archive.read(name).decode("utf-8")
            for name in archive.namelist()
            if name.endswith(".py") and ".dist-info/" not in name and ".data/" not in name
        }


def test_the_wheel_holds_only_del_plugin_modules(wheel):
    modules = wheel_modules(wheel)
    assert "del_plugin/__init__.py" in modules and "del_plugin/core/places.py" in modules
    assert [name for name in modules if not name.startswith(PACKAGE + "/")] == []  # no experiments/, tools/, tests/
    shipped = {module_name(REPO / name, REPO) for name in modules}
    assert shipped == set(package_modules(REPO)), "the wheel and del_plugin/ hold different modules"


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
