"""goodput.py on constructed logs and journals: the path to the final step, the rollback checkpoint,
the figures, the wall time broken down (and `runwatch goodput`); resume.py: what a relaunched
script resumes from."""

from __future__ import annotations

import json
import math
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runwatch.cli import main
from runwatch.errors import ConfigError
from runwatch.reading.history import checkpoints, path, rollback_target
from runwatch.reading.records import load_sessions
from runwatch.reading.resume import Resume, parse_skip_steps, resume_checkpoint
from runwatch.supervising.goodput import BUCKETS, breakdown, goodput

RUN_ID = "r-test"


def _write_run(run_dir, sessions):
    """sessions: [(start_step, t0, events)], events: ("train", updates, time) / ("ckpt", time) /
    ("val", time) / ("end", reason, time). Steps, tokens and elapsed times follow the schema's identities; each
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
            elif ev[0] == "val":
                base.update(event="val", loss=0.5)
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
    assert g == {
        "steps_kept": 40,
        "steps_run": 50,
        "ratio": round(40.4 / 60, 4),  # the time ratio: productive seconds over the wall (1000..1060)
        "steps_ratio": 0.8,
        "restarts": 1,
        "rollbacks": 0,
        "seconds_lost": 19.6,
        "wall_seconds": 60.0,
        "productive_seconds": 40.4,
    }


def test_a_fault_free_run_loses_nothing(tmp_path):
    sessions = _write_run(tmp_path / "run", [(0, 50, _windows(3, 50) + [("end", "normal", 80)])])
    assert goodput(sessions) == {
        "steps_kept": 30,
        "steps_run": 30,
        "ratio": 1.0,
        "steps_ratio": 1.0,
        "restarts": 0,
        "rollbacks": 0,
        "seconds_lost": 0.0,
        "wall_seconds": 30.0,
        "productive_seconds": 30.0,
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
    assert (g["steps_kept"], g["steps_run"], g["steps_ratio"]) == (50, 50 + 30 + 40, round(50 / 120, 4))
    assert g["seconds_lost"] == 140 - 10 - 40  # all but s1's first 10 s and s3's 40 s
    # the time ratio: productive seconds over the wall's
    assert (g["productive_seconds"], g["wall_seconds"], g["ratio"]) == (40.0, 130.0, round(40 / 130, 4))


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


# --- the wall time broken down --------------------------------------------------------------------


def _rec(event, t, attempt, **fields):
    """A journal record as the supervisor writes it (the fields the breakdown reads)."""
    return {"time": t, "event": event, "attempt": attempt, "kind": None, "first_launch": 995.0, **fields}


def _ms(split):
    """Productive time and buckets in milliseconds; and the wall time."""
    parts = [split["productive_seconds"], *split["buckets"].values()]
    return sum(round(x * 1000) for x in parts), round(split["wall_seconds"] * 1000)


def test_breakdown_of_a_crash_and_a_relaunch(tmp_path):
    s1 = [("train", 10, 1010), ("train", 10, 1020), ("ckpt", 1020.5), ("train", 10, 1030)]
    s2 = _windows(2, 1040) + [("end", "normal", 1060)]
    sessions = _write_run(tmp_path / "run", [(0, 1000, s1), (20, 1040, s2)])
    journal = [
        _rec("launch", 995.0, 1, launched_at=995.0),
        _rec("verdict", 1033.0, 1, kind="process_exit", step=30, onset=30),
        _rec("relaunch", 1038.0, 2, launched_at=1038.0, backoff_seconds=2.0),
        _rec("verdict", 1061.0, 2, step=40),
        _rec("done", 1062.0, 2),
    ]
    split = breakdown(sessions, journal)
    # launch 995 -> s1 opens at 1000 (startup 5); 20 s kept, 0.4 s more before the save, the 0.1 s
    # save, 9.5 s redone past the checkpoint; the crash seen at 1033 (detection 3); stopping to
    # 1036, back-off 2 s; s2 opens at 1040 (startup 2), 20 s kept; done at 1061, the end at 1062
    assert split == {
        "wall_seconds": 67.0,
        "productive_seconds": 40.4,
        "ratio": round(40.4 / 67, 4),
        "buckets": {
            "startup": 7.0,
            "checkpoint": 0.1,
            "eval": 0.0,
            "redone": 9.5,
            "detection": 3.0,
            "stopping": 5.0,
            "backoff": 2.0,
            "preempted": 0.0,
        },
        "advice": {
            "checkpoint_seconds": 0.1,
            "mtbi_seconds": 65.0,
            "interval_seconds": round(math.sqrt(2 * 0.1 * 65), 3),
            "saved_seconds": None,  # one checkpoint: no interval was used
            "used_interval_seconds": None,
            "interruptions": 1,
        },
    }
    assert goodput(sessions, journal, restarts=1)["seconds_lost"] == round(67 - 40.4, 3)


def test_breakdown_of_a_preemption_and_the_next_allocation(tmp_path):
    s1 = [("train", 10, 1010), ("val", 1012), ("train", 10, 1020), ("ckpt", 1020.5), ("train", 10, 1030)]
    s1 += [("end", "interrupted", 1033)]
    s2 = [("train", 10, 1115), ("train", 10, 1125), ("end", "normal", 1130)]
    sessions = _write_run(tmp_path / "run", [(0, 1000, s1), (20, 1105, s2)])
    journal = [
        _rec("launch", 995.0, 1, launched_at=995.0),
        _rec("stop", 1033.5, 1),
        _rec("preempted", 1034.0, 1, kind="interrupted", signal="SIGUSR1", signal_time=1032.0),
        _rec("launch", 1100.0, 2, launched_at=1100.0, continued=True),
        _rec("verdict", 1131.0, 2, step=40),
        _rec("done", 1132.0, 2),
    ]
    split = breakdown(sessions, journal)
    assert split["wall_seconds"] == 137.0
    assert split["buckets"] == {
        "startup": 10.0,  # 995 -> 1000, 1100 -> 1105
        "checkpoint": 0.1,
        "eval": 2.0,  # 1010 -> 1012
        "redone": 11.5,  # past the checkpoint at 20 (9.5), and the last record to the signal (2)
        "detection": 0.0,
        "stopping": 2.0,
        "backoff": 0.0,
        "preempted": 68.0,  # the signal at 1032 to the next allocation's launch at 1100
    }
    assert split["productive_seconds"] == 43.4
    assert split["advice"]["interruptions"] == 1 and split["advice"]["mtbi_seconds"] == 137.0 - 68.0


def test_breakdown_detection_runs_from_the_onsets_record(tmp_path):
    s1 = [("train", 10, 1010), ("ckpt", 1010.2), ("train", 10, 1020), ("train", 10, 1030), ("train", 10, 1040)]
    sessions = _write_run(tmp_path / "run", [(0, 1000, s1)])
    journal = [
        _rec("launch", 1000.0, 1, launched_at=1000.0),
        _rec("verdict", 1041.0, 1, kind="loss_spike", step=40, onset=30),
        _rec("gave_up", 1042.0, 1, kind="loss_spike"),
    ]
    split = breakdown(sessions, journal)
    # the record at the onset (30) came at 1030: from there to the verdict, 11 s of detection
    assert split["buckets"]["detection"] == 11.0 and split["buckets"]["stopping"] == 1.0
    # the save took its 0.1 s at the end of the 0.2 s after the record at 10; the rest is training
    assert split["productive_seconds"] == 29.9 and split["buckets"]["checkpoint"] == 0.1
    assert split["buckets"]["startup"] == 5.0  # from the first launch (995) to the session's start


def test_an_attempt_that_ended_without_a_verdict_yet_waits_in_detection(tmp_path, capsys):
    run = tmp_path / "run"
    _write_run(run, [(0, 1000, [("train", 10, 1010), ("train", 10, 1020)])])
    journal = [
        _rec("launch", 1000.0, 1, pid=4242, launched_at=1000.0, first_launch=1000.0),
        _rec("heartbeat_failed", 1030.0, 1, pid=4242, first_launch=1000.0),
    ]
    (run / "supervise.jsonl").write_text("".join(json.dumps(r) + "\n" for r in journal))
    (run / "exit.json").write_text(json.dumps({"pid": 4242, "status": 1, "signal": None, "time": 1024.0}))
    assert main(["goodput", str(run), "--json"]) == 0
    split = json.loads(capsys.readouterr().out)
    # trained to 1020, ran unlogged until its exit at 1024, then 6 s with no verdict yet
    assert split["productive_seconds"] == 24.0 and split["buckets"]["detection"] == 6.0
    assert split["wall_seconds"] == 30.0


def test_breakdown_of_a_log_without_times_splits_training_by_steps(tmp_path):
    log = tmp_path / "run" / "metrics.jsonl"
    log.parent.mkdir()
    rows = [{"step": s, "loss": 1.0} for s in (10, 20, 30)] + [{"step": s, "loss": 1.0} for s in (20, 30, 40)]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    journal = [
        _rec("launch", 1000.0, 1, first_launch=1000.0),
        _rec("verdict", 1010.0, 1, kind="process_exit", step=30, onset=30, first_launch=1000.0),
        _rec("relaunch", 1012.0, 2, backoff_seconds=1.0, first_launch=1000.0),
        _rec("verdict", 1030.0, 2, step=40, first_launch=1000.0),
        _rec("done", 1031.0, 2, first_launch=1000.0),
    ]
    split = breakdown(load_sessions(str(log)), journal)
    # 40 steps kept of 50 run: each attempt's time from launch to verdict is 80% productive
    assert split["productive_seconds"] == 22.4 and split["buckets"]["redone"] == 5.6
    assert split["buckets"]["stopping"] == 2.0 and split["buckets"]["backoff"] == 1.0
    assert _ms(split)[0] == _ms(split)[1] == 31000


def test_the_advice_compares_the_used_interval_with_young_daly(tmp_path):
    # a window closing 2 s before each checkpoint, one every 100 s, each save taking 2 s
    events = [ev for k in range(1, 10) for ev in (("train", 10, 1000 + 100 * k - 2), ("ckpt", 1000 + 100 * k))]
    _write_run(tmp_path / "run", [(0, 1000, events)])
    log = tmp_path / "run" / "metrics.jsonl"
    log.write_text(log.read_text().replace('"seconds": 0.1', '"seconds": 2.0'))
    sessions = load_sessions(str(tmp_path / "run"))
    # one interruption (a stall) in 1000 s of uptime
    journal = [
        _rec("launch", 1000.0, 1, launched_at=1000.0, first_launch=1000.0),
        _rec("verdict", 1950.0, 1, kind="stall", step=90, onset=90, first_launch=1000.0),
        _rec("gave_up", 2000.0, 1, first_launch=1000.0),
    ]
    adv = breakdown(sessions, journal)["advice"]
    assert adv["checkpoint_seconds"] == 2.0 and adv["used_interval_seconds"] == 100.0
    assert adv["interruptions"] == 1 and adv["mtbi_seconds"] == 1000.0
    advised = math.sqrt(2 * 2.0 * 1000.0)  # 63.2 s
    assert adv["interval_seconds"] == round(advised, 3)

    def waste(t):  # the saves, and half an interval redone at each interruption
        return 1000.0 / t * 2.0 + 1 * t / 2

    assert adv["saved_seconds"] == round(waste(100.0) - waste(advised), 3)


_times = st.floats(900.0, 1300.0, allow_nan=False)
_events = st.sampled_from(
    ["launch", "relaunch", "rollback", "verdict", "stop", "preempted", "done", "gave_up", "notify_failed"]
)
_journal = st.lists(
    st.fixed_dictionaries(
        {"event": _events, "time": _times},
        optional={
            "launched_at": _times,
            "backoff_seconds": st.floats(0, 50, allow_nan=False),
            "kind": st.sampled_from([None, "stall", "loss_spike", "process_exit"]),
            "onset": st.integers(0, 60),
            "signal_time": _times,
            "continued": st.booleans(),
            "adopted": st.booleans(),
        },
    ),
    max_size=12,
)
_session = st.tuples(
    st.floats(900.0, 1200.0, allow_nan=False),
    st.lists(
        st.one_of(
            st.tuples(st.just("train"), st.integers(1, 20), st.floats(0.001, 30, allow_nan=False)),
            st.tuples(st.just("ckpt"), st.floats(0.001, 30, allow_nan=False)),
            st.tuples(st.just("val"), st.floats(0.001, 30, allow_nan=False)),
        ),
        max_size=8,
    ),
)


@settings(
    max_examples=int(os.environ.get("RUNWATCH_FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(journal=_journal, raw_sessions=st.lists(_session, max_size=3), with_journal=st.booleans())
def test_buckets_and_productive_time_sum_to_the_wall_time(tmp_path_factory, journal, raw_sessions, with_journal):
    """Whatever the journal and the log hold (out of order, overlapping, half missing), every
    millisecond of the wall time goes to exactly one bucket, and none is negative."""
    sessions_spec, start = [], 0
    for t0, evs in raw_sessions:
        t, out = t0, []
        for ev in evs:
            t += ev[-1]
            out.append((*ev[:-1], t))
        sessions_spec.append((start, t0, out))
        start += 5
    sessions = _write_run(tmp_path_factory.mktemp("run"), sessions_spec) if sessions_spec else []
    for rec in journal:
        rec.setdefault("first_launch", 950.0)
    split = breakdown(sessions, journal if with_journal else None)
    if split["wall_seconds"] is None:
        assert split["productive_seconds"] is None
        return
    total, wall = _ms(split)
    assert total == wall
    assert split["productive_seconds"] >= 0 and all(split["buckets"][b] >= 0 for b in BUCKETS)
    assert split["ratio"] is None or 0 <= split["ratio"] <= 1


def test_runwatch_goodput_prints_the_breakdown(tmp_path, capsys):
    s1 = [("train", 10, 1010), ("train", 10, 1020), ("ckpt", 1020.5), ("train", 10, 1030)]
    s2 = _windows(2, 1040) + [("end", "normal", 1060)]
    run = tmp_path / "run"
    sessions = _write_run(run, [(0, 1000, s1), (20, 1040, s2)])
    journal = [
        _rec(
            "launch",
            995.0,
            1,
            launched_at=995.0,
            log={"target": ".", "format": None, "pattern": [], "run": None, "map": []},
        ),
        _rec("verdict", 1033.0, 1, kind="process_exit", step=30, onset=30),
        _rec("relaunch", 1038.0, 2, launched_at=1038.0, backoff_seconds=2.0),
        _rec("verdict", 1061.0, 2, step=40),
        _rec("done", 1062.0, 2),
    ]
    (run / "supervise.jsonl").write_text("".join(json.dumps(r) + "\n" for r in journal))
    assert main(["goodput", str(run), "--json"]) == 0
    steps = {"steps_kept": 40, "steps_run": 50, "steps_ratio": 0.8}
    assert json.loads(capsys.readouterr().out) == {**breakdown(sessions, journal), **steps}
    assert main(["goodput", str(run)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "goodput 0.603: 40.4 s productive of 67.0 s wall (2 attempts, 1 interruption); steps 0.800 (40 kept of 50 run)",
        "  startup         7.0 s   10.4%",
        "  checkpoint    0.100 s    0.1%",
        "  eval          0.000 s    0.0%",
        "  redone          9.5 s   14.2%",
        "  detection       3.0 s    4.5%",
        "  stopping        5.0 s    7.5%",
        "  backoff         2.0 s    3.0%",
        "  preempted     0.000 s    0.0%",
        "checkpoint interval: every 3.6 s (Young/Daly from a 0.100 s save and 65.0 s between interruptions); "
        "used every n/a; would have saved n/a",
    ]


def test_runwatch_goodput_bad_input(tmp_path, capsys):
    assert main(["goodput", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err == f"goodput: {tmp_path / 'missing'}: no such run directory\n"
    assert main(["goodput", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"goodput: {tmp_path}: no supervise.jsonl and no log\n"


def test_a_rollback_never_goes_to_a_path_saved_again_after_the_onset(tmp_path):
    from runwatch.reading.parsing import Record, Session

    def ckpt(step, path):
        return Record("checkpoint", "s", step, f"l{step}", None, raw={"step": step, "ckpt": path})

    def train(step):
        return Record("train", "s", step, f"l{step}", None, 2.0)

    out = str(tmp_path / "out")  # nanoGPT's out_dir: every save writes out/ckpt.pt
    os.makedirs(out)
    s = Session("s", 0)
    s.records = [train(1), ckpt(10, out), train(20), ckpt(20, out), train(30)]
    # "out" was written again at 20, past the first bad step (15): it no longer holds step 10
    assert rollback_target([s], "loss_spike", 30, 15) is None
    assert rollback_target([s], "loss_spike", 30, 25).checkpoint.step == 20
    assert [c.path for c in checkpoints([s])] == [out, out]
