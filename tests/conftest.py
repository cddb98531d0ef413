"""Test setup: import this checkout's `src/` (also in subprocesses), one thread for torch."""

from __future__ import annotations

import os
import sys
import tempfile

import pytest

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
sys.path.insert(0, SRC)
os.environ["PYTHONPATH"] = SRC + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
# Two threads on two busy cores made a tiny Trainer run 8-25x slower.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# The longest modules (real torchrun, browser, trainings) are handed out first, so that the two
# workers of `make test` finish together instead of one waiting on the last long module.
FIRST = (
    "test_distributed.py",
    "test_supervise_ranks.py",
    "test_slurm.py",
    "test_serve.py",
    "test_smoke.py",
    "test_plot.py",
    "test_integrations_hf.py",
)


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`make test`, `--dist loadgroup`): the tests of a module whose fixtures
    outlive a test (a module's real trainings, the browser) stay together on one worker, so they
    are set up once; every other test is handed out on its own, the longest modules first."""
    if getattr(config.option, "dist", "no") == "no":
        return

    def rank(item):
        name = os.path.basename(str(item.fspath))
        return FIRST.index(name) if name in FIRST else len(FIRST)

    items.sort(key=rank)  # stable: the order within a module is kept
    for item in items:
        defs = [d for fd in item._fixtureinfo.name2fixturedefs.values() for d in fd]
        if any(d.scope != "function" and d.func.__module__ == item.module.__name__ for d in defs):
            item.add_marker(pytest.mark.xdist_group(os.path.basename(str(item.fspath))))


@pytest.fixture(scope="session")
def chromium():
    """Debian's chromium for the pages' tests, installed with apt-get when missing (once: the
    workers of `make test` take a lock, so that two never run apt-get at the same time)."""
    import fcntl
    import shutil
    import subprocess

    path = shutil.which("chromium") or "/usr/bin/chromium"
    with open(os.path.join(tempfile.gettempdir(), "runwatch-tests-chromium.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(path):
            if os.geteuid() != 0 or not shutil.which("apt-get"):
                pytest.skip(
                    "chromium is not installed and cannot be installed here (needs root and apt-get): "
                    "apt-get install chromium"
                )
            res = subprocess.run(
                ["sh", "-c", "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium"],
                capture_output=True,
                text=True,
                timeout=1800,
            )
            if res.returncode != 0 or not os.path.exists(path):
                pytest.skip(f"chromium could not be installed: {(res.stderr or res.stdout).strip()[-300:]}")
    return path
