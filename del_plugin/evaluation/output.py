"""How del-eval writes its files, so that a killed or failing run never leaves half a file nor costs an earlier
report: the output folder checked with a clear error (:func:`prepare_output_dir`), every report file written to a
temporary name and renamed (:func:`write_file_atomic`, :func:`write_text_atomic`, :func:`write_json_atomic`),
``generations.jsonl`` appended whole lines at a time (:class:`JsonlAppender`; a line a failed write cut is taken
back) and read back past a line a hard kill cut (:func:`read_jsonl`), one process at a time per folder
(:func:`lock_folder`), and a report finished in a staging folder moved into place file by file
(:func:`publish_files`)."""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from .errors import OutputError, utf8_bytes

LOG = logging.getLogger(__name__)

__all__ = [
    "JsonlAppender",
    "lock_folder",
    "prepare_output_dir",
    "publish_files",
    "read_jsonl",
    "unlock_folder",
    "write_error",
    "write_file_atomic",
    "write_json_atomic",
    "write_text_atomic",
]

_FULL = (errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC))
_DENIED = (errno.EACCES, errno.EPERM, errno.EROFS)
LOCK_WAIT_S = 10.0  # a run being stopped with SIGTERM still writes its partial report: let it finish


def write_error(path: Path, err: OSError) -> OutputError:
    """The :class:`OutputError` for a failed write of ``path``, with the fix."""
    if isinstance(err, OutputError):
        return err
    reason = err.strerror or str(err)
    if err.errno in _FULL:
        fix = "free some disk space, or give another --out"
    elif err.errno in _DENIED:
        fix = "give an --out folder you can write to"
    else:
        fix = "give another --out"
    return OutputError(f"{path}: cannot be written ({reason}); {fix}")


def prepare_output_dir(path: str | Path, option: str = "--out") -> Path:
    """``path`` as a folder that exists and can be written, made (with its parents) when missing. A file there, a
    file above it or a folder that cannot be written is an :class:`OutputError` naming the path and the fix."""
    path = Path(path)
    try:
        return _prepare_output_dir(path, option)
    except OSError as err:  # a name too long for the file system (ENAMETOOLONG), a loop of links on the way
        if isinstance(err, OutputError):
            raise
        raise OutputError(
            f"{option} {path}: cannot be used ({err.strerror or err}); give another folder (each name in a path is "
            "at most 255 bytes)"
        ) from None


def _prepare_output_dir(path: Path, option: str) -> Path:
    if path.is_symlink() and not path.exists():
        raise OutputError(
            f"{option} {path} is a symbolic link to {os.readlink(path)}, which does not exist or loops: make the "
            "folder it points to, or give another --out"
        )
    if path.exists() and not path.is_dir():
        raise OutputError(f"{option} {path} is a file, not a folder: give a folder (it is made when missing)")
    above = next((p for p in path.parents if p.exists()), None)
    if above is not None and not above.is_dir():
        raise OutputError(f"{option} {path}: {above} is a file, so no folder can be made under it; give a folder path")
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".del-eval-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise OutputError(
            f"{option} {path}: cannot write in this folder ({err.strerror or err}); give a folder you can write to",
        ) from None
    return path


def write_file_atomic(path: Path, write: Callable[[Path], object]) -> Path:
    """``write(temporary path)``, then rename it to ``path``: a reader (or a run killed half-way) sees the old file
    or the new one, never half of one. A failed write removes the temporary file and raises :func:`write_error`."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException as err:  # whatever stopped it (an OSError, an encoding error, Ctrl-C): no half file left
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        if isinstance(err, OSError):
            raise write_error(path, err) from err
        raise
    return path


def write_text_atomic(path: Path, text: str) -> Path:
    """``text`` in UTF-8 (a name or path that is not UTF-8 shows U+FFFD for its bytes), written by rename."""
    return write_file_atomic(path, lambda tmp: tmp.write_bytes(utf8_bytes(text)))


def write_json_atomic(path: Path, data, **dumps) -> Path:
    """``data`` as indented JSON (``dumps``: more :func:`json.dumps` options), written by rename."""
    return write_text_atomic(path, json.dumps(data, indent=2, **dumps) + "\n")


def read_jsonl(path: Path) -> list[dict]:
    """The records of a JSONL file del-eval appends to. Its last line may be cut (a run killed while writing it):
    that line is left out, with a warning; a bad line anywhere else is an error."""
    if not path.is_file():
        return []
    lines = [line for line in path.read_text(encoding="utf-8", errors="replace").split("\n") if line.strip()]
    records = []
    for number, line in enumerate(lines, 1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if number < len(lines):
                raise ValueError(f"{path}:{number}: not a JSON line; this file was not written by del-eval") from None
            LOG.warning("%s: its last line was cut by a stopped run; left out", path)
    return records


class JsonlAppender:
    """Appends records to a JSONL file, each line in whole: a write that fails half-way (a full disk, a file size
    limit) is taken back before the error is raised, so the file never ends in half a line that way."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self._size = os.fstat(self._fd).st_size
        except OSError as err:
            raise write_error(path, err) from err

    def write(self, record: dict) -> None:
        data = (json.dumps(record) + "\n").encode("utf-8")
        try:
            done = 0
            while done < len(data):
                done += os.write(self._fd, data[done:])
        except OSError as err:
            try:
                os.ftruncate(self._fd, self._size)
            except OSError:
                pass
            raise write_error(self.path, err) from err
        self._size += len(data)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def lock_folder(path: Path, wait_s: float = LOCK_WAIT_S) -> int | None:
    """An exclusive lock on the folder ``path`` (held until :func:`unlock_folder` or the process ends, however it
    ends), so that two runs never write one report at once. A folder another process holds for longer than
    ``wait_s`` is an :class:`OutputError`. None where the platform has no ``flock``."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        return None
    fd = os.open(path, os.O_RDONLY)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                raise OutputError(
                    f"--out {path}: another del-eval process is writing there; let it end, or give another --out",
                ) from None
            time.sleep(0.1)


def unlock_folder(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def publish_files(staging: Path, out: Path, names: Sequence[str], stale: Sequence[str]) -> None:
    """Move the report finished in ``staging`` into ``out``: each of ``names`` (the report's files, report.json
    last) linked (or copied) to a temporary name in ``out`` and renamed over the old file; then the files of the
    old report the new one does not have (``stale``) removed, and ``staging`` with them. Until ``staging`` is
    removed it holds the whole new report, so a run killed while publishing publishes again when resumed."""
    for name in names:
        source, target = staging / name, out / name
        tmp = out / f".{name}.tmp"
        try:
            tmp.unlink(missing_ok=True)
            try:
                os.link(source, tmp)
            except OSError:  # a file system without hard links
                shutil.copyfile(source, tmp)
            os.replace(tmp, target)
        except OSError as err:
            raise write_error(target, err) from err
    for name in stale:
        (out / name).unlink(missing_ok=True)
    shutil.rmtree(staging, ignore_errors=True)
