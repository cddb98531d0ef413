"""runwatch.preflight.plan and .throughput: durations, the projection arithmetic, the warm-up in updates, the
sources (bench.json, schema-v1 runs, minimal telemetry, trainer_state.json), exit codes, the next step."""

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
    session = {
        "session_id": SID,
        "started_at": "2026-01-01T00:00:00Z",
        "start": {"step": 0, "tokens": 0, "skipped": 0},
        "recipe": RECIPE,
        "optimizers": [{"algorithm": "adamw"}],
        "hardware": {},
    }
    with open(os.path.join(run_dir, "run.json"), "w") as f:
        json.dump(
            {"schema_version": 1, "run_id": RUN_ID, "created_at": "2026-01-01T00:00:00Z", "sessions": [session]}, f
        )
    step = tokens = 0
    elapsed = 0.0
    lines = []

    def rec(event, **fields):
        return {
            "run_id": RUN_ID,
            "session_id": SID,
            "event": event,
            "step": step,
            "time": 1.7e9 + elapsed,
            "session": {
                "elapsed_seconds": elapsed,
                "tokens": tokens,
                "tokens_per_second": None,
                "profiling_seconds": 0.0,
            },
            **fields,
        }

    for i, (updates, seconds) in enumerate(windows):
        step += updates
        tokens += 8 * updates
        elapsed += seconds
        lines.append(
            rec(
                "train",
                updates=updates,
                skipped=0,
                attempted=updates,
                tokens=8 * updates,
                train_seconds=seconds,
                loss=0.5,
                lr=1e-3,
                grad_norm={"mean": 1.0, "max": 1.0},
                nonfinite_grad_norms=0,
                grad_clipped_fraction=0.0,
            )
        )
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


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("8h", 28800.0),
        ("90m", 5400.0),
        ("1h30m", 5400.0),
        ("45s", 45.0),
        ("5400", 5400.0),
        ("2.5h", 9000.0),
        ("1d12h", 129600.0),
        ("1h0m30s", 3630.0),
        (" 10M ", 600.0),
        ("0.5", 0.5),
    ],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text, "--window") == seconds


@pytest.mark.parametrize(
    "text, message",
    [
        ("8x", "--window: expected a duration like 8h, 90m, 1h30m, 45s or seconds, got '8x'"),
        ("", "--window: expected a duration like 8h, 90m, 1h30m, 45s or seconds, got ''"),
        ("-5m", "--window: expected a duration like 8h, 90m, 1h30m, 45s or seconds, got '-5m'"),
        ("30m1h", "--window: expected a duration like 8h, 90m, 1h30m, 45s or seconds, got '30m1h'"),
        ("h", "--window: expected a duration like 8h, 90m, 1h30m, 45s or seconds, got 'h'"),
        ("0", "--window must be a duration > 0, got '0'"),
        ("0h", "--window must be a duration > 0, got '0h'"),
    ],
)
def test_parse_duration_rejects(text, message):
    with pytest.raises(UsageError) as e:
        parse_duration(text, "--window")
    assert str(e.value) == message


def test_parse_duration_zero_setup_allowed():
    assert parse_duration("0", "--setup", allow_zero=True) == 0.0


@pytest.mark.parametrize(
    "seconds, text",
    [
        (0.25, "0.2s"),
        (9.96, "10.0s"),
        (45, "45s"),
        (59.6, "1m00s"),
        (200, "3m20s"),
        (3600, "1h00m"),
        (24480, "6h48m"),
        (86400 + 3 * 3600 + 600, "1d03h10m"),
        (-4320, "-1h12m"),
    ],
)
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


