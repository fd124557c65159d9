"""The keys of the evaluation after training (``del_eval_*``): refused when wrong by Axolotl's own config validation,
before any model is loaded, naming the key and the fix; and the DEL section of the model card. The runs that
evaluate after training (one process and two gloo ranks) are in tests/e2e/test_ddp_cpu_e2e.py."""

from __future__ import annotations

import sys

import pytest

from del_plugin.axolotl.evaluation import CARD_BEGIN, CARD_END, card_section, eval_logs, write_card_section
from del_plugin.hf.settings import DELSettings

from axolotl_helpers import load_config, refused
from paper_sets import write_benchmark_dir


def test_accepted_values_are_kept(base, tmp_path):
    directory = write_benchmark_dir(tmp_path)
    cfg = load_config(
        base(
            del_eval_benchmarks="all",
            del_eval_limit=5,
            del_eval_benchmark_dir=str(directory),
            del_eval_max_new_tokens=512,
            del_eval_allow_modified=True,  # the fixtures are not the authors' files
        )
    )
    assert (cfg.del_eval_benchmarks, cfg.del_eval_limit, cfg.del_eval_max_new_tokens) == ("all", 5, 512)
    assert cfg.del_eval_benchmark_dir == str(directory)
    assert load_config(base(del_eval_benchmarks=["gsm8k", "MMLU-math"])).del_eval_benchmarks == ["gsm8k", "MMLU-math"]
    assert load_config(base()).del_eval_benchmarks is None  # off unless asked
    assert load_config(base(del_eval_allow_modified=False)).del_eval_benchmarks is None  # its default, harmless


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            {"del_eval_benchmarks": ["gsm8k", "svmap"]},
            r"`del_eval_benchmarks`: unknown benchmark 'svmap' \(did you mean",
        ),
        ({"del_eval_benchmarks": []}, r"`del_eval_benchmarks`: no benchmark named"),
        ({"del_eval_benchmarks": 7}, r"`del_eval_benchmarks` must be `all` or a list of set names, got 7"),
        ({"del_eval_benchmarks": ["gsm8k", 7]}, r"`del_eval_benchmarks` must be `all` or a list"),
        (
            {"del_eval_benchmarks": "all"},
            r"`del_eval_benchmarks` names sets that are not here: simuleq \(SimulEq\) and sat \(SAT\) are not "
            r"shipped .*set `del_eval_benchmark_dir` to a folder holding simuleq/simuleq.json and sat/sat.json .*"
            r"or run the sets that are here without them: "
            r"`del_eval_benchmarks: \[gsm8k, math, svamp, aqua, mmlu_math\]`",
        ),
        (
            {"del_eval_benchmarks": ["gsm8k"], "del_eval_limit": 0},
            r"`del_eval_limit` must be a whole number >= 1, got 0",
        ),
        ({"del_eval_benchmarks": ["gsm8k"], "del_eval_limit": True}, r"`del_eval_limit` must be a whole number"),
        ({"del_eval_benchmarks": ["gsm8k"], "del_eval_limit": "5"}, r"`del_eval_limit` must be a whole number"),
        ({"del_eval_benchmarks": ["gsm8k"], "del_eval_max_new_tokens": -1}, r"`del_eval_max_new_tokens` must be"),
        ({"del_eval_limit": 5}, r"`del_eval_limit` set without `del_eval_benchmarks`, so nothing would be evaluated"),
        ({"del_eval_allow_modified": True}, r"`del_eval_allow_modified` set without `del_eval_benchmarks`"),
        (
            {"del_eval_benchmarks": ["gsm8k"], "del_eval_limt": 5},
            r"`del_eval_limt` \(did you mean `del_eval_limit`\?\)",
        ),
    ],
)
def test_bad_values_are_refused_naming_the_key(base, overrides, message):
    with pytest.raises(Exception, match=message):
        load_config(base(**overrides))


