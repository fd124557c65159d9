"""One program run once in a given mode: the launcher (:mod:`.launcher`) started with its settings, inside bwrap or
not, the program's limits, its wall clock, and how it ended read back."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .bwrap import bwrap_command
from .folders import program_folder
from .mounts import (
    PROGRAM_FOLDER_BYTES,
    PROGRAM_FOLDER_FILES,
    hidden_mounts,
    package_views,
    python_binds,
    sandbox_folder,
    shown,
    system_mounts,
)

PROGRAM_TIMEOUT_S = 5.0
PROGRAM_MEMORY_MB = 2048
PROGRAM_OUTPUT_BYTES = 1 << 20
PROGRAM_PROCESSES = 4
SANDBOXES = ("bwrap", "namespaces")  # in the order program_sandbox tries them
UNSANDBOXED = "none"
LAUNCHER = Path(__file__).with_name("launcher.py").read_text(encoding="utf-8")
_NOBODY = 65534  # the user a program started by root runs as in a sandbox


@dataclass(frozen=True)
class ProgramRun:
    """How a program ended: ``status`` ``"ok"`` (exit 0), ``"error"`` (an exception, a non-zero exit),
    ``"timeout"`` (the CPU or wall limit) or ``"limit"`` (killed by another limit: memory, output size, a
    signal); ``stdout`` what it printed when ``"ok"`` (else empty); ``detail`` the last line of its stderr or
    the limit it hit."""

    status: str
    stdout: str
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _environment(home: str) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": home,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


def _last_line(path: Path) -> str:
    lines = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    return lines[-1][:300] if lines else ""


def launcher_settings(
    mode: str,
    status_fd: int,
    cpu_seconds: int,
    memory_bytes: int,
    output_bytes: int,
    processes: int,
    hidden: Sequence[str] = (),
) -> dict:
    """What the launcher is given (as JSON on its stdin, before the program's source: nothing of it in the command
    line a program could read): the mode, the limits and the mounts."""
    system_binds, links = system_mounts()
    binds = system_binds + python_binds()
    views = package_views(binds) if mode != UNSANDBOXED else []
    return {
        "mode": mode,
        "status_fd": status_fd,
        "cpu_seconds": cpu_seconds,
        "memory_bytes": memory_bytes,
        "output_bytes": output_bytes,
        "processes": processes if mode != UNSANDBOXED else None,
        "folder": sandbox_folder(python_binds()) if mode != UNSANDBOXED else ".",
        "folder_bytes": PROGRAM_FOLDER_BYTES,
        "folder_files": PROGRAM_FOLDER_FILES,
        "binds": [list(b) for b in binds],
        "views": views,
        "hidden": shown(hidden_mounts(hidden, binds), views) if mode != UNSANDBOXED else [],
        "symlinks": [list(link) for link in links],
        "root_uid": _NOBODY,
        "root_gid": _NOBODY,
    }


def launch_program(
    code: str,
    mode: str,
    timeout_s: float,
    memory_mb: int,
    output_bytes: int,
    processes: int,
    hidden: Sequence[str] = (),
) -> tuple[ProgramRun, bool]:
    """Run ``code`` in ``mode`` under the limits given; how it ended, and whether the sandbox started it."""
    cpu_seconds = max(1, int(timeout_s + 0.999))
    with program_folder(unsandboxed=mode == UNSANDBOXED) as work:
        source, out_path, err_path = work / "launch.json", work / "stdout.txt", work / "stderr.txt"
        status_read, status_write = os.pipe()
        settings = launcher_settings(mode, status_write, cpu_seconds, memory_mb << 20, output_bytes, processes, hidden)
        _write_request(source, settings, code)
        command = [sys.executable, "-I", "-c", LAUNCHER]
        # bwrap run by root runs as nobody, so that the program is not root outside its namespaces
        as_nobody = {"user": _NOBODY, "group": _NOBODY, "extra_groups": []}
        if mode == "bwrap":
            command = bwrap_command(settings) + command
        try:
            with open(source, "rb") as stdin, open(out_path, "wb") as out, open(err_path, "wb") as err:
                process = subprocess.Popen(
                    command,
                    cwd="/" if mode == "bwrap" else work,
                    env=_environment(str(work) if mode == UNSANDBOXED else settings["folder"]),
                    stdin=stdin,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                    close_fds=True,
                    pass_fds=(status_write,),
                    **(as_nobody if mode == "bwrap" and os.geteuid() == 0 else {}),
                )
        except OSError as err:  # no bwrap; or root of a user namespace, where nobody is not mapped
            os.close(status_read)
            who = f" as nobody (uid {_NOBODY})" if mode == "bwrap" and os.geteuid() == 0 else ""
            why = f"cannot run {command[0]}{who}: {err.strerror or err}"
            return ProgramRun("error", "", f"the {mode} sandbox did not start it: {why}"), False
        finally:
            os.close(status_write)
        try:
            try:
                timed_out = not _ended_within(process, timeout_s)
            finally:
                _kill_group(process)  # whatever it started is stopped with it
            started, status = _read_status(status_read)
        finally:
            os.close(status_read)
        if not started:
            why = f"not started within {timeout_s:g} s" if timed_out else _last_line(err_path) or "no message"
            return ProgramRun("error", "", f"the {mode} sandbox did not start it: {why}"), False
        if timed_out:
            return ProgramRun("timeout", "", f"still running after {timeout_s:g} s"), True
        if status is None:
            return ProgramRun("limit", "", "its sandbox was stopped before it ended"), True
        returncode = os.waitstatus_to_exitcode(status)
        return _ending(returncode, out_path, err_path, cpu_seconds, memory_mb, output_bytes), True


def _write_request(path: Path, settings: dict, code: str) -> None:
    """What the launcher reads on its stdin: its settings and the program. A lone surrogate in the program (not
    Unicode text: JSON's \\ud800 makes one) goes in as '?'."""
    text = code.encode("utf-8", errors="replace").decode("utf-8")
    path.write_text(json.dumps({"settings": settings, "source": text}), encoding="utf-8")


def _ending(returncode: int, out_path: Path, err_path: Path, cpu_seconds, memory_mb, output_bytes) -> ProgramRun:
    if returncode == 0:
        return ProgramRun("ok", out_path.read_text(encoding="utf-8", errors="replace"))
    if returncode < 0:
        signum = -returncode
        if signum == signal.SIGXCPU:
            return ProgramRun("timeout", "", f"more than {cpu_seconds} s of CPU time")
        if signum == signal.SIGXFSZ:
            return ProgramRun("limit", "", f"wrote more than {output_bytes} bytes")
        return ProgramRun("limit", "", f"killed by {signal.Signals(signum).name}")
    detail = _last_line(err_path)
    if "MemoryError" in detail:
        return ProgramRun("limit", "", f"MemoryError (address space limited to {memory_mb} MiB)")
    if "File too large" in detail:  # Python ignores SIGXFSZ: the write past the limit fails instead
        return ProgramRun("limit", "", f"wrote more than {output_bytes} bytes")
    return ProgramRun("error", "", detail or f"exit status {returncode}")


def _ended_within(process: subprocess.Popen, timeout_s: float) -> bool:
    """Whether ``process`` ended within ``timeout_s``, seen the moment it ends: ``Popen.wait(timeout)`` polls
    with sleeps of up to 50 ms, as long again as a short program's whole run."""
    try:
        handle = os.pidfd_open(process.pid)
    except OSError:  # a kernel before 5.3
        try:
            process.wait(timeout=timeout_s)
            return True
        except subprocess.TimeoutExpired:
            return False
    try:
        return bool(select.select([handle], [], [], timeout_s)[0])
    finally:
        os.close(handle)


def _read_status(fd: int) -> tuple[bool, int | None]:
    """What the launcher wrote on the status pipe: whether the program started, and its wait status."""
    os.set_blocking(fd, False)
    data = b""
    while True:
        try:
            chunk = os.read(fd, 64)
        except BlockingIOError:
            break
        if not chunk:
            break
        data += chunk
    started = data.startswith(b"R")
    rest = data[1:].strip() if started else b""
    return started, int(rest) if rest.isdigit() else None


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()
