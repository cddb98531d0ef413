"""`supervise` of a real `torchrun` job: two gloo workers logging with RunLogger (tests/multirank_train.py),
each in a session of its own, none dying with the agent (`--no-pdeathsig`). One worker is SIGSTOPped
(or SIGKILLed); the whole first attempt must be gone, by pid, before the second launches, and the
relaunch must not be judged by the first attempt's heartbeat files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():  # pragma: no cover
    pytest.skip("torch.distributed is not available", allow_module_level=True)
if not sys.platform.startswith("linux"):  # pragma: no cover
    pytest.skip("the process tree is found through /proc", allow_module_level=True)

from runwatch.files.heartbeats import read_heartbeats  # noqa: E402
from runwatch.procs.process import alive  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "multirank_train.py")
DEADLINE_S = 300  # two torchrun launches of two ranks each on a loaded 2-core machine


class FirstAttempt(threading.Thread):
    """Notes every pid of the first attempt (the agent from launch.json, the ranks from their
    heartbeats) while it runs; at the moment launch.json names a second process, notes which of
    them are still alive."""

    def __init__(self, run_dir: str) -> None:
        super().__init__(daemon=True)
        self.run_dir = run_dir
        self.first: int | None = None
        self.pids: set[int] = set()
        self.alive_at_relaunch: list[int] | None = None
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            try:
                with open(os.path.join(self.run_dir, "launch.json")) as f:
                    pid = json.load(f)["pid"]
            except (OSError, ValueError, KeyError):
                time.sleep(0.01)
                continue
            if self.first is None:
                self.first = pid
                self.pids.add(pid)
            if pid != self.first:
                self.alive_at_relaunch = [p for p in sorted(self.pids) if alive(p)]
                return
            beats, _ = read_heartbeats(self.run_dir)
            self.pids.update(b.pid for b in beats.values())
            time.sleep(0.01)


def _supervise(run_dir: str, *train: str) -> tuple[subprocess.CompletedProcess[str], FirstAttempt]:
    os.makedirs(run_dir, exist_ok=True)
    watcher = FirstAttempt(run_dir)
    watcher.start()
    cmd = [sys.executable, "-m", "runwatch", "supervise", run_dir]
    cmd += ["--poll", "0.2", "--rank-stall", "5", "--stall", "120", "--startup-grace", "240", "--backoff", "0.1"]
    cmd += ["--restarts", "2", "--"]
    cmd += [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    cmd += ["--monitor_interval=0.2", SCRIPT, run_dir, "--steps", "30", "--window", "5", "--heartbeat-seconds", "0.5"]
    cmd += ["--once", "--no-pdeathsig", *train]
    try:
        res = subprocess.run(
            cmd, capture_output=True, text=True, timeout=DEADLINE_S, env=dict(os.environ, OMP_NUM_THREADS="1")
        )
    finally:
        watcher.done.set()
        watcher.join(5)
    return res, watcher


def _journal(run_dir: str) -> list[dict]:
    with open(os.path.join(run_dir, "supervise.jsonl")) as f:
        return [json.loads(line) for line in f]


def _kill_all(pids: set[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass


def test_a_sigstopped_worker_is_a_rank_stall_and_the_whole_attempt_is_stopped(tmp_path):
    run = str(tmp_path / "run")
    res, first = _supervise(run, "--stop-rank", "1", "--stop-at", "13")
    try:
        assert res.returncode == 0, res.stdout + res.stderr
        assert res.stdout.splitlines()[-1] == "OK done step=30"
        recs = _journal(run)
        assert [r["event"] for r in recs] == ["launch", "verdict", "stop", "relaunch", "verdict", "done"], recs
        v = recs[1]
        assert (v["kind"], v["class"], v["step"]) == ("rank_stall", "transient", 10)
        assert v["message"].startswith("rank 1 (host ")
        # the agent and both workers, each in a session of its own; the frozen worker got SIGCONT
        assert len(first.pids) == 3, first.pids
        assert recs[2]["stopped"] == 3 and recs[2]["left"] == []
        assert "1 was stopped by a signal: SIGCONT" in recs[2]["message"]
        assert "ignored" not in recs[2]["message"]
        assert first.alive_at_relaunch == []  # by pid: nothing of the first attempt when the second began
        assert recs[4]["kind"] is None and recs[4]["message"].endswith("ended normally at step 30")
    finally:
        _kill_all(first.pids)


def test_a_killed_worker_is_relaunched_with_nothing_of_the_first_attempt_left(tmp_path):
    run = str(tmp_path / "run")
    res, first = _supervise(run, "--kill-rank", "1", "--kill-at", "13", "--pg-timeout", "30")
    try:
        assert res.returncode == 0, res.stdout + res.stderr
        assert res.stdout.splitlines()[-1] == "OK done step=30"
        recs = _journal(run)
        events = [r["event"] for r in recs]
        assert events[0] == "launch" and events[-3:] == ["relaunch", "verdict", "done"], events
        assert events.count("relaunch") == 1
        v = recs[1]
        assert v["class"] == "transient" and v["kind"] in ("process_exit", "rank_stall"), v
        assert len(first.pids) == 3, first.pids
        assert first.alive_at_relaunch == []
        # `check` judges the run as its supervisor did: how the first attempt's rank 0 ended (gloo's
        # connection reset, a session_error; or stopped, interrupted) is recovered, the run clean
        out = subprocess.run([sys.executable, "-m", "runwatch", "check", run], capture_output=True, text=True)
        lines = out.stdout.splitlines()
        assert (out.returncode, lines[-1]) == (0, "OK clean step=30"), out.stdout + out.stderr
        assert all(line.startswith(("RECOVERED session_error", "RECOVERED interrupted")) for line in lines[:-1]), lines
    finally:
        _kill_all(first.pids)
