"""The second scorer: Hugging Face's ``math-verify`` (symbolic and numeric equivalence: ``0.5`` is
``\\frac{1}{2}``, ``x=3`` is ``3``), beside the paper's exact rules, which stay the default.

What it is given, per problem (:func:`math_verify_inputs`):

* the **prediction**: the text the paper's reader scored (the model's output; for program-of-thought, "The answer
  is " and what the program printed, or nothing when the program failed), its last :data:`MAX_PREDICTION_CHARS`
  characters (a runaway generation cannot make it slow: its answer is at the end), read by math-verify's own
  extraction;
* the **gold**: numbers (GSM8K, SVAMP, SimulEq, ``--data`` files) the reference number; MATH the last
  ``\\boxed{...}`` of the reference solution, as written there (not our normalised form); option sets (AQuA, SAT,
  MMLU-math) the reference letter, both read with ``StringExtractionConfig(strings=<the set's letters>)``: a
  letter standing as a word ("B", "B.", "answer: B"; not "(B)"), and no "A" for an output without one.

The budget: math-verify's own timeouts are signal alarms on wall time (5 s per parse and per comparison), which
let a short hostile answer cost that much (``$10^{10^{10}}$``: about 5 s a problem) and bound no memory
(``$(x+1)^{1000000}$``: 1.8 GB). So it runs in a process of its own (:mod:`.math_verify_worker`), one for the whole
run, started at the first problem, which scores each problem in a forked process under a hard budget enforced by
the kernel: parse and verify together, gold and prediction, :data:`CPU_BUDGET_S` second of CPU time and
:data:`MEMORY_BUDGET_MB` MiB of memory. A problem over it is "not verified" (False) with the reason
(:attr:`MathVerifyResult.over_budget`, the record's ``math_verify_note``, the set's ``over_budget`` count), and the
run goes on. Before any of it, a static guard (:mod:`.math_verify_guard`) reads the prediction and sends no
answer whose evaluation would explode (a power tower, ``(x+1)^{1000000}``, ``(100!)!``, a deep nest) to
math-verify: it is not verified at once, with the guard's reason, counted with the rest.
A worker that gives no answer within :data:`TIMEOUT_S` seconds of wall time (only a stalled machine:
the budget stops a slow problem long before) is killed and replaced, the problem scored the same way. It works
from any thread and never hangs the run. Without math-verify installed, every verdict is None and reports say so
in one line (:data:`MISSING_NOTE`).
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import logging
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..benchmarks.latex import last_boxed
from .math_verify_guard import too_costly

LOG = logging.getLogger(__name__)

__all__ = [
    "CPU_BUDGET_S",
    "MAX_PREDICTION_CHARS",
    "MEMORY_BUDGET_MB",
    "MISSING_NOTE",
    "TIMEOUT_S",
    "MathVerifyResult",
    "MathVerifyScorer",
    "math_verify_check",
    "math_verify_available",
    "math_verify_inputs",
    "math_verify_verdict",
]

MAX_PREDICTION_CHARS = 8_000
# the per-problem budget, given to math_verify_worker.py (which imports nothing of del_plugin) when it starts
CPU_BUDGET_S = 1.0
MEMORY_BUDGET_MB = 512
# the worker's own backstop: it kills a problem's process after 30 s of wall time, so this fires only on a worker
# that is itself stuck
TIMEOUT_S = 60.0
# importing sympy and math-verify on a loaded machine
_START_TIMEOUT_S = 120.0
MISSING_NOTE = (
    "math-verify accuracy not computed: math-verify is not installed (pip install 'del-plugin[eval]'); the "
    "accuracy is the default scorer's only"
)
_WORKER = Path(__file__).with_name("math_verify_worker.py")


def math_verify_available() -> bool:
    """Whether ``math-verify`` is installed (it is imported in its own process only)."""
    return importlib.util.find_spec("math_verify") is not None


def math_verify_inputs(
    output: str, reference: str, scoring: str, letters: str = "", solution: str | None = None
) -> tuple[str, str, str]:
    """``(gold, prediction, letters)`` as math-verify is given them (see the module docs). ``scoring``: the set's
    (``numeric``, ``numeric-tolerance``, ``latex``, ``choice``); ``letters``: an option set's letters."""
    prediction = output[-MAX_PREDICTION_CHARS:]
    if scoring == "choice":
        return reference, prediction, letters
    if scoring == "latex":
        boxed = last_boxed(solution) if solution else None
        return (f"$\\boxed{{{boxed}}}$" if boxed is not None else f"${reference}$"), prediction, ""
    return reference, prediction, ""


@dataclass(frozen=True)
class MathVerifyResult:
    """math-verify's verdict on one problem: ``correct``; ``over_budget`` why it gave none (the CPU or memory
    budget, a process that died or stalled), else None; ``cpu_s``, ``max_rss_mb`` and ``memory_limit_mb``: the CPU
    time, the largest resident memory and the address-space limit of the problem's process (None: unknown)."""

    correct: bool
    over_budget: str | None = None
    cpu_s: float | None = None
    max_rss_mb: float | None = None
    memory_limit_mb: float | None = None


