"""The bridge package (php/bridge/): the Symfony Lock store and the Laravel
lock, tested with Debian's phpunit against Debian's php-symfony-lock (5.4) and
Laravel's cache-lock contracts, on a real redis-server (issue 19.4-5)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PHP_EXT, ROOT, run_php

BRIDGE = ROOT / "php" / "bridge"
TESTS = Path(__file__).parent / "bridge"
SYMFONY_LOCK = Path("/usr/share/php/Symfony/Component/Lock/autoload.php")


@pytest.fixture(scope="module", autouse=True)
def prerequisites() -> None:
    assert PHP_EXT.exists(), f"{PHP_EXT} is missing: run `make php`"
    assert shutil.which("phpunit"), "phpunit is missing: `make setup` installs Debian's phpunit"
    assert SYMFONY_LOCK.exists(), "symfony/lock is missing: `make setup` installs php-symfony-lock"


def test_composer_json_is_a_library_needing_only_the_extension_and_symfony_lock() -> None:
    meta = json.loads((BRIDGE / "composer.json").read_text())
    assert meta["type"] == "library"
    assert set(meta["require"]) == {"php", "ext-ferrolock", "symfony/lock"}
    (prefix, src), = meta["autoload"]["psr-4"].items()
    assert prefix == "Ferrolock\\Bridge\\"
    for cls in ["Symfony/FerrolockStore", "Laravel/FerrolockLock", "Laravel/FerrolockLockProvider"]:
        assert (BRIDGE / src / f"{cls}.php").is_file(), cls
    for f in BRIDGE.rglob("*.php"):
        subprocess.run(["php", "-n", "-l", str(f)], check=True, capture_output=True)


def test_phpunit_symfony_store_and_laravel_lock(url: str) -> None:
    proc = subprocess.run(
        ["php", "-d", f"extension={PHP_EXT}", shutil.which("phpunit") or "phpunit",
         "-c", str(TESTS / "phpunit.xml")],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "REDIS_URL": url, "FERROLOCK_EXT": str(PHP_EXT), "FERROLOCK_PYTHON": sys.executable})
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "OK (" in proc.stdout, proc.stdout


def test_laravel_lock_without_laravel_is_standalone(url: str, tmp_path: Path) -> None:
    """Without illuminate/contracts the classes load on their own, and block()
    times out with Ferrolock\\LockTimeoutException."""
    script = tmp_path / "standalone.php"
    script.write_text(f"""<?php
require {str(TESTS / 'bootstrap.php')!r};
use Ferrolock\\Bridge\\Laravel\\FerrolockLockProvider;
assert(!interface_exists('Illuminate\\\\Contracts\\\\Cache\\\\Lock'));
$locks = new FerrolockLockProvider(redis_url());
$n = uniq('standalone');
$a = $locks->lock($n, 10);
assert($a->get() === true && class_implements($a) === []);
try {{ $locks->lock($n, 10)->block(0.2); assert(false); }}
catch (Ferrolock\\LockTimeoutException $e) {{ echo "timeout\\n"; }}
assert($locks->restoreLock($n, $a->owner())->release() === true);
echo "ok\\n";
""")
    out = run_php(script, env={"REDIS_URL": url, "FERROLOCK_NO_LARAVEL": "1"}).stdout
    assert out == "timeout\nok\n", out
