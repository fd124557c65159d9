"""Data-parallel Axolotl on CPU, for the tests: one in-process Axolotl run per rank under torchrun, gloo DDP.

Nothing in the plugin depends on this file. It exists because neither stock launcher gives a multi-process CPU run
of Axolotl 0.21:

* ``accelerate launch --cpu --num_processes 2`` starts a single process (``--cpu`` selects accelerate's
  ``simple_launcher``, which ignores ``--num_processes``).
* ``torchrun --nproc_per_node 2 -m axolotl.cli.train`` starts two processes, which then stop in two CUDA-only
  steps of Axolotl:

  1. ``load_cfg`` -> ``prepare_optim_env`` (axolotl/utils/trainer.py) -> ``check_cuda_p2p_ib_support`` ->
     ``check_cuda_p2p_support`` (axolotl/utils/environment.py), which calls
     ``torch.cuda.can_device_access_peer`` whenever ``WORLD_SIZE > 1`` and raises without an NVIDIA driver. The
     probe only decides whether to set ``NCCL_P2P_DISABLE``; gloo has no use for it.
  2. ``load_cfg`` -> ``normalize_config`` (axolotl/utils/config/__init__.py) sets
     ``cfg.device_map = {"": LOCAL_RANK}`` whenever ``WORLD_SIZE > 1``; transformers reads an integer device as
     ``cuda:N``.

Here (1) is replaced by a function that answers "no P2P to worry about", (2) is overwritten with ``"cpu"`` after
``load_cfg``, and ``ACCELERATE_USE_CPU=true`` makes accelerate initialise the process group with gloo. What runs
afterwards is Axolotl's own ``setup_model_and_trainer`` and ``Trainer.train`` with the DEL plugin, unchanged.

Usage, from the repository root::

    python -m torch.distributed.run --nproc_per_node 2 tests/ddp_cpu.py SPEC.json

``SPEC.json`` is ``{"out": DIR, "runs": {NAME: {"config": axolotl_config_dict, "setup": "module:function" or
null}, ...}}``. The runs are done one after the other, in order, in the same processes (one interpreter start for
all of them); ``setup``, if given, is imported and called in every rank before its run and may return a function
that undoes it afterwards (a monkeypatch for a control run). For each run every rank writes
``DIR/NAME.rank<R>.pt``: ``grads`` (the gradients of the trainable parameters as the optimizer sees them at the
first optimizer step, i.e. after the DDP all-reduce), ``logs`` (``trainer.state.log_history``), ``world_size``,
``backend`` and ``micro_batches`` (for each training micro-batch this rank computed: its row count, label tokens
and digit targets); or, if the run raised, ``error`` (the traceback). A run that raises on every rank at the same
point (a configuration DEL cannot train with) is recorded and the next run starts; put such runs last, since the
trainer they leave behind is not cleaned up. :func:`launch` does all of this from a test (:func:`start` in the
background). With ``nproc=1`` it starts one plain process instead of torchrun: no process group and no DDP wrapper,
exactly as ``axolotl train`` on one device. (Under torchrun even one CPU process is wrapped in DDP: accelerate wraps
every ``MULTI_CPU`` model, whatever the process count, and with ``WORLD_SIZE=1`` Axolotl leaves
``ddp_find_unused_parameters`` unset, so transformers turns it on for a PEFT model.)
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------------------- parent side
class Launch:
    """A running :func:`start`; :meth:`results` waits for it."""

    def __init__(self, runs: dict[str, dict], out: Path, nproc: int, timeout: float):
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        spec = out / "spec.json"
        spec.write_text(json.dumps({"out": str(out), "runs": runs}))
        env = dict(os.environ)
        env.update(
            PYTHONPATH=os.pathsep.join([str(REPO)] + [p for p in [env.get("PYTHONPATH")] if p]),
            ACCELERATE_USE_CPU="true",
            OMP_NUM_THREADS="1",  # torchrun's default, set for the single process too: same kernels, same sums
            OMP_WAIT_POLICY="PASSIVE",
            AXOLOTL_DO_NOT_TRACK="1",
            HF_HUB_OFFLINE="1",
            TOKENIZERS_PARALLELISM="false",
        )
        script = [str(Path(__file__).resolve()), str(spec)]
        if nproc == 1:
            self.cmd = [sys.executable, *script]
        else:
            self.cmd = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                f"--nproc_per_node={nproc}",
                *script,
            ]
        self.names, self.out, self.nproc, self.timeout = list(runs), out, nproc, timeout
        self.log = open(out / "launch.log", "w")
        self.proc = subprocess.Popen(self.cmd, cwd=REPO, env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def results(self) -> dict[str, list[dict]]:
        """``{name: [rank 0 result, rank 1 result, ...]}``; raises with the log's tail if the launch failed."""
        import torch

        try:
            code = self.proc.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            code = f"killed after {self.timeout} s"
        finally:
            self.log.close()
        if code != 0:
            tail = (self.out / "launch.log").read_text(errors="replace")[-12000:]
            raise RuntimeError(f"{' '.join(self.cmd)}: exit {code}\n--- log (tail)\n{tail}")
        return {
            name: [torch.load(self.out / f"{name}.rank{rank}.pt", weights_only=False) for rank in range(self.nproc)]
            for name in self.names
        }


