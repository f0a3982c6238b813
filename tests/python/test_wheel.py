"""The distribution as a user gets it: `make dist` builds the sdist and, from it, an abi3
manylinux_2_17 wheel; the wheel installs with no network into a fresh virtualenv (of the
running Python, and of Python 3.9 when there is one) and runs the README's examples there
against a real redis-server.

Set FERROLOCK_DIST to a directory `make dist` filled to test those files instead of
building (e.g. the aarch64 wheel on an aarch64 machine).
"""

from __future__ import annotations

import glob
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VERSION_RE = re.compile(r'^version = "([^"]+)"', re.MULTILINE)
VERSION = VERSION_RE.search((ROOT / "Cargo.toml").read_text()).group(1)
LICENSES = ("LICENSE-MIT", "LICENSE-APACHE")
# What a manylinux wheel may link against (the policy's system libraries).
SYSTEM_LIBS = {"libc.so.6", "libpthread.so.0", "libdl.so.2", "libm.so.6", "librt.so.1", "libgcc_s.so.1",
               "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"}

# Building takes minutes on a cold ./target (a release build of every dependency).
pytestmark = pytest.mark.timeout(1800)


def host_target() -> str:
    out = subprocess.run(["rustc", "-vV"], capture_output=True, text=True, check=True).stdout
    return re.search(r"^host: (\S+)$", out, re.MULTILINE).group(1)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("FERROLOCK_DIST")
    if given:
        return Path(given).resolve()
    out = tmp_path_factory.mktemp("dist")
    cmd = ["make", "--no-print-directory", "dist", f"DIST={out}", f"DIST_TARGETS={host_target()}",
           f"PYTHON={sys.executable}"]
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}"
    print(f"make dist: {time.monotonic() - started:.0f} s")
    return out


@pytest.fixture(scope="module")
def wheel(dist: Path) -> Path:
    found = sorted(dist.glob(f"ferrolock-{VERSION}-*_{platform.machine()}.whl"))
    assert len(found) == 1, f"one wheel for {platform.machine()} expected in {dist}: {os.listdir(dist)}"
    return found[0]


@pytest.fixture(scope="module")
def sdist(dist: Path) -> Path:
    path = dist / f"ferrolock-{VERSION}.tar.gz"
    assert path.is_file(), os.listdir(dist)
    return path


def metadata_fields(text: str) -> list[tuple[str, str]]:
    """The header fields of a METADATA / PKG-INFO file (up to the description)."""
    head = text.split("\n\n", 1)[0]
    return [(key, value) for key, _, value in (line.partition(": ") for line in head.splitlines()) if value]


def check_metadata(text: str) -> None:
    fields = metadata_fields(text)
    values = lambda key: [v for k, v in fields if k == key]  # noqa: E731
    assert values("Name") == ["ferrolock"]
    assert values("Version") == [VERSION]
    assert values("License-Expression") == ["MIT OR Apache-2.0"]
    assert sorted(values("License-File")) == sorted(LICENSES)
    assert values("Requires-Python") == [">=3.9"]
    urls = dict(v.split(", ", 1) for v in values("Project-URL"))
    assert urls["Repository"] == "https://github.com/ferrolock/ferrolock"
    classifiers = values("Classifier")
    assert "Topic :: System :: Distributed Computing" in classifiers
    assert "Programming Language :: Python :: 3.9" in classifiers
    assert "Typing :: Typed" in classifiers
    # PEP 639: the expression replaces License :: classifiers; PyPI refuses both at once.
    assert not [c for c in classifiers if c.startswith("License ::")]
    assert values("Author") and values("Keywords")


def test_sdist_has_the_licenses_the_lockfile_and_the_metadata(sdist):
    top = f"ferrolock-{VERSION}"
    with tarfile.open(sdist) as tar:
        names = set(tar.getnames())
        for required in (*LICENSES, "pyproject.toml", "Cargo.toml", "Cargo.lock", "README.md",
                         "python/ferrolock/py.typed", "python/ferrolock/_native.pyi"):
            assert f"{top}/{required}" in names, required
        assert any(n.startswith(f"{top}/core/src/scripts/") and n.endswith(".lua") for n in names)
        for lic in LICENSES:
            assert tar.extractfile(f"{top}/{lic}").read() == (ROOT / lic).read_bytes()
        check_metadata(tar.extractfile(f"{top}/PKG-INFO").read().decode())


def test_wheel_has_the_licenses_the_stubs_and_the_metadata(wheel):
    info = f"ferrolock-{VERSION}.dist-info"
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        for lic in LICENSES:
            assert zf.read(f"{info}/licenses/{lic}") == (ROOT / lic).read_bytes()
        for f in ("__init__.py", "_native.pyi", "py.typed"):
            assert f"ferrolock/{f}" in names
        assert [n for n in names if re.fullmatch(r"ferrolock/_native\.abi3\.so", n)]
        check_metadata(zf.read(f"{info}/METADATA").decode())


