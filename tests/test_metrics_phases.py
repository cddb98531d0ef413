"""The logger's liveness: phases, the single process's heartbeat file, windows that close on time,
the default window from RUNWATCH_WINDOW, and arguments checked before anything is done."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from runwatch import RunLogger, summarize
from runwatch.errors import ConfigError, RunwatchError
from runwatch.files.heartbeats import parse_heartbeat, read_heartbeats
from runwatch.judging.ranks import RankMonitor, rank_status_lines
from runwatch.logger.distributed import HeartbeatWriter

RECIPE = {"batch_size": 2, "seq_len": 3, "gradient_accumulation_steps": 1}
KEYS = {"rank", "pid", "host", "step", "time", "phase", "phase_since"}


def heartbeat(run_dir) -> dict:
    with open(os.path.join(run_dir, "heartbeats", "rank-0.json"), encoding="utf-8") as f:
        return json.load(f)


def eventually(check, timeout: float = 30.0) -> bool:
    end = time.monotonic() + timeout
    while not check():
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True


def records(run_dir) -> list[dict]:
    with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


# --- phases and the heartbeat of a single process ---------------------------------------------------


def test_a_single_process_heartbeat_follows_windows_and_phases(tmp_path):
    d = tmp_path / "run"
    before = time.time()
    with RunLogger(d, recipe=RECIPE, window=2) as log:
        first = heartbeat(d)
        assert set(first) >= KEYS and first["rank"] == 0 and first["world_size"] == 1 and first["pid"] == os.getpid()
        assert (first["step"], first["window"], first["phase"], first["phase_since"]) == (0, 0, None, None)
        assert not any(t.name == "runwatch-heartbeat" for t in threading.enumerate())  # no refresh thread
        time.sleep(0.2)
        assert heartbeat(d) == first  # nothing refreshes it between windows and phases
        for _ in range(4):
            log.step(loss=1.0, lr=0.1, grad_norm=1.0)
        # written at each window close, by the writer thread (off the training thread)
        assert eventually(lambda: (heartbeat(d)["step"], heartbeat(d)["window"]) == (4, 2))
        with log.phase("eval"):
            inside = heartbeat(d)
            assert inside["phase"] == "eval" and before <= inside["phase_since"] <= time.time()
            log.val(loss=0.5)
        left = time.time()
        after = heartbeat(d)
        assert (after["phase"], after["phase_since"]) == (None, None)
        assert after["progress_time"] >= inside["phase_since"]  # leaving a phase is progress
        assert after["progress_time"] <= left
    end = heartbeat(d)
    assert end["state"] == "ended" and end["phase"] is None
    assert os.listdir(d / "heartbeats") == ["rank-0.json"]  # no temp file left
    assert [r["event"] for r in records(d)] == ["train", "train", "val", "session_end"]  # the JSONL is as before


def test_a_window_close_posts_the_heartbeat_and_the_writer_thread_writes_it(tmp_path, monkeypatch):
    """The training thread writes the heartbeat file only at phase changes (and start and end); the
    windows it posts reach the file from the writer thread, the latest of a burst included."""
    writers: list[str] = []
    put = HeartbeatWriter._put

    def recording_put(self, seq, data):
        writers.append(threading.current_thread().name)
        put(self, seq, data)

    monkeypatch.setattr(HeartbeatWriter, "_put", recording_put)
    d = tmp_path / "run"
    with RunLogger(d, recipe=RECIPE, window=2) as log:
        assert writers == ["MainThread"]  # the first heartbeat, at start
        for _ in range(2 * 40):  # 40 windows in a burst: posts within a second coalesce
            log.step(loss=1.0, lr=0.1, grad_norm=1.0)
        posted = time.monotonic()
        assert eventually(lambda: heartbeat(d)["window"] == 40), heartbeat(d)
        assert time.monotonic() - posted < 30  # within ~1 s on an idle machine; generous under load
        beat = heartbeat(d)
        assert (beat["step"], beat["attempted"], len(beat["window_seconds"])) == (80, 80, 16)
        assert beat["window_seconds"] == beat["busy_seconds"]  # nothing samples a single process
        assert set(writers[1:]) == {"runwatch-heartbeat-writer"}
        assert len(writers) <= 1 + 3  # not one write a window: the first post, then the rest together
        before = len(writers)
        with log.phase("eval"):
            assert writers[before:] == ["MainThread"]  # a phase is written at once, by the caller
    assert writers[-2:] == ["MainThread", "MainThread"]  # leaving the phase; the end


def test_a_hung_training_thread_stops_the_heartbeat(tmp_path):
    """No step(), no phase change: nothing rewrites the file, so its time stops (a watchdog sees the
    hang); the next window close brings it up to date again."""
    d = tmp_path / "run"
    path = d / "heartbeats" / "rank-0.json"
    with RunLogger(d, recipe=RECIPE, window=3) as log:
        for _ in range(6):
            log.step(loss=1.0, lr=0.1, grad_norm=1.0)
        assert eventually(lambda: heartbeat(d)["window"] == 2)
        written = path.read_bytes()
        hung = time.time()
        time.sleep(2.5)  # the training thread "hangs": more than twice the writer's spacing
        assert path.read_bytes() == written
        assert heartbeat(d)["time"] < hung and heartbeat(d)["progress_time"] < hung
        for _ in range(3):
            log.step(loss=1.0, lr=0.1, grad_norm=1.0)
        assert eventually(lambda: heartbeat(d)["window"] == 3)
        beat = heartbeat(d)
        assert beat["step"] == 9 and beat["time"] > hung + 2.5 and beat["progress_time"] > hung + 2.5


def test_a_phase_change_writes_the_windows_posted_before_it(tmp_path):
    d = tmp_path / "run"
    with RunLogger(d, recipe=RECIPE, window=1) as log:
        for _ in range(3):
            log.step(loss=1.0, lr=0.1, grad_norm=1.0)
        with log.phase("checkpoint"):
            inside = heartbeat(d)  # read at once: written by this thread on entering
            assert (inside["phase"], inside["step"], inside["window"]) == ("checkpoint", 3, 3)


def test_an_inner_phase_wins_and_the_outer_one_comes_back(tmp_path):
    d = tmp_path / "run"
    with RunLogger(d, recipe=RECIPE) as log:
        with log.phase("eval"):
            outer = heartbeat(d)["phase_since"]
            with log.phase("checkpoint"):
                inner = heartbeat(d)
                assert inner["phase"] == "checkpoint" and inner["phase_since"] >= outer
            back = heartbeat(d)
            assert back["phase"] == "eval" and back["phase_since"] >= inner["phase_since"]
        assert heartbeat(d)["phase"] is None


def test_a_phase_that_raises_is_left(tmp_path):
    d = tmp_path / "run"
    with RunLogger(d, recipe=RECIPE) as log:
        with pytest.raises(KeyError), log.phase("setup"):
            raise KeyError("boom")
        assert heartbeat(d)["phase"] is None


@pytest.mark.parametrize("name", ["Eval", "1eval", "", "ev-al", "eval ", "évaluation", None, 3])
def test_a_phase_name_is_checked(tmp_path, name):
    with RunLogger(tmp_path / "run", recipe=RECIPE) as log:
        with pytest.raises(ValueError) as info, log.phase(name):
            pass
        assert str(info.value) == f"RunLogger.phase: name must match [a-z][a-z0-9_]* (e.g. 'eval'), got {name!r}"
        assert heartbeat(tmp_path / "run")["phase"] is None


def test_a_phase_of_a_closed_logger_is_refused(tmp_path):
    log = RunLogger(tmp_path / "run", recipe=RECIPE)
    log.close()
    with pytest.raises(RunwatchError, match=r"is closed \(session "), log.phase("eval"):
        pass


def test_a_single_process_is_silent_for_the_rank_rules_and_status(tmp_path):
    d = tmp_path / "run"
    log = RunLogger(d, recipe=RECIPE, window=2)
    for _ in range(3):
        log.step(loss=1.0, lr=0.1, grad_norm=1.0)
    later = time.time() + 10_000  # a stale heartbeat, no progress for hours: not a rank finding
    assert RankMonitor(rank_stall=5.0).poll(str(d), later) is None
    assert rank_status_lines(str(d), later) == []
    out = subprocess.run([sys.executable, "-m", "runwatch", "status", str(d)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "rank" not in out.stdout and "heartbeat" not in out.stdout, out.stdout
    js = subprocess.run([sys.executable, "-m", "runwatch", "status", str(d), "--json"], capture_output=True, text=True)
    assert json.loads(js.stdout)["ranks"] == []
    log.close()


# --- a real training in a subprocess, its evaluation sleeping inside a phase -----------------------

TRAIN = textwrap.dedent("""
    import os, sys, time
    import torch
    from runwatch import RunLogger

    run_dir, go = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 4), torch.randn(32, 1)
    recipe = {"batch_size": 32, "seq_len": 1, "gradient_accumulation_steps": 1}
    with RunLogger(run_dir, recipe=recipe, window=5) as log:
        for i in range(10):
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
            opt.step()
            log.step(loss=loss.detach(), lr=0.1, grad_norm=norm)
        with log.phase("eval"):
            print("evaluating", flush=True)
            while not os.path.exists(go):  # a slow evaluation: it sleeps until the test has looked
                time.sleep(0.02)
            with torch.no_grad():
                log.val(loss=torch.nn.functional.mse_loss(model(x), y))
        print("done", flush=True)
