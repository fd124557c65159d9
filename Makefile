# Set-up, tests and the demo. Everything lands in .venv/ (the project) and ~/.cache/del_plugin (assets).
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
# Axolotl 0.21 needs Python 3.12; pyenv shims can name a python3.12 that does not run, so test each candidate.
PYTHON312 ?= $(shell for p in python3.12 $$HOME/.pyenv/versions/3.12*/bin/python3.12 /usr/local/bin/python3.12 /usr/bin/python3.12; do \
	$$p -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null && { echo $$p; break; }; done)
export AXOLOTL_DO_NOT_TRACK := 1
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
# idle torch threads sleep instead of spinning: on a shared or small machine spinning costs more than it saves
export OMP_WAIT_POLICY := PASSIVE
# The suite runs in TEST_WORKERS pytest-xdist processes, a test file to each (module fixtures are shared Axolotl runs),
# with one torch thread each: on two cores that took 12 min instead of 16 (CONTRIBUTING.md). Memory: ~4 GB a worker.
TEST_WORKERS ?= 2
PYTEST_PARALLEL := -n $(TEST_WORKERS) --dist loadfile

.PHONY: setup assets lint test test-fast demo bench gpu-check clean

$(VENV)/.installed: setup.cfg requirements.lock
	@test -n "$(PYTHON312)" || { echo "error: Python 3.12 not found (Axolotl 0.21.0 needs >= 3.12); set PYTHON312=/path/to/python3.12"; exit 1; }
	$(PYTHON312) -m venv $(VENV)
	$(PY) -m pip install --quiet pip==26.3
	$(PY) -m pip install --quiet -c requirements.lock -e ".[axolotl,eval,test]"
	touch $@

assets: $(VENV)/.installed
	$(PY) -m del_plugin.tooling.assets tokenizers tiny tiny-qwen3 tiny-gemma3 smollm2 deepspeed-configs

setup: assets

lint: $(VENV)/.installed
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

test: setup lint
	OMP_NUM_THREADS=1 $(PY) -m pytest -q $(PYTEST_PARALLEL)

test-fast: setup
	OMP_NUM_THREADS=1 $(PY) -m pytest -q $(PYTEST_PARALLEL) -m "not e2e and not interpreter"

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis

# e.g. make demo DEMO_ARGS="--publish docs/demo"
demo: setup
	$(PY) -m del_plugin.demo $(DEMO_ARGS)

bench: setup
	$(PY) bench/run_all.py

gpu-check: setup
	$(PY) scripts/gpu_check.py
