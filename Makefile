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
# $(PIE_DIR)/root). Cargo builds the copy in a target directory of its own,
# $(PIE_CARGO_TARGET_DIR): sharing the workspace's would mix the copy's
# fingerprints with the work tree's (cargo keys path packages by their path
# relative to the workspace, which is the same in the copy), and a later
# `make php` could then take the copy's build of a source since edited as
# fresh. The copy keeps the work tree's mtimes, directories' included, so a
# rerun compiles only what changed.
PIE_DIR := target/pie
PIE_CARGO_TARGET_DIR ?= target/pie-cargo
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
	export CARGO_TARGET_DIR=$(abspath $(PIE_CARGO_TARGET_DIR)); \
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

# `make dist` (after `make setup`, which installs maturin and ziglang): the sdist, then
# from the sdist (as `python -m build` does, so a file missing from it fails here) one
# abi3 wheel per target in DIST_TARGETS whose Rust std is installed, linked by zig
# against glibc 2.17. Cargo builds the unpacked sdist in target/dist-cargo, a target
# directory of its own (see PIE_CARGO_TARGET_DIR for why not the workspace's).
DIST ?= dist
DIST_TARGETS ?= x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu
MANYLINUX ?= manylinux_2_17
# maturin beside $(PYTHON) (a virtualenv's), else on PATH.
MATURIN ?= $(firstword $(abspath $(wildcard $(dir $(PYTHON))maturin)) maturin)
ZIG = $(shell $(PYTHON) -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))' 2>/dev/null)
DIST_SRC := target/dist-src

.PHONY: dist
dist: ## sdist + abi3 manylinux_2_17 wheels (x86_64; aarch64 if its Rust std is installed) -> dist/
	@test -n "$(ZIG)" || { echo "make dist: $(PYTHON) has no ziglang (make setup installs it)" >&2; exit 1; }
	rm -rf $(DIST)/ferrolock-*
	mkdir -p $(DIST)
	$(MATURIN) sdist --out $(DIST)
	@# The sdist stores fixed mtimes, which would hide changed files from cargo: unpack
	@# with --touch, but only when its content changed (it is reproducible), so that an
	@# unchanged tree is not rebuilt.
	@if cmp -s <(gzip -dc $(DIST)/ferrolock-*.tar.gz) <(gzip -dc $(DIST_SRC)/sdist.tar.gz 2>/dev/null); then \
	  echo "make dist: sdist unchanged since the last build in $(DIST_SRC)"; \
	else \
	  echo "make dist: unpacking the sdist in $(DIST_SRC)"; \
	  rm -rf $(DIST_SRC) && mkdir -p $(DIST_SRC) && tar -xzf $(DIST)/ferrolock-*.tar.gz -C $(DIST_SRC) --touch && \
	  cp $(DIST)/ferrolock-*.tar.gz $(DIST_SRC)/sdist.tar.gz; \
	fi
	@sysroot=$$(rustc --print sysroot); built=0; \
	for t in $(DIST_TARGETS); do \
	  if [ ! -d "$$sysroot/lib/rustlib/$$t/lib" ]; then \
	    echo "make dist: skipping $$t: its Rust std is not installed (rustup target add $$t)"; continue; \
	  fi; \
	  echo "make dist: wheel for $$t"; \
	  ( cd $(DIST_SRC)/ferrolock-* && CARGO_ZIGBUILD_ZIG_PATH="$(ZIG)" CARGO_TARGET_DIR="$(CURDIR)/target/dist-cargo" \
	    $(MATURIN) build --release --zig --compatibility $(MANYLINUX) --target $$t \
	      --out "$(abspath $(DIST))" ) || exit 1; \
	  built=$$((built + 1)); \
	done; \
	[ $$built -gt 0 ] || { echo "make dist: no wheel built" >&2; exit 1; }
	@ls -l $(DIST)/ferrolock-*

# The servers `make test` runs every suite against (FERROLOCK_TEST_SERVER, read
# by core/src/testing.rs and tests/support/servers.py). Both passes always
# run; a failure in either fails the target.
TEST_SERVERS ?= redis valkey

.PHONY: test
test: setup lint docs php python ## Lint, build the docs, then run every test (Rust, Python, PHP, cross-language, docs examples) against real Redis and Valkey servers
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
lint: ## cargo fmt --check, clippy -D warnings, rustdoc -D warnings, ruff, php -l
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
	$(PYTHON) -m ruff check python tests bench scripts
	php -n -l php/ferrolock.stubs.php
	@for f in $$(find tests php/bridge -name '*.php' | sort); do php -n -l $$f >/dev/null || exit 1; done

# The documentation site (mkdocs.yml). --strict turns every warning into a failure: a broken
# link or anchor, a page missing from the nav, a link to a repository file that is gone. The
# examples on the pages are run by the tests (tests/docs/), not here.
.PHONY: docs
docs: ## Build the docs site with mkdocs build --strict (broken links and missing pages fail) -> target/site/
	NO_MKDOCS_2_WARNING=1 $(PYTHON) -m mkdocs build --strict

.PHONY: stubs
stubs: php python ## Check the Python and PHP stubs against the built modules (mypy.stubtest, PHP reflection)
	$(PYTHON) -m pytest -q tests/python/test_stubs.py "tests/php/test_extension.py::test_stubs_match_the_extension"

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
