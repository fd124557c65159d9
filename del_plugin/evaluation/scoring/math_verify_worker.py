"""The process that runs Hugging Face's ``math-verify`` for :mod:`.math_verify_scoring`, started as a script (not
imported: it must not load del-plugin, torch or anything else than math-verify).

One JSON request a line on stdin, ``{"gold": str, "prediction": str, "letters": str}`` (``letters`` empty: a
number or LaTeX answer), one JSON line back: ``{"correct": bool, "over_budget": None | str, "cpu_s": float,
"max_rss_mb": float, "memory_limit_mb": float}``; ``over_budget`` says why a problem got no verdict (then
``correct`` is False); the rest is what the kernel counted for the problem's process and its address-space limit.

The budget (per problem, parse and verify together, gold and prediction): each problem is scored in a process
forked from this one (math-verify and sympy already loaded and warmed, so a fork costs milliseconds), which the
kernel stops once it has used :data:`CPU_BUDGET_S` seconds of CPU time (``ITIMER_PROF``, whose signal ends the
process: it fires inside a long C computation too, where a Python-level alarm would wait; ``RLIMIT_CPU`` one second
later as a second stop) and whose address space may grow by :data:`MEMORY_BUDGET_BYTES` at most (``RLIMIT_AS``: an
allocation past it fails). math-verify's own timeouts (signal alarms on wall time, which its ``verify`` cannot
always honour) are off: this budget is the only one. A problem stopped by it, or whose process died otherwise, is
answered ``{"correct": false, "over_budget": "<why>"}`` and this process goes on with the next one; so it is
restarted only when it is killed itself (the parent's backstop, :data:`WALL_BACKSTOP_S` here first).
"""

import json
import math
import os
import resource
import select
import signal
import sys

# set from the command line (``<CPU seconds> <memory MiB>``) by math_verify_scoring.py, the budget's one home
CPU_BUDGET_S = 1.0
MEMORY_BUDGET_BYTES = 512 * 1024**2
# a problem's process still running after this many seconds of wall time (it waits on nothing, so only a machine
# stalled for that long gets here) is killed: the CPU budget is what stops a slow problem
WALL_BACKSTOP_S = 30.0
_MONITOR_TOOL = 4  # a sys.monitoring tool id of its own (0-5; 0, 1, 2, 5 are the debugger, coverage, profiler...)
_CPU_SIGNALS = {signal.SIGPROF: "ITIMER_PROF", signal.SIGXCPU: "RLIMIT_CPU", signal.SIGKILL: "RLIMIT_CPU"}


def _configs(letters: str):
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, StringExtractionConfig

    if letters:
        return [StringExtractionConfig(strings=tuple(letters))]
    return [LatexExtractionConfig(), ExprExtractionConfig()]


def verdict(gold: str, prediction: str, letters: str) -> bool:
    """math-verify's verdict, without its own timeouts (see the module docs)."""
    from math_verify import parse, verify

    configs = _configs(letters)
    parsed_gold = parse(gold, configs, parsing_timeout=None)
    parsed_prediction = parse(prediction, configs, parsing_timeout=None)
    return bool(parsed_gold) and bool(verify(parsed_gold, parsed_prediction, timeout_seconds=None))


def _address_space() -> int:
    """This process's address space now (bytes)."""
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _watch_memory_errors(seen: list) -> None:
    """Note every MemoryError raised (math-verify catches every exception of a parse or a comparison and returns
    "no verdict": the budget's reason would be lost)."""
    monitoring = sys.monitoring
    monitoring.use_tool_id(_MONITOR_TOOL, "math-verify budget")

    def raised(code, offset, exception):
        if isinstance(exception, MemoryError):
            seen.append(True)

    monitoring.register_callback(_MONITOR_TOOL, monitoring.events.RAISE, raised)
    monitoring.set_events(_MONITOR_TOOL, monitoring.events.RAISE)


