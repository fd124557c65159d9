"""Run Axolotl configs one after another in this process and tabulate their final losses and digit metrics.

    python examples/ablation/run_ablation.py examples/ablation/*.yaml
    python examples/ablation/run_ablation.py examples/ablation/{mle,del}.yaml \\
        --override base_model=/path/to/model --override max_steps=2 --output-root /tmp/ablation

Every config is validated before the first one trains. Each run's ``log_history`` is saved as
``<table-dir>/<config>.log_history.json``; the side-by-side table is ``<table-dir>/ablation.md`` and
``ablation.csv`` (rewritten after every run, so a crash keeps the finished ones). ``--table-only`` rebuilds the
table from the saved histories without training. Under ``accelerate launch`` every rank trains and rank 0 writes.
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import yaml

os.environ.setdefault("AXOLOTL_DO_NOT_TRACK", "1")

TRAIN_METRICS = ("loss", "ce_loss", "del_loss", "del_l_num", "digit_accuracy", "digit_entropy")
EVAL_METRICS = ("eval_loss", "eval_ce_loss", "eval_del_l_num", "eval_digit_accuracy", "eval_digit_entropy")
COLUMNS = ("config", "criterion", "status", "steps", *TRAIN_METRICS, *EVAL_METRICS, "train_runtime_s")


def ablation_configs() -> list[Path]:
    """One config per criterion of the registry, next to this script."""
    from del_plugin.core.criteria import CRITERIA

    return [Path(__file__).resolve().parent / f"{name}.yaml" for name in CRITERIA]


def parse_override(text: str) -> tuple[list[str], Any]:
    """``key=value`` (``a.b=value`` for a nested key); the value is read as YAML (numbers, lists, dicts)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"--override expects KEY=VALUE, got {text!r}")
    return key.strip().split("."), yaml.safe_load(value)


def load_yaml_config(path: Path, overrides: list[tuple[list[str], Any]], output_root: Path | None) -> dict:
    with open(path, encoding="utf-8") as handle:
        cfg = yaml.safe_load(handle)
    if not isinstance(cfg, dict):
        raise ValueError(f"{path}: not a YAML mapping")
    for keys, value in overrides:
        node = cfg
        for key in keys[:-1]:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ValueError(f"--override {'.'.join(keys)}: {key} is not a mapping in {path}")
        node[keys[-1]] = value
    if output_root is not None:
        cfg["output_dir"] = str(output_root / path.stem)
    return cfg


def validate(cfg: dict):
    """Axolotl's own loading and validation; raises on a bad config."""
    from axolotl.cli.config import load_cfg
    from axolotl.utils.dict import DictDefault

    return load_cfg(DictDefault(cfg))


def train_one(cfg: dict) -> list[dict]:
    """One in-process Axolotl run; returns the trainer's ``log_history``."""
    from axolotl.common.datasets import load_datasets
    from axolotl.train import train

    loaded = validate(cfg)
    meta = load_datasets(cfg=loaded)
    model, _, trainer = train(cfg=loaded, dataset_meta=meta)
    history = list(trainer.state.log_history)
    del model, trainer, meta
    gc.collect()
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return history


def summarise(name: str, criterion: str, history: list[dict], status: str = "ok") -> dict:
    """The last logged training values, the last evaluation and the run time."""
    row: dict[str, Any] = {"config": name, "criterion": criterion, "status": status}
    train_logs = [h for h in history if "loss" in h]
    eval_logs = [h for h in history if "eval_loss" in h]
    summary = next((h for h in reversed(history) if "train_runtime" in h), {})
    last_train = train_logs[-1] if train_logs else {}
    last_eval = eval_logs[-1] if eval_logs else {}
    row["steps"] = max((h.get("step", 0) for h in history), default=0)
    for key in TRAIN_METRICS:
        row[key] = last_train.get(key)
    for key in EVAL_METRICS:
        row[key] = last_eval.get(key)
    row["train_runtime_s"] = summary.get("train_runtime")
    return row


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return f"{value:.4f}" if abs(value) >= 1e-3 or value == 0 else f"{value:.3e}"
    return str(value)


