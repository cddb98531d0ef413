"""Liveness: stall phase by phase, another host, the last error of a dead process, the watchdog's
own heartbeat, verdict classes and onset, --exit-transient. Time-dependent rules are judged with
the Watcher's injected clock; processes and signals are real."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from runwatch import RunLogger
from runwatch.cli import main
from runwatch.errors import ConfigError
from runwatch.judging.liveness import (
    PhaseLimits,
    dead_rank,
    is_local_host,
    last_error,
    parse_phase_limits,
    stall_finding,
    watchdog_liveness,
)
from runwatch.judging.rules import CLASSES, Rules, verdict_class
from runwatch.judging.watchdog import Options, Watcher
from runwatch.reading.records import Record
from runwatch.views.status import format_status, status

RECIPE = {"batch_size": 2, "seq_len": 4, "gradient_accumulation_steps": 1, "qk_clip_threshold": None}


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _beat(
    run_dir,
    *,
    rank=0,
    world=1,
    session="s-1",
    state="running",
    t=1000.0,
    step=10,
    pid=None,
    host=None,
    phase=None,
    phase_since=None,
    progress_time=None,
):
    folder = os.path.join(run_dir, "heartbeats")
    os.makedirs(folder, exist_ok=True)
    doc = {
        "rank": rank,
        "world_size": world,
        "host": host or socket.gethostname(),
        "pid": pid or os.getpid(),
        "session_id": session,
        "state": state,
        "time": t,
        "step": step,
        "window": 1,
        "attempted": step,
        "progress_time": t if progress_time is None else progress_time,
        "train_seconds": 1.0,
        "window_seconds": [1.0],
        "busy_seconds": [1.0],
        "where": None,
        "waiting": None,
        "phase": phase,
        "phase_since": phase_since,
    }
    with open(os.path.join(folder, f"rank-{rank}.json"), "w") as f:
        json.dump(doc, f)


def _v1_run(path, steps=5):
    log = RunLogger(str(path), recipe=RECIPE, hardware={}, window=1)
    for _ in range(steps):
        log.step(1.0, 0.1, 1.0)
    log._release()
    return log


# --- phase limits and the stall rule --------------------------------------------------------------


def test_phase_limits_defaults_and_overrides():
    limits = parse_phase_limits(("eval=7200", "warmup=50"), stall=360, startup_grace=600)
    assert (limits.limit("eval"), limits.limit("checkpoint"), limits.limit("setup")) == (7200, 3600, 600)
    assert (limits.limit("warmup"), limits.limit("other_phase")) == (50, 360)


@pytest.mark.parametrize(
    "item, message",
    [
        ("eval", "watch.stall_phase must be PHASE=SECONDS with PHASE like eval or checkpoint, got 'eval'"),
        ("Eval=5", "watch.stall_phase must be PHASE=SECONDS with PHASE like eval or checkpoint, got 'Eval=5'"),
        ("eval=-1", "watch.stall_phase eval must be a number of seconds > 0, got '-1'"),
        ("eval=x", "watch.stall_phase eval must be a number of seconds > 0, got 'x'"),
    ],
)
def test_phase_limits_bad(item, message):
    with pytest.raises(ConfigError) as exc:
        Options(stall_phase=(item,))
    assert str(exc.value) == message
    assert main(["check", "x", "--grad-max", "0"]) == 2  # a bad option is a usage error: exit 2


class _B:  # the heartbeat fields the stall rule reads
    def __init__(self, phase=None, since=None, progress=0.0):
        self.phase, self.phase_since, self.progress_time = phase, since, progress


LIMITS = PhaseLimits({"eval": 100.0, "checkpoint": 100.0, "setup": 50.0}, other=10.0)


@pytest.mark.parametrize(
    "now, last, beat, expected",
    [
        (1000, 995, None, None),
        (1000, 980, None, "no new record for 20 s (--stall 10)"),
        (1000, 980, _B(progress=995), None),  # the heartbeat moved later than the last record
        (1000, 980, _B("eval", 950), None),  # inside eval: its own limit, 100 s
        (1000, 980, _B("eval", 890), "no progress for 110 s inside phase eval (limit 100 s)"),
        (1000, None, _B("setup", 960), None),
        (1000, None, _B("setup", 940), "no progress for 60 s inside phase setup (limit 50 s)"),
        (1000, 999, _B("custom", 985), "no progress for 15 s inside phase custom (limit 10 s)"),
    ],
)
def test_stall_finding(now, last, beat, expected):
    assert stall_finding(now, last, beat, LIMITS, 10.0) == expected


def test_watch_slow_eval_is_not_a_stall_and_a_hung_one_is(tmp_path):
    """A healthy run inside a 20x --stall evaluation stays clean; past the phase limit it is a stall."""
    log = _v1_run(tmp_path)
    clock = Clock(time.time())
    w = Watcher(
        str(tmp_path), Options(stall=3, stall_phase=("eval=100",)), clock=clock, poll_checks=[], log=lambda m: None
    )
    assert w.poll_once() is None
    _beat(tmp_path, session=log.session_id, phase="eval", phase_since=clock.t, t=clock.t)
    clock.t += 60  # 20x --stall inside eval
    assert w.poll_once() is None
    clock.t += 45  # 105 s into eval: past its 100 s limit
    v = w.poll_once()
    assert (v.kind, v.cls) == ("stall", "transient")
    assert v.message == "no progress for 105 s inside phase eval (limit 100 s)"


def test_watch_outside_a_phase_the_heartbeat_counts_as_progress(tmp_path):
    log = _v1_run(tmp_path)
    clock = Clock(time.time() + 100)  # the log is 100 s old
    w = Watcher(str(tmp_path), Options(stall=50), clock=clock, poll_checks=[], log=lambda m: None)
    _beat(tmp_path, session=log.session_id, t=clock.t - 5)
    assert w.poll_once() is None
    clock.t += 50
    assert w.poll_once().message.startswith("no new record for 55 s")


def test_a_heartbeat_of_an_earlier_session_is_ignored(tmp_path):
    _v1_run(tmp_path)
    clock = Clock(time.time() + 100)
    _beat(tmp_path, session="s-old", phase="eval", phase_since=clock.t - 10)
    w = Watcher(str(tmp_path), Options(stall=50), clock=clock, poll_checks=[], log=lambda m: None)
    assert w.poll_once().kind == "stall"


# --- another host ---------------------------------------------------------------------------------


def test_a_process_on_another_host_is_not_looked_up_here(tmp_path, capsys):
    _v1_run(tmp_path)
    pid = _dead_pid()
    (tmp_path / "pid").write_text(f"{pid}\n")
    (tmp_path / "launch.json").write_text(
        json.dumps(
            {"pid": pid, "pgid": pid, "command": ["x"], "cwd": "/", "host": "gpu-node-17", "started_at": "", "time": 0}
        )
    )
    w = Watcher(str(tmp_path), Options(stall=1e6), poll_checks=[], log=lambda m: None)
    assert w.poll_once() is None and w.process.remote_host == "gpu-node-17"
    st = status(str(tmp_path), gpus=False)
    assert "process  on host gpu-node-17 (not checked from here)" in format_status(st)
    assert not is_local_host("gpu-node-17") and is_local_host(socket.gethostname()) and is_local_host(None)


# --- the last error of a dead process -------------------------------------------------------------


@pytest.mark.parametrize(
    "tail, expected",
    [
        (
            'step 1\nTraceback (most recent call last):\n  File "t.py", line 3, in <module>\n    f()\n'
            "RuntimeError: CUDA error: an illegal memory access was encountered\n",
            "RuntimeError: CUDA error: an illegal memory access was encountered",
        ),
        (
            'Traceback (most recent call last):\n  File "t.py", line 1\nValueError: bad shape\n--- runwatch launch x\n',
            "ValueError: bad shape",
        ),
        (
            "[rank1]:[E ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5)\nbye\n",
            "[rank1]:[E ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5)",
        ),
        ("loss 1.2\nKilled\n", "Killed"),
        (
            "slurmstepd: error: *** JOB 123 ON n1 CANCELLED AT 2026-12-03T01:00:00 DUE TO TIME LIMIT ***\n",
            "slurmstepd: error: *** JOB 123 ON n1 CANCELLED AT 2026-12-03T01:00:00 DUE TO TIME LIMIT ***",
        ),
        ("all good\nstep 5\n", None),
    ],
)
def test_last_error(tmp_path, tail, expected):
    path = tmp_path / "stdout.log"
    path.write_text("x" * 100_000 + "\n" + tail)
    assert last_error(str(path)) == expected


def test_process_exit_carries_the_last_error(tmp_path, capsys):
    _v1_run(tmp_path)
    pid = _dead_pid()
    (tmp_path / "pid").write_text(f"{pid}\n")
    (tmp_path / "stdout.log").write_text(
        "Traceback (most recent call last):\n  x\nRuntimeError: NCCL error: unhandled system error\n"
    )
    assert main(["watch", str(tmp_path), "--poll", "0.05", "--json"]) == 7
    out = capsys.readouterr().out
    assert out.splitlines()[-1].endswith("; last error: RuntimeError: NCCL error: unhandled system error")
    with open(tmp_path / "watchdog.json") as f:
        doc = json.load(f)
    assert doc["last_error"] == "RuntimeError: NCCL error: unhandled system error"
    assert (doc["kind"], doc["class"], doc["onset"]) == ("process_exit", "transient", 5)
    st = status(str(tmp_path), gpus=False)
    assert "error    RuntimeError: NCCL error: unhandled system error" in format_status(st)


def test_the_rank_that_died_first_is_named(tmp_path):
    gone = _dead_pid()
    _beat(tmp_path, rank=0, world=2, state="ended", pid=os.getpid(), t=1010)
    _beat(tmp_path, rank=1, world=2, state="running", pid=gone, t=1000, step=40)
    host = socket.gethostname()
    assert dead_rank(str(tmp_path)) == (
        f"rank 1 (host {host}, pid {gone}) died first: its heartbeat stopped at step 40 and its process is gone"
    )
    _beat(tmp_path, rank=1, world=2, state="ended", pid=gone)
    assert dead_rank(str(tmp_path)) is None


# --- the watchdog's own liveness ------------------------------------------------------------------


def test_watchdog_liveness_lines():
    now = 10_000.0
    rec = {
        "verdict": "watching",
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": now - 100,
        "polled_at": now - 3,
        "step": 5,
        "poll": 5,
    }
    assert watchdog_liveness(rec, now) == (True, f"watchdog watching (pid {os.getpid()}, polled 3 s ago)")
    assert watchdog_liveness({**rec, "polled_at": now - 7200}, now) == (
        False,
        f"watchdog not running (pid {os.getpid()}, last poll 2 h ago)",
    )
    gone = _dead_pid()
    assert watchdog_liveness({**rec, "pid": gone}, now) == (
        False,
        f"watchdog not running (pid {gone} gone, last poll 3 s ago)",
    )


def test_kill_9_of_the_watch_shows_in_status(tmp_path):
    _v1_run(tmp_path)
    env = dict(os.environ)
    watch = subprocess.Popen(
        [sys.executable, "-m", "runwatch", "watch", str(tmp_path), "--poll", "0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        deadline = time.time() + 60
        doc: dict = {}
        while time.time() < deadline:
            try:
                with open(tmp_path / "watchdog.json") as f:
                    doc = json.load(f)
            except (OSError, ValueError):
                doc = {}
            if doc.get("verdict") == "watching":
                break
            time.sleep(0.05)
        assert doc["verdict"] == "watching" and doc["pid"] == watch.pid and doc["step"] == 5
        assert doc["state"]["follower"]["offset"] > 0  # the resumable state travels with it
        line = next(x for x in format_status(status(str(tmp_path), gpus=False)) if x.startswith("watchdog"))
        assert line.startswith(f"watchdog watching (pid {watch.pid}, polled ")
    finally:
        watch.send_signal(signal.SIGKILL)
        watch.wait()
    line = next(x for x in format_status(status(str(tmp_path), gpus=False)) if x.startswith("watchdog"))
    assert line.startswith(f"watchdog not running (pid {watch.pid} gone, last poll ")


def test_watcher_state_round_trip_continues_where_it_was(tmp_path):
    log = RunLogger(str(tmp_path), recipe=RECIPE, hardware={}, window=1)
    for i in range(8):
        log.step(1.0 if i < 5 else 100.0, 0.1, 1.0)  # two spiking windows at steps 6 and 7
    a = Watcher(str(tmp_path), Options(stall=1e6), poll_checks=[], log=lambda m: None)
    a._read()
    state = json.loads(json.dumps(a.state_dict()))
    log.step(100.0, 0.1, 1.0)
    b = Watcher(str(tmp_path), Options(stall=1e6), poll_checks=[], log=lambda m: None)
    assert b.load_state_dict(state)
    assert b.rules.state_dict() == a.rules.state_dict()
    log._release()


# --- classes, onset, --exit-transient -------------------------------------------------------------


def test_every_kind_has_a_class():
    kinds = [
        "nonfinite_loss",
        "stall",
        "stuck_metric",
        "inverted_metric",
        "loss_at_chance",
        "throughput_drop",
        "grad_explosion",
        "grad_collapse",
        "timeout",
        "process_exit",
        "oom",
        "session_error",
        "interrupted",
        "invalid_log",
        "nonfinite_grad",
        "loss_spike",
        "loss_collapse",
        "overfitting",
        "rank_stall",
        "straggler",
        "no_progress",
        "no_signal",
    ]
    assert set(CLASSES) <= set(kinds)
    assert {k: verdict_class(k) for k in kinds if verdict_class(k) != "fatal"} == CLASSES
    assert verdict_class(None) is None


def test_onset_is_the_first_record_of_the_streak():
    rules = Rules(Options(grad_patience=3, grad_max=50.0))
    found = [
        rules.observe(Record("train", "s", step, loss=1.0, grad_mean=g, grad_max=g))
        for step, g in [(10, 1.0), (20, 99.0), (30, 99.0), (40, 99.0)]
    ]
    (f,) = found[-1]
    assert (f.kind, f.step, f.onset, f.cls) == ("grad_explosion", 40, 20, "divergence")
    assert f.to_json()["onset"] == 20 and f.to_json()["class"] == "divergence"


def test_exit_transient_for_an_interrupted_session(tmp_path, capsys):
    log = RunLogger(str(tmp_path), recipe=RECIPE, hardware={}, window=1)
    log.step(1.0, 0.1, 1.0)
    log.close("interrupted")
    assert main(["check", str(tmp_path)]) == 7
    assert main(["check", str(tmp_path), "--exit-transient", "75", "--json"]) == 75
    capsys.readouterr()
    assert main(["watch", str(tmp_path), "--exit-transient", "75"]) == 75
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "ANOMALY interrupted step=1: session ended with reason interrupted"
    with open(tmp_path / "watchdog.json") as f:
        assert json.load(f)["class"] == "transient"
    assert main(["check", str(tmp_path), "--exit-transient", "0"]) == 2


def test_check_json_has_class_and_onset(tmp_path, capsys):
    log = RunLogger(str(tmp_path), recipe=RECIPE, hardware={}, window=1)
    log.step(1.0, 0.1, 1.0)
    log.close("error", "boom")
    capsys.readouterr()
    assert main(["check", str(tmp_path), "--json"]) == 7
    doc = json.loads(capsys.readouterr().out)
    assert (doc["class"], doc["onset"]) == ("fatal", 1)
    assert doc["findings"][0]["class"] == "fatal"