# (samples/s, samples, epochs, eval fraction, setup s, window s) -> (projected s, fits, max samples)
@pytest.mark.parametrize(
    "args, projected, fits, max_samples",
    [
        ((10.0, 1000, 1, 0.0, 0.0, 100.0), 100.0, True, 1000),  # exactly the window: fits
        ((10.0, 1000, 1, 0.0, 0.0, 99.0), 100.0, False, 990),
        ((10.0, 1000, 2, 0.0, 0.0, 100.0), 200.0, False, 500),  # epochs multiply
        ((10.0, 1000, 1, 0.25, 0.0, 100.0), 125.0, False, 800),  # eval: a fraction of training
        ((10.0, 1000, 1, 0.0, 30.0, 100.0), 130.0, False, 700),  # setup comes off the window first
        ((10.0, 1000, 1, 0.0, 150.0, 100.0), 250.0, False, 0),  # setup alone overruns: nothing fits
        ((4.0, 100, 1.5, 0.1, 60.0, 3600.0), 101.25, True, 8581),  # (3600 - 60) * 4 / (1.5 * 1.1)
    ],
)
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


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"samples": 0}, "plan.samples must be an int > 0, got 0"),
        ({"samples": 1.5}, "plan.samples must be an int > 0, got 1.5"),
        ({"window_seconds": -1}, "plan.window_seconds must be a finite number > 0, got -1"),
        ({"epochs": math.inf}, "plan.epochs must be a finite number > 0, got inf"),
        ({"eval_overhead": -0.1}, "plan.eval_overhead must be a finite number >= 0, got -0.1"),
        ({"setup_seconds": True}, "plan.setup_seconds must be a finite number >= 0, got True"),
        ({"warmup": -1}, "plan.warmup must be an int >= 0, got -1"),
        ({"min_steady_updates": 0}, "plan.min_steady_updates must be an int >= 1, got 0"),
        ({"batch_size": 0}, "plan.batch_size must be an int >= 1, got 0"),
    ],
)
def test_options_validated(kwargs, message):
    base = {"samples": 100, "window_seconds": 3600.0}
    with pytest.raises(UsageError) as e:
        PlanOptions(**{**base, **kwargs})
    assert str(e.value) == message


def test_warmup_left_out_in_whole_records(tmp_path):
    # a slow first window (compilation), then 4 steady windows of 10 steps in 2 s:
    # 10 steps x 2 sequences / 2 s = 10 samples/s (the warm-up would drag it to 6.7)
    run = make_run(tmp_path / "r", [(10, 10.0)] + [(10, 2.0)] * 4)
    r = plan(run, PlanOptions(samples=36000, window_seconds=3 * 3600.0))  # --warmup 3: the first record
    assert (r["after_step"], r["warmup_updates"], r["steady_updates"], r["steady_records"]) == (10, 10, 40, 4)
    assert r["steady_samples_per_second"] == pytest.approx(10.0)
    assert r["steady_train_tokens_per_second"] == pytest.approx(40.0)
    assert r["train_seconds"] == pytest.approx(3600.0)
    assert r["eval_overhead_source"] == "none"
    assert r["fits"] is True
    r11 = plan(run, PlanOptions(samples=36000, window_seconds=3 * 3600.0, warmup=11))  # rounded up: 2 records
    assert (r11["after_step"], r11["warmup_updates"], r11["steady_updates"]) == (20, 20, 30)
    r0 = plan(run, PlanOptions(samples=36000, window_seconds=3 * 3600.0, warmup=0))
    assert r0["steady_samples_per_second"] == pytest.approx(100 / 18)  # 50 steps x 2 in 10 + 4 x 2 s


def test_eval_overhead_measured_from_val_events(tmp_path):
    # steady: 4 windows x 2 s = 8 s of training, two evals of 0.5 s, a checkpoint of 3 s (not eval)
    run = make_run(
        tmp_path / "r", [(10, 1.0)] * 2 + [(10, 2.0)] * 4, evals={0: 9.0, 3: 0.5, 5: 0.5}, checkpoints={4: 3.0}
    )
    r = plan(run, PlanOptions(samples=1000, window_seconds=1000.0, warmup=20))
    assert r["eval_overhead_source"] == "measured"
    assert r["val_events"] == 2  # the eval inside the warm-up does not count
    assert r["eval_overhead_fraction"] == pytest.approx(1.0 / 8.0)
    assert r["train_seconds"] == pytest.approx(100.0)
    assert r["eval_seconds"] == pytest.approx(12.5)
    given = plan(run, PlanOptions(samples=1000, window_seconds=1000.0, eval_overhead=0.5, setup_seconds=7.0, warmup=20))
    assert given["eval_overhead_source"] == "given"
    assert given["projected_seconds"] == pytest.approx(100.0 + 50.0 + 7.0)


