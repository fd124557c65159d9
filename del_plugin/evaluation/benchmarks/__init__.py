"""The DEL paper's seven benchmarks (GSM8K, MATH, SVAMP, SimulEq, AQuA, SAT, MMLU-math): their files, their answer
readers and scorers (the paper's harness's rules), and the sandbox that runs program-of-thought answers."""

from .latex import last_boxed, normalize_math_answer, same_math_answer
from .readers import Verdict, read_choice, read_math_answer, read_number, score_choice, score_math, score_number
from .sets import (
    BENCHMARK_NAMES,
    BENCHMARKS,
    Benchmark,
    BenchmarkSet,
    Problem,
    load_benchmark,
    resolve_benchmark_names,
)

__all__ = [
    "BENCHMARKS",
    "BENCHMARK_NAMES",
    "Benchmark",
    "BenchmarkSet",
    "Problem",
    "Verdict",
    "last_boxed",
    "load_benchmark",
    "normalize_math_answer",
    "read_choice",
    "read_math_answer",
    "read_number",
    "resolve_benchmark_names",
    "same_math_answer",
    "score_choice",
    "score_math",
    "score_number",
]
