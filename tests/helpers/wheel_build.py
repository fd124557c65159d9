"""The package's wheel, built once per test run for every test that reads or installs it
(tests/project/test_house.py: what ships; tests/project/test_install.py: installing it as a user does)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from filelock import FileLock

from repo import REPO


def run_folder(tmp_path_factory) -> Path:
    """The folder this run's pytest-xdist workers share (each worker's base temp folder sits in it), or this
    process's own base temp folder when there are no workers."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def build_clone_wheel(out: Path) -> Path:
    """``pip wheel . --no-deps`` of a copy of the clone's files (tracked and new, less what git ignores), built in
    ``out`` so that the build leaves nothing in the tree; offline, with this environment's setuptools. Built from
    the whole clone, so that it shows what the packaging configuration would add from beyond ``del_plugin/``."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.decode()
    source = out / "clone"
    for name in filter(None, listed.split("\0")):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w"]
    done = subprocess.run([*command, str(out / "dist"), "."], cwd=source, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    shutil.rmtree(source)
    (built,) = (out / "dist").glob("del_plugin-*.whl")
    return built


def shared_wheel(tmp_path_factory) -> Path:
    """The run's one wheel: the first worker to ask builds it under a lock, the others wait and read the same file."""
    out = run_folder(tmp_path_factory) / "del-plugin-wheel"
    with FileLock(str(out) + ".lock"):
        built = sorted((out / "dist").glob("del_plugin-*.whl"))
        if built:
            return built[0]
        out.mkdir(exist_ok=True)
        return build_clone_wheel(out)
