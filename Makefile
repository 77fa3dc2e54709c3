# The README's two commands are `make run` and `make test`; everything they need is set up here.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: run test lint typecheck unit bench clean setup

setup: $(STAMP)

$(STAMP): pyproject.toml
	bash scripts/setup-venv.sh "$(PYTHON)" "$(VENV)"
	rm -f $(VENV)/.installed-*
	touch $@

run: $(STAMP)
	$(PY) -m replog.demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy

test: lint typecheck
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) bench/storage.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