def test_wheel_is_abi3_manylinux_2_17_and_needs_no_newer_glibc(wheel, tmp_path):
    arch = platform.machine()
    # name-version-python-abi-platforms.whl; platforms are dot-separated.
    _, _, python_tag, abi_tag, platforms = wheel.name[: -len(".whl")].split("-")
    assert (python_tag, abi_tag) == ("cp39", "abi3")
    assert f"manylinux_2_17_{arch}" in platforms.split(".")
    with zipfile.ZipFile(wheel) as zf:
        tags = re.findall(r"^Tag: (\S+)$", zf.read(f"ferrolock-{VERSION}.dist-info/WHEEL").decode(), re.MULTILINE)
        assert f"cp39-abi3-manylinux_2_17_{arch}" in tags
        so = Path(zf.extract("ferrolock/_native.abi3.so", tmp_path))
    # The versions of glibc symbols the library binds to: none newer than 2.17.
    symbols = subprocess.run(["objdump", "-T", so], capture_output=True, text=True, check=True).stdout
    versions = {tuple(map(int, v.split("."))) for v in re.findall(r"\bGLIBC_(\d+(?:\.\d+)+)\b", symbols)}
    assert versions, "no versioned glibc symbol found: is objdump reading the right file?"
    assert max(versions) <= (2, 17), sorted(versions)
    dynamic = subprocess.run(["readelf", "-d", so], capture_output=True, text=True, check=True).stdout
    needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic))
    assert "libc.so.6" in needed and needed <= SYSTEM_LIBS, needed


def python39() -> str | None:
    """A Python 3.9 interpreter (the oldest the abi3 wheel supports), if this machine has one."""
    pyenv_root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates = [shutil.which("python3.9"), *sorted(glob.glob(f"{pyenv_root}/versions/3.9*/bin/python3.9"))]
    for c in filter(None, candidates):
        probe = subprocess.run([c, "-c", "import sys, venv; print(sys.version_info[:2] == (3, 9))"],
                               capture_output=True, text=True)
        if probe.returncode == 0 and probe.stdout.strip() == "True":
            return c
    return None


EXAMPLE = r"""
import json, sys
import ferrolock
from ferrolock import Lock, Queue

url, name = sys.argv[1], sys.argv[2]
fences = []
for _ in range(2):
    with Lock(name, url=url, ttl=10, timeout=5) as lock:
        assert lock.owned()
        assert not Lock(name, url=url).acquire(blocking=False)   # held: a second object can't take it
        fences.append(lock.fencing_token)
    assert not lock.locked()

queue = Queue(name, url=url, visibility=30)
assert queue.enqueue(["a", "b"]) == 2
done = []
with queue.reserve(wait=5) as task:                              # acked when the block ends
    done.append(task.id)
task = queue.reserve(wait=5)
done.append(task.id)
assert task.ack()
assert queue.reserve(wait=0) is None and len(queue) == 0
print(json.dumps({"file": ferrolock.__file__, "version": ferrolock.__version__,
                  "python": list(sys.version_info[:2]), "fences": fences, "done": done}))
"""


@pytest.mark.parametrize("which", ["running", "3.9"])
def test_installs_offline_in_a_fresh_virtualenv_and_runs_the_examples(which, dist, wheel, tmp_path,
                                                                        redis_server, r, name):
    interpreter = sys.executable if which == "running" else python39()
    if interpreter is None:
        pytest.skip("no Python 3.9 on this machine")
    # A clean environment: nothing from the test's own Python or this checkout leaks in.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PIP_"))}
    venv = tmp_path / "venv"
    run = lambda *cmd: subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)  # noqa: E731
    made = run(interpreter, "-m", "venv", str(venv))
    assert made.returncode == 0, made.stderr
    py = str(venv / "bin" / "python")
    # pip picks the wheel for this platform itself (the sdist sits beside it: --only-binary).
    installed = run(py, "-m", "pip", "install", "--no-index", "--find-links", str(dist), "--only-binary", ":all:",
                    "--disable-pip-version-check", "ferrolock")
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert wheel.name in installed.stdout + installed.stderr

    script = tmp_path / "example.py"
    script.write_text(EXAMPLE)
    ran = run(py, "-I", str(script), redis_server.url, name)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    out = json.loads(ran.stdout)
    assert Path(out["file"]).resolve().is_relative_to(venv.resolve())
    assert out["version"] == VERSION
    if which == "3.9":
        assert out["python"] == [3, 9]
    assert out["fences"][0] < out["fences"][1]
    assert sorted(out["done"]) == ["a", "b"]
    assert r("EXISTS", f"Lock:{name}", f"Queue:{name}") == 0
