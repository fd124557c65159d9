"""What a sandboxed program sees: the folders bound read-only into its new root (the system's programs and
libraries, the Python installation), the places covered there (the answer key), and its own folder."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Sequence
from pathlib import Path

PROGRAM_FOLDER_BYTES = 64 << 20
PROGRAM_FOLDER_FILES = 4096
_SANDBOX_FOLDER = "/tmp"  # the program's folder inside a sandbox
# ... where the Python installation lies under /tmp (a virtual environment made there), which is bound at its own
# path: in /tmp it would be hidden by the folder's tmpfs (bwrap) or show in the program's folder (namespaces)
_SANDBOX_FOLDER_BESIDE_TMP = "/del-eval-program"
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime")
# the package's shipped sets (del_plugin/evaluation/data): never in a program's sight
_SHIPPED_SETS = str(Path(__file__).resolve().parents[2] / "data")


def under(path: str, folders: Sequence[str]) -> bool:
    """Whether ``path`` is one of ``folders`` or lies inside one."""
    return any(path == f or path.startswith(f + "/") for f in folders)


@functools.cache
def python_binds() -> tuple[tuple[str, str], ...]:
    """(real path, path inside) of the Python installation and its virtual environment, under the names the
    interpreter knows them by and their real paths (so that links into either resolve): the only folders of
    HOME or the working tree a sandboxed program sees (read-only)."""
    binds = {}
    for prefix in (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix):
        for path in (os.path.abspath(prefix), os.path.realpath(prefix)):
            if os.path.isdir(path) and not under(path, _SYSTEM_DIRS):
                binds.setdefault(path, os.path.realpath(path))
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