def write_tables(rows: list[dict], table_dir: Path) -> tuple[Path, Path]:
    table_dir.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = table_dir / "ablation.csv", table_dir / "ablation.md"
    with open(csv_path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: row.get(k) for k in COLUMNS})
    lines = [
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join("---" if c in ("config", "criterion", "status") else "---:" for c in COLUMNS) + "|",
    ]
    lines += ["| " + " | ".join(_cell(row.get(c)) for c in COLUMNS) + " |" for row in rows]
    md_path.write_text(
        "Final logged values per run (train: last logging window; eval: last evaluation). `loss` is what each "
        "criterion minimises; compare runs on `ce_loss` / `eval_ce_loss` and the digit metrics.\n\n"
        + "\n".join(lines)
        + "\n",
        encoding="utf-8",
    )
    return md_path, csv_path


def history_path(table_dir: Path, name: str) -> Path:
    return table_dir / f"{name}.log_history.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "configs",
        nargs="*",
        type=Path,
        help="Axolotl YAML configs, run in this order (default: examples/ablation/<criterion>.yaml for "
        "every criterion of del_plugin.core.criteria.CRITERIA, in the registry's order)",
    )
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        type=parse_override,
        metavar="KEY=VALUE",
        help="set a key in every config (YAML value; a.b=... for nested keys); repeatable",
    )
    parser.add_argument(
        "--output-root",
        type=Path,
        default=None,
        help="put each run's output_dir at OUTPUT_ROOT/<config name> instead of the YAML's",
    )
    parser.add_argument(
        "--table-dir",
        type=Path,
        default=Path("outputs/ablation"),
        help="where the tables and the per-run log histories go (default: outputs/ablation)",
    )
    parser.add_argument(
        "--table-only", action="store_true", help="do not train: rebuild the table from the saved log histories"
    )
    args = parser.parse_args(argv)

    from axolotl.utils.logging import get_logger
    from tqdm import tqdm

    log = get_logger("del_plugin.ablation")
    if not args.configs:
        args.configs = ablation_configs()
    names = [path.stem for path in args.configs]
    if len(set(names)) != len(names):
        parser.error(f"config names must be unique (they name the runs): {names}")
    missing = [str(p) for p in args.configs if not p.is_file()]
    if missing:
        parser.error(f"config file(s) not found: {', '.join(missing)}")
    cfgs = [load_yaml_config(path, args.override, args.output_root) for path in args.configs]
    writes = int(os.environ.get("RANK", "0")) == 0

    rows: list[dict] = []
    if args.table_only:
        for name, cfg in zip(names, cfgs):
            path = history_path(args.table_dir, name)
            if not path.is_file():
                rows.append(summarise(name, cfg.get("del_criterion", ""), [], status=f"no history at {path}"))
                continue
            rows.append(summarise(name, cfg.get("del_criterion", ""), json.loads(path.read_text(encoding="utf-8"))))
        md_path, _ = write_tables(rows, args.table_dir)
        print(md_path.read_text(encoding="utf-8"))
        return 0

    # Validate every config before the first (long) run starts, so a typo in the last one fails now.
    for name, cfg in zip(names, cfgs):
        try:
            validate(cfg)
        except Exception as err:  # noqa: BLE001 - report which config is wrong, then stop
            log.error("%s: invalid config: %s", name, err)
            return 2

    failed = 0
    for name, cfg in tqdm(list(zip(names, cfgs)), desc="ablation", unit="run"):
        criterion = cfg.get("del_criterion") or ("del" if "plugins" in cfg else "")
        log.info("ablation: %s (criterion %s) -> %s", name, criterion, cfg.get("output_dir"))
        try:
            history = train_one(cfg)
            row = summarise(name, criterion, history)
        except Exception as err:  # noqa: BLE001 - one failed run must not lose the others
            log.exception("ablation: %s failed", name)
            history, failed = [], failed + 1
            row = summarise(name, criterion, [], status=f"failed: {type(err).__name__}")
        rows.append(row)
        if writes:
            args.table_dir.mkdir(parents=True, exist_ok=True)
            history_path(args.table_dir, name).write_text(json.dumps(history, indent=1), encoding="utf-8")
            write_tables(rows, args.table_dir)
    if writes:
        md_path, csv_path = write_tables(rows, args.table_dir)
        log.info("ablation: table in %s and %s", md_path, csv_path)
        print(md_path.read_text(encoding="utf-8"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
