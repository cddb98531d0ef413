"""How a supervisor reads its run's log: one Watcher and one RecordSource an attempt, exit.json read
once an attempt, the whole log read only for a decision that needs every record (a rollback, the
end), never at a launch. Real trainings (tests/supervise_train.py) under a `Supervisor` run in
this process, so that the reads can be counted where they happen."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from runwatch.judging.watchdog import Options, Watcher
from runwatch.procs import process
from runwatch.reading import RecordSource, load_sessions
from runwatch.reading.history import Trail, latest_checkpoint
from runwatch.supervising.supervise import Supervisor
from runwatch.supervising.supervision import SuperviseOptions

TRAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "supervise_train.py")


class Reads:
    """What a supervision opened and read, counted as it happens."""

    def __init__(self) -> None:
        self.sources: list[RecordSource] = []
        self.watchers: list[Watcher] = []
        self.whole_reads = 0  # RecordSource.sessions(): the whole log, from its start
        self.exit_reads = 0  # exit.json, waited for or read at once (one each)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Reads:
    seen = Reads()
    source_init, watcher_init, sessions = RecordSource.__init__, Watcher.__init__, RecordSource.sessions
    read_exit, wait_exit = process.read_exit, process.wait_exit
    waiting = [False]

    def new_source(self: RecordSource, *args: Any, **kwargs: Any) -> None:
        seen.sources.append(self)
        source_init(self, *args, **kwargs)

    def new_watcher(self: Watcher, *args: Any, **kwargs: Any) -> None:
        seen.watchers.append(self)
        watcher_init(self, *args, **kwargs)

    def whole(self: RecordSource) -> Any:
        seen.whole_reads += 1
        return sessions(self)

    def counted_read(run_dir: str, pid: int) -> Any:
        seen.exit_reads += 0 if waiting[0] else 1  # (wait_exit reads it until it appears: one read)
        return read_exit(run_dir, pid)

    def counted_wait(run_dir: str, pid: int, timeout: float = process.EXIT_WAIT_SECONDS) -> Any:
        seen.exit_reads += 1
        waiting[0] = True
        try:
            return wait_exit(run_dir, pid, timeout)
        finally:
            waiting[0] = False

    monkeypatch.setattr(RecordSource, "__init__", new_source)
    monkeypatch.setattr(Watcher, "__init__", new_watcher)
    monkeypatch.setattr(RecordSource, "sessions", whole)
    monkeypatch.setattr(process, "read_exit", counted_read)
    monkeypatch.setattr(process, "wait_exit", counted_wait)
    return seen


def _supervise(run: Path, *train: str, stall: float = 4) -> tuple[int, list[dict[str, Any]], list[str]]:
    lines: list[str] = []
    cmd = [sys.executable, TRAIN, str(run), *train]
    sup = Supervisor(
        str(run), cmd, Options(poll=0.1, stall=stall), SuperviseOptions(backoff=0.1), log=lines.append, out=lines.append
    )
    code = sup.run()
    with open(run / "supervise.jsonl") as f:
        journal = [json.loads(line) for line in f]
    return code, journal, lines


def test_a_crash_and_its_relaunch_read_the_log_once_an_attempt(tmp_path: Path, reads: Reads) -> None:
    run = tmp_path / "run"
    code, journal, lines = _supervise(run, "--steps", "30", "--fault", "kill@12")
    assert code == 0, lines
    assert [r["event"] for r in journal] == ["launch", "verdict", "relaunch", "verdict", "done"]
    attempts = journal[-1]["attempt"]
    assert attempts == 2
    assert len(reads.watchers) == attempts and len(reads.sources) == attempts
    assert [w.source for w in reads.watchers] == reads.sources  # each attempt's one source is its watch's
    # exit.json: the crash's read by its watch (process_exit), used by the verdict record; the
    # completed attempt's read once by the supervisor
    assert reads.exit_reads == attempts
    assert journal[1]["kind"] == "process_exit" and journal[1]["exit"]["signal"] == "SIGKILL"
    assert "killed by SIGKILL" in journal[1]["message"]
    # the relaunch's checkpoint comes from what the watches read: the log is read whole once, at the end
    assert journal[2]["checkpoint"] == str(run / "ckpt-10.json")
    assert reads.whole_reads == 1
    assert journal[-1]["checkpoint"] == str(run / "ckpt-30.json") and journal[-1]["goodput"]["steps_kept"] == 30


def test_a_rollback_reads_the_whole_log_once_for_its_target(tmp_path: Path, reads: Reads) -> None:
    run = tmp_path / "run"
    code, journal, lines = _supervise(run, "--steps", "40", "--fault", "nan@27")
    assert code == 0, lines
    events = [r["event"] for r in journal]
    assert events in (
        ["launch", "verdict", "stop", "rollback", "verdict", "done"],
        ["launch", "verdict", "rollback", "verdict", "done"],
    )
    attempts = journal[-1]["attempt"]
    assert attempts == 2
    assert len(reads.watchers) == attempts and len(reads.sources) == attempts
    assert [w.source for w in reads.watchers] == reads.sources
    assert reads.exit_reads == attempts  # each verdict came from a record: exit.json read once for its record
    rollback = next(r for r in journal if r["event"] == "rollback")
    assert rollback["checkpoint"] == str(run / "ckpt-20.json") and rollback["skip_steps"] == "21-27"
    assert reads.whole_reads == 2  # the rollback's target, and the goodput at the end

    # what the watches kept as they read is what a whole read of the log says
    sessions = load_sessions(str(run))
    assert len(sessions) == 2
    trail = Trail()
    source = RecordSource(str(run))
    while True:
        polled = source.poll(final=True)
        for rec in polled:
            trail.add(rec, source.parser)
        if not polled.more:
            break
    expected = latest_checkpoint(sessions, cwd=str(tmp_path))
    assert expected is not None and trail.latest_checkpoint(cwd=str(tmp_path)) == expected
    assert trail.high_step() == max(r.step for s in sessions for r in s.records if r.kind != "invalid") == 40


def _wait(cond: Any, timeout: float = 30.0) -> bool:
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.05)
    return False


def test_a_supervisor_that_adopts_a_training_reads_its_history_once(tmp_path: Path, reads: Reads) -> None:
    run = tmp_path / "run"
    go = run / "go"
    # the training waits before update 21 until `go`: its kill at 22 comes after the adoption
    train = ["--steps", "40", "--fault", "kill@22", "--hold", f"{go}@21"]
    first = subprocess.Popen(
        [sys.executable, "-m", "runwatch", "supervise", str(run), "--poll", "0.1", "--stall", "120", "--"]
        + [sys.executable, TRAIN, str(run), *train],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert _wait(lambda: (run / "ckpt-20.json").exists() and (run / "watchdog.json").exists())
        time.sleep(0.5)  # its watch has read to the hold (watchdog.json: where it had read to)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        adopted = threading.Thread(target=lambda: _wait(lambda: len(_lines(run / "supervise.jsonl")) >= 2, 60))
        adopted.start()
        threading.Thread(target=lambda: (adopted.join(), go.touch())).start()
        code, journal, lines = _supervise(run, *train, stall=120)
    finally:
        if first.poll() is None:
            first.kill()
        first.wait()
    assert code == 0, lines
    assert [r["event"] for r in journal] == ["launch", "launch", "verdict", "relaunch", "verdict", "done"]
    assert journal[1]["adopted"] is True and journal[1]["checkpoint"] == str(run / "ckpt-20.json")
    # this supervisor's attempts: the adopted one and its relaunch, one watch and one source each
    assert len(reads.watchers) == 2 and len(reads.sources) == 2
    assert reads.exit_reads == 2
    assert journal[3]["checkpoint"] == str(run / "ckpt-20.json")
    assert reads.whole_reads == 2  # the history it did not see, at the adoption; the goodput at the end


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except OSError:
        return []


def test_a_whole_read_through_a_source_leaves_where_it_follows_from(tmp_path: Path) -> None:
    log = tmp_path / "metrics.jsonl"
    log.write_text("".join(json.dumps({"step": i, "loss": 1.0 / i}) + "\n" for i in range(1, 6)))
    source = RecordSource(str(log))
    first = [r.step for r in source.poll()]
    with open(log, "a") as f:
        f.write(json.dumps({"step": 6, "loss": 0.1}) + "\n")
    whole = source.sessions()
    assert [[r.step for r in s.records] for s in whole] == [[1, 2, 3, 4, 5, 6]]
    assert first == [1, 2, 3, 4, 5] and [r.step for r in source.poll()] == [6]


def test_a_log_read_again_from_its_start_voids_what_the_trail_kept(tmp_path: Path) -> None:
    log = tmp_path / "metrics.jsonl"

    def write(*lines: dict[str, Any]) -> None:
        log.write_text("".join(json.dumps(x) + "\n" for x in lines))

    def ckpt(step: int, path: str) -> dict[str, Any]:
        return {"step": step, "ckpt": str(tmp_path / path)}  # (minimal telemetry's checkpoint line)

    for name in ("a-20.pt", "b-5.pt"):
        (tmp_path / name).write_text("saved")
    write({"step": 10, "loss": 1.0}, {"step": 20, "loss": 0.9}, ckpt(20, "a-20.pt"), {"step": 30, "loss": 0.8})
    trail = Trail()
    w = Watcher(str(log), Options(stall=600), log=lambda m: None, out=lambda m: None, trail=trail)
    assert w.poll_once() is None
    first = trail.latest_checkpoint()
    assert first is not None and first.path == str(tmp_path / "a-20.pt") and trail.high_step() == 30
    write({"step": 1, "loss": 2.0}, {"step": 5, "loss": 1.9}, ckpt(5, "b-5.pt"))  # a new log, shorter
    assert w.poll_once() is None
    again = trail.latest_checkpoint()
    assert again is not None and again.path == str(tmp_path / "b-5.pt") and trail.high_step() == 5


def test_what_follows_a_verdict_in_the_same_read_is_kept_unjudged(tmp_path: Path) -> None:
    """The records read with the one that decided the watch are not judged, but their checkpoints
    are counted and kept in the trail, as a drain keeps them: a relaunch names the latest one."""
    log = tmp_path / "metrics.jsonl"
    (tmp_path / "a-30.pt").write_text("saved")
    log.write_text(json.dumps({"step": 10, "loss": 1.0}) + "\n")
    trail = Trail()
    w = Watcher(str(log), Options(stall=600), log=lambda m: None, out=lambda m: None, trail=trail)
    assert w.poll_once() is None  # caught up: from now on a record's finding decides at once
    lines = [{"step": 20, "loss": float("nan")}, {"step": 30, "ckpt": str(tmp_path / "a-30.pt")}]
    with log.open("a") as f:
        f.write("".join(json.dumps(x) + "\n" for x in lines))
    v = w.poll_once()
    assert v is not None and v.kind == "nonfinite_loss"
    cp = trail.latest_checkpoint()
    assert cp is not None and cp.path == str(tmp_path / "a-30.pt")
    assert w.checkpoints == 1
