"""``del-llamafactory train CONFIG.yaml [key=value ...]``: LLaMA-Factory's ``llamafactory-cli train`` with DEL.

The config is the LLaMA-Factory YAML a user already trains with, plus DEL's keys (``del_alpha``, ``del_criterion``,
...: docs/hosts.md). It is read as ``llamafactory-cli`` reads it (OmegaConf: the file, then ``key=value``
overrides), DEL's keys are taken out and validated with LLaMA-Factory's options that cannot combine with DEL, every
problem at once, before LLaMA-Factory parses its arguments or loads a model; then LLaMA-Factory's own ``run_exp``
trains, with DEL's SFT trainer (:mod:`del_plugin.llamafactory.trainer`). With several GPUs (or
``FORCE_TORCHRUN=1``) it starts ``torchrun`` on this command, as ``llamafactory-cli`` starts it on its own.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from .config import DELConfigError, check_llamafactory_version, read_config

__all__ = ["main", "read_yaml", "train"]


def read_yaml(path: str | Path, overrides: list[str] = ()) -> dict[str, Any]:
    """The config as ``llamafactory-cli train`` reads it: the YAML (or JSON) file merged with ``key=value``
    overrides."""
    from omegaconf import OmegaConf

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"del-llamafactory: no config file {path}")
    loaded = OmegaConf.load(path.absolute())
    return OmegaConf.to_container(OmegaConf.merge(loaded, OmegaConf.from_cli(list(overrides))))


def installed_llamafactory() -> str:
    """The installed LLaMA-Factory's version; a RuntimeError with the install line when there is none."""
    try:
        return version("llamafactory")
    except PackageNotFoundError:
        raise RuntimeError(
            "del-llamafactory: LLaMA-Factory is not installed here; install it (pip install 'del-plugin[llamafactory]' "
            "or llamafactory==0.9.5) and run this command in its environment"
        ) from None


def _needs_torchrun() -> bool:
    """Whether ``llamafactory-cli train`` would start ``torchrun`` here (its launcher's rule), and this is not
    already one of its processes."""
    if "LOCAL_RANK" in os.environ:
        return False
    from llamafactory.extras.misc import get_device_count, is_env_enabled

    return is_env_enabled("FORCE_TORCHRUN") or get_device_count() > 1


def _torchrun(argv: list[str]) -> int:
    """This command on every GPU of the node, through ``torchrun`` (``NPROC_PER_NODE``, ``MASTER_PORT``,
    ``NNODES``, ``NODE_RANK`` and ``MASTER_ADDR`` read as ``llamafactory-cli`` reads them)."""
    from llamafactory.extras.misc import find_available_port, get_device_count

    env = os.environ
    command = [
        "torchrun",
        f"--nnodes={env.get('NNODES', '1')}",
        f"--node_rank={env.get('NODE_RANK', '0')}",
        f"--nproc_per_node={env.get('NPROC_PER_NODE', str(get_device_count()))}",
        f"--master_addr={env.get('MASTER_ADDR', '127.0.0.1')}",
        f"--master_port={env.get('MASTER_PORT', str(find_available_port()))}",
        "-m",
        "del_plugin.llamafactory.cli",
        *argv,
    ]
    return subprocess.run(command, check=False).returncode


def train(config: dict[str, Any], callbacks: list | None = None, trainer_class: type | None = None) -> None:
    """Validate ``config`` (:class:`~del_plugin.llamafactory.config.DELConfigError` with every problem), then train
    it with LLaMA-Factory's ``run_exp`` and DEL's SFT trainer (or ``trainer_class``, a subclass of it)."""
    host_args, settings = read_config(config)
    check_llamafactory_version(installed_llamafactory())
    from llamafactory.train.tuner import run_exp

    from .trainer import DELSeq2SeqTrainer, del_sft_trainer

    with del_sft_trainer(settings, trainer_class or DELSeq2SeqTrainer):
        run_exp(args=host_args, callbacks=callbacks)
    save_config(config)


def save_config(config: dict[str, Any]) -> None:
    """The run's config, DEL's keys included, into its ``output_dir`` (by the first process), where ``del-eval``
    reads the prompt format the model was trained with (LLaMA-Factory keeps no config there)."""
    output_dir = config.get("output_dir")
    if not output_dir or os.environ.get("RANK", "0") != "0" or not Path(output_dir).is_dir():
        return
    import yaml

    from ..evaluation.run.llamafactory_config import CONFIG_FILE

    text = yaml.safe_dump(config, sort_keys=False)
    (Path(output_dir) / CONFIG_FILE).write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        prog="del-llamafactory",
        description="Train with LLaMA-Factory and DEL: a LLaMA-Factory YAML with del_* keys (docs/hosts.md).",
    )
    parser.add_argument("command", choices=["train"])
    parser.add_argument("config", help="the LLaMA-Factory YAML (or JSON) config, with DEL's keys")
    parser.add_argument("overrides", nargs="*", help="key=value overrides, as llamafactory-cli takes them")
    args = parser.parse_args(argv)
    try:
        config = read_yaml(args.config, args.overrides)
        read_config(config)  # every problem, before anything heavy is imported
        check_llamafactory_version(installed_llamafactory())
    except (DELConfigError, FileNotFoundError, RuntimeError) as err:
        print(err, file=sys.stderr)
        return 2
    if _needs_torchrun():
        return _torchrun(argv)
    train(config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
