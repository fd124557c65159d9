"""What a sandboxed program sees: the folders bound read-only into its new root (the system's programs and
libraries, the Python installation), its packages (the standard library and :data:`ALLOWED_PACKAGES` only: every
other folder of packages is an empty view with those bound into it), the places covered there (the answer key),
and its own folder."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

PROGRAM_FOLDER_BYTES = 64 << 20
PROGRAM_FOLDER_FILES = 4096
_SANDBOX_FOLDER = "/tmp"  # the program's folder inside a sandbox
# ... where the Python installation lies under /tmp (a virtual environment made there), which is bound at its own
# path: in /tmp it would be hidden by the folder's tmpfs (bwrap) or show in the program's folder (namespaces)
_SANDBOX_FOLDER_BESIDE_TMP = "/del-eval-program"
_VENV_PARTS = ("pyvenv.cfg", "bin", "lib")
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime")
# what a paper's program may import besides the standard library (and what those import): no other installed
# package is in sight (lm-eval's task files hold test problems with their answers; datasets' caches, ...)
ALLOWED_PACKAGES = ("numpy", "sympy", "mpmath")
# the package's shipped sets (del_plugin/evaluation/data): never in a program's sight
_SHIPPED_SETS = str(Path(__file__).resolve().parents[2] / "data")


def under(path: str, folders: Sequence[str]) -> bool:
    """Whether ``path`` is one of ``folders`` or lies inside one."""
    return any(path == f or path.startswith(f + "/") for f in folders)


@functools.cache
def python_binds() -> tuple[tuple[str, str], ...]:
    """(real path, path inside) of the Python installation and its virtual environment, under the names the
    interpreter knows them by and their real paths (so that links into either resolve): the only folders of
    HOME or the working tree a sandboxed program sees (read-only). Of a virtual environment, only what its
    interpreter reads: ``pyvenv.cfg``, ``bin`` and ``lib`` (not ``share``, ``include``, or what else lies there)."""
    binds = {}
    for prefix in (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix):
        for path in (os.path.abspath(prefix), os.path.realpath(prefix)):
            if not os.path.isdir(path) or under(path, _SYSTEM_DIRS):
                continue
            parts = _VENV_PARTS if os.path.isfile(os.path.join(path, "pyvenv.cfg")) else ("",)
            for part in parts:
                inside = os.path.join(path, part) if part else path
                if os.path.exists(inside):
                    binds.setdefault(inside, os.path.realpath(inside))
    return tuple((real, path) for path, real in sorted(binds.items()))  # a folder before the folders inside it


def sandbox_folder(binds) -> str:
    """The program's folder in a sandbox: ``/tmp``, unless the Python installation (``binds``: bound at its own
    path) lies under it."""
    if any(under(path, (_SANDBOX_FOLDER,)) for _, path in binds):
        return _SANDBOX_FOLDER_BESIDE_TMP
    return _SANDBOX_FOLDER


@functools.cache
def system_mounts() -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
    """(binds, symlinks) of the system's programs and libraries: ``/usr``, ``/lib*``, ``/bin``, ``/sbin`` and
    the dynamic linker's files in ``/etc``; a top-level link (a merged ``/usr``) stays a link."""
    binds, links = [], []
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            links.append((path, os.readlink(path)))
        elif os.path.isdir(path):
            binds.append((os.path.realpath(path), path))
    for path in _SYSTEM_FILES:
        if os.path.exists(path):
            binds.append((os.path.realpath(path), path))
    return tuple(binds), tuple(links)


def hidden_mounts(hidden: Sequence[str], binds: Sequence[tuple[str, str]]) -> list[list[str]]:
    """``[path inside, "folder" | "file"]`` for every place where one of the binds (real path, path inside) shows
    one of ``hidden`` (the shipped sets and those of ``hidden``, by their real paths), so that each can be covered
    there: by every path a program may take (a venv's link and its real path are two binds, each covered; a
    symbolic link or ``/proc/self/root`` ends in one of them). A hidden folder that holds a bind (a
    ``--benchmark-dir`` above the Python installation) cannot be covered whole: the set files named in ``hidden``
    are, then."""
    covers: dict[str, str] = {}
    for path in (_SHIPPED_SETS, *hidden):
        real = os.path.realpath(path)
        kind = "folder" if os.path.isdir(real) else "file" if os.path.exists(real) else None
        if kind is None or any(under(source, (real,)) for source, _ in binds):
            continue
        for source, inside in binds:
            if under(real, (source,)):
                covers.setdefault(inside + real[len(source) :], kind)
    folders = [path for path, kind in covers.items() if kind == "folder"]
    # what lies in a covered folder is covered with it (and there is no mount point for it in the empty tmpfs)
    return [
        [path, kind]
        for path, kind in sorted(covers.items())
        if not any(under(path, (f,)) for f in folders if f != path)
    ]


