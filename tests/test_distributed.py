"""RunLogger under torch.distributed: real `torchrun` runs of a tiny DDP training on gloo (CPU).

Each run is a real process group of 2 or 3 ranks; faults are real (a sleeping rank, a slowed
rank, a rank that SIGKILLs itself, a NaN loss on one rank). Every test kills its process group.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():  # pragma: no cover
    pytest.skip("torch.distributed is not available", allow_module_level=True)

from runwatch import summarize  # noqa: E402
from runwatch.files.heartbeats import read_heartbeats  # noqa: E402
from runwatch.judging.ranks import RankMonitor, rank_status_lines  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "multirank_train.py")
DEADLINE_S = 90  # a loaded 2-core machine needs ~15 s to start torchrun and two ranks


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Torchrun:
    """`python -m torch.distributed.run` in its own process group, killed whole at the end."""

    def __init__(self, run_dir: str, nproc: int, *args: str) -> None:
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc_per_node={nproc}",
            "--master_addr=127.0.0.1",
            f"--master_port={_free_port()}",
            "--monitor_interval=0.2",
            SCRIPT,
            run_dir,
            *args,
        ]
        self.log_path = os.path.join(os.path.dirname(run_dir), "torchrun.out")
        self._out = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self._out, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def wait(self, timeout: float = DEADLINE_S) -> int:
        return self.proc.wait(timeout=timeout)

    def output(self) -> str:
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)
        self._out.close()


@pytest.fixture
def launch(tmp_path):
    runs: list[Torchrun] = []

    def start(nproc: int, *args: str) -> tuple[Torchrun, str]:
        run_dir = str(tmp_path / "run")
        run = Torchrun(run_dir, nproc, *args)
        runs.append(run)
        return run, run_dir

    yield start
    for run in runs:
        run.kill()


def _records(run_dir: str) -> list[dict]:
    with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _poll_until(monitor: RankMonitor, run_dir: str, run: Torchrun, timeout: float) -> tuple[str, int, str] | None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        finding = monitor.poll(run_dir, time.time())
        if finding is not None:
            return finding
        time.sleep(0.25)
    return None


def _watch(run_dir: str, *options: str) -> subprocess.Popen:
    """`runwatch watch RUN_DIR` (the real watchdog) beside the run; it waits for the run to appear."""
    os.makedirs(run_dir, exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-m", "runwatch", "watch", run_dir, "--poll", "0.3", "--startup-grace", "120", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _verdict(watch: subprocess.Popen) -> tuple[int, str]:
    try:
        out, err = watch.communicate(timeout=DEADLINE_S)
    finally:
        if watch.poll() is None:
            os.killpg(watch.pid, signal.SIGKILL)
            watch.wait()
    return watch.returncode, (out.strip().splitlines() or [err])[-1]


def test_three_ranks_log_once_with_the_mean_loss_and_name_the_straggler(launch, tmp_path):
    watch = _watch(str(tmp_path / "run"), "--straggler-patience", "3")
    # 0.15 s a step (0.6 s a window) of busy time on rank 2: a margin that two busy cores shared with
    # other work cannot erase (at 0.05 s, once in a loaded run the other ranks' busy time caught up).
    run, run_dir = launch(3, "--steps", "60", "--window", "4", "--slow-rank", "2", "--slow-seconds", "0.15")
    code, verdict = _verdict(watch)
    assert run.wait() == 0, run.output()

    summary = summarize(run_dir)
    assert summary["completed"] and summary["updates"] == 60 and summary["train_windows"] == 15
    assert summary["hardware"]["world_size"] == 3 and summary["hardware"]["nodes"] == 1
    assert summary["hardware"]["rank_devices"] == [{"device": "cpu", "ranks": 3}]
    assert summary["recipe"]["batch_size"] == 48  # global: 16 a rank
    # Rank 0 alone wrote: one session, one line per window, nothing else beside the heartbeats.
    with open(os.path.join(run_dir, "run.json"), encoding="utf-8") as f:
        assert len(json.load(f)["sessions"]) == 1
    assert sorted(os.listdir(run_dir)) == [
        "heartbeats",
        "losses-rank0.json",
        "losses-rank1.json",
        "losses-rank2.json",
        "metrics.jsonl",
        "run.json",
        "watchdog.json",
    ]
    # The logged loss is the mean over ranks of each rank's own losses.
    per_rank = []
    for k in range(3):
        with open(os.path.join(run_dir, f"losses-rank{k}.json"), encoding="utf-8") as f:
            per_rank.append(json.load(f))
    train = [r for r in _records(run_dir) if r["event"] == "train"]
    for j, rec in enumerate(train):
        expected = math.fsum(x for losses in per_rank for x in losses[4 * j : 4 * j + 4]) / 12
        assert rec["loss"] == pytest.approx(expected, rel=1e-12)
    assert len({tuple(losses[:4]) for losses in per_rank}) == 3  # the ranks' data differ
    # Every rank's heartbeat, ended, at the last window.
    beats, problems = read_heartbeats(run_dir)
    assert problems == [] and sorted(beats) == [0, 1, 2]
    assert {(b.state, b.window, b.step, b.world_size) for b in beats.values()} == {("ended", 15, 60, 3)}
    # The watchdog named the slowed rank, not the ranks waiting for it.
    assert code == 7 and verdict.startswith("ANOMALY straggler step="), verdict
    assert verdict.split(": ", 1)[1].startswith(f"rank 2 (host {beats[2].host}) took "), verdict
    assert "x the median window time (" in verdict and "for 3 consecutive windows" in verdict
    lines = rank_status_lines(run_dir)
    assert 2 <= len(lines) <= 4 and lines[0].startswith("ranks: 3/3 heartbeats on 1 host(s), steps 60..60")
    assert any(line.startswith("slowest: rank 2 ") for line in lines), lines


def test_a_sleeping_rank_is_named_not_the_rank_waiting_for_it(launch, tmp_path):
    # Rank 1 sleeps mid-window; rank 0 blocks inside backward() (DDP's all-reduce), where a
    # process-group timeout would raise on rank 0 and torchrun would blame it.
    watch = _watch(str(tmp_path / "run"), "--rank-stall", "4")
    run, run_dir = launch(2, "--steps", "400", "--window", "5", "--hang-rank", "1", "--hang-at", "13")
    code, verdict = _verdict(watch)
    assert run.proc.poll() is None, run.output()  # still hung, not crashed
    beats, _ = read_heartbeats(run_dir)
    assert code == 7, verdict
    assert verdict.startswith(
        f"ANOMALY rank_stall step=10: rank 1 (host {beats[1].host}, pid {beats[1].pid}) stopped at "
        "step 10 outside any collective (in multirank_train.py:"
    ), verdict
    assert "while 1 rank(s) wait in one (in graph.py:" in verdict
    assert beats[0].waiting is True and beats[1].waiting is False
    status = subprocess.run([sys.executable, "-m", "runwatch", "status", run_dir], capture_output=True, text=True)
    rank_lines = [line for line in status.stdout.splitlines() if line.startswith(("ranks    ", "         most behind"))]
    assert rank_lines[0].startswith("ranks    2/2 heartbeats on 1 host(s), steps 10..10"), status.stdout
    assert rank_lines[1].startswith(
        f"         most behind: rank 1 (host {beats[1].host}, pid {beats[1].pid}) at step 10"
    ), status.stdout


def test_a_killed_rank_is_named_and_the_log_stays_valid(launch):
    run, run_dir = launch(
        2, "--steps", "400", "--window", "5", "--kill-rank", "1", "--kill-at", "13", "--pg-timeout", "20"
    )
    assert run.wait() != 0
    beats, _ = read_heartbeats(run_dir)
    assert beats[1].state == "running" and beats[0].state == "ended"
    time.sleep(max(0.0, beats[1].time + 2.5 - time.time()))
    finding = RankMonitor(rank_stall=2.0).poll(run_dir, time.time())
    assert finding is not None and finding.kind == "rank_stall", run.output()
    assert finding.message.startswith(
        f"rank 1 (host {beats[1].host}, pid {beats[1].pid}) stopped at step 10: its heartbeat is "
    )
    summary = summarize(run_dir)  # valid up to the kill: rank 0 ended the session
    assert summary["end_reason"] in ("error", "interrupted") and summary["last_step"] == 10


def test_a_nan_on_one_rank_ends_the_session_on_every_rank(launch):
    run, run_dir = launch(2, "--steps", "40", "--window", "5", "--nan-rank", "1", "--nan-at", "7")
    assert run.wait() != 0
    out = run.output()
    for k in (0, 1):
        assert f"rank {k}: runwatch: non-finite loss nan on rank 1 at the attempted update after step 6;" in out
    summary = summarize(run_dir)
    assert summary["end_reason"] == "nonfinite_loss" and summary["last_step"] == 6 and summary["updates"] == 6
    end = _records(run_dir)[-1]
    assert end["event"] == "session_end" and "on rank 1" in end["error"]
    beats, _ = read_heartbeats(run_dir)
    assert {b.state for b in beats.values()} == {"ended"}


@pytest.mark.parametrize("slow_rank", [0, 1])
def test_windows_close_on_time_together_whichever_rank_is_slow(launch, slow_rank):
    # Rank 0's clock decides, and every rank learns it at the same update: one window sequence.
    run, run_dir = launch(
        2,
        "--steps",
        "12",
        "--window",
        "1000",
        "--max-window-seconds",
        "0.4",
        "--slow-rank",
        str(slow_rank),
        "--slow-seconds",
        "0.15",
    )
    assert run.wait() == 0, run.output()
    summary = summarize(run_dir, expect_step=12)
    assert summary["completed"] and summary["updates"] == 12
    train = [r for r in _records(run_dir) if r["event"] == "train"]
    assert 2 <= len(train) <= 12 and all(r["attempted"] < 1000 for r in train)
    assert all(r["train_seconds"] >= 0.4 for r in train[:-1])  # closed on time, not early
    beats, problems = read_heartbeats(run_dir)
    assert problems == [] and sorted(beats) == [0, 1]
    assert {(b.state, b.window, b.step, b.phase) for b in beats.values()} == {("ended", len(train), 12, None)}


# --- in-process parts: the heartbeat writer, the stack sampler, the single-process paths ------------

from runwatch import RunLogger  # noqa: E402
from runwatch.files.heartbeats import HeartbeatConfig, parse_heartbeat  # noqa: E402
from runwatch.logger.distributed import HeartbeatWriter, is_waiting_frame, process_group  # noqa: E402

RECIPE = {"batch_size": 4, "seq_len": 8, "gradient_accumulation_steps": 1}


def test_heartbeat_writer_writes_atomically_and_refreshes_from_its_thread(tmp_path):
    progress = [0, time.perf_counter()]
    writer = HeartbeatWriter(
        str(tmp_path),
        1,
        2,
        "s-x",
        lambda: (progress[0], progress[1]),
        HeartbeatConfig(every_seconds=0.05, sample_seconds=0.01),
    )
    path = os.path.join(str(tmp_path), "heartbeats", "rank-1.json")

    def read():
        with open(path, "rb") as f:
            return parse_heartbeat(f.read(), path)

    writer.start(step=7)
    first = read()
    assert (first.rank, first.world_size, first.pid, first.step, first.window, first.state) == (
        1,
        2,
        os.getpid(),
        7,
        0,
        "running",
    )
    progress[0] = 3
    deadline = time.monotonic() + 10
    while read().attempted != 3 and time.monotonic() < deadline:  # the thread's refresh
        time.sleep(0.02)
    refreshed = read()
    assert refreshed.attempted == 3 and refreshed.time > first.time and refreshed.waiting is False
    assert refreshed.where is not None and refreshed.where.startswith("test_distributed.py:")
    for k in range(20):
        writer.window(step=10 + k, train_seconds=0.5)
    beat = read()
    assert beat.window == 20 and beat.step == 29 and beat.train_seconds == 0.5 and len(beat.window_seconds) == 16
    assert all(0 <= b <= 0.5 for b in beat.busy_seconds)
    writer.end()
    assert read().state == "ended" and not writer._thread.is_alive()
    assert os.listdir(os.path.dirname(path)) == ["rank-1.json"]  # no temp file left


class _Capture(torch.autograd.Function):
    frames: list = []

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        _Capture.frames.append(sys._getframe())
        return grad * 2


def test_a_frame_inside_backward_counts_as_waiting_and_user_code_does_not():
    x = torch.ones(2, requires_grad=True)
    _Capture.apply(x).sum().backward()
    assert is_waiting_frame(_Capture.frames[-1].f_back) is True  # the autograd engine's frames above it
    assert is_waiting_frame(sys._getframe()) is False


def test_a_one_rank_group_is_a_single_process(tmp_path):
    assert process_group() is None
    dist = torch.distributed
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        assert process_group() is None  # one rank: the single-process logger, unchanged
        run_dir = str(tmp_path / "run")
        with RunLogger(run_dir, recipe=RECIPE, window=2) as log:
            for _ in range(5):
                log.step(loss=torch.tensor(1.0), lr=0.1, grad_norm=torch.tensor(0.5))
            assert log.state_dict()["step"] == 5  # closes the window, as a single process does
        assert sorted(os.listdir(run_dir)) == ["heartbeats", "metrics.jsonl", "run.json"]
        assert summarize(run_dir)["updates"] == 5
        beats, problems = read_heartbeats(run_dir)  # a world of one: rank 0, no refresh thread
        assert problems == [] and list(beats) == [0]
        assert (beats[0].world_size, beats[0].state, beats[0].step, beats[0].where) == (1, "ended", 5, None)
    finally:
        dist.destroy_process_group()


def test_the_logger_never_imports_torch_itself(tmp_path):
    code = (
        "import sys, runwatch\n"
        f"with runwatch.RunLogger({str(tmp_path)!r}, recipe={RECIPE!r}) as log:\n"
        "    [log.step(loss=1.0, lr=0.1, grad_norm=1.0) for _ in range(12)]\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_ranks_out_of_step_are_caught_at_the_end_on_every_rank(launch):
    run, run_dir = launch(2, "--steps", "10", "--window", "5", "--extra-rank", "1", "--extra-steps", "3")
    assert run.wait() != 0
    out = run.output()
    message = (
        "ranks out of step at a window close: rank 0 had 0 attempted updates, rank 1 3; "
        "every rank must call RunLogger.step() the same number of times"
    )
    for k in (0, 1):
        assert f"rank {k}: RanksOutOfStepError: {message}" in out, out
    summary = summarize(run_dir)
    assert summary["end_reason"] == "error" and summary["last_step"] == 10
    assert _records(run_dir)[-1]["error"] == message
