# Two entry points for a fresh machine: `make demo` and `make test`. Each builds its own
# virtualenv in .venv (pip only, no system packages needed beyond Python 3.11).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The demo needs the three packages only, not the test and lint tools.
SERVER_STAMP := $(VENV)/.installed-server

.PHONY: demo test lint typecheck unit devcluster bench clean

$(SERVER_STAMP): client/pyproject.toml server/pyproject.toml devcluster/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ./client -e ./server -e ./devcluster
	touch $(SERVER_STAMP)

# pip >= 25.1 reads the workspace's [dependency-groups] (the upgrade above brings it).
$(STAMP): $(SERVER_STAMP) pyproject.toml
	$(BIN)/pip install --quiet --group test
	touch $(STAMP)

demo: $(SERVER_STAMP)
	$(BIN)/trainjob-devcluster demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache --no-logo

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest -q

test: lint typecheck unit

devcluster: $(STAMP)
	$(BIN)/trainjob-devcluster serve --port 6443 --kubeconfig-out devcluster.kubeconfig

bench: $(STAMP)
	$(BIN)/python bench/devcluster_bench.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