# A run of 15 updates at the default window of 10 is refused (the first record is the warm-up, 5
# updates remain); 18 updates (10 + a last record of 8) are enough; so are 15 records of one update.
@pytest.mark.parametrize(
    "windows, warmup, message",
    [
        (
            [(10, 1.0), (5, 0.5)],
            3,
            "{run}: 15 updates logged, 5 after the warm-up (the first 10 updates, 1 train record); need 8 after it to"
            " project: log 18+ updates (3 more), or use runwatch bench",
        ),
        (
            [(10, 1.0)],
            3,
            "{run}: 10 updates logged, 0 after the warm-up (the first 10 updates, 1 train record); need 8 after it to"
            " project: log 18+ updates (8 more), or use runwatch bench",
        ),
        (
            [(1, 0.1)] * 2,
            3,
            "{run}: 2 updates logged, 0 after the warm-up (the first 3 updates, 3 train records); need 8 after it to"
            " project: log 11+ updates (9 more), or use runwatch bench",
        ),
        (
            [(1, 0.1)] * 10,
            3,
            "{run}: 10 updates logged, 7 after the warm-up (the first 3 updates, 3 train records); need 8 after it to"
            " project: log 11+ updates (1 more), or use runwatch bench",
        ),
        (
            [(10, 1.0)] * 6,
            55,
            "{run}: 60 updates logged, 0 after the warm-up (the first 60 updates, 6 train records); need 8 after it to"
            " project: log 68+ updates (8 more), or use runwatch bench",
        ),
    ],
)
def test_too_few_updates_refused(tmp_path, windows, warmup, message):
    run = make_run(tmp_path / "r", windows)
    with pytest.raises(InsufficientRunError) as e:
        plan(run, PlanOptions(samples=10, window_seconds=60.0, warmup=warmup))
    assert str(e.value) == message.format(run=run)


@pytest.mark.parametrize("windows, steady", [([(10, 1.0), (8, 0.8)], 8), ([(1, 0.1)] * 11, 8), ([(1, 0.1)] * 15, 12)])
def test_enough_updates_project(tmp_path, windows, steady):
    r = plan(make_run(tmp_path / "r", windows), PlanOptions(samples=10, window_seconds=60.0))
    assert r["steady_updates"] == steady
    assert r["steady_samples_per_second"] == pytest.approx(20.0)  # 2 sequences per 0.1 s


