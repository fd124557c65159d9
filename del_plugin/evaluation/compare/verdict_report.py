"""How the verdict of :mod:`.verdict` reads: its line, its section of comparison.md (a row per set and one for
the mean over sets) and its forest plot."""

from __future__ import annotations

from pathlib import Path

__all__ = ["plot_forest", "verdict_line", "verdict_markdown"]


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _signed(x: float) -> str:
    return f"{100 * x:+.1f}"


def verdict_line(verdict: dict) -> str:
    """The verdict in one line: the difference over the sets with its interval, whether it is resolved (and which
    sets are on their own) or how large a difference this sample could resolve and what would resolve the one
    seen; what one run an arm compares; what --intersection dropped."""
    summary = verdict["summary"]
    base_label, cand_label = verdict["baseline"]["label"], verdict["candidate"]["label"]
    d = summary["difference"]
    line = (
        f"{cand_label} - {base_label}: {_signed(d['value'])} {summary['name']} points "
        f"[{_signed(d['low'])}, {_signed(d['high'])}]"
    )
    single = "problems_to_resolve" in summary  # one run an arm
    if summary["resolved"]:
        line += f", resolved: {summary['better']} is better"
        if len(verdict["sets"]) > 1:
            won = [f"{s['title']} for {s['better']}" for s in verdict["sets"] if s["resolved"]]
            line += f" (sets resolved on their own: {', '.join(won)})" if won else " (no set resolved on its own)"
    else:
        line += f", not resolved: {_resolvable(summary, single)}"
    if single:
        line += (
            "; one run an arm compares two checkpoints, not two training recipes: the spread between training "
            "seeds is not in this interval (train seeds and give --baseline/--candidate)"
        )
    else:
        runs = (len(verdict["baseline"]["runs"]), len(verdict["candidate"]["runs"]))
        line += f"; {runs[0]} v {runs[1]} runs, the training run as the replicate"
        if min(runs) == 1:  # the pooled test: what it assumes and what that costs, where it is read
            line += (
                "; assumes both recipes spread alike (the single run's spread is not measured: if its recipe "
                "spreads more, this test calls too much resolved); train 2+ runs of each for a test that does not"
            )
    dropped = verdict.get("dropped")
    if dropped:
        line += (
            f"; --intersection: the baseline's runs dropped {dropped['baseline']:,} problems, the candidate's "
            f"{dropped['candidate']:,}"
        )
    return line


def _resolvable(summary: dict, single: bool) -> str:
    """What this sample resolves, and what would resolve the difference seen."""
    detectable = summary["detectable"]
    if detectable >= 1:
        said = "this sample cannot resolve any difference (too few problems or runs)"
    else:
        said = f"this sample resolves about +/-{100 * detectable:.1f}"
    value = summary["difference"]["value"]
    if single and summary.get("problems_to_resolve"):
        return f"{said}; about {summary['problems_to_resolve']:,} problems would resolve {_signed(value)}"
    if not single and summary.get("seeds_to_resolve"):
        return f"{said}; about {summary['seeds_to_resolve']} runs an arm would resolve {_signed(value)}"
    if not single and value != 0:
        return (
            f"{said}; even 100 runs an arm would not resolve {_signed(value)} on this many problems (more runs do "
            "not shrink the problems' share of the noise)"
        )
    return said


def _arm_cell(arm: dict) -> str:
    se = "" if arm["se"] is None else f" ± {_pct(arm['se'])}"
    return f"{_pct(arm['accuracy'])}{se}"


def _p_cell(s: dict) -> str:
    if s.get("p") is None or s.get("holm_p") is None:
        return "–"

    def fmt(p: float) -> str:
        return f"{p:.3f}" if p >= 0.001 else f"{p:.0e}"

    c = s["discordant"]
    counts = f"; {c['candidate_only']}/{c['baseline_only']}" if c else ""
    return f"{fmt(s['p'])} ({fmt(s['holm_p'])}){counts}"


