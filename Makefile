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
# with one torch thread each: faster than one process on two cores (CONTRIBUTING.md has the times). Memory: ~4 GB a worker.
TEST_WORKERS ?= 2
# Files go to the workers longest first (tests/conftest.py: LONGEST_FILES_FIRST), not by their count of tests,
# pytest-xdist's default, which left a long file of few tests running alone at the end.
PYTEST_PARALLEL := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

.PHONY: setup assets lint test test-fast test-hosts-latest demo bench gpu-check clean

$(VENV)/.installed: setup.cfg requirements.lock requirements-dev.txt
	@test -n "$(PYTHON312)" || { echo "error: Python 3.12 not found (Axolotl 0.21.0 needs >= 3.12); set PYTHON312=/path/to/python3.12"; exit 1; }
	$(PYTHON312) -m venv $(VENV)
	$(PY) -m pip install --quiet pip==26.3
	$(PY) -m pip install --quiet -c requirements.lock -e ".[axolotl,eval]" -r requirements-dev.txt
	touch $@

assets: $(VENV)/.installed
	$(PY) -m tools.assets tokenizers tiny tiny-qwen3 tiny-gemma3 smollm2 deepspeed-configs cpu-example

# .venv's defaults (tools/venv_defaults.py): AXOLOTL_DO_NOT_TRACK=1 where unset, so an offline Axolotl run exits
setup: assets
	$(PY) -m tools.venv_defaults

lint: $(VENV)/.installed
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

test: setup lint
	OMP_NUM_THREADS=1 $(PY) -m pytest -q $(PYTEST_PARALLEL) --durations=20
	$(MAKE) --no-print-directory test-hosts-latest
	$(MAKE) --no-print-directory test-llamafactory

# The newest-hosts lane (CONTRIBUTING.md): the host tests on the newest transformers, TRL, accelerate and peft, with
# no Axolotl. requirements-latest.lock pins them and the dependencies they need newer than the project's; they are
# installed without dependencies into $(LATEST), ahead of the project's environment on PYTHONPATH (the same torch
# and everything else). tests/conftest.py refuses to run the lane on other versions and makes Axolotl unimportable;
# the tests that need it carry the `axolotl` marker.
LATEST := .venv-latest
HOSTS_LATEST_TESTS := tests/core/test_loss.py tests/core/test_places.py tests/core/test_criteria.py \
	tests/core/test_multi_digit.py tests/core/test_hidden.py tests/core/test_number_capture.py \
	tests/core/test_head_rows.py tests/core/test_row_gradient.py tests/core/test_capture_parts.py \
	tests/core/test_architectures.py tests/core/test_real_tokenizers.py tests/experiments/test_digit_logit_levels.py \
	tests/hf/test_liger_real.py tests/hf/test_normalisation.py tests/hf/test_plain_hf_trainer.py \
	tests/hf/test_trl_sft.py tests/hf/test_trl_sft_smollm2.py tests/hf/test_hosts_doc.py \
	tests/evaluation/test_benchmarks.py tests/evaluation/test_evaluation.py
$(LATEST)/.installed: requirements-latest.lock $(VENV)/.installed
	rm -rf $(LATEST)
	$(PY) -m pip install --quiet --no-deps --target $(LATEST) -r requirements-latest.lock
	touch $@

test-hosts-latest: setup $(LATEST)/.installed
	DEL_TEST_LANE=hosts-latest PYTHONPATH=$(CURDIR)/$(LATEST) OMP_NUM_THREADS=1 \
		$(PY) -m pytest -q $(PYTEST_PARALLEL) -m "not axolotl" $(HOSTS_LATEST_TESTS)

# The LLaMA-Factory lane (CONTRIBUTING.md): the LLaMA-Factory host's tests on LLaMA-Factory 0.9.5 and the releases it
# pins (requirements-llamafactory.lock), installed as the newest-hosts lane is, into $(LLAMAFACTORY); no Axolotl.
LLAMAFACTORY := .venv-llamafactory
LLAMAFACTORY_TESTS := tests/llamafactory tests/hf/test_hosts_doc.py
$(LLAMAFACTORY)/.installed: requirements-llamafactory.lock $(VENV)/.installed
	rm -rf $(LLAMAFACTORY)
	$(PY) -m pip install --quiet --no-deps --target $(LLAMAFACTORY) -r requirements-llamafactory.lock
	touch $@

test-llamafactory: setup $(LLAMAFACTORY)/.installed
	DEL_TEST_LANE=llamafactory PYTHONPATH=$(CURDIR)/$(LLAMAFACTORY) OMP_NUM_THREADS=1 \
		$(PY) -m pytest -q $(PYTEST_PARALLEL) -m "not axolotl" $(LLAMAFACTORY_TESTS)

test-fast: setup
	OMP_NUM_THREADS=1 $(PY) -m pytest -q $(PYTEST_PARALLEL) -m "not e2e and not interpreter"

clean:
	rm -rf $(VENV) $(LATEST) .pytest_cache .hypothesis

# e.g. make demo DEMO_ARGS="--publish docs/demo"
demo: setup
	$(PY) -m experiments $(DEMO_ARGS)

bench: setup
	$(PY) bench/run_all.py

gpu-check: setup
	$(PY) -m bench.gpu_check
