"""`runwatch plot`: real tinytrain runs, minimal telemetry and trainer_state.json drawn into PNGs.

The PNGs are checked for their pixel size (read from the file's IHDR chunk) and their panels; the
thresholds and findings drawn are checked on the figure's own artists. The pictures themselves were
looked at by eye (see docs/LOOK.md for what each panel shows).
"""

from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import sys

import pytest

pytest.importorskip("matplotlib", reason="runwatch[plot] is not installed")

from runwatch.cli import main  # noqa: E402
from runwatch.judging.watchdog import Options, check  # noqa: E402
from runwatch.views import plot  # noqa: E402

ALL_PANELS = ["loss", "lr", "grad_norm", "throughput", "eval_metrics"]


def _train(run_dir, *args: str) -> int:
    cmd = [sys.executable, "-m", "runwatch.demo.tinytrain", str(run_dir), "--eval-every", "40", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300).returncode


@pytest.fixture(scope="module")
def resumed_run(tmp_path_factory):
    """Two sessions: SIGKILLed at step 130, resumed from the checkpoint at step 100 to step 160."""
    run_dir = tmp_path_factory.mktemp("resumed") / "run"
    assert _train(run_dir, "--steps", "160", "--crash-at", "130") == -9
    assert _train(run_dir, "--steps", "160") == 0
    return run_dir


@pytest.fixture(scope="module")
def exploded_run(tmp_path_factory):
    """One session whose gradient norm is scaled 1e4x from step 100: grad_explosion."""
    run_dir = tmp_path_factory.mktemp("exploded") / "run"
    assert _train(run_dir, "--steps", "160", "--inject", "explode", "--inject-at", "100") == 0
    return run_dir


def png_size(path) -> tuple[int, int]:
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        raise ValueError(f"{path} is not a PNG")
    return struct.unpack(">II", head[16:24])


def minimal_log(path, *, inverted: bool = False) -> str:
    """Minimal telemetry: a launch to step 300, a relaunch from 200 to 700, evals every 100."""
    lines = []
    t = 0.0
    for launch, (first, last) in enumerate([(10, 300), (210, 700)]):
        for step in range(first, last + 1, 10):
            t += 0.5
            lines.append(
                {
                    "step": step,
                    "t": t,
                    "loss": 0.7 * math.exp(-step / 300),
                    "lr": 1e-4,
                    "grad_norm": 1.0 + (step % 30) / 30,
                    "sps": 40.0 if launch == 0 else 38.0,
                }
            )
            if step % 100 == 0:
                auroc = 0.5 + 0.45 * (1 - math.exp(-step / 200))
                lines.append(
                    {
                        "step": step,
                        "eval_loss": 0.6 * math.exp(-step / 400),
                        "eval_auroc": 1 - auroc if inverted else auroc,
                        "eval_acc": 0.5 + step / 2000,
                    }
                )
    with open(path, "w") as f:
        f.writelines(json.dumps(line) + "\n" for line in lines)
    return str(path)


def trainer_state(path) -> str:
    """A Hugging Face trainer_state.json: no throughput in its log_history."""
    history = []
    for step in range(10, 201, 10):
        history.append(
            {
                "epoch": step / 100,
                "grad_norm": 0.8,
                "learning_rate": 5e-5 * (1 - step / 200),
                "loss": 0.69 - step / 1000,
                "step": step,
            }
        )
        if step % 50 == 0:
            history.append(
                {"epoch": step / 100, "eval_loss": 0.6, "eval_auroc": 0.8, "eval_runtime": 0.1, "step": step}
            )
    with open(path, "w") as f:
        json.dump({"global_step": 200, "log_history": history}, f)
    return str(path)


def test_resumed_run_two_sessions(resumed_run):
    info = plot.snapshot(str(resumed_run))
    assert info["path"] == os.path.join(str(resumed_run), "snapshot.png")
    assert info["panels"] == ALL_PANELS
    assert info["sessions"] == 2
    assert info["findings"] == []
    assert png_size(info["path"]) == tuple(info["size"]) == plot.figure_size(5) == (800, 1032)
    assert [n for n in os.listdir(resumed_run) if ".tmp" in n] == []