def verdict_markdown(verdict: dict, forest: str | None = None) -> list[str]:
    """The verdict section of comparison.md: the line, the table per set and the summary, the method, the notes."""
    lines = ["## Verdict", "", verdict["line"], ""]
    base, cand = verdict["baseline"]["label"], verdict["candidate"]["label"]
    if verdict["sets"]:
        header = [
            "set",
            "problems paired",
            f"{base} (%, ± SE)",
            f"{cand} (%, ± SE)",
            f"{cand} - {base} [95 % CI]",
            "McNemar p (Holm); discordant +/-" if verdict["sets"][0]["discordant"] else "t-test p (Holm)",
            "detectable ±",
            "resolved",
        ]
        rows = []
        entries = list(verdict["sets"])
        if len(entries) > 1:
            entries.append(verdict["summary"] | {"title": verdict["summary"]["name"], "problems": None})
        for s in entries:
            d = s["difference"]
            diff = f"{_signed(d['value'])} [{_signed(d['low'])}, {_signed(d['high'])}]"
            if s["resolved"]:
                diff = f"**{diff}**"
            rows.append(
                [
                    s["title"],
                    "–" if s["problems"] is None else f"{s['problems']:,}",
                    _arm_cell(s["baseline"]),
                    _arm_cell(s["candidate"]),
                    diff,
                    _p_cell(s),
                    f"{100 * s['detectable']:.1f}" if s["detectable"] < 1 else "none",
                    f"yes: {s['better']}" if s["resolved"] else "no",
                ]
            )
        lines += ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        lines += [
            "",
            f"Scorer: {verdict['scorer']}. Differences in accuracy points; bold: resolved (the interval excludes "
            "0 and, per set, Holm-adjusted p < 0.05). "
            + (
                f"Discordant +/-: problems only {cand} got right / only {base} (McNemar's exact p). "
                if verdict["sets"][0]["discordant"]
                else "± SE: over the runs (the run as the replicate). "
            )
            + "Detectable ±: the smallest difference this sample finds 80 % of the time. "
            f"Method: {verdict['method']}.",
        ]
        if forest:
            lines += ["", f"![{cand} - {base} per set, 95 % intervals]({forest})"]
    if verdict["notes"]:
        lines += [""] + [f"- {note}" for note in verdict["notes"]]
    return lines + [""]


def plot_forest(verdict: dict, path: Path) -> Path | None:
    """A forest plot: per set (and the mean over sets) the difference with its 95 % interval, zero marked, the
    detectable difference shaded; None when nothing was compared."""
    if not verdict["sets"]:
        return None
    from ..reports.plots import pyplot, save_figure

    plt = pyplot()
    entries = list(verdict["sets"])
    if len(entries) > 1:
        entries.append(verdict["summary"] | {"title": verdict["summary"]["name"]})
    fig, ax = plt.subplots(figsize=(7, 0.9 + 0.45 * len(entries)))
    for y, s in enumerate(reversed(entries)):
        d = s["difference"]
        color = "C0" if s["resolved"] else "grey"
        marker = "D" if s is entries[-1] and len(entries) > 1 else "o"
        ax.errorbar(
            [100 * d["value"]],
            [y],
            xerr=[[100 * (d["value"] - d["low"])], [100 * (d["high"] - d["value"])]],
            fmt=marker,
            color=color,
            capsize=4,
        )
        shade = 100 * min(s["detectable"], 1.0)
        ax.plot(
            [-shade, shade],
            [y, y],
            color="C1",
            alpha=0.25,
            linewidth=8,
            solid_capstyle="butt",
        )
    ax.axvline(0, color="black", linewidth=1)
    ax.set_yticks(range(len(entries)))
    ax.set_yticklabels([s["title"] for s in reversed(entries)])
    ax.set_ylim(-0.7, len(entries) - 0.3)
    base, cand = verdict["baseline"]["label"], verdict["candidate"]["label"]
    ax.set_xlabel(f"{cand} - {base}, accuracy points (95 % interval; shaded: ± detectable difference)")
    ax.set_title(f"{cand} - {base}: blue where resolved, grey inside the noise ({verdict['scorer']} scorer)")
    ax.grid(alpha=0.3, axis="x")
    return save_figure(fig, path)
