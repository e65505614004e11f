# ctxpress: `make demo` runs the appliance on the embedded defaults, `make test` runs every test, `make check` in
# under a minute the lint and every test that needs no service.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install peer demo test check lint up down clean eval-long eval-short eval-heldout eval-cross bench fuzz faults editor-clients e2e

# llama-cpp-python compiles llama.cpp for the host it runs on: ggml's CPU backend as the one variant of
# GGML_CPU_ALL_VARIANTS this CPU would load (zen4, sapphirerapids, haswell …; serving/llama_build.py picks it from
# /proc/cpuinfo, AMX only where Linux grants the tile state), with that variant's switches, as one loadable
# libggml-cpu.so beside libllama.so (GGML_BACKEND_DL; ggml refuses GGML_NATIVE beside it on x86). The engine
# (serving/engine/cpu_kernels.py) checks it with ggml's own score before loading it. LLAMA_VARIANTS=all builds
# every x86-64 variant instead (13 libggml-cpu-<microarch>.so, none for this CPU in particular), for an image
# built once for many hosts; cpu_kernels.py then loads the best one the host runs, and CTXPRESS_CPU_KERNELS
# forces another. CMAKE_INSTALL_BINDIR puts the backends into the package's lib/ (ggml installs them to bin/);
# LLAVA_BUILD=OFF leaves out the multimodal library nothing here loads, and serving/llama_without_common.cmake
# llama.cpp's common library (llama-cpp-python forces it on; its Python never loads it).
# serving/gcc_amx_tile_fix.h is force-included into every C++ file: with GCC 12 the AMX variant's tile
# configuration lost its rows and widths (dead stores to it), and its first tile instruction was a SIGILL.
# The wheel is built once per machine kind, version and flags into LLAMA_WHEELS (the key hashes the CMake
# switches, which name this CPU's variant) and installed from there: pip's own wheel cache would hand back a
# wheel built with other flags, or for another CPU.
LLAMA_CPP := $(shell grep -o 'llama-cpp-python==[0-9.]*' pyproject.toml)
LLAMA_VARIANTS ?= host
LLAMA_HOST := $(shell $(PYTHON) serving/llama_build.py host)
LLAMA_HOST_VARIANT := $(firstword $(LLAMA_HOST))
LLAMA_HOST_ARGS := $(wordlist 2,$(words $(LLAMA_HOST)),$(LLAMA_HOST))
ifeq ($(LLAMA_VARIANTS),all)
LLAMA_CPU := all
LLAMA_CPU_ARGS := -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON
else ifeq ($(LLAMA_VARIANTS),host)
LLAMA_CPU := $(LLAMA_HOST_VARIANT)
LLAMA_CPU_ARGS := $(LLAMA_HOST_ARGS)
else
$(error LLAMA_VARIANTS=$(LLAMA_VARIANTS): host (the default) or all)
endif
LLAMA_CMAKE_ARGS := $(LLAMA_CPU_ARGS) -DLLAVA_BUILD=OFF -DCMAKE_INSTALL_BINDIR=llama_cpp/lib
LLAMA_CMAKE_FILES := -DCMAKE_PROJECT_INCLUDE=$(abspath serving/llama_without_common.cmake)
LLAMA_CXXFLAGS := -include $(abspath serving/gcc_amx_tile_fix.h)
LLAMA_KEY := $(LLAMA_CPU)-$(shell (echo '$(LLAMA_CPP) $(LLAMA_CMAKE_ARGS)'; cat serving/gcc_amx_tile_fix.h \
	serving/llama_without_common.cmake) | sha1sum | cut -c1-12)
LLAMA_WHEELS ?= $(HOME)/.cache/ctxpress/llama-wheels/$(LLAMA_KEY)
STAMP := $(VENV)/.installed-$(LLAMA_KEY)

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@start=$$(date +%s); \
	if ! ls $(LLAMA_WHEELS)/llama_cpp_python-*.whl >/dev/null 2>&1; then \
		echo "building $(LLAMA_CPP) for $(LLAMA_CPU) into $(LLAMA_WHEELS) (first time only)…"; \
		rm -rf $(LLAMA_WHEELS).partial && \
		CMAKE_ARGS="$(LLAMA_CMAKE_ARGS) $(LLAMA_CMAKE_FILES)" CXXFLAGS="$$CXXFLAGS $(LLAMA_CXXFLAGS)" $(PY) -m pip wheel --quiet --no-deps --no-cache-dir \
			--no-binary llama-cpp-python -w $(LLAMA_WHEELS).partial '$(LLAMA_CPP)' && \
		rm -rf $(LLAMA_WHEELS) && mv $(LLAMA_WHEELS).partial $(LLAMA_WHEELS) || exit 1; \
		echo "llama.cpp built in $$(( $$(date +%s) - start ))s"; \
	fi; \
	echo "installing ctxpress and its models into $(VENV)…"; \
	$(PY) -m pip install --quiet --progress-bar off --no-deps --force-reinstall $(LLAMA_WHEELS)/llama_cpp_python-*.whl && \
	$(PY) -m pip install --quiet --progress-bar off --find-links $(LLAMA_WHEELS) -e '.[dev,models]' && \
	echo "install took $$(( $$(date +%s) - start ))s"
	@rm -f $(VENV)/.installed-*
	@touch $(STAMP)

# llama.cpp's own llama-server, the peer the benchmarks compare with (`--peer-server`): built from the same pinned
# llama.cpp (the vendor/llama.cpp of llama-cpp-python's sdist, from PyPI) for this host's variant, with the same
# forced include, statically linked, cached like the wheel under PEER_DIR; prints the binary's path (alone on stdout:
# `--peer-server $$(make -s peer)`).
PEER_CMAKE_ARGS := $(filter-out -DGGML_BACKEND_DL=%,$(LLAMA_HOST_ARGS)) -DGGML_BACKEND_DL=OFF -DBUILD_SHARED_LIBS=OFF \
	-DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF \
	-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
	-DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF
PEER_KEY := $(LLAMA_HOST_VARIANT)-$(shell (echo '$(LLAMA_CPP) $(PEER_CMAKE_ARGS)'; cat serving/gcc_amx_tile_fix.h) | sha1sum | cut -c1-12)
PEER_DIR ?= $(HOME)/.cache/ctxpress/llama-server/$(PEER_KEY)
PEER := $(PEER_DIR)/llama-server

peer: $(PEER)
	@echo $(PEER)

$(PEER):
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@start=$$(date +%s); src=$$(mktemp -d); \
	echo "building llama-server of $(LLAMA_CPP) for $(LLAMA_HOST_VARIANT) into $(PEER_DIR) (first time only)…" >&2; \
	$(PY) -m pip download --quiet --no-deps --no-binary :all: -d $$src '$(LLAMA_CPP)' && \
	tar xzf $$src/llama_cpp_python-*.tar.gz -C $$src && \
	cd $$src/llama_cpp_python-*/vendor/llama.cpp && \
	CXXFLAGS="$$CXXFLAGS $(LLAMA_CXXFLAGS)" cmake -B build -G Ninja $(PEER_CMAKE_ARGS) >/dev/null && \
	cmake --build build --target llama-server -j$$(nproc) >/dev/null && \
	mkdir -p $(PEER_DIR) && cp build/bin/llama-server $(PEER_DIR)/llama-server.partial && \
	mv $(PEER_DIR)/llama-server.partial $(PEER) && rm -rf $$src && \
	echo "llama-server built in $$(( $$(date +%s) - start ))s" >&2 || { rm -rf $$src; exit 1; }

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
