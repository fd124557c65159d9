"""Loading a model (a folder, or a base model plus a LoRA adapter), building prompts, batched greedy generation.

Prompts follow the format the model was fine-tuned with:

* ``chat``: the tokenizer's chat template with one user turn (the question) and the generation prompt; this is
  what Axolotl's ``type: chat_template`` trains on;
* ``alpaca``: Axolotl's ``type: alpaca`` prompt without input ("Below is an instruction … ### Response:\\n");
* ``custom``: a prompt of the model's own, as Axolotl's user-defined ``type:`` (a mapping with ``format``,
  ``no_input_format``, ``system_prompt``, ...) writes it for an instruction without input (:class:`CustomFormat`);
  only ``auto`` chooses it, from the Axolotl config saved with the model;
* ``auto``: resolved by :func:`~.axolotl_config.resolve_prompt_format` (the Axolotl config saved with the model,
  else ``chat`` when the tokenizer has a chat template, else ``alpaca``); :class:`PromptFormat` alone, without
  the model's folder, applies the tokenizer rule.

A ``response_prefix`` (the paper's "Let's solve the multi-choice question step by step." for option questions)
is written after the prompt, as the start of the response.

Generation stops at EOS, at :data:`STOP_STRINGS` (the start of a new turn a model that runs on would write; the
paper's harness stops at them too), or at the token limit.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ..benchmarks.names import MAX_NEW_TOKENS
from ..errors import UnusableInput

LOG = logging.getLogger(__name__)

__all__ = [
    "ALPACA_PROMPT",
    "MAX_NEW_TOKENS",
    "STOP_STRINGS",
    "CustomFormat",
    "LoadedModel",
    "ModelSource",
    "PromptFormat",
    "check_model_source",
    "device_batch_size",
    "generate_greedy",
    "load_model",
    "resolve_device",
]

ALPACA_PROMPT = (
    "Below is an instruction that describes a task. Write a response that appropriately completes the request."
    "\n\n### Instruction:\n{question}\n\n### Response:\n"
)
PROMPT_FORMATS = ("auto", "chat", "alpaca")
STOP_STRINGS = ("### Instruction", "### Response", "USER:", "ASSISTANT:", "\n\nProblem:")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class LoadedModel:
    model: torch.nn.Module
    tokenizer: object
    base: str
    adapter: str | None
    dtype: str
    device: str


# prompts per generation batch when --batch-size is not given: a GPU runs a batch of 16 in about the time of one
# prompt; a CPU's time grows with the batch, and a row that ends early waits for the batch's longest, so small
# batches there (docs/cpu.md, "Evaluating on a CPU", has the measurement)
DEVICE_BATCH_SIZES = {"cuda": 16, "cpu": 4}


def device_batch_size(device: str | torch.device) -> int:
    """The batch size for ``device`` when none is given (:data:`DEVICE_BATCH_SIZES`; another kind of device takes
    the CPU's)."""
    return DEVICE_BATCH_SIZES.get(torch.device(device).type, DEVICE_BATCH_SIZES["cpu"])


def resolve_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def _resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be auto or one of {', '.join(DTYPES)}, got {dtype!r}")
    return DTYPES[dtype]


@dataclass(frozen=True)
class ModelSource:
    """What :func:`load_model` reads: ``base`` (a folder, or the id of a model in the Hugging Face cache) and the
    LoRA ``adapter`` folder (or None)."""

    base: str
    adapter: str | None

    def weights_fingerprint(self) -> str | None:
        """A digest of the weight files' names, sizes and modification times in the model and adapter folders:
        which weights a report scored, so that a model trained again into the same folder (Axolotl's output_dir)
        is not taken for the run that scored the earlier one. None for a model read from the Hugging Face cache,
        whose snapshot files do not change."""
        folders = [Path(f) for f in (self.base, self.adapter) if f is not None and Path(f).is_dir()]
        if not folders:
            return None
        digest = hashlib.sha256()
        for folder in folders:
            for file in sorted(folder.iterdir()):
                if file.is_file() and (file.suffix in _WEIGHT_SUFFIXES or file.name in _WEIGHT_CONFIGS):
                    stat = file.stat()
                    digest.update(f"{file.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
        return digest.hexdigest()


_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
_WEIGHT_CONFIGS = ("config.json", "adapter_config.json")


def _local_model(name: str, what: str) -> str:
    """``name`` as a model folder, or as the id of a model already in the Hugging Face cache; anything else is an
    error that says what to do, before anything loads (del-eval never downloads)."""
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UnusableInput(f"{what} {name}: no config.json in this folder (not a Hugging Face model folder)")
        return str(path)
    if path.exists():
        raise UnusableInput(f"{what} {name} is a file, not a model folder: give the folder that holds config.json")
    parts = name.split("/")
    looks_like_hub_id = not name.startswith((".", "/", "~")) and len(parts) <= 2 and all(parts)
    if not looks_like_hub_id:
        raise UnusableInput(f"{what} {name}: no such folder")
    from huggingface_hub import constants, try_to_load_from_cache

    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        return name
    raise UnusableInput(
        f"{what} {name}: no such folder, and not in the Hugging Face cache ({constants.HF_HUB_CACHE}). del-eval reads "
        f"local files only (as with HF_HUB_OFFLINE=1) and downloads nothing: download the model first (hf download "
        f"{name}), or pass the folder that holds it"
    )


def check_model_source(model: str | Path, adapter: str | Path | None = None) -> ModelSource:
    """Where :func:`load_model` will read ``model`` (+ ``adapter``), checked on disk without loading anything: a
    model folder, an adapter folder (its ``adapter_config.json`` names the base model) or a model in the Hugging
    Face cache. A missing folder, a folder without ``config.json`` or a hub id that is not in the cache is an
    :class:`~..errors.UnusableInput` naming it and the fix."""
    model_path = Path(model).expanduser()
    if adapter is None and (model_path / "adapter_config.json").is_file():
        adapter = model_path
        config = json.loads((model_path / "adapter_config.json").read_text(encoding="utf-8"))
        base = config.get("base_model_name_or_path")
        if not base:
            raise UnusableInput(
                f"{model_path}/adapter_config.json names no base_model_name_or_path; pass the base model as "
                "--model and this folder as --adapter"
            )
        base = _local_model(base, f"the base model named in {model_path}/adapter_config.json,")
    else:
        base = _local_model(str(model), "--model")
    if adapter is not None and not (Path(adapter) / "adapter_config.json").is_file():
        raise UnusableInput(f"--adapter {adapter}: no adapter_config.json there (not a PEFT/LoRA adapter folder)")
    return ModelSource(base, None if adapter is None else str(adapter))


def load_model(
    model: str | Path, adapter: str | Path | None = None, *, dtype: str = "auto", device: str = "auto"
) -> LoadedModel:
    """A causal LM ready for inference. ``model`` is a model folder (or the id of a model in the Hugging Face
    cache), or an adapter folder such as Axolotl's ``output_dir`` (its ``adapter_config.json`` names the base
    model); ``adapter`` adds a LoRA adapter to ``model``. Adapters are merged into the weights, so generation runs
    at the base model's speed. Only local files are read (:func:`check_model_source`)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = check_model_source(model, adapter)
    base, adapter = source.base, source.adapter
    torch_device = resolve_device(device)
    torch_dtype = _resolve_dtype(dtype, torch_device)
    # Axolotl saves the tokenizer it trained with next to the adapter; prefer it over the base model's
    tokenizer_source = adapter if adapter is not None and (Path(adapter) / "tokenizer_config.json").is_file() else base
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_source), local_files_only=True)
    LOG.info("loading %s%s (%s, %s)", base, f" + adapter {adapter}" if adapter else "", torch_dtype, torch_device)
    lm = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch_dtype, local_files_only=True)
    if adapter is not None:
        from peft import PeftModel

        lm = PeftModel.from_pretrained(lm, str(adapter)).merge_and_unload()
    lm.to(torch_device).eval()
    return LoadedModel(
        lm,
        tokenizer,
        str(base),
        None if adapter is None else str(adapter),
        str(torch_dtype).removeprefix("torch."),
        str(torch_device),
    )


@dataclass(frozen=True)
class CustomFormat:
    """Axolotl's user-defined prompt (``datasets[].type:`` a mapping; ``axolotl/prompt_strategies/user_defined.py``,
    whose defaults these are), for an instruction without input: the system prompt in ``system_format`` when there
    is one, then ``no_input_format`` with the question as ``{instruction}``; Axolotl tokenizes it with the
    tokenizer's special tokens (BOS), as the alpaca prompt."""

    no_input_format: str = "{instruction} "
    system_prompt: str = ""
    system_format: str = "{system}"  # "" leaves the system prompt out, as Axolotl does

    @classmethod
    def from_type(cls, spec: dict) -> CustomFormat:
        keys = ("no_input_format", "system_prompt", "system_format")
        return cls(**{key: str(spec[key]) for key in keys if spec.get(key) is not None})

    def text(self, question: str) -> str:
        system = self.system_format.format(system=self.system_prompt) if self.system_prompt else ""
        return system + self.no_input_format.format(instruction=question)


class PromptFormat:
    """Turns a question into prompt text and token ids, and a (prompt, solution) pair into teacher-forcing ids.
    ``custom`` (the kind :func:`~.axolotl_config.resolve_prompt_format` gives for Axolotl's user-defined format)
    takes its :class:`CustomFormat`."""

    def __init__(self, tokenizer, kind: str = "auto", custom: CustomFormat | None = None):
        if kind == "custom" and custom is None:
            raise ValueError("prompt format custom needs its CustomFormat")
        if kind not in PROMPT_FORMATS and kind != "custom":
            raise ValueError(f"prompt format must be one of {', '.join(PROMPT_FORMATS)}, got {kind!r}")
        if kind == "auto":
            kind = "chat" if getattr(tokenizer, "chat_template", None) else "alpaca"
        elif kind == "chat" and not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                "--prompt-format chat needs a tokenizer with a chat template, and this one has none; "
                "use --prompt-format alpaca"
            )
        self.tokenizer = tokenizer
        self.kind = kind
        self.custom = custom if kind == "custom" else None

    def text(self, question: str, response_prefix: str = "") -> str:
        if self.kind == "chat":
            prompt = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True
            )
        elif self.custom is not None:
            prompt = self.custom.text(question)
        else:
            prompt = ALPACA_PROMPT.format(question=question)
        return prompt + response_prefix

    def _encode(self, text: str) -> list[int]:
        # a chat template writes its own special tokens; the alpaca and custom texts get the tokenizer's (e.g. BOS)
        return list(self.tokenizer(text, add_special_tokens=self.kind != "chat")["input_ids"])

    def prompt_ids(self, question: str, response_prefix: str = "") -> list[int]:
        return self._encode(self.text(question, response_prefix))

    def teacher_forcing_ids(self, question: str, solution: str, response_prefix: str = "") -> tuple[list[int], int]:
        """Ids of prompt + solution tokenized together (as Axolotl tokenizes a training row) and the number of
        leading prompt positions that are not targets."""
        prompt_text = self.text(question, response_prefix)
        return self._encode(prompt_text + solution), len(self._encode(prompt_text))


