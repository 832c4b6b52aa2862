# `make train` and `make test` work on a fresh clone: they build .venv first when it is
# missing or pyproject.toml changed, with the newest torch, Lightning and timm in range.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The oldest stack in range: the GPU machine's, which cannot be changed there.
OLDEST_STACK := torch==2.11.0 torchvision==0.26.0 lightning==2.6.6 timm==1.0.29
PYTHON_OLDEST ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12) $(shell command -v python3.12))
OLDEST := .venv-oldest
OLDEST_STAMP := $(OLDEST)/.installed
# What the oldest stack must run, what its torch can change: every compile test (slow ones
# too), the inductor workarounds, FSDP2 with bf16 weights, the memory fit, the library
# internals, gpu_check --quick, the method kit's 2-rank equality for every experiment, and its
# resume and 2-rank train.py checks on the GPU's method (ijepa_digits) and on a BatchNorm CNN
# with multi-crop (dino_digits_resnet). The other pairings repeat those two's torch calls
# with other method code, which does not change with torch; make test-slow runs them all.
OLDEST_TESTS := tests/test_ijepa.py tests/test_train.py tests/test_method_kit.py \
	tests/test_distributed.py tests/test_library_internals.py \
	$(wildcard tests/test_compile.py tests/test_gpu_check.py tests/test_fsdp.py tests/test_memory_fit.py)
OLDEST_SELECT := compile or inductor or trace or fsdp or memory_fit or library_internals \
	or gpu_check or (method_kit and (equal_one_process or covers_every_family \
	or ijepa_digits] or dino_digits_resnet]))
VERSIONS := import sys, torch, lightning, timm, torchvision; print(f"stack: Python \
	{sys.version.split()[0]}, torch {torch.__version__}, torchvision {torchvision.__version__}, \
	Lightning {lightning.__version__}, timm {timm.__version__}")

.DEFAULT_GOAL := help
.PHONY: help install install-oldest train data test test-slow test-full test-oldest bench lint format clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

# `make -j2 install install-oldest` builds both at once (CI does): each install of the project
# itself writes src/trainlab.egg-info, so those two steps take turns.
LOCKED := flock $(VENV).lock

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(LOCKED) $(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP) ## create .venv and install the project with its dev tools

# The oldest stack first, then the project: pip keeps a torch that is already in range.
$(OLDEST_STAMP): pyproject.toml
	test -x $(OLDEST)/bin/python || $(PYTHON_OLDEST) -m venv $(OLDEST)
	$(OLDEST)/bin/python -m pip install --quiet --upgrade pip
	$(OLDEST)/bin/python -m pip install --quiet $(OLDEST_STACK)
	$(LOCKED) $(OLDEST)/bin/python -m pip install --quiet -e ".[dev]"
	touch $(OLDEST_STAMP)

train: $(STAMP) ## run the default job: VICReg on the embedded digits (CPU, ~3 min)
	$(PY) train.py $(ARGS)

data: $(STAMP) ## fetch Fashion-MNIST into data/ as data=fashion_mnist does on first use (its data.fetch, or its hosts)
	$(PY) -c 'import logging, os, hydra; logging.basicConfig(level=logging.INFO, format="%(message)s"); hydra.initialize_config_dir(os.path.abspath("configs/data"), version_base="1.3"); hydra.utils.instantiate(hydra.compose("fashion_mnist", ["root=data"])).prepare_data()'

# Every suite runs as WORKERS pytest processes (pytest-xdist), each with one torch thread, the
# count Lightning gives each of 2 ranks on 2 cores: most of a test's time is a process
# importing torch and Lightning (10 s) or a tiny model's Python, a core's work each. With 2
# threads a process, OpenMP's waiting threads spin on the other's core (5 s runs took 20 to
# 40). A worker takes a file at a time (loadscope), so a module fixture (a twin run, a
# 2-process harness) is built once. Each test has a limit (pyproject.toml's timeout).
WORKERS ?= 2
PYTEST = OMP_NUM_THREADS=1 WANDB_MODE=offline $(1) -m pytest -q -n $(WORKERS) --dist loadscope

test: $(STAMP) ## fast tests (3 to 5 minutes on 2 CPU cores)
	@$(PY) -c '$(VERSIONS)'
	$(call PYTEST,$(PY)) $(ARGS)

# gpu_check --quick saves the GPU machine's minutes, so it runs on that machine's stack alone
# (make test-oldest): here it would add 107 s to CI and check another stack.
test-slow: $(STAMP) ## only the slow tests (CI runs them after make test)
	@$(PY) -c '$(VERSIONS)'
	$(call PYTEST,$(PY)) -m slow --deselect tests/test_gpu_check.py $(ARGS)

install-oldest: $(OLDEST_STAMP) ## create .venv-oldest: the oldest stack in range and the project

test-oldest: $(OLDEST_STAMP) ## the oldest stack (torch 2.11, Python 3.12) on its named set, and the default job
	@$(OLDEST)/bin/python -c '$(VERSIONS)'
	$(call PYTEST,$(OLDEST)/bin/python) -m "" $(OLDEST_TESTS) -k "$(OLDEST_SELECT)" $(ARGS)
	WANDB_MODE=offline $(OLDEST)/bin/python train.py debug=fdr paths.log_dir=$$(mktemp -d) run_name=oldest

test-full: $(STAMP) ## all tests, slow ones included
	$(call PYTEST,$(PY)) -m "" $(ARGS)

bench: $(STAMP) ## benchmarks; results go to benchmarks/README.md
	$(PY) -m benchmarks


lint: $(STAMP) ## ruff check
	$(PY) -m ruff check src tests scripts benchmarks research train.py eval.py

format: $(STAMP) ## ruff format + import sorting
	$(PY) -m ruff check --fix --select I src tests scripts benchmarks research train.py eval.py
	$(PY) -m ruff format src tests scripts benchmarks research train.py eval.py

clean: ## remove caches and logs (keeps .venv)
	rm -rf .pytest_cache .ruff_cache logs/* src/*.egg-info
	find . -name __pycache__ -not -path './.venv/*' -prune -exec rm -rf {} +
