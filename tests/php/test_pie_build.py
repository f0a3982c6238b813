"""The PIE build (issue 19): `make pie` runs what PIE runs from composer.json's
php-ext section (phpize, ./configure, make, make install) on a clean copy of
the tracked files; the result loads with `php -n -d extension=ferrolock` and
runs the legacy call sequence against a real redis-server. configure fails
with a clear message when cargo or libclang is missing."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT

PIE_DIR = ROOT / "target" / "pie"
PIE_CARGO = ROOT / "target" / "pie-cargo"  # the Makefile's PIE_CARGO_TARGET_DIR, passed to it
WORKSPACE_RELEASE = ROOT / "target" / "release"
# A cold `make pie` compiles the extension (when `make php` has not already):
# minutes on a small machine. It runs once, in the first test's setup.
pytestmark = pytest.mark.timeout(1800)


def seed_pie_cargo() -> None:
    """A first `make pie` starts from a copy of the workspace's release build (`make php`'s)
    rather than an empty target directory: cargo keys path packages by their path relative to
    the workspace, the same in the clean copy, and the copy keeps the work tree's mtimes, so
    what `make php` built from the same sources is fresh there and cargo only checks it (was
    1.5 min of compiling the same crates again, the longest setup of the suite). A source
    missing from the tracked files still fails the build (a dependency that no longer exists is
    stale), and a source edited since `make php` is compiled in the copy. Copied, not linked:
    cargo rewrites files in place. Never into an existing directory (a rerun is incremental)."""
    if PIE_CARGO.exists() or not (WORKSPACE_RELEASE / ".fingerprint").is_dir():
        return
    tmp = PIE_CARGO.with_name(PIE_CARGO.name + ".seeding")
    shutil.rmtree(tmp, ignore_errors=True)
    for part in (".fingerprint", "build", "deps"):
        shutil.copytree(WORKSPACE_RELEASE / part, tmp / "release" / part, symlinks=True)
    tmp.rename(PIE_CARGO)


def composer() -> dict:
    return json.loads((ROOT / "composer.json").read_text())


@pytest.fixture(scope="module")
def pie() -> Path:
    """Runs `make pie`; returns the directory holding ferrolock.so."""
    seed_pie_cargo()
    proc = subprocess.run(["make", "--no-print-directory", "pie", f"PIE_CARGO_TARGET_DIR={PIE_CARGO}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, f"make pie failed:\n{proc.stdout}\n{proc.stderr}"
    return PIE_DIR


def php(extension_dir: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`php -n` (no php.ini) loading the extension by name, as php.ini would."""
    return subprocess.run(["php", "-n", "-d", f"extension_dir={extension_dir}", "-d", "extension=ferrolock",
                           "-d", "display_errors=stderr", "-d", "error_reporting=-1", *args],
                          capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})


def test_composer_json_is_php_ext_metadata_pointing_at_the_build() -> None:
    meta = composer()
    assert meta["type"] == "php-ext"
    assert "/" in meta["name"]
    ext = meta["php-ext"]
    assert ext["extension-name"] == "ferrolock"
    assert 10 <= ext["priority"] <= 99
    assert ext["support-nts"] is True and ext["support-zts"] is True
    build = ROOT / ext["build-path"]
    assert (build / "config.m4").is_file() and (build / "Makefile.frag").is_file()
    for opt in ext["configure-options"]:
        assert opt["name"].startswith(("with-", "enable-")) and opt["description"]
        text = (build / "config.m4").read_text()
        assert f"--{opt['name']}" in text, f"{opt['name']} is not an option of config.m4"


def test_the_built_module_is_named_as_composer_json_says(pie: Path) -> None:
    ext = composer()["php-ext"]["extension-name"]
    proc = php(pie, "-r", 'echo json_encode([(new ReflectionExtension("ferrolock"))->getName(),'
                          ' class_exists("RedisLock"), class_exists("RedisQueue"),'
                          ' is_subclass_of("RedisLockException", "RuntimeException")]);')
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert json.loads(proc.stdout) == [ext, True, True, True]


def test_make_install_puts_ferrolock_so_in_the_extension_dir(pie: Path) -> None:
    ext_dir = subprocess.run(["php-config", "--extension-dir"], capture_output=True, text=True,
                             check=True).stdout.strip()
    installed = pie / "root" / ext_dir.lstrip("/") / "ferrolock.so"
    assert installed.is_file(), sorted(str(p) for p in (pie / "root").rglob("*"))
    built = pie / "src" / composer()["php-ext"]["build-path"] / "modules" / "ferrolock.so"
    digest = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()  # noqa: E731
    assert digest(installed) == digest(built) == digest(pie / "ferrolock.so")


