"""What the check trains on, built here (nothing is downloaded): a synthetic tokenizer, a random Llama saved with
it, and Alpaca rows of integer and decimal arithmetic."""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import torch

# every 2- and 3-digit string, the number tokens of --number-tokens (the single digits are characters already)
NUMBER_STRINGS = [str(v).zfill(m) for m in (2, 3) for v in range(10**m)]
CHARACTER_TOKENS = 128  # the specials and printable ASCII characters every synthetic tokenizer holds, padding aside


def build_tokenizer(vocab_size: int, number_tokens: bool = False):
    """One token per printable ASCII character (so every digit is its own token), padded to `vocab_size`; with
    ``number_tokens``, digit runs are cut into tokens of 1-3 digits from the left instead ('12345' is '123' '45'),
    as Llama-3's ``\\p{N}{1,3}`` does."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "<s>", "</s>", "<pad>"]
    chars = ["\n"] + [chr(c) for c in range(32, 127)]
    tokens = specials + chars + (NUMBER_STRINGS if number_tokens else [])
    tokens += [f"<unused_{i}>" for i in range(vocab_size - len(tokens))]
    vocab = {token: i for i, token in enumerate(tokens)}
    if number_tokens:  # chunks of 1-3 digits, every other character alone: each piece is a word of the vocabulary
        backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
        backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[0-9]{1,3}|[^0-9]"), behavior="isolated")
    else:
        backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))  # no merges: one token per char
    backend.decoder = decoders.Fuse()
    backend.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", vocab["<s>"])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>"
    )


def build_model_dir(args: argparse.Namespace, out: Path) -> int:
    """A random Llama saved with the synthetic tokenizer; returns its parameter count."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_tokenizer(args.vocab, args.number_tokens)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        max_position_embeddings=max(2048, args.seq_len),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return sum(p.numel() for p in model.parameters())


def write_arithmetic_rows(path: Path, rows: int, seed: int = 0) -> None:
    """Alpaca rows with integer and decimal arithmetic, so that DEL has digits to work on."""
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as handle:
        for _ in range(rows):
            a, b = rng.randint(2, 99999), rng.randint(2, 999)
            price = rng.randint(100, 99999) / 100
            question = (
                f"A shop sells {b} boxes of {a} screws and one lamp for ${price:.2f}. "
                f"How many screws is that, and what is {b} times the lamp's price?"
            )
            answer = (
                f"There are {b} * {a} = {a * b} screws.\n"
                f"{b} * {price:.2f} = {b * price:.2f}\n#### {a * b} and {b * price:.2f}"
            )
            handle.write(json.dumps({"instruction": question, "input": "", "output": answer}) + "\n")


def arithmetic_labels(tokenizer, rows_path: Path, batch: int, length: int) -> torch.Tensor:
    """``[batch, length]`` labels of the synthetic arithmetic rows as sample packing lays them out: each row's
    Alpaca prompt masked with -100, its answer + EOS the targets, rows back to back (the numbers of the answers
    are the digit targets, cut by the tokenizer as it cuts them)."""
    from collation import ALPACA_PROMPT  # bench/, on the path in the loss-step child

    need, flat = batch * length, []
    with open(rows_path, encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            masked = tokenizer(ALPACA_PROMPT.format(instruction=row["instruction"]), add_special_tokens=False)
            masked = masked["input_ids"]
            answer = tokenizer(row["output"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
            flat += [-100] * len(masked) + answer
            if len(flat) >= need:
                return torch.tensor(flat[:need]).view(batch, length)
    raise ValueError(f"{rows_path} holds fewer than {need} label tokens (--rows)")
