# Two entry points for a fresh machine: `make demo` and `make test`. Each builds its own
# virtualenv in .venv (pip only, no system packages needed beyond Python 3.11).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The demo needs the server's dependencies only, not the test and lint tools.
SERVER_STAMP := $(VENV)/.installed-server

.PHONY: demo test lint typecheck unit devcluster bench clean

$(SERVER_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[server]'
	touch $(SERVER_STAMP)

$(STAMP): $(SERVER_STAMP)
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(SERVER_STAMP)
	$(BIN)/trainjob-status-server demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest -q

test: lint typecheck unit

devcluster: $(STAMP)
	$(BIN)/trainjob-status-server devcluster --port 6443 --kubeconfig-out devcluster.kubeconfig

bench: $(STAMP)
	$(BIN)/python bench/devcluster_bench.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
