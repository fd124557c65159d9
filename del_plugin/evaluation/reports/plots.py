"""PNG plots of one or several reports (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

__all__ = ["plot_benchmark_accuracy", "plot_entropy_histograms", "plot_place_accuracy"]

_STYLES = ("-", "--", "-.", ":")


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend (no display needed), imported on first use."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path, dpi: int = 100) -> Path:
    """Lay out ``fig``, write it to ``path`` by rename (its folder made if missing), close it; ``path``."""
    from ..output import write_file_atomic

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        write_file_atomic(path, lambda tmp: fig.savefig(tmp, dpi=dpi, format=path.suffix.lstrip(".") or "png"))
    finally:
        pyplot().close(fig)
    return path


def plot_entropy_histograms(series: Sequence[tuple[str, dict | None]], path: Path, title: str) -> Path | None:
    """Overlaid step histograms of teacher-forced digit entropies; ``series`` is ``(label, teacher_forced dict)``.
    Each histogram is normalised to fractions of its digit targets. Returns None when no series has data."""
    series = [(label, tf) for label, tf in series if tf and tf.get("digits")]
    if not series:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for k, (label, tf) in enumerate(series):
        edges = tf["entropy_histogram"]["edges"]
        counts = tf["entropy_histogram"]["counts"]
        total = sum(counts)
        fractions = [c / total for c in counts]
        ax.stairs(
            fractions,
            edges,
            label=f"{label} (mean {tf['mean_entropy']:.3f})",
            linewidth=1.8,
            linestyle=_STYLES[k % len(_STYLES)],
        )
    ax.set_xlabel("entropy of the ten-digit distribution at digit targets (nats; ln 10 = uniform)")
    ax.set_ylabel("fraction of digit targets")
    ax.set_title(title)
    ax.set_xlim(edges[0], edges[-1])
    ax.legend()
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


def _place_curve(places: dict) -> tuple[list[int], list[float]]:
    keys = sorted((int(p) for p in places), reverse=True)
    return keys, [places[str(p)]["accuracy"] for p in keys]


def plot_place_accuracy(series: Sequence[tuple[str, dict | None, dict | None]], path: Path, title: str) -> Path | None:
    """Per-place digit accuracy; ``series`` is ``(label, generation metrics, teacher_forced stats)``. Left: digits
    of the generated final answers; right: teacher-forced digits of the reference solutions. A panel without data
    is left out (an option set's answers have no digits), and with neither, no plot: None."""
    panels = [
        (
            "generated final answers",
            [(lbl, g["place_accuracy"]) for lbl, g, _ in series if g and g.get("place_accuracy")],
        ),
        ("teacher-forced reference solutions", [(lbl, t["places"]) for lbl, _, t in series if t and t.get("places")]),
    ]
    panels = [(name, data) for name, data in panels if data]
    if not panels:
        return None
    plt = pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
    for ax, (name, data) in zip(axes[0], panels):
        all_places = sorted({int(p) for _, places in data for p in places}, reverse=True)
        position = {p: i for i, p in enumerate(all_places)}
        for k, (label, places) in enumerate(data):
            keys, accuracy = _place_curve(places)
            ax.plot([position[p] for p in keys], accuracy, marker="o", label=label, linestyle=_STYLES[k % len(_STYLES)])
        ax.set_xticks(range(len(all_places)), [f"$10^{{{p}}}$" for p in all_places])
        ax.set_xlabel("place of the digit (left: most significant)")
        ax.set_ylabel("digit accuracy")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(name)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    return save_figure(fig, path)


def plot_benchmark_accuracy(
    series: Sequence[tuple[str, dict[str, float], float | None]], path: Path, title: str
) -> Path | None:
    """Grouped bars of accuracy per benchmark, the paper's column order, mACC last; ``series`` is ``(label,
    {benchmark name: accuracy}, mACC or None)``. Returns None when no series has a benchmark."""
    from ..benchmarks.names import BENCHMARK_NAMES
    from ..benchmarks.sets import BENCHMARKS

    names = [n for n in BENCHMARK_NAMES if any(n in accuracies for _, accuracies, _ in series)]
    if not names:
        return None
    plt = pyplot()
    columns = [BENCHMARKS[n].title for n in names] + ["mACC"]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(columns) * max(1, len(series)) ** 0.5), 4))
    width = 0.8 / len(series)
    for k, (label, accuracies, mean) in enumerate(series):
        values = [accuracies.get(n) for n in names] + [mean]
        xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(columns))]
        heights = [100 * v if v is not None else 0.0 for v in values]
        bars = ax.bar(xs, heights, width, label=label)
        for bar, value in zip(bars, values):
            if value is not None:
                ax.annotate(
                    f"{100 * value:.1f}",
                    (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center",
                    va="bottom",
                    fontsize=7,
                )
    ax.set_xticks(range(len(columns)), columns)
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 105)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    if len(series) > 1:
        ax.legend()
    return save_figure(fig, path)
