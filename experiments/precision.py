"""Mixed precision as the paper trained: float32 weights, gradients and AdamW states, bf16 products under autocast.

Axolotl ties the dtype it loads the weights in to ``bf16``: ``bf16: true`` loads them in bf16 and AdamW then
updates bf16 weights, whose 8-bit mantissa rounds away a relative change below 2**-9. At the paper's lr 5e-6 most
updates are smaller than that. The authors' script (PolyU-VCLab/DEL, ``train-qwen-deepseek.py``) loads the model
in float32 and passes ``--bf16 True`` to the Hugging Face Trainer, whose accelerate then runs each forward under bf16
autocast: the float32 master weights take every update. List this plugin in ``plugins`` beside ``bf16: true`` to
get that recipe from Axolotl; on a machine without CUDA it also gives the Trainer ``use_cpu`` (transformers refuses
``bf16`` on a CPU otherwise), so the same config runs on a CPU with bf16 matrix units (AMX, AVX-512 BF16).
"""

from __future__ import annotations

from axolotl.integrations.base import BasePlugin

__all__ = ["Float32MasterWeightsPlugin"]


class Float32MasterWeightsPlugin(BasePlugin):
    """``plugins: [experiments.precision.Float32MasterWeightsPlugin]`` with ``bf16: true``: the weights are
    loaded (and kept) in float32, the forward runs under bf16 autocast."""

    def register(self, cfg):
        """Refuses, as the config is read, a config this plugin cannot serve."""
        if cfg.get("bf16") is not True:
            raise ValueError(
                "Float32MasterWeightsPlugin keeps float32 weights under bf16 autocast: set `bf16: true` with it "
                "(without it the run is plain float32 and the plugin has nothing to do)"
            )
        if cfg.get("adapter") == "qlora" or cfg.get("load_in_4bit") or cfg.get("load_in_8bit"):
            raise ValueError(
                "Float32MasterWeightsPlugin is for unquantised weights; a QLoRA run keeps its base weights in 4 bit "
                "and its adapters in float32 already: remove the plugin"
            )

    def pre_model_load(self, cfg):
        import torch

        cfg.torch_dtype = torch.float32  # Axolotl set bf16 from `bf16: true`; the model is loaded after this hook

    def get_training_args(self, cfg):
        import torch

        return None if torch.cuda.is_available() else {"use_cpu": True}
