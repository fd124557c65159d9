"""Program-of-thought answers: the Python program a model wrote, run in a sandbox.

The paper runs GSM8K, SVAMP, SimulEq and MATH as program-of-thought: the question ends in "Let's write a program.",
an output that contains ``print(`` is taken for a program and run, and what it prints becomes the answer ("The
answer is <stdout>"). A program that fails, or prints nothing, gives no answer, and the problem is asked again
as chain-of-thought. ``del-eval`` does this only when asked (``--program-of-thought``): it executes model-written
code.

:func:`run_program` runs one program in a sandbox built by the operating system (:func:`program_sandbox` picks
it: ``"bwrap"`` where bubblewrap is installed and works, else ``"namespaces"``, Linux namespaces set up by
:mod:`.launcher`; ``"none"`` only when asked for by name):

* its own user, mount, network, PID, IPC and UTS namespaces: no network at all (a network namespace of its own,
  with nothing in it), no other process in sight (a fresh ``/proc`` of its PID namespace: not the caller's
  environment or command line), nothing it can signal outside, no new user namespaces;
* a new root holding only the system's programs and libraries (``/usr``, ``/lib*``, ``/bin``), the Python
  installation it runs with and its virtual environment, all read-only, a few device nodes, and its folder
  ``/tmp`` (``/del-eval-program`` when the Python installation lies under ``/tmp``), an empty 64 MiB tmpfs that
  is its working directory and ``HOME``: nothing of ``HOME``, the working tree or the rest of the file system;
* the answer key out of sight: the package's shipped sets (``del_plugin/evaluation/data``) and the folders and
  files of the sets being scored (``hidden``), wherever the binds above show them (a wheel's copy in the virtual
  environment, a ``--benchmark-dir`` inside it), each covered by an empty read-only tmpfs (a file: by
  ``/dev/null``);
* no capabilities and no new privileges; run by root, it runs as ``nobody``, so that the process limit holds;
* when it ends, whatever it started ends with it (its PID namespace goes), and its folder goes with its tmpfs.

In every mode, as before the sandbox: a new interpreter (``sys.executable -I``: no ``PYTHON*`` variables, no user
site), an environment of its own (nothing inherited: ``PATH=/usr/bin:/bin``, a UTF-8 locale, one BLAS thread),
stdin empty, and limits set before the program starts: CPU time and wall time (``timeout_s``, 5 s as in the
paper's harness; at the wall limit the program is killed with what it started: in a sandbox everything, without
one what is still in its process group or its folder), address space (``memory_mb``, per process), size of any
file it writes (``output_bytes``; its stdout is such a file), 64 open files, no core dump, and in a sandbox
``processes`` processes, itself included (:data:`PROGRAM_PROCESSES`).

``"none"`` (``--unsandboxed-programs``) keeps only that last paragraph, without the process limit: the program
runs as your user, can read, change and delete what you can, open network connections, and signal your other
processes. docs/evaluation.md says what the sandbox was tested against and what it does not stop.
"""

from __future__ import annotations

import errno
import functools
import json
import logging
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

LOG = logging.getLogger(__name__)

__all__ = [
    "ProgramRun",
    "SANDBOXES",
    "SandboxUnavailableError",
    "extract_program",
    "program_sandbox",
    "run_program",
    "run_programs",
]

