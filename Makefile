# Two commands on a fresh machine: `make demo` (train the digits example) and `make test` (the whole suite).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test install diagrams lint docs benchmark

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first, pinned, so pip never resolves a newer (CUDA, several GB) build
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[dev,cli,docs]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) examples/digits.py

test: $(STAMP)
	$(PY) -m statemachine.engine.diagram --check
	$(PY) -m pytest -q --transition-coverage-fail-under=100

diagrams: $(STAMP)
	$(PY) -m statemachine.engine.diagram

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict

benchmark: $(STAMP)
	$(PY) benchmarks/overhead.py