def _score_in_child(request: dict, write_fd: int, memory: int) -> None:
    """In the forked process: the budget set (``memory``: its address-space limit), the verdict written to
    ``write_fd``; never returns."""
    try:
        signal.signal(signal.SIGPROF, signal.SIG_DFL)  # its default action ends the process
        cpu_hard = math.ceil(CPU_BUDGET_S) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_hard, cpu_hard))
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        memory_errors: list = []
        _watch_memory_errors(memory_errors)
        signal.setitimer(signal.ITIMER_PROF, CPU_BUDGET_S)
        correct = verdict(request["gold"], request["prediction"], request.get("letters", ""))
        signal.setitimer(signal.ITIMER_PROF, 0)
        mib = MEMORY_BUDGET_BYTES >> 20
        answer = {"correct": correct, "over_budget": f"memory: over {mib} MiB" if memory_errors else None}
        if memory_errors:
            answer["correct"] = False
    except MemoryError:
        answer = {"correct": False, "over_budget": f"memory: over {MEMORY_BUDGET_BYTES >> 20} MiB"}
    except Exception as err:  # noqa: BLE001 - one problem's failure is its verdict, not the run's
        answer = {"correct": False, "over_budget": None, "error": f"{type(err).__name__}: {str(err)[:200]}"}
    try:
        os.write(write_fd, json.dumps(answer).encode())
    finally:
        os._exit(0)


def _ending(status: int, data: bytes) -> dict:
    """The child's answer, or why it gave none (how it ended)."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        if number in _CPU_SIGNALS:
            return {"correct": False, "over_budget": f"CPU time: over {CPU_BUDGET_S:g} s ({_CPU_SIGNALS[number]})"}
        return {"correct": False, "over_budget": f"killed by {signal.Signals(number).name}"}
    try:
        return json.loads(data)
    except json.JSONDecodeError:
        return {"correct": False, "over_budget": f"ended without a verdict (exit status {os.WEXITSTATUS(status)})"}


def score(request: dict) -> dict:
    """One problem scored in a forked process under the budget (see the module docs)."""
    read_fd, write_fd = os.pipe()
    memory = _address_space() + MEMORY_BUDGET_BYTES  # the child starts with this process's address space
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _score_in_child(request, write_fd, memory)
    os.close(write_fd)
    data, stalled = b"", False
    try:
        while True:
            if not select.select([read_fd], [], [], WALL_BACKSTOP_S)[0]:
                stalled = True
                os.kill(pid, signal.SIGKILL)
                break
            chunk = os.read(read_fd, 65536)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(read_fd)
    _, status, usage = os.wait4(pid, 0)
    answer = _ending(status, data)
    if stalled:
        answer = {"correct": False, "over_budget": f"wall time: no verdict within {WALL_BACKSTOP_S:g} s"}
    # ru_maxrss: KiB on Linux
    cpu_s = usage.ru_utime + usage.ru_stime
    return answer | {"cpu_s": cpu_s, "max_rss_mb": usage.ru_maxrss / 1024, "memory_limit_mb": memory / 2**20}


def serve() -> None:
    import gc

    verdict("$1$", "1", "")  # math-verify's lazy imports and sympy's caches, loaded once, before the first fork
    gc.freeze()  # the loaded modules' objects stay out of each child's collections (and its copied pages)
    replies, sys.stdout = sys.stdout, sys.stderr  # whatever a library prints must not pass for a reply
    budget = {"cpu_s": CPU_BUDGET_S, "memory_mb": MEMORY_BUDGET_BYTES >> 20}
    print(json.dumps({"ready": True, "budget": budget}), file=replies, flush=True)
    for line in sys.stdin:
        try:
            answer = score(json.loads(line))
        except (Exception, MemoryError) as err:  # noqa: BLE001 - one problem's failure is its verdict
            answer = {"correct": False, "over_budget": None, "error": f"{type(err).__name__}: {str(err)[:200]}"}
        print(json.dumps(answer), file=replies, flush=True)


if __name__ == "__main__":
    # run as a script, sys.path[0] is del_plugin/evaluation/, whose modules (data.py, errors.py, …) must not shadow
    # top-level modules of math-verify's dependencies
    sys.path.pop(0)
    if len(sys.argv) == 3:
        CPU_BUDGET_S, MEMORY_BUDGET_BYTES = float(sys.argv[1]), int(sys.argv[2]) << 20
    serve()