PROGRAM_TIMEOUT_S = 5.0
PROGRAM_MEMORY_MB = 2048
PROGRAM_OUTPUT_BYTES = 1 << 20
PROGRAM_PROCESSES = 4
PROGRAM_FOLDER_BYTES = 64 << 20
PROGRAM_FOLDER_FILES = 4096
SANDBOXES = ("bwrap", "namespaces")  # in the order program_sandbox tries them
UNSANDBOXED = "none"
_STOP_AT = ("### Instruction",)
_FENCE = re.compile(r"```[ \t]*(?:python|py)?[ \t]*\n(.*?)(?:```|$)", re.DOTALL | re.IGNORECASE)
_LAUNCHER = Path(__file__).with_name("launcher.py").read_text(encoding="utf-8")
_SANDBOX_FOLDER = "/tmp"  # the program's folder inside a sandbox
# ... where the Python installation lies under /tmp (a virtual environment made there), which is bound at its own
# path: in /tmp it would be hidden by the folder's tmpfs (bwrap) or show in the program's folder (namespaces)
_SANDBOX_FOLDER_BESIDE_TMP = "/del-eval-program"
_NOBODY = 65534  # the user a program started by root runs as in a sandbox
_BWRAP_MIN_VERSION = (0, 8, 0)  # --size and --disable-userns
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime")
# the package's shipped sets (del_plugin/evaluation/data): never in a program's sight
_SHIPPED_SETS = str(Path(__file__).resolve().parents[1] / "data")
# + "<PID namespace>-<owner pid>-<its start time>-": a killed run's folders are found again
_FOLDER_PREFIX = "del-eval-program-"


class SandboxUnavailableError(ValueError):
    """No sandbox works on this machine (and the programs were not allowed to run without one): the command asks
    for what cannot be done here as given (del-eval's exit status 2); ``--unsandboxed-programs`` is the explicit way
    out. (A ValueError, not del-eval's UsageError: this module imports nothing of the package, so that the tests can
    run it alone.)"""


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


def extract_program(output: str) -> str | None:
    """The program in a model ``output``, or None when it holds none (no ``print(``, as the paper's harness
    decides). The text is cut at a new "### Instruction"; a fenced block (```python ... ```) holding ``print(``
    is taken alone."""
    if "print(" not in output:
        return None
    for stop in _STOP_AT:
        output = output.split(stop)[0]
    for block in _FENCE.findall(output):
        if "print(" in block:
            return block
    return output


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


# ---------------------------------------------------------------------------------------------- what is bound


@functools.cache
def _python_binds() -> tuple[tuple[str, str], ...]:
    """(real path, path inside) of the Python installation and its virtual environment, under the names the
    interpreter knows them by and their real paths (so that links into either resolve): the only folders of
    HOME or the working tree a sandboxed program sees (read-only)."""
    binds = {}
    for prefix in (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix):
        for path in (os.path.abspath(prefix), os.path.realpath(prefix)):
            if os.path.isdir(path) and not _under(path, _SYSTEM_DIRS):
                binds.setdefault(path, os.path.realpath(path))
    return tuple((real, path) for path, real in sorted(binds.items()))  # a folder before the folders inside it


def _under(path: str, folders: Sequence[str]) -> bool:
    return any(path == f or path.startswith(f + "/") for f in folders)


def _sandbox_folder(python_binds) -> str:
    """The program's folder in a sandbox: ``/tmp``, unless the Python installation (bound at its own path) lies
    under it."""
    if any(_under(path, (_SANDBOX_FOLDER,)) for _, path in python_binds):
        return _SANDBOX_FOLDER_BESIDE_TMP
    return _SANDBOX_FOLDER


@functools.cache
def _system_mounts() -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
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


def _hidden_mounts(hidden: Sequence[str], binds: Sequence[tuple[str, str]]) -> list[list[str]]:
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
        if kind is None or any(_under(source, (real,)) for source, _ in binds):
            continue
        for source, inside in binds:
            if _under(real, (source,)):
                covers.setdefault(inside + real[len(source) :], kind)
    folders = [path for path, kind in covers.items() if kind == "folder"]
    # what lies in a covered folder is covered with it (and there is no mount point for it in the empty tmpfs)
    return [
        [path, kind]
        for path, kind in sorted(covers.items())
        if not any(_under(path, (f,)) for f in folders if f != path)
    ]


