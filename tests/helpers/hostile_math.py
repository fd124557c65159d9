"""Outputs that cost math-verify (sympy) far more than their length: the hostile set of the math-verify budget's
test (tests/evaluation/test_math_verify_budget.py) and measurement (bench/math_verify_budget.py), beside plain
GSM8K-style outputs of the same shape. Each is a chain-of-thought that ends in a hostile "answer"; none of them is
the reference (:data:`REFERENCE`), so each is "not verified" whether math-verify finishes or its budget stops it."""

from __future__ import annotations

REFERENCE = "18"
_REASONING = (
    "Janet's ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes muffins for her "
    "friends every day with four. She sells the rest at the market for two dollars per egg. Her takings, "
    "simplified: "
)


def _tower(base: str, levels: int) -> str:
    return "^{".join([base] * levels) + "}" * (levels - 1)


def _fractions(levels: int) -> str:
    return "\\frac{1}{" * levels + "2" + "}" * levels


# name -> (the hostile end of the output, "runaway": math-verify takes more than the 1 s budget on it: measured with
# a budget of 6 s and 2 GiB, each runaway was stopped at 6 s, or at 2.0 s and 3.4 s of CPU (the \sqrt and the 200
# \frac nests); the others took 0.05-0.26 s)
HOSTILE = {
    "power tower 10^10^10": ("$10^{10^{10}}$", True),
    "power tower 9^9^9^9": ("$9^{9^{9^{9}}}$", True),
    "power tower 2^2^2^2^2^30": ("$2^{2^{2^{2^{2^{30}}}}}$", True),
    "7 KB power tower": (f"${_tower('9', 1750)}$", True),
    "power tower in a box": (f"$\\boxed{{{_tower('7', 12)}}}$", True),
    "(x+1)^1000000": ("$(x+1)^{1000000}$", True),
    "(x+y+1)^100000": ("$(x+y+1)^{100000}$", True),
    "(x+1)^1000000 - 3": ("The answer is $(x+1)^{1000000} - (x+1)^{1000000} + 3$.", False),
    "((10!)!)!": ("$((10!)!)!$", True),
    "(100!)!": ("The answer is $(100!)!$", True),
    "factorial chain 1000!!!!": ("$1000!!!!$", False),
    "99999999! / 99999998!": ("$\\frac{99999999!}{99999998!}$", True),
    "deep \\frac nest 200": (f"${_fractions(200)}$", True),  # 3.4 s of CPU unbounded
    "deep \\frac nest 60": (f"$\\boxed{{{_fractions(60)}}}$", True),
    "\\sqrt nest 300": ("$" + "\\sqrt{" * 300 + "2" + "}" * 300 + "$", True),  # 2.0 s unbounded
    "10^{10^{10}} in a sum": ("The answer is $18 + 10^{10^{10}} - 10^{10^{10}}$.", True),
    "binomial (10^10 choose 10^5)": ("$\\binom{10^{10}}{10^{5}}$", True),
    "10^{10^{10}} mod 7": ("$10^{10^{10}} \\bmod 7$", False),
    "many huge powers": ("$" + " + ".join(f"{n}^{{{n}^{{{n}}}}}" for n in range(5, 15)) + "$", True),
    "parentheses 2000 deep": ("$" + "(" * 2000 + "18" + ")" * 2000 + "+1$", True),
}
HOSTILE_OUTPUTS = {name: _REASONING + end for name, (end, _) in HOSTILE.items()}
RUNAWAY = [name for name, (_, runaway) in HOSTILE.items() if runaway]

# plain outputs of the same shape: right, wrong, LaTeX, cut short
PLAIN_OUTPUTS = [
    _REASONING + end
    for end in (
        "The answer is 18.",
        "The answer is $18$.",
        "The answer is $\\boxed{18}$.",
        "The answer is 17.",
        "The answer is $\\frac{36}{2}$.",
        "So the total is 9 * 2 = 18. The answer is 18",
        "The answer is 18 dollars.",
        "The answer is $18.00.",
        "The answer is $\\boxed{\\$18}$",
        "The answer is 9.",
        "She makes 9 \\times 2 = 18 dollars. The answer is 18.",
        "The answer is 1,8.",
        "The answer is $2 \\cdot 9 = 18$.",
        "The answer is eighteen.",
        "The answer is $x = 18$.",
        "The answer is 16.",
        "The answer is $\\frac{1}{2}$.",
        "The answer is $3^2 \\cdot 2$.",
        "The answer is 18 + 0 =",
        "Therefore the answer is 18",
    )
]
