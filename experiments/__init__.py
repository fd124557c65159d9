"""The demo (``python -m experiments``): generated arithmetic word problems, two Axolotl LoRA fine-tunes of
SmolLM2-135M-Instruct (MLE and DEL), del-eval on the base model and both, side by side.

``problems`` (the generator) imports nothing heavy; the pipeline imports Axolotl and torch when it runs.
"""
