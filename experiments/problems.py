"""Arithmetic word problems with integer and decimal answers, for the demo's fine-tuning and held-out sets.

Every problem is one of a few templates filled with seeded random names and operands; the answer is computed
exactly with :class:`decimal.Decimal` (no binary float rounding) and written as ``The answer is N`` with N in
plain positional notation, trailing decimal zeros removed (``12.5``, ``340``).

Two problems *overlap* when they have the same template and the same operands (the names and objects do not
change the arithmetic); :func:`make_splits` guarantees that no held-out problem overlaps a training problem.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

__all__ = [
    "ANSWER_PREFIX",
    "Problem",
    "format_number",
    "generate_problems",
    "make_splits",
    "write_chat_jsonl",
    "write_eval_jsonl",
    "TEMPLATES",
]

ANSWER_PREFIX = "The answer is"

_PEOPLE = (
    ("Ana", "She"),
    ("Ben", "He"),
    ("Chen", "He"),
    ("Dara", "She"),
    ("Emeka", "He"),
    ("Fatima", "She"),
    ("Gus", "He"),
    ("Hana", "She"),
    ("Ivan", "He"),
    ("Julia", "She"),
    ("Kofi", "He"),
    ("Lena", "She"),
    ("Mateo", "He"),
    ("Nia", "She"),
    ("Omar", "He"),
    ("Priya", "She"),
    ("Quinn", "He"),
    ("Rosa", "She"),
    ("Sami", "He"),
    ("Tara", "She"),
)
_COUNTABLES = ("marbles", "stickers", "apples", "stamps", "beads", "cards", "shells", "coins", "pencils", "eggs")
_GOODS = (
    ("notebook", "notebooks"),
    ("ticket", "tickets"),
    ("sandwich", "sandwiches"),
    ("bottle of juice", "bottles of juice"),
    ("pen", "pens"),
    ("box of tea", "boxes of tea"),
    ("toy car", "toy cars"),
    ("bag of rice", "bags of rice"),
    ("poster", "posters"),
    ("cup of coffee", "cups of coffee"),
)
_VEHICLES = ("train", "car", "bus", "truck", "boat", "cyclist")

CENT = Decimal("0.01")
TENTH = Decimal("0.1")


def format_number(value: Decimal | int) -> str:
    """Plain positional notation without trailing decimal zeros: 12.50 -> '12.5', 1E+2 -> '100', -0 -> '0'."""
    value = Decimal(value)
    text = format(value.normalize(), "f")
    return "0" if text in ("-0", "0") else text


def _money(value: Decimal) -> str:
    return f"${value:.2f}"


def _cents(rng: random.Random, low: int, high: int) -> Decimal:
    """A random amount of money between low and high cents, as dollars."""
    return Decimal(rng.randint(low, high)) * CENT


# Each template returns (question, answer, operands); operands identify the arithmetic for overlap checks. The
# ranges keep answers to at most four digits: a 135M model fine-tuned for minutes on a CPU, answering without
# working, gets some of them right, so the fine-tunes can be told apart by accuracy and not only by digit metrics.
def _add_items(rng: random.Random):
    (name, pron), items = rng.choice(_PEOPLE), rng.choice(_COUNTABLES)
    a, b = rng.randint(10, 199), rng.randint(10, 99)
    question = f"{name} has {a} {items}. {pron} gets {b} more {items}. How many {items} does {name} have now?"
    return question, Decimal(a + b), (a, b)


def _spend_money(rng: random.Random):
    (name, _), (thing, _) = rng.choice(_PEOPLE), rng.choice(_GOODS)
    have = _cents(rng, 40, 399) * 25  # $10.00 .. $99.75 in quarters
    spend = _cents(rng, 4, int(have / CENT) // 25 - 1) * 25
    question = (
        f"{name} has {_money(have)} and spends {_money(spend)} on a {thing}. How many dollars does {name} have left?"
    )
    return question, have - spend, (have, spend)


def _unit_price(rng: random.Random):
    (thing, things) = rng.choice(_GOODS)
    price, count = _cents(rng, 4, 80) * 25, rng.randint(2, 6)  # $1.00 .. $20.00 in quarters
    question = f"One {thing} costs {_money(price)}. How many dollars do {count} {things} cost?"
    return question, price * count, (price, count)


def _share_equally(rng: random.Random):
    (name, _), items = rng.choice(_PEOPLE), rng.choice(_COUNTABLES)
    friends, each = rng.randint(2, 9), rng.randint(3, 60)
    total = friends * each
    question = f"{name} shares {total} {items} equally among {friends} friends. How many {items} does each friend get?"
    return question, Decimal(each), (total, friends)


def _travel_distance(rng: random.Random):
    vehicle = rng.choice(_VEHICLES)
    speed, hours = Decimal(rng.randint(20, 120)) / 2, rng.randint(2, 5)  # 10.0 .. 60.0 km/h in halves
    question = f"A {vehicle} travels at {speed:.1f} km per hour for {hours} hours. How many km does it travel?"
    return question, speed * hours, (speed, hours)


def _change(rng: random.Random):
    (name, _), (_, things) = rng.choice(_PEOPLE), rng.choice(_GOODS)
    count, price = rng.randint(2, 5), _cents(rng, 21, 199) * 5  # $1.05 .. $9.95 in nickels
    bill = next(b for b in (20, 50) if b > count * price)
    question = (
        f"{name} buys {count} {things} at {_money(price)} each and pays with a ${bill} bill. "
        f"How much change in dollars does {name} get?"
    )
    return question, Decimal(bill) - count * price, (count, price, bill)


def _weekly_savings(rng: random.Random):
    (name, _) = rng.choice(_PEOPLE)
    per_week, weeks = rng.randint(5, 60), rng.randint(2, 9)
    question = f"{name} saves {per_week} dollars every week. How many dollars does {name} save in {weeks} weeks?"
    return question, Decimal(per_week * weeks), (per_week, weeks)


TEMPLATES: dict[str, Callable[[random.Random], tuple[str, Decimal, tuple]]] = {
    "add_items": _add_items,
    "spend_money": _spend_money,
    "unit_price": _unit_price,
    "share_equally": _share_equally,
    "travel_distance": _travel_distance,
    "change": _change,
    "weekly_savings": _weekly_savings,
}


@dataclass(frozen=True)
class Problem:
    question: str
    answer: Decimal
    kind: str
    operands: tuple

    @property
    def key(self) -> tuple:
        """What makes two problems the same arithmetic (names and objects aside)."""
        return (self.kind, tuple(str(x) for x in self.operands))

    @property
    def answer_text(self) -> str:
        return f"{ANSWER_PREFIX} {format_number(self.answer)}"


def generate_problems(n: int, seed: int, exclude: Iterable[tuple] = ()) -> list[Problem]:
    """``n`` distinct problems (templates in turn, operands from ``random.Random(seed)``), none with a key in
    ``exclude``."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(seed)
    kinds = list(TEMPLATES)
    seen = set(exclude)
    problems: list[Problem] = []
    attempts = 0
    while len(problems) < n:
        attempts += 1
        if attempts > 100 * n + 1000:
            raise RuntimeError(
                f"could not draw {n} distinct problems (got {len(problems)}); the templates' ranges are too small"
            )
        kind = kinds[len(problems) % len(kinds)]
        question, answer, operands = TEMPLATES[kind](rng)
        problem = Problem(question, answer, kind, operands)
        if problem.key in seen:
            continue
        seen.add(problem.key)
        problems.append(problem)
    return problems


def make_splits(n_train: int, n_eval: int, seed: int) -> tuple[list[Problem], list[Problem]]:
    """A training set and a held-out set from the same generator, with no problem (template + operands) in both."""
    train = generate_problems(n_train, seed)
    held_out = generate_problems(n_eval, seed + 1_000_003, exclude=[p.key for p in train])
    return train, held_out


def write_chat_jsonl(path: Path, problems: Iterable[Problem]) -> Path:
    """Training rows for Axolotl's ``chat_template`` type: ``{"messages": [user, assistant]}``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for p in problems:
            messages = [{"role": "user", "content": p.question}, {"role": "assistant", "content": p.answer_text}]
            handle.write(json.dumps({"messages": messages}) + "\n")
    return path


def write_eval_jsonl(path: Path, problems: Iterable[Problem]) -> Path:
    """Held-out rows in del-eval's plain format: ``{"question", "answer": "The answer is N", "kind"}``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for p in problems:
            handle.write(json.dumps({"question": p.question, "answer": p.answer_text, "kind": p.kind}) + "\n")
    return path
