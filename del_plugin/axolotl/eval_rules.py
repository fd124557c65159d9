"""The rules on the ``del_eval_*`` keys (the evaluation after training), checked when the config is validated against
the light registry of the paper's sets (:mod:`del_plugin.evaluation.benchmarks.names`): a set named and not found, or
a file that cannot be read, is refused now rather than after training. Nothing of the evaluation's runner, generation
or sandbox is loaded."""

from __future__ import annotations

from typing import Any

from ..evaluation.benchmarks.names import SET_FILES, missing_benchmarks, resolve_benchmark_names
from .config_rules import refuse
from .logs import LOG

# the evaluation's settings, which need del_eval_benchmarks
EVAL_SETTING_KEYS = ("del_eval_limit", "del_eval_benchmark_dir", "del_eval_max_new_tokens", "del_eval_allow_modified")


def _eval_names(value: Any) -> list[str] | None:
    """The sets ``del_eval_benchmarks`` names, None when unset or not valid (refused by
    :func:`check_eval_benchmark_names`)."""
    if not (isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))):
        return None
    try:
        return resolve_benchmark_names(value)
    except ValueError:
        return None


def refuse_eval_settings_without_benchmarks(data: dict) -> None:
    """``del_eval_limit``, ``del_eval_benchmark_dir`` or ``del_eval_max_new_tokens`` without
    ``del_eval_benchmarks`` would evaluate nothing."""
    keys = [k for k in EVAL_SETTING_KEYS if data.get(k) not in (None, False)]
    if keys and data.get("del_eval_benchmarks") is None:
        refuse(
            f"{', '.join(f'`{k}`' for k in keys)} set without `del_eval_benchmarks`, so nothing would be "
            "evaluated; add `del_eval_benchmarks: all` (or a list of sets), or remove them"
        )


def check_eval_benchmark_names(data: dict) -> None:
    """``del_eval_benchmarks``: ``all`` or known set names (the closest one named for a typo)."""
    value = data.get("del_eval_benchmarks")
    if value is None:
        return
    if not (isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))):
        refuse(f"`del_eval_benchmarks` must be `all` or a list of set names, got {value!r}")
    try:
        resolve_benchmark_names(value)
    except ValueError as err:
        refuse(f"`del_eval_benchmarks`: {err}")


def check_eval_counts(data: dict) -> None:
    """``del_eval_limit`` and ``del_eval_max_new_tokens`` are whole numbers >= 1."""
    bad = [
        f"`{key}` must be a whole number >= 1, got {value!r}"
        for key in ("del_eval_limit", "del_eval_max_new_tokens")
        if (value := data.get(key)) is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1)
    ]
    if bad:
        refuse("; ".join(bad))


def _unreadable_set(name: str, data: dict) -> str | None:
    """Why the set ``name``, read from ``del_eval_benchmark_dir`` (SimulEq, SAT), cannot be scored, or None."""
    from ..evaluation.benchmarks.sets import load_benchmark, modified_set_error

    try:
        loaded = load_benchmark(name, data.get("del_eval_benchmark_dir"))
        if not loaded.verified and not data.get("del_eval_allow_modified"):
            fix = "set `del_eval_allow_modified: true` to score it"
            raise modified_set_error(name, loaded.path, loaded.sha256, loaded.benchmark.sha256, fix)
    except (FileNotFoundError, ValueError) as err:
        fix = (
            str(err)
            .replace("pass --benchmark-dir DIR", "set `del_eval_benchmark_dir: DIR`")
            .replace("--benchmark-dir", "del_eval_benchmark_dir")
        )
        return f"`del_eval_benchmarks` names {name}: {fix}"
    return None


def check_eval_sets_are_readable(data: dict) -> None:
    """Every set ``del_eval_benchmarks`` names is found and read now, not after training: SimulEq and SAT from
    ``del_eval_benchmark_dir``; every set that is not here named at once."""
    names = _eval_names(data.get("del_eval_benchmarks"))
    if not names:
        return  # nothing asked, or names that check_eval_benchmark_names refuses
    directory = data.get("del_eval_benchmark_dir")
    missing = missing_benchmarks(
        names,
        directory,
        dir_option="`del_eval_benchmark_dir`",
        run_instead=lambda available: f"`del_eval_benchmarks: [{', '.join(available)}]`",
    )
    unreadable = [f"`del_eval_benchmarks` names sets that are not here: {missing}"] if missing is not None else []
    here = [n for n in names if not SET_FILES[n].shipped and (missing is None or n not in missing.missing)]
    unreadable += [problem for name in here if (problem := _unreadable_set(name, data)) is not None]
    if unreadable:
        refuse(";\n".join(unreadable))
    if directory is not None and all(SET_FILES[n].shipped for n in names):
        LOG.warning(
            "del_plugin: `del_eval_benchmark_dir` is not used: `del_eval_benchmarks` names no set read from it "
            "(simuleq, sat)"
        )


def check_eval_extra_installed(data: dict) -> None:
    """The evaluation's packages (``del-plugin[eval]``), checked before training rather than after it."""
    if data.get("del_eval_benchmarks") is None:
        return
    from ..evaluation.eval_extra import require_eval_extra

    try:
        require_eval_extra()
    except ImportError as err:
        refuse(f"`del_eval_benchmarks`: {err}")


# in this order: the names first, so that the later rules read only sets that exist
EVAL_RULES = (
    check_eval_benchmark_names,
    refuse_eval_settings_without_benchmarks,
    check_eval_counts,
    check_eval_sets_are_readable,
    check_eval_extra_installed,
)