def start(runs: dict[str, dict], out: Path, nproc: int, timeout: float = 600) -> Launch:
    """Start the entries of ``runs`` (``{"config": ..., "setup": ...}``, see the module docstring) on ``nproc``
    CPU processes, in the background; logs go to ``out/launch.log``."""
    return Launch(runs, out, nproc, timeout)


def launch(runs: dict[str, dict], out: Path, nproc: int, timeout: float = 600) -> dict[str, list[dict]]:
    """:func:`start` and wait: ``{name: [rank 0 result, rank 1 result, ...]}``."""
    return start(runs, out, nproc, timeout).results()


# ---------------------------------------------------------------------------------------------- rank side
def patch_cuda_only_checks() -> None:
    """Step (1) of the module docstring. Step (2) is a config override, see :func:`load_cpu_config`."""
    import axolotl.utils.trainer as axolotl_trainer

    axolotl_trainer.check_cuda_p2p_ib_support = lambda: True


def load_cpu_config(config: dict):
    from axolotl.cli.config import load_cfg
    from axolotl.utils.dict import DictDefault

    cfg = load_cfg(DictDefault(config))
    cfg.device_map = "cpu"  # step (2): not {"": LOCAL_RANK}, which transformers places on cuda:LOCAL_RANK
    return cfg


def train_one(config: dict) -> dict:
    import torch
    from axolotl.common.datasets import load_datasets
    from axolotl.train import setup_model_and_trainer
    from transformers import TrainerCallback

    from del_plugin.core.places import NOT_A_DIGIT
    from del_plugin.hf.collator import TARGET_PLACES_KEY

    class FirstStepGradients(TrainerCallback):
        grads = None

        def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
            if self.grads is None:
                self.grads = {
                    n.removeprefix("module."): p.grad.detach().clone()
                    for n, p in model.named_parameters()
                    if p.grad is not None
                }

    cfg = load_cpu_config(config)
    trainer = setup_model_and_trainer(cfg, load_datasets(cfg=cfg))[0]
    capture = FirstStepGradients()
    trainer.add_callback(capture)

    micro_batches: list[dict] = []
    compute_loss = trainer.compute_loss

    def recording_compute_loss(model, inputs, *args, **kwargs):
        if model.training:
            micro_batches.append(
                {
                    "rows": int(inputs["input_ids"].shape[0]),
                    "label_tokens": int((inputs["labels"][..., 1:] != -100).sum()),
                    "digits": int((inputs[TARGET_PLACES_KEY] != NOT_A_DIGIT).sum()),
                }
            )
        return compute_loss(model, inputs, *args, **kwargs)

    trainer.compute_loss = recording_compute_loss
    trainer.train()
    assert trainer.accelerator.num_processes == int(os.environ.get("WORLD_SIZE", "1"))
    return {
        "grads": capture.grads,
        "logs": trainer.state.log_history,
        "world_size": trainer.accelerator.num_processes,
        "distributed_type": str(trainer.accelerator.distributed_type),
        "micro_batches": micro_batches,
        "backend": torch.distributed.get_backend() if torch.distributed.is_initialized() else None,
    }


def main(spec_path: str) -> None:
    import torch

    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    os.environ.setdefault("ACCELERATE_USE_CPU", "true")
    spec = json.loads(Path(spec_path).read_text())
    out = Path(spec["out"])
    rank = int(os.environ.get("RANK", "0"))
    patch_cuda_only_checks()
    for name, run in spec["runs"].items():
        undo = None
        try:
            if run.get("setup"):
                module, _, attr = run["setup"].partition(":")
                undo = getattr(importlib.import_module(module), attr)()
            result = train_one(run["config"])
        except Exception:  # recorded for the test to read; see the module docstring
            result = {"error": traceback.format_exc()}
        finally:
            if callable(undo):
                undo()
        torch.save(result, out / f"{name}.rank{rank}.pt")


if __name__ == "__main__":
    main(sys.argv[1])