class MathVerifyScorer:
    """math-verify in its own process behind the guard (see the module docs); :meth:`correct` is safe to call from
    any thread."""

    def __init__(
        self,
        timeout_s: float = TIMEOUT_S,
        cpu_s: float = CPU_BUDGET_S,
        memory_mb: int = MEMORY_BUDGET_MB,
        guard: Callable[[str], str | None] | None = too_costly,
    ):
        self.timeout_s = timeout_s
        self.guard = guard  # None: every answer to math-verify, the budget alone (its tests)
        self.budget = {"cpu_s": cpu_s, "memory_mb": memory_mb}
        self.timeouts = 0
        self.over_budget = 0
        self._process: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def _start(self) -> subprocess.Popen:
        env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
        process = subprocess.Popen(
            [sys.executable, str(_WORKER), str(self.budget["cpu_s"]), str(self.budget["memory_mb"])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # math-verify logs each of its own timeouts there
            env=env,
            # a Ctrl-C is the run's to handle; the worker ends when its stdin closes (the run ended, however)
            start_new_session=True,
        )
        reply = self._read(process, _START_TIMEOUT_S)
        if reply is None or not reply.get("ready") or reply.get("budget") != self.budget:
            self._stop(process)
            raise RuntimeError(f"math-verify did not start ({sys.executable} {_WORKER})")
        return process

    @staticmethod
    def _read(process: subprocess.Popen, timeout_s: float) -> dict | None:
        """The next line of the worker as JSON, or None when none came within ``timeout_s`` (or it died)."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([process.stdout], [], [], left)
            if ready:
                line = process.stdout.readline()
                try:
                    return json.loads(line) if line else None
                except json.JSONDecodeError:
                    return None

    @staticmethod
    def _stop(process: subprocess.Popen) -> None:
        process.kill()
        process.wait()
        for stream in (process.stdin, process.stdout):
            stream.close()

    def correct(self, gold: str, prediction: str, letters: str = "") -> bool:
        """math-verify's verdict on ``prediction`` against ``gold`` (False when over the budget: :meth:`check`)."""
        return self.check(gold, prediction, letters).correct

    def check(self, gold: str, prediction: str, letters: str = "") -> MathVerifyResult:
        """math-verify's verdict on ``prediction`` against ``gold``, within the budget (see the module docs)."""
        prediction = prediction[-MAX_PREDICTION_CHARS:]
        reason = self.guard(prediction) if self.guard else None  # too large to evaluate: no process spent on it
        if reason is not None:
            with self._lock:
                self._count_over_budget(reason)
            return MathVerifyResult(False, reason, cpu_s=0.0)
        request = json.dumps({"gold": gold, "prediction": prediction, "letters": letters})
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._process = self._start()
            try:
                self._process.stdin.write(request.encode() + b"\n")
                self._process.stdin.flush()
                reply = self._read(self._process, self.timeout_s)
            except OSError:  # the worker died (killed from outside): this problem has no verdict, the next a new one
                reply = None
            except BaseException:  # a Ctrl-C while it works: its late answer must not be read as the next one's
                self.close_unlocked()
                raise
            if reply is None:
                self.timeouts += 1
                self.over_budget += 1
                LOG.warning(
                    "math-verify gave no verdict within %.0f s: not verified, its process replaced", self.timeout_s
                )
                self.close_unlocked()
                return MathVerifyResult(False, f"wall time: no answer within {self.timeout_s:g} s (worker replaced)")
            usage = (reply.get(key) for key in ("cpu_s", "max_rss_mb", "memory_limit_mb"))
            result = MathVerifyResult(bool(reply.get("correct")), reply.get("over_budget"), *usage)
            if result.over_budget is not None:
                self._count_over_budget(result.over_budget)
            return result

    def _count_over_budget(self, reason: str) -> None:
        self.over_budget += 1
        if self.over_budget == 1:  # once a run: each such problem's reason is in its record
            LOG.warning(
                "math-verify gave a problem no verdict within its budget (%s): counted not verified; the reports "
                "record each such problem and its reason",
                reason,
            )

    def close_unlocked(self) -> None:
        if self._process is not None:
            self._stop(self._process)
            self._process = None

    def close(self) -> None:
        with self._lock:
            self.close_unlocked()


_SCORER: MathVerifyScorer | None = None
_SCORER_LOCK = threading.Lock()


def _scorer() -> MathVerifyScorer:
    global _SCORER
    with _SCORER_LOCK:
        if _SCORER is None:
            _SCORER = MathVerifyScorer()
            atexit.register(_SCORER.close)
        return _SCORER


def math_verify_check(
    output: str, reference: str, scoring: str, letters: str = "", solution: str | None = None
) -> MathVerifyResult | None:
    """math-verify's verdict on one output (:func:`math_verify_inputs`) within the budget, or None without
    math-verify."""
    if not math_verify_available():
        return None
    gold, prediction, letters = math_verify_inputs(output, reference, scoring, letters, solution)
    return _scorer().check(gold, prediction, letters)


def math_verify_verdict(
    output: str, reference: str, scoring: str, letters: str = "", solution: str | None = None
) -> bool | None:
    """math-verify's verdict on one output (:func:`math_verify_inputs`; False over the budget), or None without
    math-verify."""
    result = math_verify_check(output, reference, scoring, letters, solution)
    return None if result is None else result.correct
