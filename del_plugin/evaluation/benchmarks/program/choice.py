"""Which sandbox programs run in on this machine: the first that runs a test program, found once per process."""

from __future__ import annotations

import functools
import threading

from .bwrap import bwrap_problem
from .launch import PROGRAM_MEMORY_MB, PROGRAM_OUTPUT_BYTES, PROGRAM_PROCESSES, SANDBOXES, UNSANDBOXED, launch_program

_CHOICE_LOCK = threading.Lock()


class SandboxUnavailableError(ValueError):
    """No sandbox works on this machine (and the programs were not allowed to run without one): the command asks
    for what cannot be done here as given (del-eval's exit status 2); ``--unsandboxed-programs`` is the explicit way
    out. (A ValueError, not del-eval's UsageError: this package imports nothing of del_plugin, so that the tests can
    run it alone.)"""


@functools.cache
def sandbox_problem(mode: str) -> str | None:
    """Why ``mode`` cannot run programs on this machine (None: it can), found by running one."""
    if mode == "bwrap":
        problem = bwrap_problem()
        if problem:
            return problem
    run, _ = launch_program("print(6 * 7)", mode, 30, PROGRAM_MEMORY_MB, PROGRAM_OUTPUT_BYTES, PROGRAM_PROCESSES)
    if run.status != "ok" or run.stdout != "42\n":
        return run.detail if run.detail.startswith(f"the {mode} sandbox") else f"a test program: {run.detail}"
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
            problems[mode] = sandbox_problem(mode)
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
