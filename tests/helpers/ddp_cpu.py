"""Data-parallel Axolotl on CPU, for the tests: one in-process Axolotl run per rank under torchrun, gloo DDP, FSDP2
or DeepSpeed ZeRO.

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

  With an ``fsdp_config`` two more steps stop it, and a third with ``bf16: true``:

  3. ``ModelLoader._set_parallel_config`` -> ``build_parallelism_config`` (axolotl/utils/distributed.py) builds the
     FSDP device mesh with the device type ``"cuda"`` written in (``init_device_mesh("cuda", ...)``, which calls
     ``torch.cuda.set_device``).
  4. accelerate's ``AcceleratorState`` turns a data-parallel run into ``DistributedType.FSDP`` only for the
     accelerator types (``MULTI_GPU``, ``MULTI_XPU``, ...; accelerate/state.py): with ``ACCELERATE_USE_CPU`` the run
     stays ``MULTI_CPU`` and the model is wrapped in DDP, the ``fsdp_config`` silently unused.
  5. transformers' ``TrainingArguments`` refuses ``bf16`` unless ``is_torch_bf16_gpu_available()`` (a CUDA
     capability probe) or ``use_cpu``, which Axolotl never sets.

  With a ``deepspeed`` config (DeepSpeed's CPU accelerator, ``DS_ACCELERATOR=cpu``, which every launch sets), two
  more:

  6. accelerate never makes a CPU run a DeepSpeed one (``ACCELERATE_USE_CPU`` or ``cpu=True`` skips its DeepSpeed
     branch), and without it finds no backend for a process without an accelerator (``_prepare_backend`` knows
     gloo only for ``cpu=True``), so the run would have no process group: ``distributed_type`` ``NO``, one process.
  7. not a CUDA step, but a minute of every fresh environment: DeepSpeed's communicator compiles a shared-memory
     all-reduce for the CPU when it starts (:func:`skip_deepspeed_shm_build`), which training never calls.

Here (1) is replaced by a function that answers "no P2P to worry about", (2) is overwritten with ``"cpu"`` after
``load_cfg``, (3) builds the same mesh with the device type ``"cpu"``, (4) does for ``MULTI_CPU`` what accelerate
does for a GPU when it is handed an FSDP plugin (``distributed_type = FSDP``, the plugin kept, the partial state
told), (5) answers the probe with yes (the CPU runs bf16 autocast, and FSDP2's bf16 parameters and reductions),
and ``ACCELERATE_USE_CPU=true`` makes accelerate initialise the process group with gloo. For a DeepSpeed run
``ACCELERATE_USE_CPU`` is unset, (6) hands accelerate gloo and ``MULTI_CPU`` where it found nothing (it then starts
DeepSpeed's communicator on gloo and makes the run ``DEEPSPEED``, as it does on GPUs), and (7) leaves the
shared-memory op unbuilt (:func:`start_deepspeed_run`). What runs afterwards is Axolotl's own
``setup_model_and_trainer`` and ``Trainer.train`` with the DEL plugin, unchanged: for FSDP2 that is accelerate's
``_prepare_fsdp2`` with Axolotl's ``fsdp2_prepare_model`` (its wrap policy, activation checkpointing,
``cpu_ram_efficient_loading`` broadcast from rank 0, ``fully_shard`` per unit and root last), over gloo; for
DeepSpeed, Axolotl's ``setup_deepspeed_env``, the model loaded under ``deepspeed.zero.Init`` for ZeRO-3, and
accelerate's DeepSpeed engine with the config's ``"auto"`` values filled by transformers.

Usage, from the repository root::

    python -m torch.distributed.run --nproc_per_node 2 tests/helpers/ddp_cpu.py SPEC.json

``SPEC.json`` is ``{"out": DIR, "runs": {NAME: {"config": axolotl_config_dict, "setup": "module:function" or
null}, ...}}``. The runs are done one after the other, in order, in the same processes (one interpreter start for
all of them; the environment variables Axolotl sets for a run, ``FSDP_*`` among them, are reset between runs);
``setup``, if given, is imported and called in every rank before its run and may return a function that undoes it
afterwards (a monkeypatch for a control run). For each run every rank writes
``DIR/NAME.rank<R>.pt``: ``grads`` (the gradients of the trainable parameters as the optimizer sees them at the
first optimizer step, i.e. after the DDP all-reduce, FSDP's reduce-scatter or ZeRO's reduction; a sharded FSDP
gradient is gathered whole, a ZeRO one read whole with :func:`deepspeed_first_step_gradients`, and the names are
those of the unwrapped model), ``logs`` (``trainer.state.log_history``), ``world_size``, ``backend``,
``cpu_backend`` (:func:`cpu_backend`), ``distributed_type``, the layout of :func:`fsdp_layout` (``fsdp_units``,
``head_unit``, ``head_tied``, ``checkpointed``, ``param_dtypes``) and of :func:`zero_layout` (DeepSpeed runs),
and ``micro_batches`` (for each training micro-batch this rank computed: its row count, label tokens and digit
targets); or, if the run raised, ``error`` (the traceback). A run
that raises on every rank at the same point (a configuration DEL cannot train with) is recorded and the next run
starts; put such runs last, since the trainer they leave behind is not cleaned up. :func:`launch` does all of this
from a test (:func:`start` in the background). With ``nproc=1`` it starts one plain process instead of torchrun: no
process group and no DDP wrapper, exactly as ``axolotl train`` on one device. (Under torchrun even one CPU process
is wrapped in DDP: accelerate wraps every ``MULTI_CPU`` model, whatever the process count, and with
``WORLD_SIZE=1`` Axolotl leaves ``ddp_find_unused_parameters`` unset, so transformers turns it on for a PEFT
model.)

A run with ``"whole": true`` runs Axolotl's whole ``axolotl.train.train`` instead, as ``axolotl train`` does: the
final save, the model card, the plugins' ``post_train`` hooks and the end of the process group (so it must be the
last run of a launch); it records ``logs``, ``world_size``, ``output_dir`` and whether a process group is left
(``process_group``).
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from repo import REPO


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
            DS_ACCELERATOR="cpu",
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
    """Steps (1), (3), (4) and (5) of the module docstring. Step (2) is a config override, see
    :func:`load_cpu_config`."""
    import accelerate.state
    import axolotl.utils.trainer as axolotl_trainer
    import transformers.training_args
    from accelerate.parallelism_config import ParallelismConfig
    from accelerate.utils import DistributedType

    axolotl_trainer.check_cuda_p2p_ib_support = lambda: True  # (1)

    build_device_mesh = ParallelismConfig.build_device_mesh

    def build_cpu_device_mesh(self, device_type):  # (3)
        return build_device_mesh(self, "cpu")

    ParallelismConfig.build_device_mesh = build_cpu_device_mesh

    state_init = accelerate.state.AcceleratorState.__init__

    def init_fsdp_on_cpu(self, *args, fsdp_plugin=None, **kwargs):  # (4): accelerate's own lines for a GPU
        state_init(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
        if fsdp_plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
            self.distributed_type = DistributedType.FSDP
            if self._mixed_precision != "no":
                fsdp_plugin.set_mixed_precision(self._mixed_precision)
            self.fsdp_plugin = fsdp_plugin
            accelerate.state.PartialState._shared_state["distributed_type"] = self.distributed_type

    accelerate.state.AcceleratorState.__init__ = init_fsdp_on_cpu

    transformers.training_args.is_torch_bf16_gpu_available = lambda: True  # (5)

    prepare_backend = accelerate.state.PartialState._prepare_backend

    def prepare_deepspeed_backend_on_cpu(self, cpu=False, sagemaker_dp=False, backend=None):  # (6)
        backend, distributed_type = prepare_backend(self, cpu, sagemaker_dp, backend)
        deepspeed = os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true"
        if deepspeed and distributed_type == DistributedType.NO and int(os.environ.get("LOCAL_RANK", -1)) != -1:
            return "gloo", DistributedType.MULTI_CPU
        return backend, distributed_type

    accelerate.state.PartialState._prepare_backend = prepare_deepspeed_backend_on_cpu


def skip_deepspeed_shm_build() -> None:
    """Step (7) of the module docstring: DeepSpeed's communicator, on its CPU accelerator, compiles a shared-memory
    all-reduce when it starts (``build_shm_op``: a C++ extension, about a minute in a fresh environment), used only by
    ``inference_all_reduce`` (tensor-parallel inference layers), never in training. Without it every collective goes
    through torch.distributed (gloo), as on a CPU that cannot build the op."""
    # by module name: the package `deepspeed.comm` exports `torch` (the torch module) over its submodule's name
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None


def load_cpu_config(config: dict):
    from axolotl.cli.config import load_cfg
    from axolotl.utils.dict import DictDefault

    cfg = load_cfg(DictDefault(config))
    cfg.device_map = "cpu"  # step (2): not {"": LOCAL_RANK}, which transformers places on cuda:LOCAL_RANK
    return cfg


def unwrapped_name(name: str) -> str:
    """A parameter's or module's name in the unwrapped model: without DDP's ``module.`` and activation
    checkpointing's ``_checkpoint_wrapped_module`` (FSDP2 itself keeps the names)."""
    name = name.removeprefix("module.").replace("._checkpoint_wrapped_module", "")
    return name.replace("_checkpoint_wrapped_module.", "").removesuffix("_checkpoint_wrapped_module")


