"""``python -m tools.llamafactory_examples``: write examples/llamafactory/ from the Axolotl examples, so the two
never drift: each paper family's ``<family>-qlora-24gb.yaml`` is its ``examples/<family>/qlora-24gb.yml`` in
LLaMA-Factory's keys (the same model, DEL keys, data, LoRA, quantisation, packing, batch, schedule and seed), and
``smollm2-135m-cpu.yaml`` a first run on a CPU. ``tests/llamafactory/test_llamafactory_examples.py`` checks that
the files are this module's output. Edit the Axolotl example (or this table), then run it again.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

from del_plugin.hf.settings import DEFAULT_ALPHA

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
FOLDER = EXAMPLES / "llamafactory"
# the paper's four families and the LLaMA-Factory template of the prompt their Axolotl example trains with
TEMPLATES = {
    "codellama-7b": "alpaca",
    "mistral-7b": "alpaca",
    "deepseek-math-7b-instruct": "deepseek",  # the model's chat format, "User: ...\n\nAssistant:"
    "qwen2.5-7b": "alpaca",
}
# LLaMA-Factory's dataset_info.json for the examples' data (its `dataset_dir`)
DATASET_INFO = {
    "mathinstruct": {
        "hf_hub_url": "TIGER-Lab/MathInstruct",
        "columns": {"prompt": "instruction", "response": "output"},
    },
    "gsm8k": {"hf_hub_url": "openai/gsm8k", "subset": "main", "columns": {"prompt": "question", "response": "answer"}},
}
DEL_COMMENT = (
    "# DEL's keys, as in the Axolotl example (the README's \"Config keys\"); del_alpha 0.03 is the advice of\n"
    "# docs/choosing-del-alpha.md. del-llamafactory takes them out before LLaMA-Factory reads the rest.\n"
)


def _del_keys(axolotl: dict) -> dict:
    return {key: value for key, value in axolotl.items() if key.startswith("del_")}


def from_axolotl(axolotl: dict, family: str) -> dict:
    """The LLaMA-Factory config of an Axolotl QLoRA example: the same run in LLaMA-Factory's keys. Cut Cross Entropy
    (Axolotl's) becomes Liger's fused linear cross-entropy (LLaMA-Factory's ``enable_liger_kernel``): both skip the
    [tokens, vocabulary] logits, and DEL reads its digit logits from the hidden states beside either."""
    bnb = axolotl["bnb_config_kwargs"]
    return {
        "model_name_or_path": axolotl["base_model"],
        "stage": "sft",
        "do_train": True,
        **_del_keys(axolotl),
        "finetuning_type": "lora",
        "lora_rank": axolotl["lora_r"],
        "lora_alpha": axolotl["lora_alpha"],
        "lora_dropout": axolotl["lora_dropout"],
        "lora_target": "all" if axolotl["lora_target_linear"] else axolotl["lora_target_modules"],
        "quantization_bit": 4 if axolotl["load_in_4bit"] else None,
        "quantization_method": "bnb",
        "quantization_type": bnb["bnb_4bit_quant_type"],
        "double_quantization": bnb["bnb_4bit_use_double_quant"],
        "enable_liger_kernel": True,
        "flash_attn": "fa2" if axolotl["attn_implementation"] == "flash_attention_2" else "auto",
        "dataset": "mathinstruct",
        "dataset_dir": "examples/llamafactory",
        "template": TEMPLATES[family],
        "train_on_prompt": axolotl["train_on_inputs"],
        "cutoff_len": axolotl["sequence_len"],
        "packing": axolotl["sample_packing"],
        # each packed row attends to itself only, as Axolotl's sample packing keeps rows apart
        "neat_packing": axolotl["sample_packing"],
        "per_device_train_batch_size": axolotl["micro_batch_size"],
        "gradient_accumulation_steps": axolotl["gradient_accumulation_steps"],
        "num_train_epochs": float(axolotl["num_epochs"]),
        "optim": axolotl["optimizer"],
        "learning_rate": axolotl["learning_rate"],
        "lr_scheduler_type": axolotl["lr_scheduler"],
        "warmup_ratio": axolotl["warmup_ratio"],
        "weight_decay": axolotl["weight_decay"],
        "max_grad_norm": axolotl["max_grad_norm"],
        "bf16": axolotl["bf16"],
        "tf32": axolotl["tf32"],
        "logging_steps": axolotl["logging_steps"],
        "save_total_limit": axolotl["save_total_limit"],
        "output_dir": axolotl["output_dir"] + "-llamafactory",
        "report_to": "none",
        "seed": axolotl["seed"],
    }


def cpu_example() -> dict:
    """SmolLM2-135M-Instruct with LoRA on GSM8K, 30 steps on a CPU: the run of examples/smollm2-135m-cpu.yml."""
    return {
        "model_name_or_path": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "stage": "sft",
        "do_train": True,
        "del_alpha": DEFAULT_ALPHA,
        "finetuning_type": "lora",
        "lora_rank": 8,
        "lora_alpha": 16,
        "lora_dropout": 0.0,
        "lora_target": "all",
        "dataset": "gsm8k",
        "dataset_dir": "examples/llamafactory",
        "template": "smollm2",
        "cutoff_len": 512,
        "per_device_train_batch_size": 2,
        "gradient_accumulation_steps": 1,
        "max_steps": 30,
        "learning_rate": 1.0e-3,
        "lr_scheduler_type": "cosine",
        "warmup_steps": 5,
        "logging_steps": 5,
        "output_dir": "./outputs/del-smollm2-135m-cpu-llamafactory",
        "report_to": "none",
        "bf16": False,
        "seed": 42,
    }


def _text(config: dict, header: str) -> str:
    """The YAML of ``config`` under ``header``, DEL's keys under their comment."""
    body = yaml.safe_dump(config, sort_keys=False, width=120)
    first_del = next(line for line in body.splitlines() if line.startswith("del_"))
    return header + body.replace(first_del, DEL_COMMENT + first_del, 1)


def rendered() -> dict[str, str]:
    """{file name: text} of examples/llamafactory/."""
    files = {}
    for family in TEMPLATES:
        source = f"examples/{family}/qlora-24gb.yml"
        axolotl = yaml.safe_load((EXAMPLES / family / "qlora-24gb.yml").read_text(encoding="utf-8"))
        header = (
            f"# {family} + Digit Entropy Loss (DEL) with LLaMA-Factory, QLoRA on ONE 24 GB GPU: the run of\n"
            f"# {source} (its comments say why each value is\n"
            "# what it is), written from it by "
            "`python -m tools.llamafactory_examples`.\n#\n"
            f"#   del-llamafactory train examples/llamafactory/{family}-qlora-24gb.yaml\n#\n"
            "# Cut Cross Entropy (Axolotl's) is Liger's fused linear cross-entropy here (enable_liger_kernel);\n"
            f"# memory as estimated for {source}, not measured with LLaMA-Factory.\n"
        )
        files[f"{family}-qlora-24gb.yaml"] = _text(from_axolotl(axolotl, family), header)
    header = (
        "# SmolLM2-135M-Instruct + DEL with LLaMA-Factory, a LoRA fine-tune on a CPU (no GPU needed): the run of\n"
        "# examples/smollm2-135m-cpu.yml, 30 steps on GSM8K, written by `python -m tools.llamafactory_examples`.\n#\n"
        "#   del-llamafactory train examples/llamafactory/smollm2-135m-cpu.yaml\n"
        "#   del-llamafactory train examples/llamafactory/smollm2-135m-cpu.yaml del_alpha=0.0 \\\n"
        "#     output_dir=./outputs/mle-smollm2-135m-cpu-llamafactory   # its del_alpha 0 twin\n"
    )
    files["smollm2-135m-cpu.yaml"] = _text(cpu_example(), header)
    files["dataset_info.json"] = json.dumps(DATASET_INFO, indent=2) + "\n"
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=FOLDER, help="folder to write (default examples/llamafactory)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in rendered().items():
        (args.out / name).write_text(text, encoding="utf-8")
        print(args.out / name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
