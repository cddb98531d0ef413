"""runwatch.preflight.smoke and verify_checkpoint, on real tiny trainings (python -m runwatch.demo.tinytrain)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

import runwatch
from runwatch.cli import main
from runwatch.errors import CheckpointError, UsageError
from runwatch.preflight.smoke import SmokeOptions, smoke

STEPS = 200  # enough for the healthy run's AUROC to reach ~1 and the inverted one's ~0


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Three real trainings, side by side: healthy, inverted labels, random labels (never learns)."""
    base = tmp_path_factory.mktemp("smoke")
    procs = {}
    for name, labels in (("healthy", "normal"), ("inverted", "inverted"), ("random", "random")):
        cmd = [
            sys.executable,
            "-m",
            "runwatch.demo.tinytrain",
            str(base / name),
            "--steps",
            str(STEPS),
            "--eval-every",
            "50",
            "--ckpt-every",
            "100",
            "--labels",
            labels,
        ]
        procs[name] = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=dict(os.environ, OMP_NUM_THREADS="1")
        )
    for name, proc in procs.items():
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, out.decode()
    return {name: str(base / name) for name in procs}


@pytest.mark.parametrize(
    "run, argv, code, verdict, failed",
    [
        ("healthy", [], 0, "SMOKE PASS", []),
        ("healthy", ["--samples", "1000", "--window", "8h"], 0, "SMOKE PASS", []),
        ("healthy", ["--samples", "10000000000000", "--window", "1h"], 1, "SMOKE FAIL: projection", ["projection"]),
        ("healthy", ["--metric", "accuracy"], 0, "SMOKE PASS", []),
        ("healthy", ["--chance-loss", "0.001"], 1, "SMOKE FAIL: loss", ["loss"]),
        ("inverted", [], 1, "SMOKE FAIL: metric", ["metric"]),
        ("random", [], 1, "SMOKE FAIL: loss, metric", ["loss", "metric"]),
    ],
)
def test_verdicts_on_real_runs(runs, capsys, run, argv, code, verdict, failed):
    assert main(["smoke", runs[run], *argv]) == code
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == verdict
    assert main(["smoke", runs[run], *argv, "--json"]) == code
    r = json.loads(capsys.readouterr().out)
    assert (r["verdict"], r["failed"]) == (verdict, failed)
    assert [c["name"] for c in r["checks"]] == ["log", "loss", "metric", "checkpoint"] + (
        ["projection"] if "--samples" in argv else []
    )


def test_evidence(runs):
    checks = {c["name"]: c for c in smoke(runs["inverted"])["checks"]}
    assert checks["metric"]["evidence"].startswith("inverted_metric: auroc ")
    assert checks["metric"]["evidence"].endswith(
        "< 0.5 - 0.05: labels or scores the wrong way round? (flipped it would be 1.0000)"
    )
    assert checks["log"]["evidence"] == f"valid; completed normally at step {STEPS} (20 train windows)"
    assert checks["checkpoint"]["evidence"].startswith("2 written, 2 verified (latest ")
    checks = {c["name"]: c for c in smoke(runs["random"])["checks"]}
    assert checks["metric"]["evidence"].endswith("within 0.5 +- 0.05: at chance")
    assert "(chance 0.6931 from ln(recipe num_classes 2), less 0.02)" in checks["loss"]["evidence"]
    assert " >= 0.6731 " in checks["loss"]["evidence"]
    checks = {c["name"]: c for c in smoke(runs["healthy"], SmokeOptions(metric="f1"))["checks"]}
    assert checks["metric"]["evidence"] == "no val event with metric 'f1' (val metrics seen: accuracy, auroc)"


def _rewrite_log(src, dst, edit):
    shutil.copytree(src, dst)
    path = os.path.join(dst, "metrics.jsonl")
    with open(path) as f:
        recs = [json.loads(line) for line in f]
    recs = [r for r in (edit(r) for r in recs) if r is not None]
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in recs)
    return str(dst)


def _unverify(rec):
    if rec["event"] == "checkpoint":
        rec.pop("verified")
    return rec


def test_unverified_checkpoint_is_read_back(runs, tmp_path):
    run = _rewrite_log(runs["healthy"], tmp_path / "r", _unverify)
    check = smoke(run)["checks"][3]
    assert check["passed"] and check["evidence"].startswith("2 written, none verified in the log; read back now: ")
    for name in os.listdir(os.path.join(runs["healthy"], "ckpt")):  # the log names the original files
        with open(os.path.join(runs["healthy"], "ckpt", name), "rb") as f:
            assert f.read(2) == b"PK"
    broken = _rewrite_log(
        runs["healthy"],
        tmp_path / "b",
        lambda r: {**_unverify(r), "path": str(tmp_path / "junk.pt")} if r["event"] == "checkpoint" else r,
    )
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    check = smoke(broken)["checks"][3]
    assert not check["passed"]
    assert check["evidence"].startswith(
        f"2 written, none verified; reading back the newest: {tmp_path}/junk.pt:"
        " cannot be loaded by torch.load(weights_only=True): "
    )


