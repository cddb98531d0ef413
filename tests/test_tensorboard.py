"""`runwatch tensorboard`: exports read back with TensorBoard's own EventAccumulator.

The expected series are computed here straight from the log's JSON (not through runwatch's
parser), so a tag, step, value or wall time that the export gets wrong fails the test.
"""

from __future__ import annotations

import json
import math
import os

import pytest

pytest.importorskip("tensorboard", reason="runwatch[tensorboard] is not installed")

import numpy as np  # noqa: E402  (a dependency of tensorboard)
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

from runwatch.cli import main  # noqa: E402
from runwatch.logger.metrics import RunLogger  # noqa: E402
from runwatch.views import tensorboard as tb  # noqa: E402

RECIPE = {"batch_size": 4, "seq_len": 8, "gradient_accumulation_steps": 2, "qk_clip_threshold": 100.0}


def _log_steps(log: RunLogger, first: int, last: int) -> dict | None:
    state = None
    for step in range(first, last + 1):
        log.step(
            loss=1.0 / step,
            lr=1e-3 * step / 100,
            grad_norm=0.5 + step % 7,
            clipped=step % 3 == 0,
            skipped=step % 17 == 0,
            qk_observed=8,
            qk_clipped=step % 4,
            qk_max_logit=90.0 + step % 20,
        )
        if step % 20 == 0:
            log.val(loss=0.9 / step, metrics={"auroc": min(0.99, 0.5 + step / 200), "accuracy": 0.6})
            log.checkpoint(f"ckpt/{step}.pt", seconds=0.25, bytes=1000 + step, verified=True)
            if step == 40:
                state = log.state_dict()
    return state


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A real RunLogger run of two sessions: the second resumes from the state saved at step 40."""
    path = str(tmp_path_factory.mktemp("tb") / "run")
    with RunLogger(path, recipe=RECIPE, hardware={}, window=5) as log:
        state = _log_steps(log, 1, 60)
    with RunLogger(path, recipe=RECIPE, hardware={}, window=5, resume_from=state) as log:
        _log_steps(log, state["step"] + 1, 100)
    return path


def expected_v1(run_dir: str) -> dict[str, dict[str, list]]:
    """session_id -> tag -> [(step, value, wall_time)], from metrics.jsonl by hand."""
    out: dict[str, dict[str, list]] = {}
    memory_steps: dict[str, int] = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            tags = out.setdefault(r["session_id"], {})
            step, t = r["step"], r["time"]

            def put(tag, value):
                tags.setdefault(tag, []).append((step, value, t))

            if r["event"] == "train":
                put("train/loss", r["loss"])
                put("train/lr", r["lr"])
                put("train/grad_norm_mean", r["grad_norm"]["mean"])
                put("train/grad_norm_max", r["grad_norm"]["max"])
                put("train/tokens_per_second", r["tokens"] / r["train_seconds"])
                put("train/grad_clipped_fraction", r["grad_clipped_fraction"])
                put("train/skipped", r["skipped"])
                put("train/nonfinite_grad_norms", r["nonfinite_grad_norms"])
                put("train/qk_clip_max_logit", r["qk_clip"]["max_logit"])
                put(
                    "train/qk_clip_clipped_fraction",
                    r["qk_clip"]["clipped_head_updates"] / r["qk_clip"]["observed_head_updates"],
                )
                put("session/tokens", r["session"]["tokens"])
                put("session/tokens_per_second", r["session"]["tokens_per_second"])
                put("session/elapsed_seconds", r["session"]["elapsed_seconds"])
            elif r["event"] == "val":
                put("val/loss", r["loss"])
                for name, value in r["metrics"].items():
                    put(f"val/{name}", value)
            elif r["event"] == "checkpoint":
                put("checkpoint/seconds", r["seconds"])
                put("checkpoint/bytes", r["bytes"])
            # memory: one point a step, from the step's first record that has it
            if r.get("memory") and memory_steps.get(r["session_id"]) != step:
                memory_steps[r["session_id"]] = step
                for name, value in r["memory"].items():
                    put(f"memory/{name}", value)
    return out


def read_back(run_path: str) -> dict[str, list]:
    """tag -> [(step, value, wall_time)] as TensorBoard's own reader sees the run."""
    acc = EventAccumulator(run_path, size_guidance={"scalars": 0})  # 0: keep every point
    acc.Reload()
    assert acc.Tags()["tensors"] == []
    return {tag: [(e.step, e.value, e.wall_time) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def assert_same(got: dict[str, list], want: dict[str, list]) -> None:
    assert sorted(got) == sorted(want)
    for tag in want:
        g, w = got[tag], want[tag]
        assert [s for s, _, _ in g] == [s for s, _, _ in w], tag
        # TensorBoard stores scalars as float32
        for (_, gv, gt), (_, wv, wt) in zip(g, w):
            assert (math.isnan(gv) and math.isnan(wv)) or gv == float(np.float32(wv)), (tag, gv, wv)
            assert gt == wt, tag


def events_files(logdir: str) -> list[str]:
    return sorted(
        os.path.relpath(os.path.join(d, n), logdir)
        for d, _, names in os.walk(logdir)
        for n in names
        if n.startswith("events.out.tfevents.")
    )


def test_schema_v1_two_sessions(run_dir):
    info = tb.export(run_dir)
    logdir = os.path.join(run_dir, "tensorboard")
    assert info["logdir"] == logdir and info["invalid_records"] == 0
    with open(os.path.join(run_dir, "run.json")) as f:
        manifest = json.load(f)
    sids = [s["session_id"] for s in manifest["sessions"]]
    assert [r["session"] for r in info["runs"]] == [r["name"] for r in info["runs"]] == sids
    want = expected_v1(run_dir)
    for sid in sids:
        assert_same(read_back(os.path.join(logdir, sid)), want[sid])
    # the sessions overlap: the second resumed from a checkpoint before the first one's end
    start = manifest["sessions"][1]["start"]["step"]
    assert read_back(os.path.join(logdir, sids[0]))["train/loss"][-1][0] > start
    assert start < read_back(os.path.join(logdir, sids[1]))["train/loss"][0][0] <= start + 5
    assert len(events_files(logdir)) == 2


def test_reexport_replaces_the_previous_one(run_dir, tmp_path):
    logdir = str(tmp_path / "tb")
    first = tb.export(run_dir, logdir)
    files = events_files(logdir)
    second = tb.export(run_dir, logdir)
    assert second == first
    assert len(events_files(logdir)) == 2 and events_files(logdir) != files  # new files, old ones gone
    want = expected_v1(run_dir)
    for r in second["runs"]:
        assert_same(read_back(os.path.join(logdir, r["name"])), want[r["session"]])
    assert sorted(os.listdir(tmp_path)) == ["tb"]  # no temp or old directories left


def test_refuses_a_directory_it_did_not_write(run_dir, tmp_path, capsys):
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    assert main(["tensorboard", run_dir, "--logdir", str(other)]) == 2
    assert capsys.readouterr().err == (
        f"tensorboard: --logdir {other} holds files that runwatch did not export (no runwatch-export.json); "
        "choose a new or empty directory\n"
    )
    assert os.listdir(other) == ["notes.txt"]


def minimal_log(path) -> str:
    lines = [
        {"step": 10, "t": 1.5, "loss": 0.69, "lr": 1e-4, "grad_norm": 1.1, "sps": 40.2},
        {"step": 20, "t": 3.0, "loss": 0.60, "lr": 1e-4, "grad_norm": 0.9, "sps": 41.0},
        {"step": 20, "eval_loss": 0.62, "eval_auroc": 0.71, "eval_acc": 0.66},
        {"step": 10, "t": 0.5, "loss": 0.70, "lr": 2e-4, "grad_norm": 1.3, "sps": 39.0},  # relaunch
        {"step": 20, "t": 2.0, "loss": None, "lr": 2e-4, "grad_norm": 1.2, "sps": 39.5},  # null loss: NaN
    ]
    with open(path, "w") as f:
        f.writelines(json.dumps(line) + "\n" for line in lines)
        f.write("not json\n")
    return str(path)


def test_minimal_telemetry(tmp_path, capsys):
    log = minimal_log(tmp_path / "train.jsonl")
    assert main(["tensorboard", log, "--json"]) == 0
    out = capsys.readouterr()
    assert out.err == "runwatch tensorboard: left out 1 invalid records (runwatch check names them)\n"
    info = json.loads(out.out)
    assert [r["name"] for r in info["runs"]] == ["session-1", "session-2"]
    assert info["invalid_records"] == 1
    first = read_back(str(tmp_path / "tensorboard" / "session-1"))
    assert_same(
        first,
        {
            "train/loss": [(10, 0.69, 1.5), (20, 0.60, 3.0)],
            "train/lr": [(10, 1e-4, 1.5), (20, 1e-4, 3.0)],
            "train/grad_norm": [(10, 1.1, 1.5), (20, 0.9, 3.0)],
            "train/sps": [(10, 40.2, 1.5), (20, 41.0, 3.0)],
            # an eval line without a time of its own takes its session's last one
            "val/loss": [(20, 0.62, 3.0)],
            "val/auroc": [(20, 0.71, 3.0)],
            "val/acc": [(20, 0.66, 3.0)],
        },
    )
    second = read_back(str(tmp_path / "tensorboard" / "session-2"))
    assert [v for _, v, _ in second["train/loss"]][0] == pytest.approx(0.70)
    assert math.isnan(second["train/loss"][1][1])


def test_mapped_keys(tmp_path):
    path = tmp_path / "other.jsonl"
    path.write_text('{"iter": 5, "train/loss": 0.5}\n{"iter": 10, "train/loss": 0.25, "val/loss": 0.3}\n')
    info = tb.export(str(path), maps={"step": "iter", "loss": "train/loss", "eval_loss": "val/loss"})
    got = read_back(os.path.join(info["logdir"], "session-1"))
    assert_same(got, {"train/loss": [(5, 0.5, 0.0), (10, 0.25, 0.0)], "val/loss": [(10, 0.3, 0.0)]})


def test_a_minimal_log_with_an_event_key_of_its_own(tmp_path):
    """Which dialect a log speaks is the parser's answer, not a key's: a minimal-telemetry line that
    happens to carry `event` exports as minimal telemetry (it once ended in an assertion)."""
    path = tmp_path / "train.jsonl"
    path.write_text(
        '{"step": 1, "loss": 0.5, "event": "step", "sps": 3.0}\n{"step": 2, "loss": 0.4, "event": "step"}\n'
    )
    info = tb.export(str(path))
    got = read_back(os.path.join(info["logdir"], "session-1"))
    assert_same(got, {"train/loss": [(1, 0.5, 0.0), (2, 0.4, 0.0)], "train/sps": [(1, 3.0, 0.0)]})


def test_trainer_state(tmp_path, capsys):
    history = [
        {"epoch": 0.5, "grad_norm": 0.8, "learning_rate": 5e-5, "loss": 0.69, "step": 10},
        {"epoch": 1.0, "eval_loss": 0.6, "eval_auroc": 0.8, "eval_runtime": 0.1, "step": 20},
    ]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    assert main(["tensorboard", str(tmp_path)]) == 0
    logdir = tmp_path / "tensorboard"
    assert capsys.readouterr().out == (
        f"wrote 6 scalars in 1 runs (one a session) to {logdir}\nview: tensorboard --logdir {logdir}\n"
    )
    assert_same(
        read_back(str(logdir / "session-1")),
        {
            "train/loss": [(10, 0.69, 0.0)],
            "train/lr": [(10, 5e-5, 0.0)],
            "train/grad_norm": [(10, 0.8, 0.0)],
            "val/loss": [(20, 0.6, 0.0)],
            "val/auroc": [(20, 0.8, 0.0)],
            "val/runtime": [(20, 0.1, 0.0)],
        },
    )


@pytest.mark.parametrize(
    "setup, argv, code, message",
    [
        ("none", ["tensorboard", "{d}/nothere"], 2, "tensorboard: {d}/nothere: no such run directory or log"),
        ("empty", ["tensorboard", "{d}/e.jsonl"], 1, "Invalid training run: {d}/e.jsonl: no records to export"),
        (
            "file",
            ["tensorboard", "{d}/e.jsonl", "--logdir", "{d}/e.jsonl"],
            2,
            "tensorboard: --logdir {d}/e.jsonl is not a directory",
        ),
        (
            "empty",
            ["tensorboard", "{d}/e.jsonl", "--map", "nope=x"],
            2,
            "watch.map: 'nope' is not a minimal telemetry key (expected one of step, t, loss, lr, learning_rate, "
            "grad_norm, sps, eval_loss, FATAL or eval_<metric>)",
        ),
    ],
)
def test_errors(tmp_path, capsys, setup, argv, code, message):
    d = str(tmp_path)
    if setup in ("empty", "file"):
        (tmp_path / "e.jsonl").write_text("\n")
    assert main([a.format(d=d) for a in argv]) == code
    assert capsys.readouterr().err == message.format(d=d) + "\n"
    assert sorted(os.listdir(tmp_path)) == ([] if setup == "none" else ["e.jsonl"])


def test_missing_tensorboard_names_the_extra(tmp_path, capsys, monkeypatch):
    log = minimal_log(tmp_path / "m.jsonl")
    monkeypatch.setitem(__import__("sys").modules, "tensorboard.summary.writer.event_file_writer", None)
    assert main(["tensorboard", log]) == 1
    assert capsys.readouterr().err == (
        "runwatch: tensorboard export needs the tensorboard package: pip install 'runwatch[tensorboard]'\n"
    )
    assert not (tmp_path / "tensorboard").exists()