def _eos_ids(lm: LoadedModel) -> list[int]:
    ids: list[int] = []
    for source in (lm.tokenizer.eos_token_id, getattr(lm.model.generation_config, "eos_token_id", None)):
        for i in source if isinstance(source, (list, tuple)) else [source]:
            if i is not None and int(i) not in ids:
                ids.append(int(i))
    if not ids:
        raise ValueError(f"{lm.base}: the tokenizer and generation config define no EOS token to stop generation")
    return ids


class _StepProgress:
    """A stopping criterion that stops nothing: each generation step advances ``progress`` by ``rows /
    max_new_tokens`` (a batch of ``rows`` problems counts as done at the token limit), so a progress bar counted in
    problems moves with every token, and its rate and ETA are those of a batch that runs to the limit (an upper
    bound: a batch that ends sooner tops the bar up)."""

    def __init__(self, progress, rows: int, max_new_tokens: int):
        # a multiple of 2**-20: sums of such steps are exact in floating point, so the bar ends on the whole count
        self.progress, self.step, self.left = progress, round(rows / max_new_tokens * 2**20) / 2**20, float(rows)

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        if self.left > self.step:
            self.progress.update(self.step)
            self.left -= self.step
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    def finish(self) -> None:
        """The batch is done: the rest of its rows."""
        self.progress.update(self.left)
        self.left = 0.0


