"""Evaluation sets: local JSONL files, one problem per line.

Three formats, told apart per line:

* **GSM8K**: ``{"question": ..., "answer": "<solution>\\n#### 72"}``; the reference is the number after "####".
* **plain numeric**: ``{"question": ..., "answer": ...}`` where the answer is a JSON number (``12.5``), a numeric
  string (``"1,234"``) or a text ending in the answer (``"The answer is 12.5"``); the reference is read with the
  same rule as model outputs (:func:`~.answers.extract_answer`).
* **chat**: ``{"messages": [{"role": "user", "content": ...}, {"role": "assistant", "content": ...}, ...]}`` (the
  format of chat fine-tuning sets): the last assistant turn is the answer (read as either of the above), the user
  turns before it, joined by a blank line, the question; system turns are left out.

The ``answer`` text (a JSON number as written) is also the *solution* the teacher-forced metrics score.

A bad line (not UTF-8, not JSON, not an object, a missing or empty field, no number in the answer) does not stop the
evaluation: it is skipped and reported as ``file:line: reason``. A missing file, or one without a single usable
line, is an error before any model is loaded (:func:`require_problems`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from ..errors import UnusableInput, json_value, read_input_bytes
from .answers import extract_answer

__all__ = ["DataIssue", "EvalExample", "EvalSet", "read_eval_set", "check_files_exist", "require_problems"]

GSM8K_MARKER = "####"
EXPECTED_KEYS = (
    "`question` and `answer` (GSM8K's format, or a number as the answer), or chat `messages` "
    '([{"role": "user", "content": ...}, {"role": "assistant", "content": ...}])'
)


@dataclass(frozen=True)
class DataIssue:
    path: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"

    def as_dict(self) -> dict:
        return {"file": self.path, "line": self.line, "reason": self.reason}


@dataclass(frozen=True)
class EvalExample:
    dataset: str
    line: int
    question: str
    solution: str
    reference: Decimal
    reference_text: str
    format: str  # "gsm8k", "numeric" or "chat"


@dataclass
class EvalSet:
    name: str
    path: str
    examples: list[EvalExample]
    issues: list[DataIssue]
    lines_read: int


def check_files_exist(paths: list[str | Path]) -> None:
    missing = [str(p) for p in paths if not Path(p).is_file()]
    if missing:
        raise FileNotFoundError(
            "evaluation set not found: " + ", ".join(missing) + " (give local JSONL files with `question` and "
            "`answer` per line, e.g. GSM8K's test.jsonl)"
        )


def _reference(answer: object) -> tuple[str, Decimal, str, str] | str:
    """(solution text, reference value, its text, format), or the reason it has none."""
    if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
        return f"`answer` must be a string or a number, got {type(answer).__name__}"
    if not isinstance(answer, str):
        text = json.dumps(answer)  # as written in the file, e.g. 12.5 -> "12.5"
        return text, Decimal(text), text, "numeric"
    if not answer.strip():
        return "`answer` is empty"
    if GSM8K_MARKER in answer:
        tail = answer.rsplit(GSM8K_MARKER, 1)[1]
        found = extract_answer(GSM8K_MARKER + tail)
        if found is None or found.source != "marker":
            return f"no number after '{GSM8K_MARKER}' in `answer` ({tail.strip()[:40]!r})"
        return answer, found.value, found.text, "gsm8k"
    found = extract_answer(answer)
    if found is None:
        return f"no number in `answer` ({answer.strip()[:60]!r})"
    return answer, found.value, found.text, "numeric"


def _text(content: object) -> str | None:
    """A turn's text: a string, or the text parts of a list of parts (``[{"type": "text", "text": ...}]``)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type", "text") == "text"]
        if parts and all(isinstance(p, str) for p in parts):
            return "".join(parts)
    return None


def _chat_turns(messages: object) -> tuple[str, object] | str:
    """(question, answer) of a chat line: the user turns before the last assistant turn, and that turn; or the
    reason there is none."""
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        return '`messages` must be a list of {"role", "content"} turns'
    roles = [m.get("role") for m in messages]
    if "assistant" not in roles:
        return f"`messages` has no assistant turn to read the answer from (roles: {', '.join(map(str, roles))})"
    last = len(roles) - 1 - roles[::-1].index("assistant")
    asked = [_text(m.get("content")) for m in messages[:last] if m.get("role") == "user"]
    if not asked or any(a is None for a in asked):
        return "`messages` has no user turn with text before its last assistant turn"
    answer = _text(messages[last].get("content"))
    if answer is None:
        return "the last assistant turn of `messages` has no text"
    return "\n\n".join(a.strip() for a in asked), answer


def read_eval_set(path: str | Path, limit: int | None = None, name: str | None = None) -> EvalSet:
    """Read up to ``limit`` valid problems from ``path``; bad lines become :class:`DataIssue` entries."""
    path = Path(path)
    check_files_exist([path])
    name = name or path.stem
    examples: list[EvalExample] = []
    issues: list[DataIssue] = []
    lines_read = 0
    for line_number, encoded in enumerate(read_input_bytes(path, "evaluation set").split(b"\n"), start=1):
        if limit is not None and len(examples) >= limit:
            break
        if not encoded.strip():
            continue
        lines_read += 1

        def skip(reason: str, line_number: int = line_number) -> None:
            issues.append(DataIssue(str(path), line_number, reason))

        try:
            line = encoded.decode("utf-8")
        except UnicodeDecodeError as err:
            skip(f"not UTF-8 (byte 0x{encoded[err.start]:02x} at column {err.start + 1}); save the file as UTF-8")
            continue

        try:
            row = json_value(line)
        except ValueError as err:  # not JSON, nested too deep, an integer too long
            skip(str(err))
            continue
        if not isinstance(row, dict):
            skip(f"expected a JSON object with `question` and `answer`, got {type(row).__name__}")
            continue
        chat = "messages" in row and not ("question" in row or "answer" in row)
        if chat:
            turns = _chat_turns(row["messages"])
            if isinstance(turns, str):
                skip(turns)
                continue
            question, answer = turns
        else:
            missing = [key for key in ("question", "answer") if key not in row]
            if missing:
                skip(f"missing key(s) {', '.join(missing)} (keys present: {', '.join(sorted(row)) or 'none'})")
                continue
            question, answer = row["question"], row["answer"]
        if not isinstance(question, str) or not question.strip():
            skip("`question` must be a non-empty string")
            continue
        parsed = _reference(answer)
        if isinstance(parsed, str):
            skip(parsed)
            continue
        solution, value, text, fmt = parsed
        fmt = "chat" if chat else fmt
        examples.append(EvalExample(name, line_number, question, solution, value, text, fmt))
    return EvalSet(name=name, path=str(path), examples=examples, issues=issues, lines_read=lines_read)


def require_problems(eval_set: EvalSet) -> None:
    """An :class:`~..errors.UnusableInput` for a file without a single usable line (every line skipped, or none),
    naming the file, its first bad line and the keys expected: evaluating it would load a model for nothing."""
    if eval_set.examples:
        return
    if not eval_set.issues:
        raise UnusableInput(
            f"{eval_set.path}: no problems (the file is empty); give one JSON object a line with {EXPECTED_KEYS}"
        )
    first = eval_set.issues[0]
    raise UnusableInput(
        f"{eval_set.path}: none of its {eval_set.lines_read} line(s) is a problem (the first bad one, {first}); give "
        f"one JSON object a line with {EXPECTED_KEYS}"
    )
