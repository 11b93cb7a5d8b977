# RAWP master relay. `make run` starts the master; `make test` checks everything.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
UV_VERSION := 0.13.9
export UV_PROJECT_ENVIRONMENT := $(VENV)
PACKAGES := protocol relay conformance rawp

.PHONY: setup run test lint typecheck pytest bench schemas clean screenshots

$(STAMP): pyproject.toml uv.lock
	@$(PY) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "Python 3.11 or newer is needed (PY=$(PY))"; exit 1; }
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)
	$(BIN)/uv sync --frozen --inexact --all-extras --quiet
	@touch $@

setup: $(STAMP)

run: setup
	$(BIN)/rawp serve $(ARGS)

test: lint typecheck dashboard-check pytest sdk-test

lint: setup
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/lint-imports

typecheck: setup
	$(BIN)/mypy

pytest: setup
	$(BIN)/pytest $(PYTEST_ARGS)

# Rewrite the tracked dashboard screenshots (tests/browser/screenshots/) from the browser tests.
screenshots: setup
	RAWP_UPDATE_SCREENSHOTS=1 $(BIN)/pytest tests/browser -q

bench: setup
	$(BIN)/uv sync --frozen --inexact --all-extras --group bench --quiet
	$(BIN)/python -m bench $(ARGS)

# The TypeScript SDK (sdk/typescript, Node >= 20): locked install, tsc, node --test against a
# real `rawp serve`.
.PHONY: sdk-test
sdk-test: setup
	cd sdk/typescript && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build
	cd sdk/typescript && RAWP_BIN=$(CURDIR)/$(BIN)/rawp npm test --silent

schemas: setup
	$(BIN)/rawp schemas --out schemas
	$(BIN)/python -m protocol.docgen
	$(BIN)/python -m relay.docgen

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# The dashboard (sdk/dashboard, on @rawp/client): `make dashboard` rebuilds the checked-in bundle
# relay/http/static/dashboard{.js,-style.css}; dashboard-check (in make test) type-checks the
# sources and fails when the checked-in bundle differs from a fresh build (stale).
.PHONY: dashboard dashboard-check
dashboard:
	cd sdk/dashboard && npm ci --no-audit --no-fund --loglevel=error && node build.mjs

dashboard-check:
	cd sdk/dashboard && npm ci --no-audit --no-fund --loglevel=error && npx tsc -p tsconfig.json && node build.mjs --check
