"""runwatch.preflight.plan: durations, the projection arithmetic, warm-up exclusion, measured eval overhead, the CLI."""

from __future__ import annotations

import json
import math
import os

import pytest

from runwatch.cli import main
from runwatch.errors import InsufficientRunError, UsageError
from runwatch.preflight.plan import PlanOptions, format_duration, parse_duration, plan, project

RUN_ID = "r-20260101-000000"
SID = "s-20260101T000000-0000"
RECIPE = {"batch_size": 2, "seq_len": 4, "gradient_accumulation_steps": 1, "qk_clip_threshold": None}


def make_run(run_dir, windows, evals=None, checkpoints=None, end=True):
    """A schema-v1 run written by hand, so throughput and wall times are exact.

    windows: [(updates, train_seconds)]; evals/checkpoints: {window index: seconds} after that window.
    """
    evals, checkpoints = evals or {}, checkpoints or {}
    os.makedirs(run_dir, exist_ok=True)
    session = {"session_id": SID, "started_at": "2026-01-01T00:00:00Z", "start": {"step": 0, "tokens": 0, "skipped": 0},
               "recipe": RECIPE, "optimizers": [{"algorithm": "adamw"}], "hardware": {}}
    with open(os.path.join(run_dir, "run.json"), "w") as f:
        json.dump({"schema_version": 1, "run_id": RUN_ID, "created_at": "2026-01-01T00:00:00Z", "sessions": [session]}, f)
    step = tokens = 0
    elapsed = 0.0
    lines = []

    def rec(event, **fields):
        return {"run_id": RUN_ID, "session_id": SID, "event": event, "step": step, "time": 1.7e9 + elapsed,
                "session": {"elapsed_seconds": elapsed, "tokens": tokens, "tokens_per_second": None,
                            "profiling_seconds": 0.0}, **fields}

    for i, (updates, seconds) in enumerate(windows):
        step += updates
        tokens += 8 * updates
        elapsed += seconds
        lines.append(rec("train", updates=updates, skipped=0, attempted=updates, tokens=8 * updates,
                         train_seconds=seconds, loss=0.5, lr=1e-3, grad_norm={"mean": 1.0, "max": 1.0},
                         nonfinite_grad_norms=0, grad_clipped_fraction=0.0))
        if i in evals:
            elapsed += evals[i]
            lines.append(rec("val", loss=0.4, metrics={"auroc": 0.9}))
        if i in checkpoints:
            elapsed += checkpoints[i]
            lines.append(rec("checkpoint", path="ckpt.pt", seconds=checkpoints[i], verified=True))
    if end:
        lines.append(rec("session_end", reason="normal", error=None, totals={"tokens": tokens, "skipped": 0}))
    with open(os.path.join(run_dir, "metrics.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in lines)
    return str(run_dir)


@pytest.mark.parametrize("text, seconds", [
    ("8h", 28800.0), ("90m", 5400.0), ("1h30m", 5400.0), ("45s", 45.0), ("5400", 5400.0), ("2.5h", 9000.0),
    ("1d12h", 129600.0), ("1h0m30s", 3630.0), (" 10M ", 600.0), ("0.5", 0.5),
])
def test_parse_duration(text, seconds):
    assert parse_duration(text, "--window") == seconds


@pytest.mark.parametrize("text, message", [
    ("8x", "--window: expected a duration like 8h, 90m, 1h30m, 45s or seconds, got '8x'"),
    ("", "--window: expected a duration like 8h, 90m, 1h30m, 45s or seconds, got ''"),
    ("-5m", "--window: expected a duration like 8h, 90m, 1h30m, 45s or seconds, got '-5m'"),
    ("30m1h", "--window: expected a duration like 8h, 90m, 1h30m, 45s or seconds, got '30m1h'"),
    ("h", "--window: expected a duration like 8h, 90m, 1h30m, 45s or seconds, got 'h'"),
    ("0", "--window must be a duration > 0, got '0'"),
    ("0h", "--window must be a duration > 0, got '0h'"),
])
def test_parse_duration_rejects(text, message):
    with pytest.raises(UsageError) as e:
        parse_duration(text, "--window")
    assert str(e.value) == message


def test_parse_duration_zero_setup_allowed():
    assert parse_duration("0", "--setup", allow_zero=True) == 0.0


@pytest.mark.parametrize("seconds, text", [
    (0.25, "0.2s"), (9.96, "10.0s"), (45, "45s"), (59.6, "1m00s"), (200, "3m20s"), (3600, "1h00m"),
    (24480, "6h48m"), (86400 + 3 * 3600 + 600, "1d03h10m"), (-4320, "-1h12m"),
])
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


# (samples/s, samples, epochs, eval fraction, setup s, window s) -> (projected s, fits, max samples)
@pytest.mark.parametrize("args, projected, fits, max_samples", [
    ((10.0, 1000, 1, 0.0, 0.0, 100.0), 100.0, True, 1000),          # exactly the window: fits
    ((10.0, 1000, 1, 0.0, 0.0, 99.0), 100.0, False, 990),
    ((10.0, 1000, 2, 0.0, 0.0, 100.0), 200.0, False, 500),          # epochs multiply
    ((10.0, 1000, 1, 0.25, 0.0, 100.0), 125.0, False, 800),         # eval: a fraction of training
    ((10.0, 1000, 1, 0.0, 30.0, 100.0), 130.0, False, 700),         # setup comes off the window first
    ((10.0, 1000, 1, 0.0, 150.0, 100.0), 250.0, False, 0),          # setup alone overruns: nothing fits
    ((4.0, 100, 1.5, 0.1, 60.0, 3600.0), 101.25, True, 8581),   # (3600 - 60) * 4 / (1.5 * 1.1)
])
def test_project_arithmetic(args, projected, fits, max_samples):
    r = project(*args)
    assert r["projected_seconds"] == pytest.approx(projected)
    assert r["fits"] is fits
    assert r["max_samples"] == max_samples
    assert r["max_fraction"] == pytest.approx(max_samples / args[1])
    assert r["margin_seconds"] == pytest.approx(args[5] - projected)
    # the largest run that fits does fit, one more sample does not
    sps, _, epochs, frac, setup, window = args
    if max_samples:
        assert project(sps, max_samples, epochs, frac, setup, window)["fits"]
    assert not project(sps, max_samples + 1, epochs, frac, setup, window)["fits"]


@pytest.mark.parametrize("kwargs, message", [
    ({"samples": 0}, "plan.samples must be an int > 0, got 0"),
    ({"samples": 1.5}, "plan.samples must be an int > 0, got 1.5"),
    ({"window_seconds": -1}, "plan.window_seconds must be a finite number > 0, got -1"),
    ({"epochs": math.inf}, "plan.epochs must be a finite number > 0, got inf"),
    ({"eval_overhead": -0.1}, "plan.eval_overhead must be a finite number >= 0, got -0.1"),
    ({"setup_seconds": True}, "plan.setup_seconds must be a finite number >= 0, got True"),
    ({"warmup_windows": -1}, "plan.warmup_windows must be an int >= 0, got -1"),
    ({"min_steady_windows": 0}, "plan.min_steady_windows must be an int >= 1, got 0"),
])
def test_options_validated(kwargs, message):
    base = {"samples": 100, "window_seconds": 3600.0}
    with pytest.raises(UsageError) as e:
        PlanOptions(**{**base, **kwargs})
    assert str(e.value) == message


def test_warmup_windows_left_out(tmp_path):
    # two slow warm-up windows (compilation), then 4 steady windows of 10 steps in 2 s:
    # 10 steps x 2 sequences / 2 s = 10 samples/s (the warm-up would drag it to 5.7)
    run = make_run(tmp_path / "r", [(10, 10.0), (10, 5.0)] + [(10, 2.0)] * 4)
    r = plan(run, PlanOptions(samples=36000, window_seconds=3 * 3600.0))
    assert r["after_step"] == 20
    assert r["steady_windows"] == 4
    assert r["steady_samples_per_second"] == pytest.approx(10.0)
    assert r["steady_train_tokens_per_second"] == pytest.approx(40.0)
    assert r["train_seconds"] == pytest.approx(3600.0)
    assert r["eval_overhead_source"] == "none"
    assert r["fits"] is True
    r0 = plan(run, PlanOptions(samples=36000, window_seconds=3 * 3600.0, warmup_windows=0))
    assert r0["steady_samples_per_second"] == pytest.approx(120 / 23)  # 60 steps x 2 in 10 + 5 + 4 x 2 s


def test_eval_overhead_measured_from_val_events(tmp_path):
    # steady: 4 windows x 2 s = 8 s of training, two evals of 0.5 s, a checkpoint of 3 s (not eval)
    run = make_run(tmp_path / "r", [(10, 1.0)] * 2 + [(10, 2.0)] * 4, evals={0: 9.0, 3: 0.5, 5: 0.5},
                   checkpoints={4: 3.0})
    r = plan(run, PlanOptions(samples=1000, window_seconds=1000.0))
    assert r["eval_overhead_source"] == "measured"
    assert r["val_events"] == 2  # the eval inside the warm-up does not count
    assert r["eval_overhead_fraction"] == pytest.approx(1.0 / 8.0)
    assert r["train_seconds"] == pytest.approx(100.0)
    assert r["eval_seconds"] == pytest.approx(12.5)
    given = plan(run, PlanOptions(samples=1000, window_seconds=1000.0, eval_overhead=0.5, setup_seconds=7.0))
    assert given["eval_overhead_source"] == "given"
    assert given["projected_seconds"] == pytest.approx(100.0 + 50.0 + 7.0)


@pytest.mark.parametrize("windows, message", [
    (4, "{run}: 4 train windows (40 steps), 2 steady after 2 warm-up; need 3 steady windows to trust the"
        " throughput: run about 10 more steps"),
    (1, "{run}: 1 train windows (10 steps), 0 steady after 2 warm-up; need 3 steady windows to trust the"
        " throughput: run about 40 more steps"),
])
def test_too_few_steady_windows_refused(tmp_path, windows, message):
    run = make_run(tmp_path / "r", [(10, 1.0)] * windows)
    with pytest.raises(InsufficientRunError) as e:
        plan(run, PlanOptions(samples=10, window_seconds=60.0))
    assert str(e.value) == message.format(run=run)


def test_cli_fits_and_not(tmp_path, capsys):
    run = make_run(tmp_path / "r", [(10, 2.0)] * 6)  # 10 samples/s
    assert main(["plan", run, "--samples", "36000", "--window", "1h30m", "--setup", "10m"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "FITS: 1h10m of 1h30m, margin 20m00s"
    assert main(["plan", run, "--samples", "36000", "--epochs", "2", "--window", "90m", "--eval-overhead", "0.1"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == ("DOES NOT FIT: 2h12m of 1h30m, over by 42m00s; the largest that fits is"
                       " 24,545 samples (fraction 0.682)")
    assert main(["plan", run, "--samples", "36000", "--window", "5400", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["projected_seconds"] == pytest.approx(3600.0)
    assert r["margin_seconds"] == pytest.approx(1800.0)
    assert r["fits"] is True


@pytest.mark.parametrize("argv, code, err", [
    (["--window", "8x"], 2, "--window: expected a duration like 8h, 90m, 1h30m, 45s or seconds, got '8x'"),
    (["--window", "1h", "--setup", "soon"], 2,
     "--setup: expected a duration like 8h, 90m, 1h30m, 45s or seconds, got 'soon'"),
    (["--window", "1h", "--warmup-windows", "5"], 1,
     "runwatch: {run}: 6 train windows (60 steps), 1 steady after 5 warm-up; need 3 steady windows to trust"
     " the throughput: run about 20 more steps"),
])
def test_cli_errors(tmp_path, capsys, argv, code, err):
    run = make_run(tmp_path / "r", [(10, 2.0)] * 6)
    assert main(["plan", run, "--samples", "100", *argv]) == code
    captured = capsys.readouterr()
    assert captured.err.strip() == err.format(run=run)
    assert captured.out == ""


def test_cli_invalid_run(tmp_path, capsys):
    run = make_run(tmp_path / "r", [(10, 2.0)] * 6)
    with open(os.path.join(run, "metrics.jsonl"), "a") as f:
        f.write('{"torn": ')
    assert main(["plan", run, "--samples", "100", "--window", "1h"]) == 1
    assert capsys.readouterr().err.strip() == "Invalid training run: Uncommitted metrics tail at line 8"