def test_no_checkpoint_no_val_no_chance(runs, tmp_path):
    def strip(rec):
        if rec["event"] in ("checkpoint", "val"):
            return None
        return rec

    run = _rewrite_log(runs["healthy"], tmp_path / "r", strip)
    with open(os.path.join(run, "run.json")) as f:
        manifest = json.load(f)
    del manifest["sessions"][-1]["recipe"]["num_classes"]
    with open(os.path.join(run, "run.json"), "w") as f:
        json.dump(manifest, f)
    r = smoke(run)
    assert r["verdict"] == "SMOKE FAIL: loss, metric, checkpoint"
    ev = [c["evidence"] for c in r["checks"]]
    assert ev[1].startswith("no chance level: pass --chance-loss or name num_classes in the recipe (train loss ")
    assert ev[2] == "no val event with metric 'auroc' (no val event)"
    assert ev[3] == "no checkpoint record in the log (name the file with --checkpoint PATH)"
    assert smoke(run, SmokeOptions(chance_loss=0.6931))["checks"][1]["passed"]


def test_invalid_or_unfinished_log(runs, tmp_path, capsys):
    assert main(["smoke", str(tmp_path / "nowhere")]) == 2
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == (
        f"SMOKE CANNOT JUDGE: no log to read: the log, read as --format jsonl: {tmp_path}/nowhere/metrics.jsonl"
        " does not exist"
    )
    unfinished = _rewrite_log(runs["healthy"], tmp_path / "u", lambda r: None if r["event"] == "session_end" else r)
    r = smoke(unfinished)
    assert r["failed"] == ["log"]
    assert r["checks"][0]["evidence"] == (
        f"valid; has no session_end (still running or killed) at step {STEPS} (20 train windows)"
    )


def test_usage_errors(runs, capsys):
    assert main(["smoke", runs["healthy"], "--samples", "10"]) == 2
    assert capsys.readouterr().err.strip() == (
        "runwatch smoke: --samples and --window go together (the projection needs both)"
    )
    assert main(["smoke", runs["healthy"], "--samples", "10", "--window", "soon"]) == 2
    with pytest.raises(UsageError, match=r"^smoke.chance_loss must be a finite number > 0, got -1$"):
        SmokeOptions(chance_loss=-1)


def test_verify_checkpoint_torch_and_safetensors(runs, tmp_path):
    torch = pytest.importorskip("torch")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    report = runwatch.verify_checkpoint(os.path.join(runs["healthy"], "ckpt", "latest.pt"))
    assert report["format"] == "torch" and report["files"] == 1
    # 5 parameters (embed 16x32, linear 32x32 + 32, linear 32 + 1: 1601 floats), AdamW's two moments of
    # each, and its 5 step counters (float32 scalars)
    assert (report["tensors"], report["tensor_bytes"]) == (5 + 5 * 3, 1601 * 4 * 3 + 5 * 4)
    st = tmp_path / "model.safetensors"
    safetensors_torch.save_file({"w": torch.zeros(3, 4), "b": torch.zeros(4, dtype=torch.float16)}, str(st))
    assert runwatch.verify_checkpoint(st) == {
        "path": str(st),
        "format": "safetensors",
        "files": 1,
        "tensors": 2,
        "tensor_bytes": 3 * 4 * 4 + 4 * 2,
        "file_bytes": os.path.getsize(st),
    }
    d = tmp_path / "checkpoint-5"
    d.mkdir()
    shutil.copy(st, d / "model.safetensors")
    torch.save({"x": torch.ones(5)}, d / "optimizer.pt")
    (d / "trainer_state.json").write_text("{}")
    r = runwatch.verify_checkpoint(d)
    assert (r["format"], r["files"], r["tensors"], r["tensor_bytes"]) == ("mixed", 2, 3, 56 + 20)


@pytest.mark.parametrize(
    "make, message",
    [
        (None, "{p}: no such checkpoint file"),
        (b"garbage", "{p}: cannot be loaded by torch.load(weights_only=True): "),
        ("empty", "{p}: holds no tensors"),
        ("dir", "{p}: a directory without checkpoint files (.safetensors, .pt, .pth, .bin, .ckpt)"),
    ],
)
def test_verify_checkpoint_errors(tmp_path, make, message):
    torch = pytest.importorskip("torch")
    p = tmp_path / "c.pt"
    if make == "empty":
        torch.save({"step": 3}, p)
    elif make == "dir":
        p.mkdir()
        (p / "notes.txt").write_text("x")
    elif make is not None:
        p.write_bytes(make)
    with pytest.raises(CheckpointError) as e:
        runwatch.verify_checkpoint(p)
    assert str(e.value).startswith(message.format(p=p))


def test_bad_safetensors(tmp_path):
    pytest.importorskip("safetensors")
    p = tmp_path / "m.safetensors"
    p.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{broken}")
    with pytest.raises(CheckpointError, match=r"m\.safetensors: not a readable safetensors file: "):
        runwatch.verify_checkpoint(p)
