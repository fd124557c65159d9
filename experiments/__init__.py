"""The demo (``python -m experiments``): generated arithmetic word problems, two Axolotl LoRA fine-tunes of
SmolLM2-135M-Instruct (MLE and DEL), del-eval on the base model and both, side by side; its sweep (``python -m
experiments sweep``) and the paper's regime (``python -m experiments paper``).

Commands (a parser and ``main``, imported by nothing but ``__main__``): ``pipeline`` (the demo), ``sweep``,
``paper``, ``digit_logit_levels`` (a diagnostic of a sweep's adapters). What they share, each module one job:

- ``runs``: a run folder's bookkeeping (settings, ``run.json`` and its state, data written once, publishing);
  ``jobs``: runs one at a time, each in a child process; ``options``: the options the demo and its sweep share.
- ``problems``: the generated problems; ``training``: the demo's Axolotl LoRA config and in-process training;
  ``precision``: float32 master weights under bf16 autocast (an Axolotl plugin).
- the demo's report: ``demo_report`` (results.md, summary.json), ``findings`` (what it found, in words).
- the sweep: ``sweep_plan`` (settings, seeds, specs), ``sweep_worker`` (one run), ``sweep_report``, with the
  statistics and tables of ``efficacy`` (over seeds: ``seed_stats``) and the plots of ``efficacy_plots``.
- the paper's regime: ``paper_plan`` (regimes, profiles, the time estimate), ``paper_runs`` (every run's spec and
  folder), ``paper_data`` (GSM8K rows, the model), ``paper_worker`` (one run), ``paper_metrics``, ``paper_report``.

``problems`` (the generator) imports nothing heavy; the pipeline imports Axolotl and torch when it runs.
"""