LEGACY_SEQUENCE = r"""<?php
[, $url, $held, $cycled, $queue] = $argv;
$out = [];
$lock = new RedisLock($url);
$other = new RedisLock($url);
// Taken and left held (legacy locks outlive the script), its TTL set by expire().
$out['lock'] = $lock->lock($held);
$out['other_lock'] = $other->lock($held);
$out['isLocking'] = $lock->isLocking($held);
$out['other_isLocking'] = $other->isLocking($held);
$out['expire'] = $lock->expire($held, 60);
$out['other_expire'] = $other->expire($held, 60);
// Taken, then unlocked.
$out['lock2'] = $lock->lock($cycled, 0, 5);
$out['other_unlock'] = $other->unlock($cycled);
$out['unlock'] = $lock->unlock($cycled);
$out['unlock_again'] = $lock->unlock($cycled);
$out['isLocking_after'] = $lock->isLocking($cycled);

$q = new RedisQueue($url);
$out['enqueue'] = $q->enqueue($queue, ['b', 'a']);
$out['enqueue_later'] = $q->enqueue($queue, 'c', 10, 3600);
$out['top'] = $q->top($queue, 5);
$out['pop'] = $q->pop($queue);
$b = $q->top($queue);
$out['top1'] = $b;
$out['dequeue_wrong_score'] = $q->dequeue($queue, 'b', $b['score'] + 1);
$out['dequeue'] = $q->dequeue($queue, 'b', $b['score']);
$out['dequeue_again'] = $q->dequeue($queue, 'b', $b['score']);
$out['pop_not_due'] = $q->pop($queue);
$out['pop_list'] = $q->pop($queue, 3);
echo json_encode($out);
"""


def test_php_n_extension_ferrolock_runs_the_legacy_call_sequence(pie: Path, url: str, r, name: str,
                                                                tmp_path: Path) -> None:
    script = tmp_path / "legacy_sequence.php"
    script.write_text(LEGACY_SEQUENCE)
    held, cycled, queue = f"{name}-held", f"{name}-cycled", f"{name}-queue"
    before = time.time()
    proc = php(pie, str(script), url, held, cycled, queue)
    after = time.time()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr == ""
    out = json.loads(proc.stdout)

    assert out["lock"] is True and out["other_lock"] is False
    assert out["isLocking"] is True and out["other_isLocking"] is False
    assert out["expire"] is True and out["other_expire"] is False
    assert 55_000 < r("PTTL", f"Lock:{held}") <= 60_000

    assert out["lock2"] is True and out["other_unlock"] is False
    assert out["unlock"] is True and out["unlock_again"] is False and out["isLocking_after"] is False
    assert r("EXISTS", f"Lock:{cycled}") == 0

    assert out["enqueue"] is True and out["enqueue_later"] is True
    top = out["top"]
    assert [t["id"] for t in top] == ["a", "b"], top  # 'c' is not due; ties by id
    assert top[0]["score"] == top[1]["score"] and before - 1 <= top[0]["score"] <= after + 1
    assert out["pop"] == top[0]
    assert out["top1"] == top[1]
    assert out["dequeue_wrong_score"] is False
    assert out["dequeue"] is True and out["dequeue_again"] is False
    assert out["pop_not_due"] is False and out["pop_list"] == []
    assert r("ZRANGE", f"Queue:{queue}", 0, -1) == [b"c"]
    assert before + 3599 <= float(r("ZSCORE", f"Queue:{queue}", "c")) <= after + 3601


def configure(pie: Path, tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """./configure of the phpize'd clean copy, in a copy of its own."""
    build = tmp_path / "php"
    shutil.copytree(pie / "src" / composer()["php-ext"]["build-path"], build, symlinks=True)
    return subprocess.run(["./configure", "--quiet"], cwd=build, capture_output=True, text=True, timeout=300,
                          env=env)


def test_configure_says_cargo_is_missing(pie: Path, tmp_path: Path) -> None:
    path = [d for d in os.environ["PATH"].split(os.pathsep) if d and not (Path(d) / "cargo").exists()]
    env = {k: v for k, v in os.environ.items() if k not in ("CARGO", "RUSTUP_TOOLCHAIN")}
    env |= {"PATH": os.pathsep.join(path), "HOME": str(tmp_path)}  # no ~/.cargo/bin either
    proc = configure(pie, tmp_path, env)
    assert proc.returncode != 0
    assert "cargo not found" in proc.stderr and "https://rustup.rs" in proc.stderr, proc.stderr


def test_configure_says_libclang_is_missing(pie: Path, tmp_path: Path) -> None:
    empty = tmp_path / "no-libclang"
    empty.mkdir()
    proc = configure(pie, tmp_path, {**os.environ, "LIBCLANG_PATH": str(empty)})
    assert proc.returncode != 0
    assert f"LIBCLANG_PATH={empty}: no libclang" in proc.stderr, proc.stderr
