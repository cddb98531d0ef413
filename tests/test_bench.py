"""runwatch.preflight.bench: real jobs (a RunLogger loop, an HF Trainer, a Lightning fit) benched for a few
updates and stopped; jobs that fail; RUNWATCH_WINDOW as the loggers' default window."""

from __future__ import annotations

import json
import os
import sys

import pytest

from runwatch.cli import main
from runwatch.errors import UsageError
from runwatch.integrations.session import CallbackOptions
from runwatch.judging.liveness import last_error
from runwatch.logger.metrics import RunLogger, default_window
from runwatch.preflight.bench import BenchOptions, quantile, steady_rates
from runwatch.procs.process import alive

HERE = os.path.dirname(os.path.abspath(__file__))
RECIPE = {"batch_size": 4, "seq_len": 1, "gradient_accumulation_steps": 1, "qk_clip_threshold": None}
KEYS = {"steps", "warmup", "samples_per_second", "tokens_per_second", "seconds_per_step", "seconds_to_first_step"}


def read_log(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def check_bench(run_dir, steps, warmup, seq_len):
    """bench.json holds the documented keys, its rates agree with the log, and the job was stopped."""
    with open(os.path.join(run_dir, "bench.json")) as f:
        bench = json.load(f)
    assert set(bench) >= KEYS
    assert (bench["steps"], bench["warmup"], bench["updates"], bench["steady_updates"]) == (
        steps,
        warmup,
        steps,
        steps - warmup,
    )
    log = read_log(run_dir)
    train = [r for r in log if r["event"] == "train"]
    assert len(train) >= steps and all(r["updates"] == 1 for r in train)  # RUNWATCH_WINDOW=1 reached the job
    steady = train[warmup:steps]
    seconds = sum(r["train_seconds"] for r in steady)
    assert bench["tokens_per_second"] == pytest.approx(sum(r["tokens"] for r in steady) / seconds)
    assert bench["samples_per_second"] == pytest.approx(bench["tokens_per_second"] / seq_len)
    per_step = bench["seconds_per_step"]
    assert 0 < per_step["p10"] <= per_step["median"] <= per_step["p90"]
    assert bench["seconds_to_first_step"] > 0
    # stopped by SIGTERM: the session ended (Lightning turns SIGTERM into its own SIGTERMException: `error`)
    assert log[-1]["event"] == "session_end" and log[-1]["reason"] in ("interrupted", "error")
    with open(os.path.join(run_dir, "launch.json")) as f:
        assert not alive(json.load(f)["pid"])
    return bench


def test_bench_plain_loop_then_plan(tmp_path, capsys):
    d = str(tmp_path / "b")
    cmd = [sys.executable, "-m", "runwatch.demo.tinytrain", d, "--steps", "5000"]
    assert main(["bench", d, "--steps", "11", "--", *cmd]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""  # no progress when stderr is not a terminal
    out = captured.out.splitlines()
    assert out[0].startswith(f"bench {d}: 11 updates timed, the first 3 as warm-up; job stopped after ")
    assert out[0].endswith(" updates: SIGTERM (1 process)")
    assert out[-1] == f"wrote {d}/bench.json; next: runwatch plan {d} --samples N --window DURATION"
    bench = check_bench(d, 11, 3, seq_len=16)
    # plan reads the bench: 8 updates after the warm-up are enough
    assert main(["plan", d, "--samples", "1000", "--window", "1h", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["source"] == "bench"
    assert r["steady_samples_per_second"] == pytest.approx(bench["samples_per_second"])


def test_bench_hf_trainer(tmp_path, capsys):
    pytest.importorskip("transformers")
    d = str(tmp_path / "b")
    cmd = [sys.executable, "-m", "runwatch.demo.tinyhf", d, "--steps", "300"]
    assert main(["bench", d, "--steps", "6", "--warmup", "2", "--json", "--", *cmd]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == check_bench(d, 6, 2, seq_len=16)


def test_bench_lightning_fit(tmp_path):
    pytest.importorskip("lightning")
    d = str(tmp_path / "b")
    assert (
        main(
            [
                "bench",
                d,
                "--steps",
                "6",
                "--warmup",
                "2",
                "--",
                sys.executable,
                os.path.join(HERE, "bench_jobs.py"),
                "lightning",
            ]
        )
        == 0
    )
    check_bench(d, 6, 2, seq_len=1)


@pytest.mark.parametrize(
    "kind, err",
    [
        (
            "raise",
            "runwatch: the command ended (exit status 1) after 2 of 6 updates; last error in {d}/stdout.log:"
            " ValueError: boom: batch 3 is empty",
        ),
        (
            "silent",
            "runwatch: the command ended (exit status 3) after 0 of 6 updates; last error in {d}/stdout.log:"
            " (no output); the log, read as --format jsonl: {d}/metrics.jsonl does not exist",
        ),
    ],
)
def test_bench_job_ends_too_soon(tmp_path, capsys, kind, err):
    d = str(tmp_path / "b")
    os.makedirs(d)
    with open(os.path.join(d, "bench.json"), "w") as f:
        f.write('{"stale": true}\n')  # an earlier bench's result: removed once the job started
    assert main(["bench", d, "--steps", "6", "--", sys.executable, os.path.join(HERE, "bench_jobs.py"), kind]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip() == err.format(d=d)
    assert captured.out == ""
    assert not os.path.exists(os.path.join(d, "bench.json"))


@pytest.mark.parametrize(
    "argv, err",
    [
        (["{d}", "--", "/nonexistent/train"], "bench: cannot start '/nonexistent/train': No such file or directory"),
        (["{d}", "--steps", "0", "--", "true"], "bench.steps must be an int >= 1, got 0"),
        (
            ["{d}", "--steps", "6", "--warmup", "6", "--", "true"],
            "bench.warmup must be an int >= 0 and < steps (6), got 6",
        ),
        (["{d}", "true"], "bench: expected RUN_DIR [options] -- CMD ..."),
        (["{d}", "--"], "bench: no command given (runwatch bench RUN_DIR -- CMD ...)"),
        (["{d}", "--steps", "x", "--", "true"], "runwatch bench: argument --steps: invalid int value: 'x'"),
    ],
)
def test_bench_usage_errors(tmp_path, capsys, argv, err):
    d = str(tmp_path / "b")
    assert main(["bench", *[a.format(d=d) for a in argv]]) == 2
    assert capsys.readouterr().err.strip() == err


@pytest.mark.parametrize(
    "values, q, expected",
    [
        ([1.0], 0.5, 1.0),
        ([1.0, 2.0], 0.5, 1.5),
        ([1.0, 2.0, 3.0, 4.0, 5.0], 0.1, 1.4),
        ([0.0, 10.0], 0.9, 9.0),
    ],
)
def test_quantile(values, q, expected):
    assert quantile(values, q) == pytest.approx(expected)


def test_steady_rates_weight_time_and_round_the_warmup_up():
    # records of 2 updates: a warm-up of 3 updates takes the first two records whole
    recs = [{"updates": 2, "attempted": 2, "tokens": 8, "train_seconds": s} for s in (5.0, 5.0, 1.0, 3.0)]
    r = steady_rates(recs, seq_len=2, warmup=3)
    assert (r["updates"], r["steady_updates"]) == (8, 4)
    assert r["tokens_per_second"] == pytest.approx(16 / 4.0)
    assert r["samples_per_second"] == pytest.approx(8 / 4.0)
    assert r["seconds_per_step"] == {"median": 1.0, "p10": pytest.approx(0.5), "p90": pytest.approx(1.5)}


@pytest.mark.parametrize(
    "text, line",
    [
        (
            '--- runwatch launch x: cmd\nTraceback (most recent call last):\n  File "t.py", line 1\n'
            "torch.OutOfMemoryError: CUDA out of memory\n",
            "torch.OutOfMemoryError: CUDA out of memory",
        ),
        ("ValueError: first\nstep 3\ninterrupted; session ended\n\n", "ValueError: first"),
        ("step 1\nstep 2\n", "step 2"),
        ("--- runwatch launch x: cmd\n", None),
        ("error: the data directory is empty\ncleaning up\n", "error: the data directory is empty"),
    ],
)
def test_last_error_line(tmp_path, text, line):
    path = tmp_path / "stdout.log"
    path.write_text(text)
    assert last_error(str(path), or_last_line=True) == line


def test_window_from_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("RUNWATCH_WINDOW", raising=False)
    assert default_window() == 10 and default_window(None) is None
    assert RunLogger(tmp_path / "a", recipe=RECIPE).window == 10
    monkeypatch.setenv("RUNWATCH_WINDOW", "1")
    assert RunLogger(tmp_path / "b", recipe=RECIPE).window == 1
    assert RunLogger(tmp_path / "c", recipe=RECIPE, window=5).window == 5  # an explicit window wins
    assert CallbackOptions().window == 1 and CallbackOptions(window=4).window == 4


@pytest.mark.parametrize("value", ["0", "x", "1.5", "-2", "٣"])
def test_window_from_environment_rejects(tmp_path, monkeypatch, value):
    monkeypatch.setenv("RUNWATCH_WINDOW", value)
    with pytest.raises(UsageError) as e:
        RunLogger(tmp_path / "a", recipe=RECIPE)
    assert str(e.value) == f"RUNWATCH_WINDOW must be an int >= 1, got {value!r}"
    with pytest.raises(UsageError):
        CallbackOptions()


def test_options_validated():
    assert BenchOptions() == BenchOptions(steps=15, warmup=3)
    with pytest.raises(UsageError) as e:
        BenchOptions(steps=True)
    assert str(e.value) == "bench.steps must be an int >= 1, got True"


STEP_LINE = r"^step (?P<step>\d+) loss (?P<loss>\S+) sps (?P<sps>\S+)"


def test_bench_a_printed_log_read_as_check_reads_it(tmp_path, capsys):
    d = str(tmp_path / "b")
    job = (
        "import time\n"
        "for s in range(1, 1000):\n"
        "    time.sleep(0.02)\n"
        "    print(f'step {s} loss {1/s:.4f} sps 400.0', flush=True)\n"
    )
    argv = [
        "bench",
        d,
        "--steps",
        "10",
        "--warmup",
        "2",
        "--pattern",
        STEP_LINE,
        "--json",
        "--",
        sys.executable,
        "-c",
        job,
    ]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["format"] == "text" and result["log"] == os.path.join(d, "stdout.log")
    assert result["samples_per_second"] == pytest.approx(400.0)
    assert result["tokens_per_second"] is None and result["seq_len"] is None
    assert 0.015 < result["seconds_per_step"]["median"] < 1.0
    assert main(["plan", d, "--samples", "4000", "--window", "20s"]) == 0  # 10 s at 400 samples/s: fits


def test_bench_timeout_stops_a_job_that_gives_no_update(tmp_path, capsys):
    d = str(tmp_path / "b")
    job = "import time\nprint('loading the data', flush=True)\ntime.sleep(60)\n"
    assert main(["bench", d, "--timeout", "1", "--pattern", STEP_LINE, "--", sys.executable, "-c", job]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        "runwatch: bench: no update for 1s (0 of 15 updates); job stopped after no update for 1s: SIGTERM (1 process);"
        f" the log, read as --format text --pattern {STEP_LINE}: {d}/stdout.log: "
    )
    assert err.endswith("'loading the data'")
    with open(os.path.join(d, "launch.json")) as f:
        pid = json.load(f)["pid"]
    assert not alive(pid)
    assert main(["bench", d, "--timeout", "0", "--", "true"]) == 2
    assert capsys.readouterr().err.strip() == "bench.timeout must be a number of seconds > 0, got 0.0"