class _StopAtText:
    """A stopping criterion: a row stops once the text of its last ``lookback`` generated tokens holds one of
    ``stops``. Decoding a few tokens per row and step costs far less than transformers' ``stop_strings``, which
    scans the whole vocabulary."""

    def __init__(self, tokenizer, stops: Sequence[str], prompt_width: int, lookback: int = 16):
        self.tokenizer, self.stops, self.prompt_width, self.lookback = tokenizer, tuple(stops), prompt_width, lookback

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        start = max(self.prompt_width, input_ids.shape[1] - self.lookback)
        texts = self.tokenizer.batch_decode(input_ids[:, start:].tolist(), skip_special_tokens=True)
        return torch.tensor([any(s in t for s in self.stops) for t in texts], device=input_ids.device)


def generate_greedy(
    lm: LoadedModel,
    prompts: Sequence[list[int]],
    *,
    batch_size: int,
    max_new_tokens: int,
    stop_strings: Sequence[str] = STOP_STRINGS,
    progress=None,
) -> Iterator[tuple[list[int], list[str], list[int], list[bool]]]:
    """Greedy completions of ``prompts`` (token ids), in batches with left padding, longest prompts first.

    Yields ``(indices into prompts, decoded completions, completion lengths in tokens, whether each completion
    ended)`` per batch, so the caller can save each batch as it comes. A completion ends at EOS or at a
    ``stop_strings`` entry (the text is cut before it); one that did neither was cut at ``max_new_tokens``.
    ``progress`` (a tqdm bar counted in problems) moves with every generated token and reaches the batch's size
    when the batch is done (:class:`_StepProgress`).
    """
    from transformers import GenerationConfig, StoppingCriteriaList

    if batch_size < 1 or max_new_tokens < 1:
        raise ValueError(f"batch_size and max_new_tokens must be >= 1, got {batch_size} and {max_new_tokens}")
    tokenizer, model = lm.tokenizer, lm.model
    eos = _eos_ids(lm)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
    config = GenerationConfig(
        max_new_tokens=max_new_tokens,
        do_sample=False,
        num_beams=1,
        eos_token_id=eos,
        pad_token_id=pad_id,
    )
    device = next(model.parameters()).device
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
    for start in range(0, len(order), batch_size):
        indices = order[start : start + batch_size]
        input_ids, attention, width = _left_padded([prompts[i] for i in indices], pad_id)
        steps = _StepProgress(progress, len(indices), max_new_tokens) if progress is not None else None
        criteria = [_StopAtText(tokenizer, stop_strings, width)] if stop_strings else []
        with torch.inference_mode():
            output = model.generate(
                input_ids=input_ids.to(device),
                attention_mask=attention.to(device),
                generation_config=config,
                stopping_criteria=StoppingCriteriaList(criteria + ([steps] if steps else [])) or None,
            )
        texts, lengths, finished = _decoded(tokenizer, output[:, width:].cpu(), eos, pad_id, stop_strings)
        if steps is not None:
            steps.finish()
        yield indices, texts, lengths, finished


