"""Validating a config loads only what it checks: the ``del_eval_*`` keys are checked against the light registry of
the paper's sets (del_plugin/evaluation/benchmarks/names.py), never through the evaluation's runner, generation or
program sandbox. Each check runs in a fresh interpreter and reads its ``sys.modules``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# the evaluation's heavy parts: the runner, greedy generation, the program sandbox and its launcher, lm-eval and
# math-verify
HEAVY = (
    "del_plugin.evaluation.runner",
    "del_plugin.evaluation.generation",
    "del_plugin.evaluation.benchmarks.program",
    "del_plugin.evaluation.benchmarks.launcher",
    "del_plugin.evaluation.lm_eval_",
    "del_plugin.evaluation.math_verify_",
)


def loaded_modules(code: str) -> list[str]:
    """The modules a fresh interpreter holds after running ``code`` (from this clone)."""
    probe = textwrap.dedent(code) + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "AXOLOTL_DO_NOT_TRACK": "1"}
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if m.startswith(HEAVY)]


@pytest.mark.axolotl
def test_importing_the_config_keys_loads_no_runner_generation_or_sandbox():
    modules = loaded_modules("import del_plugin.axolotl.args")
    assert "del_plugin.evaluation.benchmarks.names" in modules  # the registry the keys are checked against
    assert heavy(modules) == []
    # the probe sees them when they are loaded: the evaluation's entry point pulls them in
    assert {"del_plugin.evaluation.runner", "del_plugin.evaluation.generation"} <= set(
        heavy(loaded_modules("from del_plugin.evaluation import evaluate"))
    )


@pytest.mark.axolotl
def test_validating_the_evaluation_keys_loads_no_runner_generation_or_sandbox(tmp_path):
    """The sets are found and SAT is read (its file a copy that is not the authors', allowed), and a misspelled set
    is refused, all without the heavy parts."""
    (tmp_path / "sat").mkdir()
    (tmp_path / "sat" / "sat.json").write_text('[{"question": "1 + 1 = ? (A) 2 (B) 3", "answer": "A"}]')
    modules = loaded_modules(
        f"""
        from pydantic import ValidationError
        from del_plugin.axolotl.args import DELArgs

        keys = {{"plugins": ["del_plugin.DELPlugin"], "del_eval_benchmark_dir": {str(tmp_path)!r}}}
        DELArgs.model_validate({{**keys, "del_eval_benchmarks": ["gsm8k", "sat"], "del_eval_allow_modified": True}})
        try:
            DELArgs.model_validate({{**keys, "del_eval_benchmarks": ["gsm8kk", "sat"]}})
        except ValidationError as err:
            assert "unknown benchmark 'gsm8kk' (did you mean 'gsm8k'?)" in str(err), err
        else:
            raise AssertionError("a misspelled set was accepted")
        """
    )
    assert "del_plugin.evaluation.benchmarks.sets" in modules  # SAT was read, with its reader
    assert heavy(modules) == []


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
