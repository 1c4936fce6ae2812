# Every target runs through uv, which `make` installs on first use into .tools/.
# Only Python 3.11 and the package registries are needed on a fresh machine.

PYTHON ?= python3.11
UV_DIR := .tools
UV := $(UV_DIR)/bin/uv
RUN := $(UV) run --frozen
export UV_PYTHON_DOWNLOADS := never

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(UV):
	$(PYTHON) -m venv $(UV_DIR)
	$(UV_DIR)/bin/pip install --quiet --disable-pip-version-check "uv==0.13.9"

.venv/.synced: $(UV) uv.lock pyproject.toml $(wildcard packages/*/pyproject.toml apps/*/pyproject.toml)
	$(UV) sync --frozen --all-packages --all-extras
	@touch $@

.PHONY: setup
setup: .venv/.synced ## Install uv and the whole workspace

.PHONY: lint
lint: setup ## Ruff lint and format check
	$(RUN) ruff check .
	$(RUN) ruff format --check .

.PHONY: format
format: setup ## Apply ruff fixes and formatting
	$(RUN) ruff check --fix .
	$(RUN) ruff format .

.PHONY: typecheck
typecheck: setup ## mypy --strict over packages/ and tests/
	$(RUN) mypy

.PHONY: unit
unit: setup ## Run the test suites only (with branch coverage of core, ucan and server)
	$(RUN) pytest -q --cov=oracle_core --cov=oracle_ucan --cov=oracle_server --cov-branch --cov-report=term:skip-covered --durations=20

.PHONY: test
test: setup ## Lint, type-check and run every test
	$(UV) lock --check
	$(MAKE) --no-print-directory lint typecheck unit

.PHONY: run
run: setup ## Run the example oracle
	$(RUN) python -m example_oracle

.PHONY: bench
bench: setup ## Run the benchmarks and print their figures
	$(RUN) python -m benchmarks

.PHONY: chaos
chaos: setup ## The reliability suite at length: 120 kills, fuzzing, faults, cross-user
	$(RUN) python -m reliability kill --kills 100
	$(RUN) python -m reliability kill --kills 20 --matrix
	HYPOTHESIS_PROFILE=chaos $(RUN) pytest -q -p no:cacheprovider -m fuzz
	$(RUN) pytest -q -p no:cacheprovider tests/reliability

.PHONY: soak
soak: setup ## 1,000 concurrent SSE sessions for 10 minutes: errors, memory, descriptors
	$(RUN) python -m reliability soak --sessions 1000 --seconds 600

.PHONY: docs
docs: setup ## Check the docs against the code (hook reference, links, package pages)
	$(RUN) pytest -q tests/test_docs.py packages/oracle-core/tests/test_hookspecs.py

.PHONY: clean
clean: ## Remove the virtualenvs and caches
	rm -rf .venv $(UV_DIR) .mypy_cache .ruff_cache .pytest_cache
