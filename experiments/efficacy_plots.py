"""The plots of the efficacy sweep (``python -m experiments sweep``) and of the paper's regime (``python -m
experiments paper``): every run and the mean with its 95 % interval against ``del_alpha``, and each setting minus
the reference on the same seeds. The numbers are :mod:`.efficacy`'s."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from .efficacy import METRICS, Metric, aggregate, paired_comparisons

__all__ = ["plot_paired", "plot_sweep"]


def _yerr(stats: dict, scale: float):
    if stats["low"] is None:
        return None
    return [[scale * (stats["mean"] - stats["low"])], [scale * (stats["high"] - stats["mean"])]]


def plot_sweep(
    runs: Sequence[dict], settings: Sequence[dict], reference: str, path: Path, base: dict | None = None
) -> Path | None:
    """Two rows of panels, one column per metric. Top: every run (one line per seed, so the pairing shows) and the
    mean with its 95 % interval, against ``del_alpha`` for DEL (its values evenly spaced, 0 first) and at the
    right, apart, the other criteria. Bottom: setting minus reference on the same seed, mean and 95 % interval.
    ``settings``: dicts with ``label``, ``criterion`` and ``alpha``, in plotting order."""
    if not runs:
        return None
    from del_plugin.evaluation.reports.plots import pyplot, save_figure

    plt = pyplot()

    agg = aggregate(runs)
    comparisons = paired_comparisons(runs, reference)
    dels = [s for s in settings if s["criterion"] == "del" and s["label"] in agg]
    others = [s for s in settings if s["criterion"] != "del" and s["label"] in agg]
    positions = _positions(dels, others)
    fig, axes = plt.subplots(2, len(METRICS), figsize=(4.2 * len(METRICS), 7.6), squeeze=False)
    for col, m in enumerate(METRICS):
        ax, dax = axes[0][col], axes[1][col]
        _plot_seeds(ax, runs, m, positions, dels, others)
        _plot_means(ax, dax, m, positions, agg, comparisons)
        if base is not None and base.get(m.key) is not None:
            ax.axhline((100 if m.percent else 1) * base[m.key], color="grey", linestyle=":", label="base model")
        dax.axhline(0, color="grey", linewidth=1)
        ticks = list(positions.values())
        names = [f"{s['alpha']:g}" for s in dels] + [f"{s['criterion']}\n{s['alpha']:g}" for s in others]
        for a in (ax, dax):
            a.set_xlim(-0.6, max(ticks) + 0.6)
            a.set_xticks(ticks)
            a.set_xticklabels(names, fontsize=8)
            a.grid(alpha=0.3)
            a.set_xlabel("del_alpha (DEL)  |  other criteria")
        ax.set_title(m.title)
        dax.set_title(f"{m.title}: minus {reference}", fontsize=9)
        if col == 0:
            ax.legend(fontsize=7)
    return save_figure(fig, path, dpi=90)


def _positions(dels: Sequence[dict], others: Sequence[dict]) -> dict[str, float]:
    """x positions: DEL's alphas evenly spaced in increasing order (the sweep's are roughly log-spaced, 0 first),
    then, after a gap, the other criteria."""
    alphas = sorted({s["alpha"] for s in dels})
    positions = {s["label"]: float(alphas.index(s["alpha"])) for s in dels}
    for k, s in enumerate(others):
        positions[s["label"]] = len(alphas) + 0.5 + 1.2 * k
    return positions


def _plot_seeds(ax, runs: Sequence[dict], m: Metric, positions: dict, dels: Sequence[dict], others: Sequence[dict]):
    """Every run, a colour per seed: DEL's settings joined by a line, the other criteria as points."""
    scale = 100 if m.percent else 1
    for k, seed in enumerate(sorted({r["seed"] for r in runs})):
        points = sorted(
            (positions[r["setting"]], r["metrics"][m.key])
            for r in runs
            if r["seed"] == seed
            and r["setting"] in positions
            and r["metrics"].get(m.key) is not None
            and any(s["label"] == r["setting"] for s in dels)
        )
        if points:
            ax.plot(
                [x for x, _ in points],
                [scale * y for _, y in points],
                color=f"C{k}",
                alpha=0.45,
                marker=".",
                linewidth=1,
                label=f"seed {seed}",
            )
        for s in others:
            for r in runs:
                if r["seed"] == seed and r["setting"] == s["label"] and r["metrics"].get(m.key) is not None:
                    ax.plot(positions[s["label"]], scale * r["metrics"][m.key], ".", color=f"C{k}", alpha=0.45)


def _plot_means(ax, dax, m: Metric, positions: dict, agg: dict, comparisons: dict) -> None:
    """Per setting, the mean over seeds with its 95 % interval (top) and its paired difference (bottom)."""
    scale = 100 if m.percent else 1
    for label, x in positions.items():
        st = agg[label]["stats"][m.key]
        if st["mean"] is None:
            continue
        ax.errorbar(
            [x],
            [scale * st["mean"]],
            yerr=_yerr(st, scale),
            fmt="o",
            color="black",
            capsize=4,
            markersize=5,
            label="mean, 95 % CI" if label == next(iter(positions)) else None,
        )
        d = comparisons.get(label, {}).get("metrics", {}).get(m.key, {}).get("diff")
        if d and d["mean"] is not None:
            dax.errorbar(
                [x], [scale * d["mean"]], yerr=_yerr(d, scale), fmt="o", color="black", capsize=4, markersize=5
            )


def plot_paired(
    runs: Sequence[dict], reference: str, metrics: Sequence[Metric], path: Path, title: str = ""
) -> Path | None:
    """One panel per metric: for each setting, its difference to ``reference`` on every shared seed (dots) and
    their mean with its 95 % interval (a bar); zero marked. None when no setting shares a seed with the reference."""
    comparisons = paired_comparisons(runs, reference, metrics)
    if not comparisons:
        return None
    from del_plugin.evaluation.reports.plots import pyplot, save_figure

    plt = pyplot()
    settings = list(comparisons)
    columns = min(len(metrics), 5)
    rows = math.ceil(len(metrics) / columns)
    height = 0.5 + 0.45 * len(settings) + 1.6 * rows
    fig, axes = plt.subplots(rows, columns, figsize=(3.2 * columns, height), squeeze=False)
    for k, m in enumerate(metrics):
        ax = axes[k // columns][k % columns]
        scale = 100 if m.percent else 1
        for y, setting in enumerate(settings):
            r = comparisons[setting]["metrics"][m.key]
            ax.plot([scale * d for d in r["per_seed"]], [y] * len(r["per_seed"]), ".", color="C0", alpha=0.5)
            d = r["diff"]
            if d["mean"] is not None:
                xerr = _yerr(d, scale)  # the same bar, horizontal
                ax.errorbar([scale * d["mean"]], [y], xerr=xerr, fmt="o", color="black", capsize=3, markersize=4)
        ax.axvline(0, color="grey", linewidth=1)
        ax.set_yticks(range(len(settings)))
        ax.set_yticklabels(settings if k % columns == 0 else [""] * len(settings), fontsize=8)
        ax.set_ylim(-0.7, len(settings) - 0.3)
        ax.set_title(m.title.replace(" (%)", " (points)") if m.percent else m.title, fontsize=9)
        ax.grid(alpha=0.3)
    for k in range(len(metrics), rows * columns):
        axes[k // columns][k % columns].axis("off")
    fig.suptitle(title or f"minus {reference}, same seed: each seed (dots), mean and 95 % interval", fontsize=10)
    return save_figure(fig, path, dpi=90)