def _left_padded(prompts: Sequence[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """``prompts`` as one batch padded on the left: the input ids, the attention mask and the batch's width."""
    width = max(len(ids) for ids in prompts)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, ids in enumerate(prompts):
        input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
        attention[row, width - len(ids) :] = 1
    return input_ids, attention, width


def _decoded(
    tokenizer, completions: torch.Tensor, eos: Sequence[int], pad_id: int, stop_strings: Sequence[str]
) -> tuple[list[str], list[int], list[bool]]:
    """A batch's generated tokens as ``(texts, lengths in tokens, whether each ended)``: a completion ends at its
    first EOS or at a stop string (its text cut before it)."""
    lengths, finished = [], []
    for row in completions.tolist():
        # the completion ends at its first EOS (included in the count); padding after it is not generated, nor
        # is the padding after a stop string
        stop = next((k + 1 for k, t in enumerate(row) if t in eos), None)
        end = len(row)
        while stop is None and end > 0 and row[end - 1] == pad_id:
            end -= 1
        lengths.append(stop if stop is not None else end)
        finished.append(stop is not None)
    texts = [tokenizer.decode(row[:n], skip_special_tokens=True) for row, n in zip(completions.tolist(), lengths)]
    for k, text in enumerate(texts):
        cut = min((i for i in (text.find(s) for s in stop_strings) if i >= 0), default=None)
        if cut is not None:
            texts[k], finished[k] = text[:cut], True
    return texts, lengths, finished