def full_gradient(grad):
    """A gradient as one whole tensor: FSDP2's sharded ``DTensor`` gathered over the ranks (a collective: every
    rank calls this for the same parameters in the same order)."""
    from torch.distributed.tensor import DTensor

    return (grad.full_tensor() if isinstance(grad, DTensor) else grad).detach().clone()


def fsdp_layout(model) -> dict:
    """``fsdp_units``: the modules that are FSDP2 units (``""`` the root); ``head_unit``: the innermost unit whose
    parameters hold the LM head's weight; ``head_tied``: whether that weight is the input embedding's;
    ``checkpointed``: the modules activation checkpointing wraps; ``param_dtypes``: the dtypes the trainable
    parameters compute in (FSDP2's mixed-precision ``param_dtype``, else their own). Names are those of the
    unwrapped model."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper
    from torch.distributed.fsdp import FSDPModule

    modules = list(model.named_modules())
    units = [(unwrapped_name(n), m) for n, m in modules if isinstance(m, FSDPModule)]
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    embedding = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    head_unit = None
    if head is not None:
        for name, unit in units:  # outer units come first: the last match is the innermost
            if any(p is head.weight for p in unit.parameters()):
                head_unit = name
    dtypes = {str(unit._get_fsdp_state()._mp_policy.param_dtype) for _, unit in units}
    dtypes.discard("None")
    if not dtypes:
        dtypes = {str(p.dtype) for p in model.parameters() if p.requires_grad}
    return {
        "fsdp_units": sorted({name for name, _ in units}),
        "head_unit": head_unit,
        "head_tied": head is not None and embedding is not None and head.weight is embedding.weight,
        "checkpointed": sorted(unwrapped_name(n) for n, m in modules if isinstance(m, CheckpointWrapper)),
        "param_dtypes": sorted(dtypes),
    }


def zero_layout(engine) -> dict:
    """What DeepSpeed made of the model (empty without DeepSpeed): ``zero_stage``; ``offload_param`` and
    ``offload_optimizer``, the devices ZeRO offloads to (None: not offloaded); ``bf16`` (DeepSpeed's bf16 mode) and
    ``communication_dtype`` (the dtype its gradient reductions use); ``head_dtype``, the dtype the LM head weight is
    stored in; ``head_numel`` and ``head_shape``, the head weight's element count on this rank outside any forward
    and its whole shape (ZeRO-3 partitions it to no elements between forwards)."""
    if not hasattr(engine, "zero_optimization_stage"):
        return {}
    zero = engine.config["zero_optimization"] if "zero_optimization" in engine.config else {}
    weight = engine.module.get_output_embeddings().weight
    return {
        "zero_stage": engine.zero_optimization_stage(),
        "offload_param": (zero.get("offload_param") or {}).get("device"),
        "offload_optimizer": (zero.get("offload_optimizer") or {}).get("device"),
        "bf16": engine.bfloat16_enabled(),
        "communication_dtype": str(engine.communication_data_type),
        "head_dtype": str(getattr(weight, "ds_tensor", weight).dtype),
        "head_numel": weight.numel(),
        "head_shape": tuple(getattr(weight, "ds_shape", weight.shape)),
    }


def deepspeed_first_step_gradients(capture) -> Callable[[], None]:
    """Under DeepSpeed the optimizer step happens inside accelerate's ``backward`` (``engine.step()`` at the last
    micro-batch of a step), before any trainer callback sees it, and ZeRO keeps the reduced gradients in its own
    partitioned buffers, not in ``.grad``. So the first step's gradients are read at the start of the engine's first
    step at an accumulation boundary, each whole, with DeepSpeed's ``safe_get_full_grad`` (a collective: every rank
    reads the same parameters in the same order). Returns the function that undoes the patch."""
    from deepspeed.runtime.engine import DeepSpeedEngine
    from deepspeed.utils import safe_get_full_grad

    step = DeepSpeedEngine.step

    def recording_step(engine, *args, **kwargs):
        if capture.grads is None and engine.is_gradient_accumulation_boundary():
            grads = {}
            for name, param in engine.module.named_parameters():
                grad = safe_get_full_grad(param) if param.requires_grad else None
                if grad is not None:
                    grads[unwrapped_name(name)] = grad.detach().clone()
            capture.grads = grads
        return step(engine, *args, **kwargs)

    DeepSpeedEngine.step = recording_step
    return lambda: setattr(DeepSpeedEngine, "step", step)


def cpu_backend() -> str | None:
    """The backend of the default process group for CPU tensors (``get_backend`` says ``"undefined"`` for a group
    with one backend per device type, as Axolotl's FSDP device mesh makes it), None without a process group."""
    import torch.distributed as dist

    if not dist.is_initialized():
        return None
    config = dist.get_backend_config()
    if ":" not in config:
        return config
    return dict(part.split(":") for part in config.split(","))["cpu"]


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
                    unwrapped_name(n): full_gradient(p.grad) for n, p in model.named_parameters() if p.grad is not None
                }

    cfg = load_cpu_config(config)
    trainer = setup_model_and_trainer(cfg, load_datasets(cfg=cfg))[0]
    capture = FirstStepGradients()
    trainer.add_callback(capture)
    undo = deepspeed_first_step_gradients(capture) if config.get("deepspeed") else None

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
    try:
        trainer.train()
    finally:
        if undo is not None:
            undo()
    assert trainer.accelerator.num_processes == int(os.environ.get("WORLD_SIZE", "1"))
    return {
        "grads": capture.grads,
        "logs": trainer.state.log_history,
        "world_size": trainer.accelerator.num_processes,
        "distributed_type": str(trainer.accelerator.distributed_type),
        "micro_batches": micro_batches,
        "backend": torch.distributed.get_backend() if torch.distributed.is_initialized() else None,
        "cpu_backend": cpu_backend(),
        **fsdp_layout(trainer.model_wrapped),
        **zero_layout(trainer.model_wrapped),
    }