def test_exploded_run_marks_the_watchdogs_finding(exploded_run, tmp_path):
    out = tmp_path / "x.png"
    info = plot.snapshot(str(exploded_run), str(out))
    assert info["path"] == str(out) and png_size(out) == (800, 1032)
    replay = check(str(exploded_run))
    # (the plot marks the records' findings; metric_stuck of a log of unknown length is judged at its end)
    judged = [f for f in replay.findings if f.kind != "metric_stuck"]
    assert [f["kind"] for f in info["findings"]] == [f.kind for f in judged] == ["grad_explosion"]
    assert info["findings"][0]["step"] == replay.findings[0].step == 130


def test_minimal_telemetry_relaunch_and_inverted_metric(tmp_path):
    log = minimal_log(tmp_path / "train.jsonl", inverted=True)
    info = plot.snapshot(log)
    assert info["path"] == str(tmp_path / "snapshot.png")
    assert info["panels"] == ALL_PANELS
    assert info["sessions"] == 2
    judged = {(f.kind, f.step) for f in check(log).findings if f.kind != "metric_stuck"}  # (judged at the end)
    assert {(f["kind"], f["step"]) for f in info["findings"]} == judged
    assert ("inverted_metric", 500) in {(f["kind"], f["step"]) for f in info["findings"]}
    assert png_size(info["path"]) == (800, 1032)


def test_trainer_state_has_no_throughput_panel(tmp_path):
    path = trainer_state(tmp_path / "trainer_state.json")
    info = plot.snapshot(path)
    assert info["panels"] == ["loss", "lr", "grad_norm", "eval_metrics"]
    assert png_size(info["path"]) == plot.figure_size(4) == (800, 856)
    # eval_runtime is a timing, not a metric: it stays out of the metrics panel
    legends, _ = _legends(plot.load_run(path, Options()), Options())
    assert legends["eval metrics"] == ["auroc", "chance 0.5", "--metric-min 0.7"]


def test_a_directory_with_only_trainer_state(tmp_path):
    trainer_state(tmp_path / "trainer_state.json")
    info = plot.snapshot(str(tmp_path), str(tmp_path / "p.png"))
    assert info["panels"] == ["loss", "lr", "grad_norm", "eval_metrics"]


def _legends(view, opts):
    fig = plot._draw(view, plot._panels(view), opts)
    out = {}
    for ax in fig.axes:
        legend = ax.get_legend()
        out[ax.get_title(loc="left")] = [t.get_text() for t in legend.get_texts()] if legend else []
    texts = [t.get_text() for ax in fig.axes for t in ax.texts] + [t.get_text() for t in fig.texts]
    return out, texts


def test_thresholds_and_markers_are_drawn(exploded_run):
    opts = Options(grad_max=20.0, metric_min=0.8)
    legends, texts = _legends(plot.load_run(str(exploded_run), opts), opts)
    assert legends["gradient norm (pre-clip, log scale)"] == ["max", "mean", "--grad-max 20", "--grad-min 0.001"]
    assert legends["eval metrics"] == ["auroc", "accuracy", "chance 0.5", "--metric-min 0.8"]
    assert legends["throughput (tokens/s of training time)"][1] == "drop below (1-0.25)×baseline"
    assert "grad_explosion @ 130" in texts
    assert any(t.startswith("check: FINDING grad_explosion step=130: gradient norm ") for t in texts)


def test_throughput_baseline_is_the_rules(tmp_path):
    # minimal telemetry: the relaunch (train steps 210..700, sps 38) resumes the run, whose baseline
    # (sps 40 over its first 200 steps) it inherits; the picture shows the same number
    log = minimal_log(tmp_path / "m.jsonl")
    legends, _ = _legends(plot.load_run(log, Options()), Options())
    assert legends["throughput (the log's sps)"] == ["baseline 40", "drop below (1-0.25)×baseline"]
    legends, _ = _legends(plot.load_run(log, Options(throughput_baseline_steps=1000)), Options())
    assert legends["throughput (the log's sps)"][0] == "baseline so far 38"