# run by the interpreter the launcher runs with, with its flags: its sys.path, the folders of packages it may
# read (those on sys.path outside the standard library, and the installation's own, even when off sys.path, as
# the base installation's below a virtual environment), and where each allowed package lies
_PROBE = """
import importlib.util, json, site, sys, sysconfig
paths = [sysconfig.get_paths(vars={"base": b, "platbase": b})[k] for b in (sys.base_prefix, sys.prefix)
         for k in ("purelib", "platlib")]
stdlib = [sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib")]
found = {}
for name in sys.argv[1:]:
    spec = importlib.util.find_spec(name)
    found[name] = list(spec.submodule_search_locations or []) if spec else []
    if spec and spec.origin and not spec.submodule_search_locations:
        found[name] = [spec.origin]
print(json.dumps({"path": sys.path, "site": paths + site.getsitepackages(), "stdlib": stdlib, "found": found}))
"""


@functools.cache
def _probe() -> dict:
    command = [sys.executable, "-I", "-c", _PROBE, *ALLOWED_PACKAGES]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin"})
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:
        why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise RuntimeError(f"could not list the packages {sys.executable} -I imports: {why}") from None


@functools.cache
def package_folders() -> tuple[str, ...]:
    """The real paths of the folders of packages the program's interpreter would read: every ``sys.path`` entry
    outside the standard library (site-packages, what a ``.pth`` file adds) and the installation's own
    site-packages, on ``sys.path`` or not (a filesystem walk finds them too)."""
    probe = _probe()
    sites = {os.path.realpath(p) for p in probe["site"] if os.path.isdir(p)}
    stdlib = [os.path.realpath(p) for p in probe["stdlib"]]
    for entry in probe["path"]:
        real = os.path.realpath(entry)
        if os.path.isdir(real) and (not under(real, stdlib) or any(under(real, (s,)) for s in sites)):
            sites.add(real)
    # a folder inside another is in its view already
    return tuple(sorted(s for s in sites if not any(under(s, (o,)) for o in sites if o != s)))


@functools.cache
def allowed_package_paths() -> tuple[str, ...]:
    """The real paths of :data:`ALLOWED_PACKAGES` (a package's folder, a module's file) and the libraries a wheel
    ships beside one (``numpy.libs``), as the program's interpreter finds them."""
    found = []
    for locations in _probe()["found"].values():
        for location in locations:
            real = os.path.realpath(location)
            found.append(real)
            libs = os.path.join(os.path.dirname(real), os.path.basename(real).removesuffix(".py") + ".libs")
            if os.path.isdir(libs):
                found.append(libs)
    return tuple(sorted(set(found)))


def package_views(binds: Sequence[tuple[str, str]]) -> list[list]:
    """``[path inside, [[real path, path inside], ...]]``: each folder of packages (:func:`package_folders`)
    where one of the binds (real path, path inside) shows it, to be covered by an empty read-only tmpfs into which
    only the allowed packages that lie in it are bound back."""
    allowed = allowed_package_paths()
    views = {}
    for folder in package_folders():
        for source, inside in binds:
            if under(folder, (source,)):
                view = inside + folder[len(source) :]
                packages = [[p, view + p[len(folder) :]] for p in allowed if under(p, (folder,)) and p != folder]
                views.setdefault(view, packages)
    return [[view, packages] for view, packages in sorted(views.items())]


def shown(covers: list[list[str]], views: list[list]) -> list[list[str]]:
    """The ``covers`` (:func:`hidden_mounts`) of places a program can reach: one inside a view of packages
    (:func:`package_views`) but in none of the packages bound there is out of sight already (and has no mount
    point: the view is empty)."""
    kept = []
    for path, kind in covers:
        inside = [packages for view, packages in views if under(path, (view,))]
        if all(any(under(path, (target,)) for _, target in packages) for packages in inside):
            kept.append([path, kind])
    return kept
