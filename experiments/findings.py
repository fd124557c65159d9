"""What the demo found, in words computed from the reports (never written in advance), and its training plot."""

from __future__ import annotations

import json
from pathlib import Path

from del_plugin.evaluation.scoring.stats import paired_difference, sign_test_p

__all__ = ["accuracy_difference_interval", "findings_text", "paired_lower", "paired_outcomes", "plot_training_curves"]


def _rows_by_problem(generations: Path) -> dict[tuple[str, int], dict]:
    rows = {}
    with open(generations, encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            # a problem: its set and its index there (a benchmark's problems have no file line)
            rows[(row["dataset"], row["id"] if row.get("id") is not None else row["line"])] = row
    return rows


def paired_outcomes(generations_a: Path, generations_b: Path) -> dict[str, int]:
    """On the problems both models answered: how many both got right, only A, only B, neither."""
    a, b = _rows_by_problem(generations_a), _rows_by_problem(generations_b)
    shared = a.keys() & b.keys()
    right_a = {k: bool(a[k]["correct"]) for k in shared}
    right_b = {k: bool(b[k]["correct"]) for k in shared}
    return {
        "problems": len(shared),
        "both": sum(right_a[k] and right_b[k] for k in shared),
        "only_a": sum(right_a[k] and not right_b[k] for k in shared),
        "only_b": sum(right_b[k] and not right_a[k] for k in shared),
        "neither": sum(not right_a[k] and not right_b[k] for k in shared),
    }


def accuracy_difference_interval(generations_a: Path, generations_b: Path) -> tuple[float, float] | None:
    """The 95 % interval of accuracy B - A on the problems both answered, as del-eval compare's verdict gives it for
    one run an arm (:func:`del_plugin.evaluation.scoring.stats.paired_difference`: Tango's score interval, made to agree
    with McNemar's exact test), so that the findings and compare's verdict beside them say the same; None when they
    share no problem."""
    pairs = paired_outcomes(generations_a, generations_b)
    if not pairs["problems"]:
        return None
    d = paired_difference(pairs["only_b"], pairs["only_a"], pairs["problems"])
    return d["low"], d["high"]


def paired_lower(generations_a: Path, generations_b: Path, value) -> dict[str, int]:
    """Per problem, whose ``value(row)`` is lower (problems where either value is None are left out)."""
    a, b = _rows_by_problem(generations_a), _rows_by_problem(generations_b)
    pairs = [(value(a[k]), value(b[k])) for k in a.keys() & b.keys()]
    pairs = [(x, y) for x, y in pairs if x is not None and y is not None]
    return {
        "problems": len(pairs),
        "a_lower": sum(x < y for x, y in pairs),
        "b_lower": sum(y < x for x, y in pairs),
        "equal": sum(x == y for x, y in pairs),
    }


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _mean_tf_entropy(row: dict) -> float | None:
    return row["tf_entropy_sum"] / row["tf_digits"] if row.get("tf_digits") else None


def _significance(p: float) -> str:
    return f"significant, sign test p = {p:.3f}" if p < 0.05 else f"not significant, sign test p = {p:.2f}"


def findings_text(reports: dict[str, dict], generations: dict[str, Path], alpha: float) -> list[str]:
    """Sentences comparing base, MLE and DEL, computed from the reports and the saved generations; every
    MLE-vs-DEL difference comes with a paired test (accuracy: del-eval compare's interval for one run an arm,
    Tango's, and McNemar's exact test), and the verdict follows it, whichever way it goes."""
    g = {k: (reports[k]["overall"].get("generation") or {}) for k in reports}
    tf = {k: (reports[k]["overall"].get("teacher_forced") or {}) for k in reports}
    pairs = paired_outcomes(generations["MLE"], generations["DEL"])
    lines = [
        f"Accuracy on {pairs['problems']} held-out problems: base {_pct(g['base'].get('accuracy'))}, "
        f"MLE {_pct(g['MLE'].get('accuracy'))}, DEL (alpha {alpha}) {_pct(g['DEL'].get('accuracy'))}."
    ]
    cut = g["base"].get("cut_at_max_new_tokens")
    if cut:
        lines.append(
            f"The base model answers in sentences: {cut} of its {g['base'].get('n')} answers hit the "
            "new-token limit, and those are scored on the last number written."
        )
    lines += _accuracy_verdict(g, generations, pairs)
    lines += _distance_sentence(g, generations)
    lines += _entropy_sentence(tf, generations)
    a_mle, a_del = tf["MLE"].get("digit_accuracy"), tf["DEL"].get("digit_accuracy")
    if a_mle is not None and a_del is not None:
        lines.append(
            f"Teacher-forced digit accuracy: base {_pct(tf['base'].get('digit_accuracy'))}, MLE "
            f"{_pct(a_mle)}, DEL {_pct(a_del)}."
        )
    return lines


def _accuracy_verdict(g: dict[str, dict], generations: dict[str, Path], pairs: dict[str, int]) -> list[str]:
    """DEL against MLE on accuracy: the difference, its interval (Tango's) and McNemar's exact test, then the
    problem-by-problem counts ([] when an accuracy is missing)."""
    acc_mle, acc_del = g["MLE"].get("accuracy"), g["DEL"].get("accuracy")
    if acc_mle is None or acc_del is None:
        return []
    p = sign_test_p(pairs["only_a"], pairs["only_b"])
    diff = 100 * (acc_del - acc_mle)
    low, high = (100 * x for x in accuracy_difference_interval(generations["MLE"], generations["DEL"]))
    interval = f"95 % interval [{low:+.1f}, {high:+.1f}]"
    if p < 0.05 and (low > 0 or high < 0):
        verdict = (
            f"DEL is better than MLE on accuracy ({diff:+.1f} points, {interval})"
            if diff > 0
            else f"MLE is better than DEL on accuracy ({-diff:.1f} points, {interval} for DEL - MLE)"
        )
        verdict += f", and the difference is significant (McNemar exact p = {p:.3f})."
    else:
        verdict = (
            f"DEL vs MLE: {diff:+.1f} points of accuracy ({interval}; McNemar's exact test on the problems "
            f"only one of them got right: p = {p:.2f}), no significant difference: at this tiny scale the "
            "demo shows no accuracy win for either."
        )
    return [
        verdict,
        f"Problem by problem: both right {pairs['both']}, only DEL right {pairs['only_b']}, only MLE "
        f"right {pairs['only_a']}, both wrong {pairs['neither']}.",
    ]


def _distance_sentence(g: dict[str, dict], generations: dict[str, Path]) -> list[str]:
    mae_mle, mae_del = g["MLE"].get("mae"), g["DEL"].get("mae")
    if mae_mle is None or mae_del is None:
        return []
    errors = paired_lower(generations["MLE"], generations["DEL"], lambda r: r.get("abs_error"))
    p_err = sign_test_p(errors["a_lower"], errors["b_lower"])
    return [
        f"Numeric distance (lower is better): MAE MLE {_num(mae_mle)} vs DEL {_num(mae_del)}, log-MAE MLE "
        f"{_num(g['MLE'].get('log_mae'))} vs DEL {_num(g['DEL'].get('log_mae'))}. Problem by problem DEL's "
        f"error is smaller on {errors['b_lower']}, MLE's on {errors['a_lower']}, equal on {errors['equal']} "
        f"({_significance(p_err)})."
    ]


def _entropy_sentence(tf: dict[str, dict], generations: dict[str, Path]) -> list[str]:
    e_mle, e_del = tf["MLE"].get("mean_entropy"), tf["DEL"].get("mean_entropy")
    if e_mle is None or e_del is None:
        return []
    entropy = paired_lower(generations["MLE"], generations["DEL"], _mean_tf_entropy)
    p_ent = sign_test_p(entropy["a_lower"], entropy["b_lower"])
    direction = "lower" if e_del < e_mle else "higher"
    sharper = (
        "sharper digit distributions, what DEL is for" if direction == "lower" else "DEL did not sharpen them here"
    )
    return [
        f"Teacher-forced mean digit entropy on the reference answers: base {_num(tf['base'].get('mean_entropy'))},"
        f" MLE {_num(e_mle)}, DEL {_num(e_del)} nats. DEL's is {direction} than MLE's "
        f"({sharper}); "
        f"per problem DEL's is lower on {entropy['b_lower']} of {entropy['problems']} ({_significance(p_ent)})."
    ]


def plot_training_curves(histories: dict[str, list[dict]], path: Path) -> Path | None:
    """Cross-entropy, digit entropy and digit accuracy of the training batches, per logged step, one line per run."""
    from del_plugin.evaluation.reports.plots import pyplot, save_figure

    plt = pyplot()

    metrics = (
        ("ce_loss", "cross-entropy (train)"),
        ("digit_entropy", "digit entropy, nats (train)"),
        ("digit_accuracy", "digit accuracy (train)"),
    )
    if not any(any(m in h for h in hist for m, _ in metrics) for hist in histories.values()):
        return None
    fig, axes = plt.subplots(1, len(metrics), figsize=(15, 3.8))
    for ax, (key, title) in zip(axes, metrics):
        for style, (label, history) in zip(("-", "--", "-."), histories.items()):
            points = [(h["step"], h[key]) for h in history if key in h and "step" in h]
            if points:
                ax.plot(*zip(*points), linestyle=style, marker=".", label=label)
        ax.set_xlabel("optimizer step")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()
    return save_figure(fig, path)
