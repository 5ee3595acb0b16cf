# Orbital — the two set-up commands are `make dev` and `make test`; both create the environment when needed.

PORT ?= 8765
HOST ?= 127.0.0.1
DATA_DIR ?= ~/.orbital
TOKEN ?=
AUTH ?=

# pytest's workers and how tests are shared among them (ADR 0036); PYTEST_WORKERS=0 runs the tests in this process
PYTEST_WORKERS ?= 6
PYTEST_DIST ?= loadfile

VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
NODE_STAMP := node_modules/.package-lock.json

.DEFAULT_GOAL := help
.PHONY: help install dev test pytest lint format typecheck docs docs-check clean bench fuzz hot-modules chromium \
	screenshot

help:
	@echo "make dev    start the local gateway on ws://$(HOST):$(PORT)/ws (PORT=, HOST=, DATA_DIR=, TOKEN=, AUTH=same-user)"
	@echo "make test   lint (import layers, console type check), type-check, template/ASL checks, docs check and every test"
	@echo "make docs   regenerate docs/protocol.md from the method registry"
	@echo "make build  sam build (layer for python3.13/arm64)      make bench  run the benchmarks"
	@echo "make fuzz   10,000 generated frames per fuzz test (slow)"
	@echo "make hot-modules  list the files the layer ships bytecode for (after a dependency change)"
	@echo "make chromium     install Chromium for the console's browser tests (Debian's package) if it is missing"
	@echo "make screenshot   regenerate the README's picture of the console (docs/images/console-chat.png)"

$(STAMP): pyproject.toml requirements/dev.lock
	@py="$$(sh scripts/find-python.sh)" && echo "using $$py" && \
	  { [ -x $(BIN)/python ] || "$$py" -m venv $(VENV); }
	@echo "installing Orbital and its dependencies into $(VENV) (the first time takes a minute or two)..."
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade "pip>=24"
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c requirements/dev.lock -e '.[dev]'
	@touch $@

install: $(STAMP)

# the console's type check (TypeScript, pinned in package-lock.json; ADR 0053): installed by npm from the lock file
$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# the token goes in the environment, never on a command line (every user of the machine can read those)
dev: $(STAMP)
	@$(if $(TOKEN),ORBITAL_TOKEN="$$ORBITAL_DEV_TOKEN") $(BIN)/orbital dev --host $(HOST) --port $(PORT) --data-dir $(DATA_DIR) \
	  $(if $(AUTH),--auth $(AUTH))
dev: export ORBITAL_DEV_TOKEN = $(TOKEN)

lint: $(STAMP) $(NODE_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache
	node_modules/.bin/tsc -p tsconfig.json

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: $(STAMP)
	$(BIN)/mypy

docs: $(STAMP)
	$(BIN)/python -m orbital.methods.docs > docs/protocol.md
	$(BIN)/python -m orbital.methods.config_reference > docs/configuration.md

hot-modules: $(STAMP)  # the files the layer ships bytecode for (see layers/orbital/Makefile)
	$(BIN)/python scripts/layer_hot_modules.py > layers/orbital/hot-modules.txt

docs-check: $(STAMP)
	@$(BIN)/python -m orbital.methods.docs | diff -u docs/protocol.md - \
	  || { echo "docs/protocol.md is out of date: run 'make docs'"; exit 1; }

# with workers, one collection first: it compiles the test modules (their asserts rewritten) and the package once,
# which the workers then load instead of each compiling them at the same time (a clean clone; ADR 0054)
pytest: $(STAMP) chromium
	$(if $(filter-out 0,$(PYTEST_WORKERS)),$(BIN)/python -m pytest --collect-only -qq -p no:xdist -p no:randomly >/dev/null || true)
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist $(PYTEST_DIST)

test: lint typecheck docs-check validate pytest

bench: $(STAMP)
	$(BIN)/python bench/rpc.py

fuzz: $(STAMP)  # 10,000 generated frames per fuzz test (make test runs 100)
	ORBITAL_FUZZ_FRAMES=10000 $(BIN)/python -m pytest --timeout=0 tests/functional/test_fuzz_frames.py

chromium:
	sh scripts/install-chromium.sh

screenshot: $(STAMP) chromium  # the console's chat view, driven by the browser the tests use
	$(BIN)/python scripts/console_screenshot.py docs/images/console-chat.png

clean:
	rm -rf $(VENV) .venv-sam .aws-sam .pytest_cache .mypy_cache .ruff_cache node_modules

-include mk/aws.mk
