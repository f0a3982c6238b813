# ferrolock — the front door. `make help` lists the targets.
# The same commands run in CI (.ci/run calls `make test`).

SHELL := /bin/bash
# The virtualenv scripts/setup.sh makes when python3 refuses pip installs
# (Debian's own Python), else python3. Evaluated when used: after setup.
PYTHON ?= $(if $(wildcard .venv/bin/python),.venv/bin/python,python3)
PHP_EXT := target/release/libferrolock_php.so
export CARGO_TERM_COLOR ?= never

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[1m%-10s\033[0m %s\n", $$1, $$2}'

.PHONY: setup
setup: ## Install system and Python packages (idempotent; Debian 12)
	./scripts/setup.sh

.PHONY: core
core: ## Build the Rust core (release)
	cargo build --release -p ferrolock

.PHONY: php
php: ## Build the PHP extension: target/release/libferrolock_php.so
	cargo build --release -p ferrolock-php

# `make pie`: what PIE runs (composer.json's php-ext section), on a clean copy
# of the tracked files: phpize, ./configure, make, make install (into
# $(PIE_DIR)/root). The copy keeps the work tree's mtimes, directories'
# included, and cargo builds into the workspace's target directory (or
# $CARGO_TARGET_DIR), so it compiles only what `make php` would.
PIE_DIR := target/pie
PHPIZE ?= phpize
PHP_CONFIG ?= php-config

.PHONY: pie
pie: ## Build the PHP extension the PIE way from a clean copy -> target/pie/ferrolock.so
	@set -euo pipefail; \
	rm -rf $(PIE_DIR); mkdir -p $(PIE_DIR)/src; \
	git ls-files | while IFS= read -r f; do if [ -e "$$f" ]; then printf '%s\n' "$$f"; fi; done > $(PIE_DIR)/files; \
	tar -T $(PIE_DIR)/files -cf - | tar -xf - -C $(PIE_DIR)/src; \
	awk -F/ '{ p = ""; for (i = 1; i < NF; i++) { p = p $$i; print p; p = p "/" } }' $(PIE_DIR)/files | sort -u \
		| while IFS= read -r d; do touch -r "$$d" "$(PIE_DIR)/src/$$d"; done; \
	meta() { php -n -r '$$e = json_decode(file_get_contents("$(PIE_DIR)/src/composer.json"), true)["php-ext"]; echo $$e[$$argv[1]] ?? $$argv[2];' "$$@"; }; \
	build_path=$$(meta build-path .); ext=$$(meta extension-name ferrolock); \
	export CARGO_TARGET_DIR=$(abspath $(or $(CARGO_TARGET_DIR),target)); \
	cd $(PIE_DIR)/src/$$build_path; \
	echo "pie: phpize, configure, make, make install in $(PIE_DIR)/src/$$build_path"; \
	$(PHPIZE) >/dev/null; \
	./configure --quiet --with-php-config="$$(command -v $(PHP_CONFIG))"; \
	$(MAKE) --no-print-directory; \
	$(MAKE) --no-print-directory install INSTALL_ROOT=$(abspath $(PIE_DIR))/root; \
	cp modules/$$ext.so $(abspath $(PIE_DIR))/$$ext.so; \
	echo "pie: built $(PIE_DIR)/$$ext.so: php -d extension_dir=$(PIE_DIR) -d extension=$$ext"

.PHONY: python
python: ## Build and install the Python package (pip install .)
	$(PYTHON) -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --force-reinstall --no-deps .

.PHONY: build
build: core php python ## Build everything

# The servers `make test` runs every suite against (FERROLOCK_TEST_SERVER, read
# by core/src/testing.rs and tests/support/servers.py). Both passes always
# run; a failure in either fails the target.
TEST_SERVERS ?= redis valkey

.PHONY: test
test: setup lint php python ## Lint, then run every test (Rust, Python, PHP, cross-language) against real Redis and Valkey servers
	@failed=""; for s in $(TEST_SERVERS); do \
	  echo "== make test: Rust suite against $$s =="; \
	  FERROLOCK_TEST_SERVER=$$s cargo test -p ferrolock || failed="$$failed $$s/rust"; \
	  echo "== make test: Python, PHP and cross-language suite against $$s =="; \
	  FERROLOCK_TEST_SERVER=$$s $(PYTHON) -m pytest tests || failed="$$failed $$s/python"; \
	done; \
	if [ -n "$$failed" ]; then echo "make test: FAILED:$$failed"; exit 1; fi; \
	echo "make test: every suite passed against: $(TEST_SERVERS)"

.PHONY: test-fast
test-fast: ## Run the tests without rebuilding or installing anything (FERROLOCK_TEST_SERVER=valkey for Valkey)
	cargo test -p ferrolock
	$(PYTHON) -m pytest tests -x

.PHONY: lint
lint: ## cargo fmt --check, clippy -D warnings, ruff, php -l
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	$(PYTHON) -m ruff check python tests bench scripts
	php -n -l php/ferrolock.stubs.php
	@for f in tests/php/*.php tests/php/*/*.php; do php -n -l $$f >/dev/null || exit 1; done

.PHONY: stubs
stubs: php python ## Check the Python and PHP stubs against the built modules (mypy.stubtest, PHP reflection)
	$(PYTHON) -m pytest -q tests/python/test_stubs.py "tests/test_php.py::test_stubs_match_the_extension"

.PHONY: demo
demo: setup php python ## Demo: Python and PHP workers share a lock and a queue on a throwaway redis-server
	$(PYTHON) scripts/demo.py

# `make bench BENCH_SERVER=valkey` benchmarks against Valkey; BENCH_ARGS is passed
# to bench/run.py (e.g. BENCH_ARGS="--only uncontended,contention --runs 3").
BENCH_SERVER ?= redis

.PHONY: bench
bench: setup php python ## Benchmarks vs redis-py, python-redis-lock, a legacy PHP lock, huey, RQ -> bench/results/
	$(PYTHON) bench/run.py --server $(BENCH_SERVER) $(BENCH_ARGS)

.PHONY: clean
clean: ## Remove build products
	cargo clean
	rm -rf dist build .pytest_cache
