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
  with nothing in it), no other process in sight, nothing it can signal outside, no new user namespaces; an empty
  ``/proc`` (no procfs: not the caller's environment or command line, not the mount table, which names the
  host's paths), and the launcher's settings on its stdin, not in its command line;
* a new root holding only the system's programs and libraries (``/usr``, ``/lib*``, ``/bin``), the Python
  installation it runs with and its virtual environment, all read-only, of their packages only the standard
  library and :data:`~.mounts.ALLOWED_PACKAGES` (each folder of packages an empty view with those bound into it:
  no other package's data, such as lm-eval's task files with MATH answers), a few device nodes, and its folder
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

The package, one job a module: :mod:`.extract` (the program in an output), :mod:`.choice` (which sandbox works
here), :mod:`.launch` (one run in one mode, its limits and its ending), :mod:`.mounts` (what a sandboxed program
sees), :mod:`.bwrap` (bubblewrap's command line), :mod:`.folders` (the program's folder outside) and
:mod:`.launcher` (the script that builds the namespaces sandbox and sets the limits: standard library only). It
imports nothing of the rest of del_plugin, so that the tests can run it alone.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from .choice import SandboxUnavailableError, program_sandbox
from .extract import extract_program
from .launch import (
    PROGRAM_MEMORY_MB,
    PROGRAM_OUTPUT_BYTES,
    PROGRAM_PROCESSES,
    PROGRAM_TIMEOUT_S,
    SANDBOXES,
    UNSANDBOXED,
    ProgramRun,
    launch_program,
)

LOG = logging.getLogger(__name__)

__all__ = [
    "PROGRAM_MEMORY_MB",
    "PROGRAM_OUTPUT_BYTES",
    "PROGRAM_PROCESSES",
    "PROGRAM_TIMEOUT_S",
    "ProgramRun",
    "SANDBOXES",
    "SandboxUnavailableError",
    "UNSANDBOXED",
    "extract_program",
    "program_sandbox",
    "run_program",
    "run_programs",
]


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
    run, started = launch_program(code, mode, timeout_s, memory_mb, output_bytes, processes, hidden)
    if not started:
        LOG.warning("a program was not run: %s", run.detail)
    return run


def run_programs(codes: Sequence[str], *, workers: int | None = None, **limits) -> list[ProgramRun]:
    """:func:`run_program` on each of ``codes``, a few at a time (``workers``: default up to 4, one per CPU)."""
    if not codes:
        return []
    workers = workers or max(1, min(4, os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda code: run_program(code, **limits), codes))