def start_deepspeed_run() -> Callable[[], None]:
    """Before a DeepSpeed run: no ``ACCELERATE_USE_CPU`` (accelerate never turns a CPU run into a DeepSpeed one; step
    (6) gives it gloo instead), and no distributed state left by an earlier run in this process (Axolotl refuses to
    set DeepSpeed up over one). Returns what to call after the run: a ZeRO-3 run leaves transformers' ZeRO-3 switches
    on for the whole process (Axolotl replaces ``is_deepspeed_zero3_enabled`` by ``lambda: True`` while it loads the
    model), which would load every later run's model partitioned, and DeepSpeed's ZeRO-3 replaces
    ``torch.nn.functional.linear`` with its own for good."""
    import accelerate.state
    import axolotl.utils.distributed
    import torch
    import transformers.integrations.deepspeed as hf_deepspeed
    import transformers.modeling_utils

    skip_deepspeed_shm_build()  # (7)
    os.environ.pop("ACCELERATE_USE_CPU", None)
    accelerate.state.AcceleratorState._reset_state(reset_partial_state=True)
    axolotl.utils.distributed.distributed_state = None
    switches = [
        (transformers.modeling_utils, "is_deepspeed_zero3_enabled"),
        (hf_deepspeed, "is_deepspeed_zero3_enabled"),
        (torch.nn.functional, "linear"),
    ]
    saved = [(module, name, getattr(module, name)) for module, name in switches]

    def finish():
        for module, name, value in saved:
            setattr(module, name, value)
        hf_deepspeed.unset_hf_deepspeed_config()
        accelerate.state.AcceleratorState._reset_state(reset_partial_state=True)
        axolotl.utils.distributed.distributed_state = None

    return finish


