# ctxpress: `make demo` runs the appliance on the embedded defaults, `make test` runs every test.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test lint up down clean

install: $(STAMP)

# llama-cpp-python compiles llama.cpp (~8 min on 2 cores); pip keeps the built wheel in its
# cache, so later installs on the same machine reuse it.
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@echo "installing ctxpress and its models into $(VENV) (first time: llama.cpp compiles, ~8 min)…"
	@start=$$(date +%s); \
	$(PY) -m pip install --quiet --progress-bar off -e '.[dev,models]' && \
	echo "install took $$(( $$(date +%s) - start ))s"
	@touch $(STAMP)

demo: install
	$(VENV)/bin/ctxpress demo

test: install lint
	$(PY) -m pytest -q -rs

lint: install
	$(VENV)/bin/ruff check .

up: install
	$(VENV)/bin/ctxpress up

down:
	$(VENV)/bin/ctxpress down

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
