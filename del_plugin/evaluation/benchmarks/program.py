"""Program-of-thought answers: the Python program a model wrote, run in a separate, limited interpreter.

The paper runs GSM8K, SVAMP, SimulEq and MATH as program-of-thought: the question ends in "Let's write a program.",
an output that contains ``print(`` is taken for a program and run, and what it prints becomes the answer ("The
answer is <stdout>"). A program that fails, or prints nothing, gives no answer, and the problem is asked again
as chain-of-thought. ``del-eval`` does this only when asked (``--program-of-thought``): it executes model-written
code.

:func:`run_program` runs one program:

* in a new interpreter (``sys.executable -I``: no ``PYTHON*`` variables, no user site, no current folder on the
  path), in its own session (process group), with stdin closed;
* in an empty temporary folder, its working directory and ``HOME``, deleted afterwards;
* with an environment of its own, nothing inherited: ``PATH=/usr/bin:/bin``, a UTF-8 locale, one BLAS thread;
* under limits set in the child before the program starts: CPU time and wall time (``timeout_s``, 5 s as in the
  paper's harness; the whole process group is killed at the wall limit), address space (``memory_mb``), size of
  any file it writes (``output_bytes``; its stdout is such a file), 64 open files, no core dump.

What it does **not** stop (it is a guard against accidents and runaway programs, not a security boundary): the
program runs as your user, so it can read, change and delete every file you can outside its folder, open network
connections, start processes (within the limits above, which they inherit), and signal your other processes. Run
``--program-of-thought`` on models you do not trust only inside a container or VM without network and without
your files.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ProgramRun", "extract_program", "run_program", "run_programs"]

PROGRAM_TIMEOUT_S = 5.0
PROGRAM_MEMORY_MB = 2048
PROGRAM_OUTPUT_BYTES = 1 << 20
_STOP_AT = ("### Instruction",)
_FENCE = re.compile(r"```[ \t]*(?:python|py)?[ \t]*\n(.*?)(?:```|$)", re.DOTALL | re.IGNORECASE)

# Runs in the child before the model's program: set the limits (soft = hard, so the program cannot raise them
# unless it runs as root), then execute program.py as __main__.
_LAUNCHER = """
import resource, sys
cpu, memory, output = (int(a) for a in sys.argv[1:4])
for limit, value in ((resource.RLIMIT_CPU, cpu), (resource.RLIMIT_AS, memory), (resource.RLIMIT_FSIZE, output),
                     (resource.RLIMIT_NOFILE, 64), (resource.RLIMIT_CORE, 0)):
    resource.setrlimit(limit, (value, value))
del resource, cpu, memory, output, limit, value
sys.argv = ["program.py"]
with open("program.py", encoding="utf-8") as source:
    code = compile(source.read(), "program.py", "exec")
exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
"""


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


def _environment(folder: str) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": folder,
        "TMPDIR": folder,
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


def run_program(
    code: str,
    *,
    timeout_s: float = PROGRAM_TIMEOUT_S,
    memory_mb: int = PROGRAM_MEMORY_MB,
    output_bytes: int = PROGRAM_OUTPUT_BYTES,
) -> ProgramRun:
    """Run ``code`` under the limits of the module docs; return how it ended and what it printed."""
    cpu_seconds = max(1, int(timeout_s + 0.999))
    with tempfile.TemporaryDirectory(prefix="del-eval-program-") as folder:
        work = Path(folder)
        (work / "program.py").write_text(code, encoding="utf-8")
        out_path, err_path = work / "stdout.txt", work / "stderr.txt"
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            command = [sys.executable, "-I", "-c", _LAUNCHER, str(cpu_seconds), str(memory_mb << 20), str(output_bytes)]
            process = subprocess.Popen(
                command,
                cwd=folder,
                env=_environment(folder),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                close_fds=True,
            )
            try:
                returncode = process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                return ProgramRun("timeout", "", f"still running after {timeout_s:g} s")
            finally:
                _kill_group(process)  # whatever it started is stopped with it
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


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


def run_programs(codes: Sequence[str], *, workers: int | None = None, **limits) -> list[ProgramRun]:
    """:func:`run_program` on each of ``codes``, a few at a time (``workers``: default up to 4, one per CPU)."""
    if not codes:
        return []
    workers = workers or max(1, min(4, os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda code: run_program(code, **limits), codes))