def test_a_set_missing_from_the_folder_is_refused_with_its_path(base, tmp_path):
    (tmp_path / "sat").mkdir()
    message = refused(base(del_eval_benchmarks=["sat"], del_eval_benchmark_dir=str(tmp_path)))
    assert f"sat (SAT): {tmp_path}/sat/sat.json not found; `del_eval_benchmark_dir` must be a folder hold" in message
    (tmp_path / "sat" / "sat.json").write_text('[{"question": "q?", "answer": "Z"}]')
    message = refused(base(del_eval_benchmarks=["sat"], del_eval_benchmark_dir=str(tmp_path)))
    assert "`del_eval_benchmarks` names sat:" in message and "the answer 'Z' is not a letter A-D" in message


def test_a_set_that_is_not_the_authors_file_is_refused_unless_allowed(base, tmp_path):
    directory = write_benchmark_dir(tmp_path)  # tests/helpers/paper_sets.py's stand-ins, not the authors' files
    message = refused(base(del_eval_benchmarks=["gsm8k", "sat"], del_eval_benchmark_dir=str(directory)))
    assert f"`del_eval_benchmarks` names sat: sat: {directory}/sat/sat.json is not the authors' file" in message
    assert "set `del_eval_allow_modified: true` to score it" in message
    keys = dict(del_eval_benchmarks=["gsm8k", "sat"], del_eval_benchmark_dir=str(directory))
    assert load_config(base(**keys, del_eval_allow_modified=True)).del_eval_allow_modified is True


def test_the_keys_without_the_plugin_are_refused(base):
    cfg = base(del_eval_benchmarks=["gsm8k"])
    cfg["plugins"] = []
    del cfg["del_alpha"]
    assert "`del_eval_benchmarks` set, but the plugin is not listed" in refused(cfg)


def test_a_missing_evaluation_extra_is_refused_before_training(base, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed: importing it raises ImportError
    assert "pip install 'del-plugin[eval]'" in refused(base(del_eval_benchmarks=["gsm8k"]))
    load_config(base())  # without the evaluation, nothing needs it


REPORT = {
    "datasets": [
        {
            "name": "gsm8k",
            "benchmark": "gsm8k",
            "status": "complete",
            "evaluated": 2,
            "lines_read": 1319,
            "generation": {"accuracy": 0.5},
        },
        {
            "name": "aqua",
            "benchmark": "aqua",
            "status": "complete",
            "evaluated": 2,
            "lines_read": 254,
            "generation": {"accuracy": 0.0},
        },
    ],
    "macc": {"value": 0.25, "sets": ["gsm8k", "aqua"], "label": "mACC (2 of 7 sets)", "complete": False},
    "model": {"prompt_format": "alpaca", "dtype": "bfloat16"},
}


def test_the_logged_values_are_the_reports():
    assert eval_logs(REPORT) == {"del_eval/gsm8k_accuracy": 0.5, "del_eval/aqua_accuracy": 0.0, "del_eval/macc": 0.25}


def test_the_model_card_section_is_added_once_and_replaced(tmp_path):
    assert write_card_section(tmp_path, "x") is None  # no card: nothing written
    card = tmp_path / "README.md"
    card.write_text("---\nlibrary_name: peft\n---\n# out\n\nAxolotl's card\n")
    settings = DELSettings(alpha=0.3)
    write_card_section(tmp_path, card_section(settings, "one token per digit ('0'..'9')"))
    first = card.read_text()
    assert first.startswith("---\nlibrary_name: peft\n---\n# out\n\nAxolotl's card\n\n" + CARD_BEGIN)
    assert "`del_criterion: del`, weight `del_alpha: 0.3`, place weights u = 2(i+1)" in first
    assert "### Evaluation" not in first
    command = "del-eval run --model out --benchmarks gsm8k,aqua --limit 2 --max-new-tokens 256 --out out/del_eval"
    write_card_section(tmp_path, card_section(settings, "one token per digit ('0'..'9')", REPORT, command))
    second = card.read_text()
    assert second.count(CARD_BEGIN) == 1 and second.count(CARD_END) == 1 and second.endswith(CARD_END + "\n")
    assert "| GSM8K | 2 of 1,319 | 50.0% |" in second and "| AQuA | 2 of 254 | 0.0% |" in second
    assert "| **mACC (2 of 7 sets)** | | **25.0%** |" in second and f"`{command}`" in second