def _launcher_settings(
    mode: str,
    status_fd: int,
    cpu_seconds: int,
    memory_bytes: int,
    output_bytes: int,
    processes: int,
    hidden: Sequence[str] = (),
) -> dict:
    system_binds, links = _system_mounts()
    python_binds = _python_binds()
    binds = system_binds + python_binds
    return {
        "mode": mode,
        "status_fd": status_fd,
        "cpu_seconds": cpu_seconds,
        "memory_bytes": memory_bytes,
        "output_bytes": output_bytes,
        "processes": processes if mode != UNSANDBOXED else None,
        "folder": _sandbox_folder(python_binds) if mode != UNSANDBOXED else ".",
        "folder_bytes": PROGRAM_FOLDER_BYTES,
        "folder_files": PROGRAM_FOLDER_FILES,
        "binds": [list(b) for b in binds],
        "hidden": _hidden_mounts(hidden, binds) if mode != UNSANDBOXED else [],
        "symlinks": [list(link) for link in links],
        "root_uid": _NOBODY,
        "root_gid": _NOBODY,
    }


def _bwrap_command(settings: dict) -> list[str]:
    """bwrap's command line (before the launcher's) for ``settings``."""
    # --as-pid-1: the launcher is the PID namespace's init, so that bwrap ends only once everything the program
    # started is gone (with bwrap's own init, it ends while the namespace's last processes are still being killed)
    command = [_bwrap_executable() or "bwrap", "--unshare-all", "--unshare-user", "--disable-userns"]
    command += ["--die-with-parent", "--new-session"]
    command.append("--as-pid-1")
    for link, target in settings["symlinks"]:
        command += ["--symlink", target, link]
    for real, path in settings["binds"]:
        command += ["--ro-bind", real, path]
    for path, kind in settings["hidden"]:
        command += ["--tmpfs", path, "--remount-ro", path] if kind == "folder" else ["--ro-bind", "/dev/null", path]
    # --dev mounts a tmpfs of its own, without a size, which "--remount-ro /" leaves writable
    folder = settings["folder"]
    command += ["--dev", "/dev", "--remount-ro", "/dev", "--proc", "/proc"]
    command += ["--size", str(PROGRAM_FOLDER_BYTES), "--tmpfs", folder]
    return command + ["--remount-ro", "/", "--chdir", folder, "--"]


# ---------------------------------------------------------------------------------------------- running


def run_program(
    code: str,
    *,
    timeout_s: float = PROGRAM_TIMEOUT_S,
    memory_mb: int = PROGRAM_MEMORY_MB,
    output_bytes: int = PROGRAM_OUTPUT_BYTES,
    processes: int = PROGRAM_PROCESSES,
    sandbox: str = "auto",
    hidden: Sequence[str] = (),
) -> ProgramRun:
    """Run ``code`` under the limits of the module docs in ``sandbox`` (``"auto"``: :func:`program_sandbox`;
    ``"bwrap"``, ``"namespaces"`` or ``"none"``); return how it ended and what it printed. ``hidden``: folders and
    files kept out of the program's sight besides the shipped sets (the set being scored: its answers). A sandbox
    that fails to start the program (none of it ran) is a warning and an ``"error"`` of this program only."""
    mode = program_sandbox() if sandbox == "auto" else sandbox
    if mode not in SANDBOXES + (UNSANDBOXED,):
        raise ValueError(f"sandbox must be auto, {', '.join(SANDBOXES)} or {UNSANDBOXED}, got {sandbox!r}")
    run, started = _run(code, mode, timeout_s, memory_mb, output_bytes, processes, hidden)
    if not started:
        LOG.warning("a program was not run: %s", run.detail)
    return run


