# ctxpress: `make demo` runs the appliance on the embedded defaults, `make test` runs every test.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test lint up down clean eval-long eval-short eval-cross bench fuzz faults editor-clients e2e

install: $(STAMP)

# llama-cpp-python compiles llama.cpp (~8 min on 2 cores); pip keeps the built wheel in its
# cache, so later installs on the same machine reuse it. It is compiled for this CPU
# (-march=native) less AMX: on a host that reports AMX, ggml's AMX kernels stopped the engine
# with an illegal instruction (SIGILL) at its first matrix product.
ifeq ($(shell uname -m),x86_64)
NO_AMX := -mno-amx-tile -mno-amx-int8 -mno-amx-bf16
endif

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@echo "installing ctxpress and its models into $(VENV) (first time: llama.cpp compiles, ~8 min)…"
	@start=$$(date +%s); \
	CFLAGS="$$CFLAGS $(NO_AMX)" CXXFLAGS="$$CXXFLAGS $(NO_AMX)" \
	$(PY) -m pip install --quiet --progress-bar off -e '.[dev,models]' && \
	echo "install took $$(( $$(date +%s) - start ))s"
	@touch $(STAMP)

demo: install
	$(VENV)/bin/ctxpress demo

test: install lint vscode-test editor-clients vscode
	$(PY) -m pytest -q -rs

# The real editor clients that tests/e2e drives (code-server + Chromium, Neovim, tabby-agent), from
# Debian's packages and npm; the stamp is redone when an install script changes.
E2E_DIR ?= .e2e
E2E_STAMP := $(E2E_DIR)/.installed

editor-clients: $(E2E_STAMP)

$(E2E_STAMP): $(wildcard infra/editor-clients/*.sh)
	E2E_DIR=$(abspath $(E2E_DIR)) bash infra/editor-clients/install.sh
	@touch $@

# Only the end-to-end tests of the editor doors, with their latency table.
e2e: install editor-clients vscode
	$(PY) -m pytest -q -rs -s tests/e2e

# The fuzz suites with many more examples than `make test` runs (about 10,000 in all), printing
# what each subject answered.
fuzz: install
	CTXPRESS_FUZZ_EXAMPLES=2500 $(PY) -m pytest -q -s tests/workers/test_fuzz_subjects.py \
		tests/context/test_fuzz_assemble.py

# kill -9 of each part under a bounded load, an appliance per part, and one node of a three-node NATS cluster
# (docs/reliability.md); about 16 minutes, so not part of `make test` (the `faults` marker is deselected there).
faults: install
	$(PY) -m pytest -q -s -rs -m faults tests/faults

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

up: install
	$(VENV)/bin/ctxpress up

down:
	$(VENV)/bin/ctxpress down

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

# Evaluation sets are built from third-party code installed in the venv (never the standard
# library, which is kept for acceptance checks), deterministically for a seed.
SITE := $(shell $(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)
EVAL_DIR ?= .eval

eval-long: install
	@mkdir -p $(EVAL_DIR)
	$(VENV)/bin/ctxpress eval make-cases --repo $(SITE)/sqlalchemy --n 100 --seed 1 --min-lines 2000 --out $(EVAL_DIR)/long.jsonl
	$(VENV)/bin/ctxpress eval --cases $(EVAL_DIR)/long.jsonl --mode both --gate 3 --out $(EVAL_DIR)/long-results.jsonl

eval-short: install
	@mkdir -p $(EVAL_DIR)
	$(VENV)/bin/ctxpress eval make-cases --repo $(SITE)/pydantic --n 100 --seed 2 --max-lines 300 --out $(EVAL_DIR)/short.jsonl
	$(VENV)/bin/ctxpress eval --cases $(EVAL_DIR)/short.jsonl --mode both --gate 3 --out $(EVAL_DIR)/short-results.jsonl

# Cross-file cases (the expected text uses a name defined in another file of pydantic), with and
# without retrieval; the repository is indexed first (unchanged files are skipped on later runs).
eval-cross: install
	@mkdir -p $(EVAL_DIR)
	$(VENV)/bin/ctxpress index $(SITE)/pydantic
	$(VENV)/bin/ctxpress eval make-cases --repo $(SITE)/pydantic --n 100 --seed 5 --cross-file --out $(EVAL_DIR)/cross.jsonl
	$(VENV)/bin/ctxpress eval --cases $(EVAL_DIR)/cross.jsonl --mode optimized --out $(EVAL_DIR)/cross-on.jsonl
	$(VENV)/bin/ctxpress eval --cases $(EVAL_DIR)/cross.jsonl --mode optimized --features=-retrieval --out $(EVAL_DIR)/cross-off.jsonl

bench: install
	$(VENV)/bin/ctxpress bench

# The VS Code extension (editors/vscode): `npm ci` when node_modules is missing or the lock file
# changed, then the .vsix (`make vscode`) or the unit tests (`make vscode-test`). Needs node >= 20.
VSCODE_DIR := editors/vscode
VSCODE_STAMP := $(VSCODE_DIR)/node_modules/.ctxpress-installed

.PHONY: vscode vscode-test

$(VSCODE_STAMP): $(VSCODE_DIR)/package.json $(VSCODE_DIR)/package-lock.json
	@start=$$(date +%s); \
	cd $(VSCODE_DIR) && npm ci --no-audit --no-fund --ignore-scripts && \
	echo "npm ci took $$(( $$(date +%s) - start ))s"
	@touch $@

vscode: $(VSCODE_STAMP)
	@start=$$(date +%s); \
	cd $(VSCODE_DIR) && npm run package && \
	echo "packaging took $$(( $$(date +%s) - start ))s" && \
	echo "$(VSCODE_DIR)/ctxpress-$$(node -p 'require("./package.json").version').vsix"

vscode-test: $(VSCODE_STAMP)
	@start=$$(date +%s); \
	cd $(VSCODE_DIR) && npm test && \
	echo "extension tests took $$(( $$(date +%s) - start ))s"
