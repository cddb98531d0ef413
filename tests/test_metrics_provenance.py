"""Provenance in run.json and launch.json, and the GPU samples of train records (docs/FORMAT.md,
"provenance" and "gpus"): real git repositories, real files, real `runwatch launch`."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from runwatch import RunLogger, summarize
from runwatch.errors import ConfigError
from runwatch.files import provenance
from runwatch.version import __version__

RECIPE = {"batch_size": 2, "seq_len": 3, "gradient_accumulation_steps": 1}
MIB = 1 << 20


def session(run_dir) -> dict:
    with open(os.path.join(run_dir, "run.json"), encoding="utf-8") as f:
        return json.load(f)["sessions"][-1]


def git(cwd, *args: str) -> bytes:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True).stdout


@pytest.fixture
def repo(tmp_path):
    d = tmp_path / "repo"
    d.mkdir()
    git(d, "init", "-q")
    (d / "train.py").write_text("print('train')\n")
    (d / "weights.bin").write_bytes(bytes(range(256)) * 8)
    git(d, "add", ".")
    git(d, "commit", "-q", "-m", "first")
    return d


def run_logger_in(cwd, run_dir, data: list[str] | None = None) -> None:
    code = f"""
        import sys
        from runwatch import RunLogger
        with RunLogger({str(run_dir)!r}, recipe={RECIPE!r}, data={data!r}) as log:
            log.step(loss=1.0, lr=0.1, grad_norm=1.0)
    """
    subprocess.run([sys.executable, "-c", textwrap.dedent(code), "--lr", "3e-4"], cwd=cwd, check=True, timeout=120)


def test_a_clean_and_a_dirty_tree_the_versions_and_the_host(repo, tmp_path):
    run_logger_in(repo, tmp_path / "clean")
    p = session(tmp_path / "clean")["provenance"]
    manifest = json.loads((tmp_path / "clean" / "run.json").read_text())
    assert manifest["provenance"] == p  # the run's provenance is its latest session's
    head = git(repo, "rev-parse", "HEAD").decode().strip()
    empty = hashlib.sha256(b"").hexdigest()
    assert p["git"] == {"commit": head, "dirty": False, "diff_bytes": 0, "diff_sha256": empty}
    assert p["argv"] == ["-c", "--lr", "3e-4"] and p["cwd"] == str(repo)
    assert (p["python"], p["runwatch"], p["torch"]) == (platform.python_version(), __version__, None)
    assert p["host"] == socket.gethostname() and p["data"] == []
    # an edit of a text file and of a binary one: the diff's size and hash, never its text
    (repo / "train.py").write_text("print('train, changed')\n")
    (repo / "weights.bin").write_bytes(bytes(range(255, -1, -1)) * 8)
    run_logger_in(repo, tmp_path / "dirty")
    g = session(tmp_path / "dirty")["provenance"]["git"]
    diff = git(repo, "diff", "HEAD", "--binary", "--no-color", "--no-ext-diff", "--no-textconv")
    assert b"GIT binary patch" in diff
    assert g == {
        "commit": head,
        "dirty": True,
        "diff_bytes": len(diff),
        "diff_sha256": hashlib.sha256(diff).hexdigest(),
    }
    assert "changed" not in (tmp_path / "dirty" / "run.json").read_text()


def test_outside_a_repository_git_is_null_and_torch_is_named_once_imported(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(tmp_path)}
    code = f"""
        import torch
        from runwatch import RunLogger
        RunLogger({str(tmp_path / "run")!r}, recipe={RECIPE!r}).close()
        print(torch.__version__)
    """
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=plain, env=env, check=True, capture_output=True, text=True
    )
    p = session(tmp_path / "run")["provenance"]
    assert p["git"] is None and p["torch"] == out.stdout.strip()


def test_a_git_that_hangs_costs_its_timeout_and_never_fails_the_run(repo, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "git").write_text("#!/bin/sh\nexec sleep 30\n")
    (bin_dir / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(provenance, "GIT_TIMEOUT_SECONDS", 0.5)
    t0 = time.monotonic()
    p = provenance.capture(argv=["train.py"], cwd=str(repo))
    assert p["git"] is None and time.monotonic() - t0 < 5
    # no git at all: the same
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert provenance.capture(cwd=str(repo))["git"] is None


def test_data_fingerprints_first_and_last_mib_the_whole_of_a_small_file(tmp_path):
    big = tmp_path / "train.bin"
    blob = os.urandom(3 * MIB + 12345)
    big.write_bytes(blob)
    small = tmp_path / "labels.csv"
    small.write_bytes(b"a,b\n1,2\n")
    missing = tmp_path / "gone.bin"
    with RunLogger(tmp_path / "run", recipe=RECIPE, data=[big, str(small), missing]) as log:
        log.step(loss=1.0, lr=0.1, grad_norm=1.0)
    data = session(tmp_path / "run")["provenance"]["data"]
    st = os.stat(big)
    assert data[0] == {
        "path": str(big),
        "size": len(blob),
        "mtime": st.st_mtime,
        "sha256": hashlib.sha256(blob[:MIB] + blob[-MIB:]).hexdigest(),
    }
    assert data[1]["sha256"] == hashlib.sha256(b"a,b\n1,2\n").hexdigest() and data[1]["size"] == 8
    assert data[2] == {
        "path": str(missing),
        "size": None,
        "mtime": None,
        "sha256": None,
        "error": "No such file or directory",
    }
    # a byte changed in the middle of the big file is not seen (only its ends are read); at an end it is
    changed = bytearray(blob)
    changed[len(blob) // 2] ^= 0xFF
    big.write_bytes(bytes(changed))
    assert provenance.data_fingerprint(str(big))["sha256"] == data[0]["sha256"]
    changed[-1] ^= 0xFF
    big.write_bytes(bytes(changed))
    assert provenance.data_fingerprint(str(big))["sha256"] != data[0]["sha256"]
    assert summarize(str(tmp_path / "run"), expect_step=1)["updates"] == 1


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("train.bin", "RunLogger.data must be a list of paths (e.g. ['train.bin']), got 'train.bin'"),
        ([3], "RunLogger.data must be a list of paths, got an item 3"),
        (7, "RunLogger.data must be a list of paths, got 7"),
    ],
)
def test_data_that_is_not_a_list_of_paths_is_refused(tmp_path, data, message):
    with pytest.raises(ConfigError) as exc:
        RunLogger(tmp_path / "run", recipe=RECIPE, data=data)
    assert str(exc.value) == message
    assert not (tmp_path / "run").exists()


def test_launch_records_the_launched_commands_provenance(repo, tmp_path):
    run_dir = tmp_path / "launched"
    cmd = [sys.executable, "-c", "pass"]
    res = subprocess.run(
        [sys.executable, "-m", "runwatch", "launch", str(run_dir), "--", *cmd],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    with open(run_dir / "launch.json") as f:
        info = json.load(f)
    p = info["provenance"]
    assert p["argv"] == cmd and p["cwd"] == str(repo) == info["cwd"]
    assert p["git"]["commit"] == git(repo, "rev-parse", "HEAD").decode().strip() and p["git"]["dirty"] is False


# A stand-in for NVML (the nvidia-ml-py module) where no GPU is: the calls the sampler makes, with
# fixed answers. The sampler's own code (lazy import, once a second, the record's `gpus`) is real.
FAKE_PYNVML = """
class _Util:
    gpu = 87
