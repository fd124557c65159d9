"""bubblewrap (``bwrap``): found once, its version checked, and its command line for one program."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess

from .mounts import PROGRAM_FOLDER_BYTES

_BWRAP_MIN_VERSION = (0, 8, 0)  # --size and --disable-userns


@functools.cache
def bwrap_executable() -> str | None:
    """bwrap's absolute path, found once on the caller's PATH: the check and every run start this same file (the
    programs' own environment has ``PATH=/usr/bin:/bin``, which would miss one in ``/usr/local/bin``)."""
    found = shutil.which("bwrap")
    return os.path.abspath(found) if found else None


def bwrap_problem() -> str | None:
    """Why bwrap cannot build the sandbox here (not installed, too old), or None."""
    bwrap = bwrap_executable()
    if bwrap is None:
        return "bwrap is not installed"
    try:
        answer = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as err:
        return f"bwrap --version failed: {err}"
    found = re.search(r"(\d+)\.(\d+)\.(\d+)", answer)
    version = tuple(int(v) for v in found.groups()) if found else (0, 0, 0)
    if version < _BWRAP_MIN_VERSION:
        return f"bwrap {answer.strip() or '?'} is older than {'.'.join(map(str, _BWRAP_MIN_VERSION))}"
    return None


def bwrap_command(settings: dict) -> list[str]:
    """bwrap's command line (before the launcher's) for the launcher's ``settings``."""
    # --as-pid-1: the launcher is the PID namespace's init, so that bwrap ends only once everything the program
    # started is gone (with bwrap's own init, it ends while the namespace's last processes are still being killed)
    command = [bwrap_executable() or "bwrap", "--unshare-all", "--unshare-user", "--disable-userns"]
    command += ["--die-with-parent", "--new-session"]
    command.append("--as-pid-1")
    for link, target in settings["symlinks"]:
        command += ["--symlink", target, link]
    for real, path in settings["binds"]:
        command += ["--ro-bind", real, path]
    for view, packages in settings["views"]:  # an empty folder of packages, the allowed ones bound into it
        command += ["--tmpfs", view]
        for real, path in packages:
            command += ["--ro-bind", real, path]
        command += ["--remount-ro", view]
    for path, kind in settings["hidden"]:
        command += ["--tmpfs", path, "--remount-ro", path] if kind == "folder" else ["--ro-bind", "/dev/null", path]
    # --dev mounts a tmpfs of its own, without a size, which "--remount-ro /" leaves writable; no procfs (an
    # empty /proc): a program's /proc/self/mountinfo would show the host's paths of every bind
    folder = settings["folder"]
    command += ["--dev", "/dev", "--remount-ro", "/dev", "--dir", "/proc"]
    command += ["--size", str(PROGRAM_FOLDER_BYTES), "--tmpfs", folder]
    return command + ["--remount-ro", "/", "--chdir", folder, "--"]
