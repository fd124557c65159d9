"""The program's folder outside the sandbox (its source, stdout and stderr): made for one run, always removed,
with what a run killed before it could clean up left behind."""

from __future__ import annotations

import errno
import functools
import logging
import os
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .mounts import under

LOG = logging.getLogger(__name__)

# + "<PID namespace>-<owner pid>-<its start time>-": a killed run's folders are found again
_FOLDER_PREFIX = "del-eval-program-"


@contextmanager
def program_folder(unsandboxed: bool) -> Iterator[Path]:
    """A new temporary folder, always removed afterwards. Without a sandbox, a process the program left working
    in it (in a session of its own, out of reach of the process group's kill) is killed first; a folder that
    still cannot be removed is a warning, never an error."""
    _remove_folders_of_ended_runs()
    folder = Path(tempfile.mkdtemp(prefix=f"{_FOLDER_PREFIX}{_owner_tag(os.getpid())}-"))
    try:
        yield folder
    finally:
        if unsandboxed:
            _kill_processes_in(folder)
        _remove_folder(folder)


def _owner_tag(pid: int) -> str | None:
    """``"<PID namespace>-<pid>-<start time>"`` of a running process of this PID namespace (its start time in
    clock ticks since boot: a pid reused by a later process does not match), None when no such process runs."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return f"{_pid_namespace()}-{pid}-{int(fields[19])}"


@functools.cache
def _pid_namespace() -> int:
    """This process's PID namespace (its inode; 0 where /proc does not say): a pid means something only there."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


@functools.cache
def _remove_folders_of_ended_runs() -> None:
    """Remove the program folders (``del-eval-program-<PID namespace>-<pid>-<start time>-*`` in the temporary
    folder) this user's runs left when they were killed (SIGKILL: no ``finally`` ran), once per process: only those
    whose process has ended; a folder of a run still going on is left alone, and so is one of another PID
    namespace (a container sharing the folder), whose processes cannot be seen from here."""
    root = Path(tempfile.gettempdir())
    try:
        entries = list(root.iterdir())
    except OSError:
        return
    for entry in entries:
        found = re.fullmatch(rf"{_FOLDER_PREFIX}(\d+)-(\d+)-(\d+)-.+", entry.name)
        try:
            if found is None or int(found[1]) != _pid_namespace() or entry.is_symlink():
                continue
            if entry.lstat().st_uid != os.geteuid():
                continue
        except OSError:
            continue
        if _owner_tag(int(found[2])) != f"{found[1]}-{found[2]}-{found[3]}":
            shutil.rmtree(entry, ignore_errors=True)


def _remove_folder(folder: Path, attempts: int = 20) -> None:
    for _ in range(attempts):
        try:
            shutil.rmtree(folder)
            return
        except FileNotFoundError:
            return
        except OSError as err:
            if err.errno not in (errno.ENOTEMPTY, errno.EBUSY, errno.EEXIST):
                break
            _kill_processes_in(folder)
            time.sleep(0.05)
    shutil.rmtree(folder, ignore_errors=True)
    if folder.exists():
        LOG.warning("could not remove the program folder %s", folder)


def _kill_processes_in(folder: Path) -> None:
    """SIGKILL every process whose working directory is in ``folder`` (that this user may signal)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if under(cwd, [str(folder)]):
            try:
                os.kill(int(entry.name), signal.SIGKILL)
            except OSError:
                pass
