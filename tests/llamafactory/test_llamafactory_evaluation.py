"""del-eval on a LLaMA-Factory output folder: the prompt format read from the config ``del-llamafactory train``
saves there, checked against LLaMA-Factory's own templates (in its lane), and a trained adapter folder scored as an
Axolotl one is."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from del_plugin.evaluation.run.axolotl_config import resolve_prompt_format
from del_plugin.evaluation.run.llamafactory_config import CONFIG_FILE
from tools.assets import load_tokenizer

from llamafactory_runs import LANE_ONLY, LLAMAFACTORY_LANE, tiny_config, write_dataset
from repo import REPO

QUESTION = "Natalia sold 48 clips in April and half as many in May. How many did she sell in all?"


def saved(folder, template: str):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONFIG_FILE).write_text(yaml.safe_dump({"template": template, "del_alpha": 0.03}), encoding="utf-8")
    return folder


@pytest.mark.parametrize(("template", "kind"), [("alpaca", "alpaca"), ("deepseek", "chat"), ("qwen", "chat")])
def test_the_prompt_format_is_read_from_the_saved_config(tmp_path, template, kind):
    tokenizer = load_tokenizer("qwen2")  # has a chat template: without the config, auto would pick chat
    fmt, source = resolve_prompt_format("auto", tokenizer, [str(saved(tmp_path / "out", template)), None])
    assert fmt.kind == kind and "LLaMA-Factory config" in source and f"template: {template}" in source


@pytest.mark.skipif(not LLAMAFACTORY_LANE, reason=LANE_ONLY)
@pytest.mark.parametrize(("tokenizer_name", "template"), [("deepseek-llm", "alpaca"), ("deepseek-llm", "deepseek")])
def test_del_evals_prompt_is_llamafactorys_prompt_token_for_token(tmp_path, tokenizer_name, template):
    """LLaMA-Factory's own template encodes the training prompt; del-eval's prompt for the saved config, with the
    tokenizer as LLaMA-Factory saves it (its template written in when the tokenizer had none), is the same ids."""
    from llamafactory.data.template import TEMPLATES

    tokenizer = load_tokenizer(tokenizer_name)
    TEMPLATES[template].fix_jinja_template(tokenizer)  # what LLaMA-Factory does before it saves the tokenizer
    expected, _ = TEMPLATES[template].encode_oneturn(
        tokenizer, [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": ""}]
    )
    fmt, _ = resolve_prompt_format("auto", tokenizer, [str(saved(tmp_path / "out", template))])
    assert fmt.prompt_ids(QUESTION) == expected


@pytest.mark.skipif(not LLAMAFACTORY_LANE, reason=LANE_ONLY)
def test_del_eval_scores_a_trained_llamafactory_adapter(tmp_path):
    from del_plugin.llamafactory.cli import train
    from tools.assets import tiny_model_dir

    model = tiny_model_dir("llama-spm")
    out = tmp_path / "out"
    train(tiny_config(model, write_dataset(tmp_path / "data"), out, template="alpaca"))
    assert (out / "adapter_config.json").is_file() and (out / CONFIG_FILE).is_file()
    command = [sys.executable, "-m", "del_plugin.evaluation", "run", "--model", str(out), "--benchmarks", "gsm8k"]
    command += ["--limit", "2", "--max-new-tokens", "4", "--no-teacher-forced", "--out", str(tmp_path / "eval")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "eval" / "report.json").read_text(encoding="utf-8"))
    assert report["model"]["adapter"] == str(out) and report["model"]["prompt_format"] == "alpaca"
    assert "LLaMA-Factory config" in report["model"]["prompt_format_source"]
