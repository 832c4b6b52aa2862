# `make train` and `make test` work on a fresh clone: they build .venv first when it is
# missing or pyproject.toml changed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help install train test test-slow test-full bench bench-gpu signatures lint format clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP) ## create .venv and install the project with its dev tools

train: $(STAMP) ## run the default job: I-JEPA on the embedded digits (CPU, ~4 min)
	$(PY) train.py $(ARGS)

test: $(STAMP) ## fast tests (under 10 minutes on 2 CPU cores)
	WANDB_MODE=offline $(PY) -m pytest -q $(ARGS)

test-slow: $(STAMP) ## only the slow tests (CI runs them after make test)
	WANDB_MODE=offline $(PY) -m pytest -q -m slow $(ARGS)

test-full: $(STAMP) ## all tests, slow ones included
	WANDB_MODE=offline $(PY) -m pytest -q -m "" $(ARGS)

bench: $(STAMP) ## benchmarks; results go to benchmarks/README.md
	$(PY) -m benchmarks

bench-gpu: $(STAMP) ## on a CUDA GPU: MFU at ViT-H/14 and the step table; benchmarks/gpu.md
	$(PY) -m benchmarks.gpu $(ARGS)

signatures: $(STAMP) ## rewrite src/trainlab/utils/signatures.json after changing a signature
	$(PY) -c 'from trainlab.utils.signatures import write; write()'

lint: $(STAMP) ## ruff check
	$(PY) -m ruff check src tests scripts benchmarks research train.py eval.py

format: $(STAMP) ## ruff format + import sorting
	$(PY) -m ruff check --fix --select I src tests scripts benchmarks research train.py eval.py
	$(PY) -m ruff format src tests scripts benchmarks research train.py eval.py

clean: ## remove caches and logs (keeps .venv)
	rm -rf .pytest_cache .ruff_cache logs/* src/*.egg-info
	find . -name __pycache__ -not -path './.venv/*' -prune -exec rm -rf {} +
