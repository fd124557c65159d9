"""GPU check: a few QLoRA steps with Axolotl on a small local Llama, DEL plugin off and on, beside each
cross-entropy kernel and with number tokens; then the loss step at 7-8B models' heads.

    python -m bench.gpu_check                      # 8 QLoRA runs and the loss step: within 8 min on an H200
    python -m bench.gpu_check --pairs plain,liger  # only some pairs
    python -m bench.gpu_check --steps 20 --seq-len 2048 --micro-batch 2
    python -m bench.gpu_check --number-tokens --vocab 128256  # every pair with numbers in 1-3-digit tokens
    python -m bench.gpu_check --no-loss-step       # the QLoRA runs only

One pair of runs (DEL off, DEL on) per cross-entropy kernel, and one with number tokens:

* ``plain``: the model's own cross-entropy over the logits;
* ``numbers``: the same with a tokenizer that cuts numbers into tokens of 1-3 digits from the left (Llama-3's
  ``\\p{N}{1,3}``), at Llama-3's 128,256 logits (``--numbers-vocab``; a ~440M-parameter model): DEL's
  number-token path;
* ``liger``: Liger's fused linear cross-entropy (``plugins: [axolotl.integrations.liger.LigerPlugin]``,
  ``liger_fused_linear_cross_entropy: true``), which never materialises the logits;
* ``cce``: Cut Cross Entropy (``plugins: [axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin]``,
  ``cut_cross_entropy: true``), which never materialises them either. It needs Axolotl's fork of
  ``cut_cross_entropy`` (``pip install "cut-cross-entropy[transformers] @
  git+https://github.com/axolotl-ai-cloud/ml-cross-entropy.git@v0.1.1"``, not on PyPI); without it the pair is
  skipped with the reason printed.

Prints, per pair, the median step time and the peak GPU memory of each run, their ratio (DEL on / off), the
DEL metrics of the last logged step, and the host synchronisations per timed ``training_step`` (DEL on and off),
each one reported by CUDA itself (``torch.cuda.set_sync_debug_mode("warn")``), with those made by DEL's own code
(any module of the ``del_plugin`` package, told by where the code lives, not by its names) counted apart
(bench/gpu_check/syncs.py; a self-check on known synchronisations runs first and fails the run when it counts
nothing). It fails when DEL's code synchronises at all, or a DEL run's steps more often than the run without
DEL. Then the loss step (``bench/loss_step.py --device cuda``): hidden states -> head -> cross-entropy with and
without DEL at H = 4,096, 8,192 tokens of GSM8K, V = 32,000 / 128,256 / 151,936 (Llama-2-7B's, Llama-3-8B's and
Qwen2.5-7B's heads; the 128,256 one with Llama-3's number tokens), plain and Axolotl's chunked CE, frozen and
trainable head, and DEL's term alone with its kernel count, run once more under ``set_sync_debug_mode("error")``;
it fails when that raises.

Nothing is downloaded: the model is a randomly initialised Llama built here (Llama-2's 32k vocabulary size, so
the logits weigh what they weigh in the 7B runs), the tokenizer a synthetic one with one token per character, and
the data synthetic arithmetic with integers and decimals. Each run is a separate Python process, so that neither
memory nor Axolotl's plugin registry or kernel patches leak from one into the next. Flash-attention 2 is used when
`flash_attn` is installed, PyTorch's sdpa otherwise; everything else is what examples/*/qlora-24gb.yml uses (4-bit
NF4 with double quantisation, LoRA on all linear layers with Axolotl's fused kernels, sample packing, gradient
checkpointing, paged 8-bit AdamW, bf16 or fp16).

Budget: each run is mostly start-up (imports, model load, data preparation, kernel compilation); the 13 steps
of the default take seconds on an H200. Everything is meant to finish within 8 minutes: a run is stopped after
`--timeout` seconds (default 150), the loss step after `--loss-step-timeout` (default 200); a pair whose two runs
would end past `--budget` seconds (default 480, estimated from the longest run so far) is skipped with the
reason printed, and so is the loss step when its timeout would end past it. The order is plain, numbers, the loss
step, liger, cce. A run that fails or times out is reported in the table (exit status 1) and the rest still runs.

It needs a CUDA GPU and says so in one line (exit status 2) on a machine without one. `--cpu-smoke` runs the
plain and numbers pairs on the CPU with tiny models and the GPU-only features swapped for their CPU equivalents
(the fused kernels are Triton kernels and need a GPU; the loss step and the synchronisation counts need CUDA); it
exists to test this check without a GPU and its timings mean nothing.

The modules, one job each: ``cli`` (arguments), ``pairs`` (the pairs and what each needs), ``assets`` (the model,
tokenizer and rows built here), ``config`` (the Axolotl config of one run), ``protocol`` (starting a child process
and reading its result line), ``child`` (one training run, in the child), ``syncs`` (the synchronisation count),
``loss_step_child`` (the loss step, in the child), ``report`` (the table and what fails), ``driver`` (the order,
the budget, the exit status).
"""