class _Mem:
    used = 123456789
def nvmlInit(): pass
def nvmlDeviceGetCount(): return 2
def nvmlDeviceGetHandleByIndex(i): return i
def nvmlDeviceGetUtilizationRates(h): return _Util()
def nvmlDeviceGetMemoryInfo(h): return _Mem()
"""


def test_gpu_samples_at_window_close_only_when_nvml_is_there(tmp_path):
    fake = tmp_path / "nvml"
    fake.mkdir()
    (fake / "pynvml.py").write_text(FAKE_PYNVML)
    code = f"""
        import sys, time
        from runwatch import RunLogger
        with RunLogger(sys.argv[1], recipe={RECIPE!r}, window=2) as log:
            assert "pynvml" not in sys.modules  # not imported before a window closes
            for i in range(6):
                log.step(loss=1.0, lr=0.1, grad_norm=1.0)
                if i == 3:
                    time.sleep(1.1)
    """
    for name, path in (("with", str(fake)), ("without", "")):
        env = {**os.environ, "PYTHONPATH": path}
        subprocess.run([sys.executable, "-c", textwrap.dedent(code), str(tmp_path / name)], env=env, check=True)
    with open(tmp_path / "with" / "metrics.jsonl") as f:
        recs = [json.loads(line) for line in f]
    sample = [{"index": i, "util_percent": 87, "memory_used_bytes": 123456789} for i in range(2)]
    # windows close at steps 2, 4, 6: sampled at the first, not 0.0 s later, again after the sleep
    assert [r.get("gpus") for r in recs if r["event"] == "train"] == [sample, None, sample]
    assert summarize(str(tmp_path / "with"), expect_step=6)["updates"] == 6
    with open(tmp_path / "without" / "metrics.jsonl") as f:
        assert all("gpus" not in json.loads(line) for line in f)


@pytest.mark.parametrize("framework", ["hf", "lightning"])
def test_the_callbacks_take_data_and_refuse_a_string(framework, tmp_path):
    module = pytest.importorskip(f"runwatch.integrations.{framework}")
    with pytest.raises(ConfigError) as exc:
        module.RunwatchCallback(run_dir=tmp_path, data="train.bin")
    assert str(exc.value) == "RunwatchCallback.data must be a list of paths (e.g. ['train.bin']), got 'train.bin'"
    cb = module.RunwatchCallback(run_dir=tmp_path, data=[tmp_path / "train.bin", "val.bin"])
    assert cb.options.data == (str(tmp_path / "train.bin"), "val.bin")