def _run(
    code: str,
    mode: str,
    timeout_s: float,
    memory_mb: int,
    output_bytes: int,
    processes: int,
    hidden: Sequence[str] = (),
) -> tuple[ProgramRun, bool]:
    """:func:`run_program` in ``mode``; and whether the sandbox started the program."""
    cpu_seconds = max(1, int(timeout_s + 0.999))
    with _program_folder(unsandboxed=mode == UNSANDBOXED) as work:
        source, out_path, err_path = work / "program.py", work / "stdout.txt", work / "stderr.txt"
        # a lone surrogate (not Unicode text: JSON's \ud800 makes one) goes in as '?'
        source.write_bytes(code.encode("utf-8", errors="replace"))
        status_read, status_write = os.pipe()
        settings = _launcher_settings(mode, status_write, cpu_seconds, memory_mb << 20, output_bytes, processes, hidden)
        command = [sys.executable, "-I", "-c", _LAUNCHER, json.dumps(settings)]
        # bwrap run by root runs as nobody, so that the program is not root outside its namespaces
        as_nobody = {"user": _NOBODY, "group": _NOBODY, "extra_groups": []}
        if mode == "bwrap":
            command = _bwrap_command(settings) + command
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


@contextmanager
def _program_folder(unsandboxed: bool) -> Iterator[Path]:
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
        if _under(cwd, [str(folder)]):
            try:
                os.kill(int(entry.name), signal.SIGKILL)
            except OSError:
                pass


# ---------------------------------------------------------------------------------------------- choosing


_CHOICE_LOCK = threading.Lock()


@functools.cache
def _sandbox_problem(mode: str) -> str | None:
    """Why ``mode`` cannot run programs on this machine (None: it can), found by running one."""
    if mode == "bwrap":
        problem = _bwrap_problem()
        if problem:
            return problem
    run, _ = _run("print(6 * 7)", mode, 30, PROGRAM_MEMORY_MB, PROGRAM_OUTPUT_BYTES, PROGRAM_PROCESSES)
    if run.status != "ok" or run.stdout != "42\n":
        return run.detail if run.detail.startswith(f"the {mode} sandbox") else f"a test program: {run.detail}"
    return None


@functools.cache
def _bwrap_executable() -> str | None:
    """bwrap's absolute path, found once on the caller's PATH: the check and every run start this same file (the
    programs' own environment has ``PATH=/usr/bin:/bin``, which would miss one in ``/usr/local/bin``)."""
    found = shutil.which("bwrap")
    return os.path.abspath(found) if found else None


def _bwrap_problem() -> str | None:
    bwrap = _bwrap_executable()
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


def program_sandbox(unsandboxed: bool = False) -> str:
    """The isolation programs run in: ``"none"`` when ``unsandboxed`` (the user asked for it by name), else the
    first of :data:`SANDBOXES` that runs a test program on this machine (tried once per process). Raises
    :class:`SandboxUnavailableError`, naming why each failed, when none works."""
    if unsandboxed:
        return UNSANDBOXED
    with _CHOICE_LOCK:
        problems = {}
        for mode in SANDBOXES:
            problems[mode] = _sandbox_problem(mode)
            if problems[mode] is None:
                return mode
    reasons = "; ".join(f"{mode}: {problem}" for mode, problem in problems.items())
    raise SandboxUnavailableError(
        f"--program-of-thought executes model-written programs in a sandbox, and none works here ({reasons}). "
        "Install bubblewrap (e.g. apt install bubblewrap) or allow unprivileged user namespaces (Debian: sysctl "
        "kernel.unprivileged_userns_clone=1; Ubuntu: sysctl kernel.apparmor_restrict_unprivileged_userns=0), or "
        "pass --unsandboxed-programs to run the programs without a sandbox (only inside a disposable container or "
        "VM without network and without your files; docs/evaluation.md, Program-of-thought)"
    )


def run_programs(codes: Sequence[str], *, workers: int | None = None, **limits) -> list[ProgramRun]:
    """:func:`run_program` on each of ``codes``, a few at a time (``workers``: default up to 4, one per CPU)."""
    if not codes:
        return []
    workers = workers or max(1, min(4, os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda code: run_program(code, **limits), codes))
