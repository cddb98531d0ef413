"""goodput.py on constructed logs: the path to the final step, the rollback checkpoint, the figures;
resume.py: what a relaunched script resumes from."""

from __future__ import annotations

import json
import os

import pytest

from runwatch.errors import ConfigError
from runwatch.goodput import checkpoints, goodput, path, rollback_target
from runwatch.records import load_sessions
from runwatch.resume import Resume, parse_skip_steps, resume_checkpoint

RUN_ID = "r-test"


def _write_run(run_dir, sessions):
    """sessions: [(start_step, t0, events)], events: ("train", updates, time) / ("ckpt", time) /
    ("end", reason, time). Steps, tokens and elapsed times follow the schema's identities; each
    checkpoint's file is created."""
    os.makedirs(run_dir, exist_ok=True)
    manifest = {"schema_version": 1, "run_id": RUN_ID, "created_at": "2026-01-01T00:00:00Z", "sessions": []}
    lines = []
    for i, (start, t0, events) in enumerate(sessions):
        sid = f"s-{i + 1}"
        manifest["sessions"].append(
            {
                "session_id": sid,
                "started_at": "2026-01-01T00:00:00Z",
                "start": {"step": start, "tokens": start * 4, "skipped": 0},
                "recipe": {"batch_size": 1, "seq_len": 4, "gradient_accumulation_steps": 1, "qk_clip_threshold": None},
                "optimizers": [{"algorithm": "adamw"}],
                "hardware": {},
            }
        )
        step, tokens = start, 0
        for ev in events:
            t = ev[-1]
            base = {
                "run_id": RUN_ID,
                "session_id": sid,
                "step": step,
                "time": t,
                "session": {
                    "elapsed_seconds": t - t0,
                    "tokens": tokens,
                    "tokens_per_second": None,
                    "profiling_seconds": 0.0,
                },
            }
            if ev[0] == "train":
                u = ev[1]
                step += u
                tokens += 4 * u
                base.update(
                    step=step,
                    event="train",
                    updates=u,
                    skipped=0,
                    attempted=u,
                    tokens=4 * u,
                    train_seconds=0.5,
                    loss=1.0,
                    lr=0.001,
                    grad_norm={"mean": 1.0, "max": 1.0},
                    nonfinite_grad_norms=0,
                    grad_clipped_fraction=0.0,
                )
                base["session"]["tokens"] = tokens
            elif ev[0] == "ckpt":
                base.update(event="checkpoint", path=f"{run_dir}/ckpt-{step}", seconds=0.1, verified=True)
                open(base["path"], "w").close()
            else:
                base.update(
                    event="session_end",
                    reason=ev[1],
                    error=None,
                    totals={"tokens": (start + step - start) * 4, "skipped": 0},
                )
                base["totals"]["tokens"] = start * 4 + tokens
            lines.append(json.dumps(base))
    with open(os.path.join(run_dir, "run.json"), "w") as f:
        json.dump(manifest, f)
    with open(os.path.join(run_dir, "metrics.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return load_sessions(str(run_dir))


def _windows(n, t0, every=10.0, size=10):
    return [("train", size, t0 + every * (k + 1)) for k in range(n)]


def test_crash_and_resume(tmp_path):
    # s1: steps 0-30 (a window a 10 s), a checkpoint at 20 (t=1020.5), killed after 30.
    # s2: resumes from 20 at t=1040, reaches 40 at t=1060, ends normally.
    s1 = _windows(2, 1000) + [("ckpt", 1020.5), ("train", 10, 1030)]
    s2 = _windows(2, 1040) + [("end", "normal", 1060)]
    sessions = _write_run(tmp_path / "run", [(0, 1000, s1), (20, 1040, s2)])
    assert [(s.key, upto) for s, upto in path(sessions)] == [("s-1", 20), ("s-2", 40)]
    g = goodput(sessions, restarts=1)
    # lost: the 0.1 s save, the 9.5 s redone after the checkpoint, and the 10 s from the crash to s2's start
    assert g == {"steps_kept": 40, "steps_run": 50, "ratio": 0.8, "restarts": 1, "rollbacks": 0, "seconds_lost": 19.6}


def test_a_fault_free_run_loses_nothing(tmp_path):
    sessions = _write_run(tmp_path / "run", [(0, 50, _windows(3, 50) + [("end", "normal", 80)])])
    assert goodput(sessions) == {
        "steps_kept": 30,
        "steps_run": 30,
        "ratio": 1.0,
        "restarts": 0,
        "rollbacks": 0,
        "seconds_lost": 0.0,
    }


def test_a_rollback_past_a_session_leaves_its_work_and_checkpoints_off_the_path(tmp_path):
    # s1: 0-50, checkpoints at 10, 20, 40 (40 is on a branch that diverged later)
    s1 = [
        ("train", 10, 10),
        ("ckpt", 10),
        ("train", 10, 20),
        ("ckpt", 20),
        ("train", 10, 30),
        ("train", 10, 40),
        ("ckpt", 40),
        ("train", 10, 50),
        ("end", "nonfinite_loss", 50),
    ]
    # s2: rolled back to 20, runs 21-50 with no checkpoint; the window 41-50 holds the onset
    s2 = [("train", 10, 70), ("train", 10, 80), ("train", 10, 90)]
    sessions = _write_run(tmp_path / "run", [(0, 0, s1), (20, 60, s2)])
    assert [c.step for c in checkpoints(sessions)] == [10, 20]
    assert [c.step for c in checkpoints(sessions, on_path=False)] == [10, 20, 40]
    rb = rollback_target(sessions, "loss_spike", 50, 50)
    assert (rb.checkpoint.step, rb.checkpoint.session, rb.first_bad_step, rb.skip_text) == (20, "s-1", 41, "21-50")
    # s3 goes back to 10: s1 is kept to 10 only, s2 not at all
    s3 = [("train", 10, 110), ("train", 10, 120), ("train", 10, 130), ("train", 10, 140), ("end", "normal", 140)]
    sessions = _write_run(tmp_path / "run2", [(0, 0, s1), (20, 60, s2), (10, 100, s3)])
    assert [(s.key, upto) for s, upto in path(sessions)] == [("s-1", 10), ("s-3", 50)]
    g = goodput(sessions, rollbacks=2)
    assert (g["steps_kept"], g["steps_run"], g["ratio"]) == (50, 50 + 30 + 40, round(50 / 120, 4))
    assert g["seconds_lost"] == 140 - 10 - 40  # all but s1's first 10 s and s3's 40 s


@pytest.mark.parametrize(
    "events, kind, step, onset, expected",
    [
        # a session_end nonfinite_loss at 30: the update after 30 made the NaN; the checkpoint at 30 is before it
        (
            [
                ("train", 10, 10),
                ("train", 10, 20),
                ("ckpt", 21),
                ("train", 10, 30),
                ("ckpt", 31),
                ("end", "nonfinite_loss", 32),
            ],
            "nonfinite_loss",
            30,
            30,
            (30, 31, "31-31"),
        ),
        # a streak whose first window (21-30) holds the onset: the checkpoint at 20, not the one at 30
        (
            [("train", 10, 10), ("train", 10, 20), ("ckpt", 21), ("train", 10, 30), ("ckpt", 31), ("train", 10, 40)],
            "grad_explosion",
            40,
            30,
            (20, 21, "21-40"),
        ),
        # nothing before the window that holds the onset
        ([("train", 10, 10), ("ckpt", 11), ("train", 10, 20)], "nonfinite_grad", 20, 10, None),
    ],
)
def test_rollback_target(tmp_path, events, kind, step, onset, expected):
    sessions = _write_run(tmp_path / "run", [(0, 0, events)])
    rb = rollback_target(sessions, kind, step, onset)
    assert (None if rb is None else (rb.checkpoint.step, rb.first_bad_step, rb.skip_text)) == expected


def test_a_checkpoint_whose_file_is_gone_is_not_chosen(tmp_path):
    sessions = _write_run(
        tmp_path / "run",
        [(0, 0, [("train", 10, 10), ("ckpt", 11), ("train", 10, 20), ("ckpt", 21), ("train", 10, 30)])],
    )
    os.unlink(tmp_path / "run" / "ckpt-20")  # only the one at 10 is still on disk
    assert rollback_target(sessions, "loss_spike", 30, 30).checkpoint.step == 10


def test_minimal_telemetry_goodput(tmp_path):
    log = tmp_path / "log.jsonl"
    rows = [{"step": s, "loss": 1.0} for s in (10, 20, 30)] + [{"step": s, "loss": 1.0} for s in (20, 30, 40)]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    g = goodput(load_sessions(str(log)))
    # the relaunch's first record counts no updates (its resume point is not in the log)
    assert (g["steps_kept"], g["steps_run"], g["seconds_lost"]) == (40, 30 + 20, None)


# --- resume_checkpoint ----------------------------------------------------------------------------


@pytest.fixture
def clean_env(monkeypatch):
    for key in ("RUNWATCH_RESUME_FROM", "RUNWATCH_ROLLBACK", "RUNWATCH_SKIP_STEPS", "RUNWATCH_RUN_DIR"):
        monkeypatch.delenv(key, raising=False)
    return monkeypatch


def test_resume_from_the_environment(clean_env):
    clean_env.setenv("RUNWATCH_RESUME_FROM", "/ckpt/step-200")
    clean_env.setenv("RUNWATCH_ROLLBACK", "2")
    clean_env.setenv("RUNWATCH_SKIP_STEPS", "201-230")
    assert resume_checkpoint() == Resume("/ckpt/step-200", range(201, 231), 2)


def test_resume_from_the_latest_verified_checkpoint(tmp_path, clean_env):
    run = tmp_path / "run"
    _write_run(run, [(0, 0, [("train", 10, 10), ("ckpt", 11), ("train", 10, 20), ("ckpt", 21)])])
    assert resume_checkpoint(run_dir=run) == Resume(f"{run}/ckpt-20", None, 0)
    clean_env.setenv("RUNWATCH_RUN_DIR", str(run))
    assert resume_checkpoint().path == f"{run}/ckpt-20"
    assert resume_checkpoint("fallback", run_dir=tmp_path / "empty") == Resume("fallback", None, 0)


def test_an_unverified_checkpoint_is_taken_only_when_its_file_exists(tmp_path, clean_env):
    run = tmp_path / "run"
    _write_run(run, [(0, 0, [("train", 10, 10), ("ckpt", 11), ("train", 10, 20), ("ckpt", 21)])])
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines = [line.replace('"verified": true', '"verified": false') for line in lines]
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    assert resume_checkpoint("d", run_dir=run).path == f"{run}/ckpt-20"
    os.unlink(run / "ckpt-20")
    assert resume_checkpoint("d", run_dir=run).path == f"{run}/ckpt-10"
    os.unlink(run / "ckpt-10")
    assert resume_checkpoint("d", run_dir=run).path == "d"


@pytest.mark.parametrize("text, expected", [("", None), ("5-5", range(5, 6)), ("1-30", range(1, 31))])
def test_parse_skip_steps(text, expected):
    assert parse_skip_steps(text) == expected


@pytest.mark.parametrize("text", ["0-5", "9-3", "x", "5", "-5"])
def test_parse_skip_steps_rejects(text):
    with pytest.raises(ConfigError, match=rf"^RUNWATCH_SKIP_STEPS must be <a>-<b> with 1 <= a <= b, got '{text}'$"):
        parse_skip_steps(text)


@pytest.mark.parametrize("module", ["runwatch.integrations.hf", "runwatch.integrations.lightning"])
def test_callbacks_resume_auto(tmp_path, clean_env, module):
    mod = pytest.importorskip(module)
    run = tmp_path / "run"
    _write_run(run, [(0, 0, [("train", 10, 10), ("ckpt", 11)])])
    assert mod.RunwatchCallback(run).resume_from is None
    assert mod.RunwatchCallback(run, resume="auto").resume_from == f"{run}/ckpt-10"
    clean_env.setenv("RUNWATCH_RESUME_FROM", "/ckpt/checkpoint-5")
    assert mod.RunwatchCallback(run, resume="auto").resume_from == "/ckpt/checkpoint-5"
    with pytest.raises(ValueError, match=r"^RunwatchCallback.resume must be 'auto' or None, got 'yes'$"):
        mod.RunwatchCallback(run, resume="yes")
