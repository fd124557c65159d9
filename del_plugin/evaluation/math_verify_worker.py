"""The process that runs Hugging Face's ``math-verify`` for :mod:`.math_verify_scoring`, started as a script (not
imported: it must not load del-plugin, torch or anything else than math-verify).

One JSON request a line on stdin, ``{"gold": str, "prediction": str, "letters": str}`` (``letters`` empty: a
number or LaTeX answer), one JSON line back: ``{"correct": bool}``, or ``{"error": "..."}`` when math-verify
raised. Its address space is capped (a runaway sympy expression ends in a MemoryError, scored wrong, not in the
machine swapping); math-verify's own per-call timeouts (signal alarms: this is the process's main thread) stop a
slow parse or comparison, and the parent kills this process when even they do not answer in time.
"""

import json
import resource
import sys

MEMORY_LIMIT_BYTES = 2 * 1024**3
# math-verify's own limits, per parse and per comparison (seconds; it takes whole seconds)
PARSE_TIMEOUT_S = 5


def _limit_memory() -> None:
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = MEMORY_LIMIT_BYTES if hard == resource.RLIM_INFINITY else min(MEMORY_LIMIT_BYTES, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ValueError, OSError):  # a platform without RLIMIT_AS: the parent's wall-clock limit still holds
        pass


def _configs(letters: str):
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, StringExtractionConfig

    if letters:
        return [StringExtractionConfig(strings=tuple(letters))]
    return [LatexExtractionConfig(), ExprExtractionConfig()]


def verdict(gold: str, prediction: str, letters: str) -> bool:
    from math_verify import parse, verify

    configs = _configs(letters)
    parsed_gold = parse(gold, configs, parsing_timeout=PARSE_TIMEOUT_S)
    parsed_prediction = parse(prediction, configs, parsing_timeout=PARSE_TIMEOUT_S)
    return bool(parsed_gold) and bool(verify(parsed_gold, parsed_prediction, timeout_seconds=PARSE_TIMEOUT_S))


def serve() -> None:
    _limit_memory()
    import math_verify  # noqa: F401 - loaded before the first request, whose time limit it must not eat

    replies, sys.stdout = sys.stdout, sys.stderr  # whatever a library prints must not pass for a reply
    print(json.dumps({"ready": True}), file=replies, flush=True)
    for line in sys.stdin:
        try:
            request = json.loads(line)
            answer = {"correct": verdict(request["gold"], request["prediction"], request.get("letters", ""))}
        except (Exception, MemoryError) as err:  # noqa: BLE001 - one problem's failure is its verdict, not the run's
            answer = {"error": f"{type(err).__name__}: {str(err)[:200]}"}
        print(json.dumps(answer), file=replies, flush=True)


if __name__ == "__main__":
    # run as a script, sys.path[0] is del_plugin/evaluation/, whose modules (data.py, errors.py, …) must not shadow
    # top-level modules of math-verify's dependencies
    sys.path.pop(0)
    serve()