""")


def test_a_real_training_shows_its_sleeping_evaluation_in_the_heartbeat(tmp_path):
    d, go = tmp_path / "run", tmp_path / "go"
    child = subprocess.Popen(
        [sys.executable, "-c", TRAIN, str(d), str(go)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    try:
        assert child.stdout.readline().strip() == "evaluating", child.stderr.read()
        entered = time.time()
        time.sleep(0.3)  # it sleeps in its evaluation; nothing refreshes the heartbeat meanwhile
        path = d / "heartbeats" / "rank-0.json"
        beat = parse_heartbeat(path.read_bytes(), str(path))
        assert (beat.phase, beat.pid, beat.world_size, beat.step, beat.window, beat.state) == (
            "eval",
            child.pid,
            1,
            10,
            2,
            "running",
        )
        assert beat.phase_since <= entered and beat.time <= entered  # written on entering, not since
        assert beat.progress_time <= beat.phase_since
        go.write_text("")
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:  # pragma: no cover - a hang is the failure
            child.kill()
            child.wait()
    assert child.returncode == 0 and out.strip() == "done", err
    beats, problems = read_heartbeats(str(d))
    assert problems == [] and beats[0].phase is None and beats[0].state == "ended"
    assert summarize(str(d), expect_step=10)["completed"]
    assert [r["event"] for r in records(d)] == ["train", "train", "val", "session_end"]


# --- windows that close on time ---------------------------------------------------------------------


def test_a_window_closes_once_max_window_seconds_have_passed(tmp_path):
    d = tmp_path / "run"
    with RunLogger(d, recipe=RECIPE, window=1000, max_window_seconds=0.2) as log:
        for _ in range(6):
            time.sleep(0.12)
            log.step(loss=1.0, lr=0.1, grad_norm=1.0)
    train = [r for r in records(d) if r["event"] == "train"]
    assert 2 <= len(train) <= 6 and sum(r["updates"] for r in train) == 6
    assert all(r["train_seconds"] >= 0.2 for r in train[:-1])  # each closed once past the limit
    assert summarize(str(d), expect_step=6)["completed"]


def test_max_window_seconds_none_closes_on_the_count_alone(tmp_path):
    d = tmp_path / "run"
    with RunLogger(d, recipe=RECIPE, window=1000, max_window_seconds=None) as log:
        for _ in range(3):
            time.sleep(0.05)
            log.step(loss=1.0, lr=0.1, grad_norm=1.0)
    assert [r["attempted"] for r in records(d) if r["event"] == "train"] == [3]


@pytest.mark.parametrize("value", [0, -1.0, float("nan"), float("inf"), "60", True])
def test_max_window_seconds_is_checked(tmp_path, value):
    with pytest.raises(ValueError) as info:
        RunLogger(tmp_path / "run", recipe=RECIPE, max_window_seconds=value)
    assert str(info.value) == f"RunLogger.max_window_seconds must be a finite number > 0 or None, got {value!r}"
    assert not os.path.exists(tmp_path / "run")  # checked before anything is written


# --- the default window, and arguments checked first ------------------------------------------------


def test_the_default_window_comes_from_runwatch_window(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNWATCH_WINDOW", "3")
    with RunLogger(tmp_path / "a", recipe=RECIPE) as log:
        assert log.window == 3
        for _ in range(7):
            log.step(loss=1.0, lr=0.1, grad_norm=1.0)
    assert [r["attempted"] for r in records(tmp_path / "a") if r["event"] == "train"] == [3, 3, 1]
    assert RunLogger(tmp_path / "b", recipe=RECIPE, window=4).window == 4  # an explicit window wins
    monkeypatch.setenv("RUNWATCH_WINDOW", "0")
    with pytest.raises(ValueError, match=r"^RUNWATCH_WINDOW must be an int >= 1, got '0'$"):
        RunLogger(tmp_path / "c", recipe=RECIPE)


def test_step_checks_its_arguments_before_a_nan_ends_the_session(tmp_path):
    d = tmp_path / "run"
    with RunLogger(d, recipe=RECIPE) as log:
        with pytest.raises(
            ConfigError, match=r"^RunLogger.step: grad_norm must be a number or a one-element tensor, got None$"
        ):
            log.step(float("nan"), 0.1, None)
        log.step(loss=1.0, lr=0.1, grad_norm=1.0)  # nothing was recorded: the session goes on
    recs = records(d)
    assert [(r["event"], r.get("reason")) for r in recs] == [("train", None), ("session_end", "normal")]
    assert recs[0]["attempted"] == 1
