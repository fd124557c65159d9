"""Validating a config loads only what it checks: the ``del_eval_*`` keys are checked against the light registry of
the paper's sets (del_plugin/evaluation/benchmarks/names.py), never through the evaluation's runner, generation or
program sandbox. Each check runs in a fresh interpreter and reads its ``sys.modules``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from repo import REPO

# the evaluation's heavy parts: the runner, greedy generation, the program sandbox (its package holds the
# launcher), lm-eval and math-verify
HEAVY = (
    "del_plugin.evaluation.run.runner",
    "del_plugin.evaluation.run.generation",
    "del_plugin.evaluation.benchmarks.program",
    "del_plugin.evaluation.lm_eval",
    "del_plugin.evaluation.scoring.math_verify_",
)


def loaded_modules(code: str) -> list[list[str]]:
    """The modules a fresh interpreter holds (this clone's del_plugin) at each ``snapshot()`` that ``code`` calls."""
    probe = "import json, sys\ndef snapshot():\n    print(json.dumps(sorted(sys.modules)))\n" + textwrap.dedent(code)
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "AXOLOTL_DO_NOT_TRACK": "1"}
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=True
    )
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("[")]


def heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if m.startswith(HEAVY)]


@pytest.mark.axolotl
def test_the_config_keys_load_no_runner_generation_or_sandbox(tmp_path):
    """Importing the keys loads the set registry alone of the evaluation; validating them finds the sets and reads
    SAT (a copy that is not the authors', allowed), and refuses a misspelled set, still without the heavy parts."""
    (tmp_path / "sat").mkdir()
    (tmp_path / "sat" / "sat.json").write_text('[{"question": "1 + 1 = ? (A) 2 (B) 3", "answer": "A"}]')
    imported, validated = loaded_modules(
        f"""
        from del_plugin.axolotl.args import DELArgs
        snapshot()
        from pydantic import ValidationError

        keys = {{"plugins": ["del_plugin.DELPlugin"], "del_eval_benchmark_dir": {str(tmp_path)!r}}}
        DELArgs.model_validate({{**keys, "del_eval_benchmarks": ["gsm8k", "sat"], "del_eval_allow_modified": True}})
        try:
            DELArgs.model_validate({{**keys, "del_eval_benchmarks": ["gsm8kk", "sat"]}})
        except ValidationError as err:
            assert "unknown benchmark 'gsm8kk' (did you mean 'gsm8k'?)" in str(err), err
        else:
            raise AssertionError("a misspelled set was accepted")
        snapshot()
        """
    )
    assert "del_plugin.evaluation.benchmarks.names" in imported  # the registry the keys are checked against
    assert "del_plugin.evaluation.benchmarks.sets" in validated  # SAT was read, with its reader
    assert heavy(imported) == heavy(validated) == []
    # each heavy name is a module of the package: a renamed one would otherwise pass unseen
    modules = {".".join(p.relative_to(REPO).with_suffix("").parts) for p in (REPO / "del_plugin").rglob("*.py")}
    assert all(any(m.startswith(prefix) for m in modules) for prefix in HEAVY)


@pytest.mark.axolotl
def test_the_rules_run_by_one_validator_in_the_order_of_their_list():
    """No rule is a pydantic validator of its own (pydantic runs those last-defined first): one validator runs
    ``RULES``, and the refusals come out in that order."""
    from pydantic import ValidationError

    from del_plugin.axolotl import config_rules, eval_rules
    from del_plugin.axolotl.args import RULES, DELArgs, refuse_unknown_del_keys

    modes = {name: d.info.mode for name, d in DELArgs.__pydantic_decorators__.model_validators.items()}
    assert [name for name, mode in modes.items() if mode != "after"] == ["check_the_plugins_rules"]
    assert RULES.index(refuse_unknown_del_keys) < RULES.index(config_rules.refuse_modes_other_than_sft)
    assert RULES.index(config_rules.refuse_modes_other_than_sft) < RULES.index(eval_rules.check_eval_counts)
    config = {
        "plugins": ["del_plugin.DELPlugin"],
        "del_eval_benchmarks": ["gsm8k"],
        "del_eval_limit": 0,
        "rl": "dpo",
        "del_alhpa": 0.3,
    }
    with pytest.raises(ValidationError) as err:
        DELArgs.model_validate(config)
    messages = [e["msg"] for e in err.value.errors()]
    assert len(messages) == 3, messages
    assert "unknown key `del_alhpa` (did you mean `del_alpha`?)" in messages[0]
    assert "supervised fine-tuning only" in messages[1]
    assert "`del_eval_limit` must be a whole number >= 1, got 0" in messages[2]
