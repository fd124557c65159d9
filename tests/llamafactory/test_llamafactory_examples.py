"""examples/llamafactory/: written from the Axolotl examples by tools.llamafactory_examples (so the files are its
output), one for each of the paper's families, each accepted by DEL's rules and, in the LLaMA-Factory lane, by
LLaMA-Factory's own argument parser. (The CPU example trains in tests/llamafactory/test_llamafactory_training.py.)"""

from __future__ import annotations

import json

import pytest
import yaml

from del_plugin.llamafactory.config import read_config
from tools import llamafactory_examples

from example_families import EXAMPLES, FAMILIES
from llamafactory_runs import LANE_ONLY, LLAMAFACTORY_LANE

FOLDER = EXAMPLES / "llamafactory"
NAMES = sorted(llamafactory_examples.rendered())
CONFIGS = [n for n in NAMES if n.endswith(".yaml")]


@pytest.mark.parametrize("name", NAMES)
def test_the_file_is_what_the_generator_writes(name):
    """Run `python -m tools.llamafactory_examples` after changing an Axolotl example."""
    assert (FOLDER / name).read_text(encoding="utf-8") == llamafactory_examples.rendered()[name]


def test_every_paper_family_has_its_example_and_nothing_else_is_there():
    assert set(llamafactory_examples.TEMPLATES) == set(FAMILIES)
    assert sorted(p.name for p in FOLDER.iterdir()) == NAMES


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_run_is_the_axolotl_examples(family):
    axolotl = yaml.safe_load((EXAMPLES / family / "qlora-24gb.yml").read_text(encoding="utf-8"))
    mine = yaml.safe_load((FOLDER / f"{family}-qlora-24gb.yaml").read_text(encoding="utf-8"))
    assert {k: v for k, v in mine.items() if k.startswith("del_")} == {
        k: v for k, v in axolotl.items() if k.startswith("del_")
    }
    pairs = {
        "model_name_or_path": "base_model",
        "cutoff_len": "sequence_len",
        "per_device_train_batch_size": "micro_batch_size",
        "gradient_accumulation_steps": "gradient_accumulation_steps",
        "learning_rate": "learning_rate",
        "lora_rank": "lora_r",
        "lora_alpha": "lora_alpha",
        "seed": "seed",
    }
    for key, axolotl_key in pairs.items():
        assert mine[key] == axolotl[axolotl_key], key
    assert mine["quantization_bit"] == 4 and mine["packing"] and mine["neat_packing"]
    info = json.loads((FOLDER / "dataset_info.json").read_text(encoding="utf-8"))
    assert info[mine["dataset"]]["hf_hub_url"] == axolotl["datasets"][0]["path"]


@pytest.mark.parametrize("name", CONFIGS)
def test_dels_rules_accept_the_example(name):
    read_config(yaml.safe_load((FOLDER / name).read_text(encoding="utf-8")))


@pytest.mark.skipif(not LLAMAFACTORY_LANE, reason=LANE_ONLY)
@pytest.mark.parametrize("name", CONFIGS)
def test_llamafactorys_parser_takes_every_key(name):
    """LLaMA-Factory's own parser (no model loaded; bf16, TF32 and flash-attention off: this machine has no GPU)."""
    from llamafactory.hparams.parser import _parse_train_args

    host_args, _ = read_config(yaml.safe_load((FOLDER / name).read_text(encoding="utf-8")))
    model_args, data_args, training_args, finetuning_args, _ = _parse_train_args(
        {**host_args, "bf16": False, "tf32": False, "flash_attn": "auto"}
    )
    assert finetuning_args.stage == "sft" and data_args.template == host_args["template"]
    assert training_args.per_device_train_batch_size == host_args["per_device_train_batch_size"]
