# ctxpress: `make demo` runs the appliance on the embedded defaults, `make test` runs every test, `make check` in
# under a minute the lint and every test that needs no service.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install demo test check lint up down clean eval-long eval-short eval-heldout eval-cross bench fuzz faults editor-clients e2e

# llama-cpp-python compiles llama.cpp with ggml's CPU backend as run-time variants: one
# libggml-cpu-<microarch>.so per x86-64 generation (SSE4.2 … AVX2, AVX-512, AMX) beside libllama.so,
# none compiled for this CPU in particular (GGML_NATIVE=OFF), so one install runs on every x86-64 host.
# serving/engine/cpu_kernels.py asks Linux for the AMX tile state and loads the best variant the host runs
# (AMX only where the CPU has it and the tile state was granted; CTXPRESS_CPU_KERNELS forces one).
# CMAKE_INSTALL_BINDIR puts the variants into the package's lib/ (ggml installs backends to bin/).
# serving/gcc_amx_tile_fix.h is force-included into every C++ file: with GCC 12 the AMX variant's tile
# configuration lost its rows and widths (dead stores to it), and its first tile instruction was a SIGILL.
# The wheel is built once per machine, version and flags (9-14 min on 2 shared cores) into LLAMA_WHEELS and
# installed from there: pip's own wheel cache would hand back a wheel built with other flags.
LLAMA_CPP := $(shell grep -o 'llama-cpp-python==[0-9.]*' pyproject.toml)
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DCMAKE_INSTALL_BINDIR=llama_cpp/lib
LLAMA_CXXFLAGS := -include $(abspath serving/gcc_amx_tile_fix.h)
LLAMA_KEY := $(shell (echo '$(LLAMA_CPP) $(LLAMA_CMAKE_ARGS)'; cat serving/gcc_amx_tile_fix.h) | sha1sum | cut -c1-12)
LLAMA_WHEELS ?= $(HOME)/.cache/ctxpress/llama-wheels/$(LLAMA_KEY)
STAMP := $(VENV)/.installed-$(LLAMA_KEY)

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@start=$$(date +%s); \
	if ! ls $(LLAMA_WHEELS)/llama_cpp_python-*.whl >/dev/null 2>&1; then \
		echo "building $(LLAMA_CPP) with its CPU variants into $(LLAMA_WHEELS) (first time: 9-14 min on 2 cores)…"; \
		rm -rf $(LLAMA_WHEELS).partial && \
		CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" CXXFLAGS="$$CXXFLAGS $(LLAMA_CXXFLAGS)" $(PY) -m pip wheel --quiet --no-deps --no-cache-dir \
			--no-binary llama-cpp-python -w $(LLAMA_WHEELS).partial '$(LLAMA_CPP)' && \
		rm -rf $(LLAMA_WHEELS) && mv $(LLAMA_WHEELS).partial $(LLAMA_WHEELS) || exit 1; \
	fi; \
	echo "installing ctxpress and its models into $(VENV)…"; \
	$(PY) -m pip install --quiet --progress-bar off --no-deps --force-reinstall $(LLAMA_WHEELS)/llama_cpp_python-*.whl && \
	$(PY) -m pip install --quiet --progress-bar off --find-links $(LLAMA_WHEELS) -e '.[dev,models]' && \
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

# ruff, the import contracts, and every test that needs no service, model or editor client (`pytest --pure`: the
# markers tests/kinds.py applies; a test that starts one unmarked fails here). It takes the virtualenv as it is:
# a pyproject.toml newer than the install stamp would have `install` reinstall for minutes before the first lint
# message (`make install` or `make test` does that); only where there is no virtualenv does it make one. Two pytest
# processes, half the test files each (--shard), so the tests that wait overlap the others on two cores; without
# pytest's cache, which both would write at once. CHECK_BASETEMP=DIR: each shard's temporary files under DIR.
CHECK_SHARDS := 0 1

check:
	@test -x $(PY) || $(MAKE) --no-print-directory install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	@$(MAKE) --no-print-directory -j$(words $(CHECK_SHARDS)) -Otarget $(CHECK_SHARDS:%=check-shard-%)

check-shard-%:
	$(PY) -m pytest -q -p no:cacheprovider --pure --shard $*/$(words $(CHECK_SHARDS)) \
		$(if $(CHECK_BASETEMP),--basetemp=$(CHECK_BASETEMP)/shard-$*)

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

# The held-out sets (issue #35): two code bases nothing here was tuned on, both arms with the paired bootstrap
# interval of the differences. Measure on them; tune nothing on them.
eval-heldout: install
	@mkdir -p $(EVAL_DIR)
	$(VENV)/bin/ctxpress eval make-cases --repo $(SITE)/hypothesis --n 60 --seed 7 --min-lines 1000 --out $(EVAL_DIR)/heldout.jsonl
	$(VENV)/bin/ctxpress eval --cases $(EVAL_DIR)/heldout.jsonl --mode both --out $(EVAL_DIR)/heldout-results.jsonl
	$(VENV)/bin/ctxpress eval make-cases --repo $(SITE)/_pytest --n 60 --seed 11 --min-lines 1000 --out $(EVAL_DIR)/heldout2.jsonl
	$(VENV)/bin/ctxpress eval --cases $(EVAL_DIR)/heldout2.jsonl --mode both --out $(EVAL_DIR)/heldout2-results.jsonl

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