def test_cli_fits_and_not(tmp_path, capsys):
    run = make_run(tmp_path / "r", [(10, 2.0)] * 6)  # 10 samples/s
    assert main(["plan", run, "--samples", "36000", "--window", "1h30m", "--setup", "10m"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "FITS: 1h10m of 1h30m, margin 20m00s"
    assert main(["plan", run, "--samples", "36000", "--epochs", "2", "--window", "90m", "--eval-overhead", "0.1"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-2] == (
        "DOES NOT FIT: 2h12m of 1h30m, over by 42m00s; the largest that fits is 24,545 samples (fraction 0.682)"
    )
    assert out[-1] == "next: runwatch subsample DATA.jsonl --n 24545 --seed 0 --out DATA.n24545.jsonl"
    assert main(["plan", run, "--samples", "36000", "--window", "5400", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["projected_seconds"] == pytest.approx(3600.0)
    assert r["margin_seconds"] == pytest.approx(1800.0)
    assert r["fits"] is True


@pytest.mark.parametrize(
    "argv, code, err",
    [
        (["--window", "8x"], 2, "--window: expected a duration like 8h, 90m, 1h30m, 45s or seconds, got '8x'"),
        (
            ["--window", "1h", "--setup", "soon"],
            2,
            "--setup: expected a duration like 8h, 90m, 1h30m, 45s or seconds, got 'soon'",
        ),
        (
            ["--window", "1h", "--warmup", "55"],
            2,
            "runwatch: {run}: 60 updates logged, 0 after the warm-up (the first 60 updates, 6 train records); need 8 after"
            " it to project: log 68+ updates (8 more), or use runwatch bench",
        ),
        (
            ["--window", "1h", "--warmup-windows", "2"],
            2,
            "--warmup-windows was replaced by --warmup N (updates, default 3, rounded up to whole train records)",
        ),
        (["--window", "1h", "--batch-size", "0"], 2, "plan.batch_size must be an int >= 1, got 0"),
    ],
)
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


def write_bench(run_dir, **fields):
    os.makedirs(run_dir, exist_ok=True)
    bench = {
        "steps": 15,
        "warmup": 3,
        "samples_per_second": 10.0,
        "tokens_per_second": 40.0,
        "seconds_per_step": {"median": 0.2, "p10": 0.19, "p90": 0.25},
        "seconds_to_first_step": 3.0,
        "updates": 15,
        "steady_updates": 12,
        "seq_len": 4,
        **fields,
    }
    with open(os.path.join(run_dir, "bench.json"), "w") as f:
        json.dump(bench, f)
    return str(run_dir)


def test_bench_json_is_the_source(tmp_path, capsys):
    run = write_bench(tmp_path / "b")
    assert main(["plan", run, "--samples", "36000", "--window", "2h"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == (
        "  throughput  10 samples/s steady (runwatch bench: 12 updates after a 3-update warm-up;"
        " per step median 0.2s, p10 0.19s, p90 0.25s)"
    )
    assert out[-1] == "FITS: 1h00m of 2h00m, margin 1h00m"
    r = plan(run, PlanOptions(samples=36000, window_seconds=3000.0))
    assert (r["source"], r["fits"], r["max_samples"], r["next_command"]) == (
        "bench",
        False,
        30000,
        ("runwatch subsample DATA.jsonl --n 30000 --seed 0 --out DATA.n30000.jsonl"),
    )


@pytest.mark.parametrize(
    "fields, code, err",
    [
        (
            {"steps": 6, "warmup": 2, "steady_updates": 4},
            2,
            "runwatch: {run}/bench.json: 4 updates after the warm-up; need 8 to project: rerun runwatch bench with"
            " --steps 10 or more",
        ),
        (
            {"samples_per_second": 0},
            1,
            "Invalid training run: {run}/bench.json: samples_per_second must be a finite number > 0, got 0",
        ),
        ({"warmup": "3"}, 1, "Invalid training run: {run}/bench.json: warmup must be an int >= 0, got '3'"),
    ],
)
def test_bench_json_refused(tmp_path, capsys, fields, code, err):
    run = write_bench(tmp_path / "b", **fields)
    assert main(["plan", run, "--samples", "100", "--window", "1h"]) == code
    assert capsys.readouterr().err.strip() == err.format(run=run)


def write_lines(path, records):
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    return str(path)


def test_minimal_telemetry_sps_and_t(tmp_path):
    # 10 updates a record; sps 5 in the first (warm-up), then 20 and 10: Σ steps / Σ (steps / sps)
    recs = [
        {"step": 10 * i, "t": 3.0 * i, "loss": 1.0, "sps": 5.0 if i == 1 else (20.0 if i % 2 else 10.0)}
        for i in range(1, 6)
    ]
    log = write_lines(tmp_path / "telemetry.jsonl", recs)
    r = plan(log, PlanOptions(samples=1000, window_seconds=3600.0))
    assert r["source"] == "telemetry"
    assert r["steady_updates"] == 40
    assert r["steady_samples_per_second"] == pytest.approx(40 / (10 / 10 + 10 / 20 + 10 / 10 + 10 / 20))
    no_sps = write_lines(tmp_path / "t.jsonl", [{k: v for k, v in rec.items() if k != "sps"} for rec in recs])
    r = plan(no_sps, PlanOptions(samples=1000, window_seconds=3600.0, batch_size=4))
    assert r["steady_samples_per_second"] == pytest.approx(4 * 40 / 12.0)
    assert r["throughput_detail"] == (
        "4 samples x 40 updates in 12s of wall time `t` of t.jsonl after step 10 (eval and checkpoints included)"
    )


@pytest.mark.parametrize(
    "records, err",
    [
        (
            [{"step": i, "t": float(i), "loss": 1.0} for i in range(1, 20)],
            "runwatch: {log}: t.jsonl carries wall time `t` but not samples/s: pass --batch-size (samples per update),"
            " or use runwatch bench",
        ),
        (
            [{"step": i, "loss": 1.0} for i in range(1, 20)],
            "runwatch: {log}: no timing in t.jsonl (no `sps`, `t` or train_samples_per_second): use runwatch bench",
        ),
        (
            [{"step": i, "loss": 1.0, "sps": 3.0} for i in range(1, 6)],
            "runwatch: {log}: 5 updates logged, 2 after the warm-up (the first 3 updates, 3 train records); need 8 after"
            " it to project: log 11+ updates (6 more), or use runwatch bench",
        ),
    ],
)
def test_minimal_telemetry_cannot_project(tmp_path, capsys, records, err):
    log = write_lines(tmp_path / "t.jsonl", records)
    assert main(["plan", log, "--samples", "100", "--window", "1h"]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip() == err.format(log=log)
    assert captured.out == ""


def test_trainer_state_final_samples_per_second(tmp_path, capsys):
    state = {
        "log_history": [
            {"step": 10, "loss": 0.6, "learning_rate": 1e-3, "epoch": 0.1},
            {"step": 20, "eval_loss": 0.5},
            {"step": 20, "train_runtime": 10.0, "train_samples_per_second": 32.0, "train_loss": 0.6},
        ]
    }
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps(state))
    assert (
        main(
            ["plan", str(path), "--samples", "230400", "--window", "1h", "--data", "d/train.csv", "--stratify", "label"]
        )
        == 1
    )
    out = capsys.readouterr().out.splitlines()
    assert out[1] == (
        "  throughput  32 samples/s steady (train_samples_per_second of trainer_state.json: the whole"
        " train() call, warm-up, evaluation and checkpoints included)"
    )
    assert (
        out[3]
        == "  eval        +0.0s (0.0% of training, already in the throughput, which counts the whole train() call)"
    )
    assert (
        out[-1] == "next: runwatch subsample d/train.csv --n 115200 --stratify label --seed 0 --out d/train.n115200.csv"
    )
    assert main(["plan", str(tmp_path), "--samples", "230400", "--window", "1h", "--setup", "2h", "--json"]) == 1
    r = json.loads(capsys.readouterr().out)
    assert (r["source"], r["max_samples"], r["next_command"]) == ("trainer_state", 0, None)
    assert main(["plan", str(tmp_path), "--samples", "230400", "--window", "1h", "--setup", "2h"]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "next: nothing fits: the setup alone takes 2h00m of 1h00m"


def test_real_trainer_state(tmp_path):
    """A real Trainer.train() and save_state(): plan reads its trainer_state.json through the record parser."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")

    class Data(torch.utils.data.Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            return {"x": torch.tensor([float(i % 2)]), "labels": torch.tensor(float(i % 2))}

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(1, 1)

        def forward(self, x, labels=None):
            out = self.lin(x).squeeze(-1)
            return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}

    out_dir = str(tmp_path / "hf")
    args = transformers.TrainingArguments(
        output_dir=out_dir,
        max_steps=12,
        per_device_train_batch_size=4,
        logging_steps=2,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = transformers.Trainer(model=Model(), args=args, train_dataset=Data())
    trainer.train()
    trainer.save_state()
    r = plan(out_dir, PlanOptions(samples=1000, window_seconds=3600.0))
    assert r["source"] == "trainer_state"
    final = trainer.state.log_history[-1]["train_samples_per_second"]
    assert r["steady_samples_per_second"] == pytest.approx(final)
