"""GSM8K's rows for the tests: the train split from the clone's ``tools/data/gsm8k/`` (training data does not ship),
the test split from the package (what del-eval scores). Core and hf tests read their text from here, not from
``del_plugin.evaluation``."""

from __future__ import annotations

from tools.assets import gsm8k_train_rows


def gsm8k_rows(n: int | None = None, split: str = "train") -> list[dict]:
    """The first ``n`` (all if None) GSM8K problems of ``split`` ("train" or "test"), ``{"question", "answer"}``."""
    if split == "train":
        return gsm8k_train_rows(n)
    from del_plugin.evaluation.gsm8k import gsm8k_rows as shipped_rows

    return shipped_rows(n, split)


def _files() -> list[str]:
    from del_plugin.evaluation.gsm8k import GSM8K_DIR
    from tools.assets import GSM8K_TRAIN_DIR

    return ["--train-file", str(GSM8K_TRAIN_DIR / "train.jsonl.gz"), "--eval-file", str(GSM8K_DIR / "test.jsonl.gz")]


# examples/trl_sft.py offline: GSM8K's local files instead of openai/gsm8k from the hub
GSM8K_FILES = _files()