def train_whole(config: dict) -> dict:
    """Axolotl's ``train`` from start to end (see the module docstring)."""
    import torch
    from axolotl.common.datasets import load_datasets
    from axolotl.train import train

    cfg = load_cpu_config(config)
    _, _, trainer = train(cfg=cfg, dataset_meta=load_datasets(cfg=cfg))
    return {
        "logs": trainer.state.log_history,
        "world_size": trainer.accelerator.num_processes,
        "output_dir": str(cfg.output_dir),
        "process_group": torch.distributed.is_initialized(),
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
    environ = dict(os.environ)
    for name, run in spec["runs"].items():
        # Axolotl collects garbage several times a run (model loader, trainer, callbacks), each a full pass over
        # every Python object of the process: a second or more with the imports and earlier runs' objects. Frozen
        # (left out of collections), they make each pass take milliseconds; earlier runs' garbage cycles (a tiny
        # model's worth) are kept rather than freed.
        gc.freeze()
        undo = None
        finish = start_deepspeed_run() if run["config"].get("deepspeed") else None
        try:
            if run.get("setup"):
                module, _, attr = run["setup"].partition(":")
                undo = getattr(importlib.import_module(module), attr)()
            result = (train_whole if run.get("whole") else train_one)(run["config"])
        except Exception:  # recorded for the test to read; see the module docstring
            result = {"error": traceback.format_exc()}
        finally:
            if callable(undo):
                undo()
            if finish is not None:
                finish()
        torch.save(result, out / f"{name}.rank{rank}.pt")
        # Axolotl sets FSDP_* and ACCELERATE_USE_FSDP for a run with an fsdp_config and never unsets them (accelerate
        # reads them when the next trainer starts); its trainer resets accelerate's state itself
        os.environ.clear()
        os.environ.update(environ)


if __name__ == "__main__":
    main(sys.argv[1])
