# Two commands from a fresh clone:  `make run`  (main job)  and  `make test`  (test suite).
# Both create the virtual environment .venv on first use and are idempotent.
PYTHON ?= python3
VENV := .venv
# The library accepts any torch 2.x; here we pin the CPU build for development and CI.
# GPU users: make TORCH_SPEC="torch" (or install the CUDA build of their choice first).
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.molntk-installed
PYTEST_ARGS ?= -n 2

.PHONY: run test setup clean-venv

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q "$(TORCH_SPEC)"
	$(VENV)/bin/python -m pip install -q -e ".[dev,baselines,distributed,md,dft]"
	@touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/molntk run configs/qm9_u0.yaml

test: $(STAMP)
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

clean-venv:
	rm -rf $(VENV)