def test_watchdog_verdict_is_shown(resumed_run, tmp_path):
    verdict = {"verdict": "anomaly", "kind": "stall", "step": 150, "message": "no new record for 360 s", "time": 1.0}
    (tmp_path / "run").mkdir()
    for name in ("run.json", "metrics.jsonl"):
        (tmp_path / "run" / name).write_bytes((resumed_run / name).read_bytes())
    (tmp_path / "run" / "watchdog.json").write_text(json.dumps(verdict))
    view = plot.load_run(str(tmp_path / "run"), Options())
    _, texts = _legends(view, Options())
    assert "watchdog: ANOMALY stall step=150: no new record for 360 s" in texts
    assert "stall @ 150" in texts
    assert "resume 100" in texts
    # the resumed session (steps 100..160) never passed start + 200: its baseline is not fixed yet
    legends, _ = _legends(view, Options())
    assert legends["throughput (tokens/s of training time)"][0].startswith("baseline so far ")


def test_options_reach_the_rules(resumed_run, tmp_path, capsys):
    assert main(["plot", str(resumed_run), "-o", str(tmp_path / "a.png"), "--grad-max", "0.01", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert {f["kind"] for f in info["findings"]} == {"grad_explosion"}
    assert info["sessions"] == 2 and info["panels"] == ALL_PANELS


def test_cli_prints_the_path(tmp_path, capsys):
    log = minimal_log(tmp_path / "m.jsonl")
    assert main(["plot", log, "-o", str(tmp_path / "m.png")]) == 0
    assert capsys.readouterr().out == f"{tmp_path / 'm.png'}\n"


@pytest.mark.parametrize(
    "setup, argv, code, message",
    [
        ("none", ["plot", "{d}/nothere"], 2, "plot: {d}/nothere: no such run directory or log"),
        (
            "empty",
            ["plot", "{d}/empty.jsonl"],
            1,
            "Invalid training run: {d}/empty.jsonl: no train or eval records to plot",
        ),
        (
            "other",
            ["plot", "{d}/other.jsonl"],
            1,
            "Invalid training run: {d}/other.jsonl: no train or eval records to plot",
        ),
        (
            "minimal",
            ["plot", "{d}/m.jsonl", "-o", "{d}/no/such/dir/p.png"],
            2,
            "plot: -o {d}/no/such/dir/p.png: directory {d}/no/such/dir does not exist",
        ),
        ("minimal", ["plot", "{d}/m.jsonl", "--grad-max", "-1"], 2, "watch.grad_max must be a number > 0, got -1"),
    ],
)
def test_errors(tmp_path, capsys, setup, argv, code, message):
    d = str(tmp_path)
    if setup == "empty":
        (tmp_path / "empty.jsonl").write_text("\n")
    elif setup == "other":
        (tmp_path / "other.jsonl").write_text('{"step": 3, "epoch": 1}\n')
    elif setup == "minimal":
        minimal_log(tmp_path / "m.jsonl")
    assert main([a.format(d=d) for a in argv]) == code
    assert capsys.readouterr().err == message.format(d=d) + "\n"
    assert [n for n in os.listdir(tmp_path) if n.endswith(".png") or ".tmp" in n] == []


def test_missing_matplotlib_names_the_extra(tmp_path, capsys, monkeypatch):
    log = minimal_log(tmp_path / "m.jsonl")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    assert main(["plot", log]) == 1
    assert capsys.readouterr().err == "runwatch: plot needs matplotlib: pip install 'runwatch[plot]'\n"
    assert not (tmp_path / "snapshot.png").exists()


def test_replot_replaces_the_picture_atomically(tmp_path):
    log = minimal_log(tmp_path / "m.jsonl")
    out = tmp_path / "p.png"
    out.write_bytes(b"old")
    plot.snapshot(log, str(out))
    assert png_size(out) == (800, 1032)
    assert sorted(os.listdir(tmp_path)) == ["m.jsonl", "p.png"]
