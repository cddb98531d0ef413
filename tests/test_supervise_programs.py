"""`supervise`, `launch` and `watch` on programs that know nothing of runwatch: a script that only
prints nanoGPT-style lines, a plain JSONL loop, a CSV logger, a SIGSTOPped process. Real
processes, real signals, the exit status as the waiter recorded it."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest

from runwatch.cli import main
from runwatch.procs.process import alive
from runwatch.views.status import format_status, status

HERE = os.path.dirname(os.path.abspath(__file__))
PRINTING = os.path.join(HERE, "printing_train.py")
FAST = ["--poll", "0.1", "--backoff", "0.1"]

JSONL_LOOP = """
import json, os, sys, time
path = os.path.join(sys.argv[1], "metrics.jsonl")
with open(path, "a") as f:
    for step in range(1, int(sys.argv[2]) + 1):
        f.write(json.dumps({"step": step, "loss": 2.0 / step, "lr": 1e-3}) + "\\n")
        f.flush()
        time.sleep(0.01)
sys.exit(int(sys.argv[3]))
"""

CSV_LOOP = """
import csv, sys, time
with open(sys.argv[1] + "/metrics.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["epoch", "step", "train_loss"])
    for step in range(1, 31):
        w.writerow([0, step, 2.0 / step])
        f.flush()
        time.sleep(0.01)
"""


def _runwatch(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runwatch", *args], capture_output=True, text=True, timeout=timeout)


def _journal(run):
    with open(run / "supervise.jsonl") as f:
        return [json.loads(line) for line in f]


def _wait(cond, timeout=60.0):
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.05)
    return False


# --- the exit status is a fact --------------------------------------------------------------------


def test_a_jsonl_loop_that_exits_0_is_done_and_never_relaunched(tmp_path):
    run = tmp_path / "run"
    res = _runwatch("supervise", str(run), *FAST, "--", sys.executable, "-c", JSONL_LOOP, str(run), "20", "0")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1] == "OK done step=20"
    recs = _journal(run)
    assert [r["event"] for r in recs] == ["launch", "verdict", "done"]
    assert recs[1]["message"] == "process exited with status 0"
    ended = json.loads((run / "exit.json").read_text())
    assert ended["pid"] == recs[0]["pid"] and ended["status"] == 0 and ended["signal"] is None
    assert set(ended) == {"pid", "status", "signal", "time"}
    assert (run / "stdout.log").read_text().count("--- runwatch launch") == 1


def test_a_jsonl_loop_that_exits_1_is_a_process_exit_naming_the_status(tmp_path):
    run = tmp_path / "run"
    res = _runwatch(
        "supervise", str(run), *FAST, "--restarts", "0", "--", sys.executable, "-c", JSONL_LOOP, str(run), "5", "1"
    )
    assert res.returncode == 7, res.stderr
    pid = _journal(run)[0]["pid"]
    assert res.stdout.splitlines()[-1] == (
        f"ANOMALY process_exit step=5: process {pid} is gone (exit status 1) (gave up after 0 restarts)"
    )


def test_a_csv_log_named_with_log_ends_done_on_exit_0(tmp_path):
    run = tmp_path / "run"
    res = _runwatch(
        "launch",
        str(run),
        "--watch",
        "--poll",
        "0.1",
        "--log",
        "metrics.csv",
        "--",
        sys.executable,
        "-c",
        CSV_LOOP,
        str(run),
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1] == "OK done step=30"


@pytest.mark.parametrize(
    "code, line",
    [
        (0, "OK done step=8"),
        (3, "ANOMALY process_exit step=8: process {pid} is gone (exit status 3)"),
    ],
)
def test_a_later_watch_of_a_detached_launch_knows_how_it_ended(tmp_path, capsys, code, line):
    run = tmp_path / "run"
    assert main(["launch", str(run), "--", sys.executable, "-c", JSONL_LOOP, str(run), "8", str(code)]) == 0
    pid = int((run / "pid").read_text())
    assert _wait(lambda: (run / "exit.json").exists())  # the waiter wrote it; nothing of ours is its parent
    capsys.readouterr()
    assert main(["watch", str(run), "--poll", "0.05"]) == (0 if code == 0 else 7)
    assert capsys.readouterr().out.splitlines()[-1] == line.format(pid=pid)
    verdict = json.loads((run / "watchdog.json").read_text())
    assert verdict["verdict"] == ("done" if code == 0 else "anomaly")


def test_a_killed_process_is_named_by_its_signal(tmp_path):
    run = tmp_path / "run"
    script = "import time; print('ready', flush=True); time.sleep(120)"
    res = subprocess.Popen(
        [sys.executable, "-m", "runwatch", "launch", str(run), "--watch", "--poll", "0.05", "--startup-grace", "100"]
        + ["--", sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert _wait(lambda: (run / "pid").exists() and "ready" in (run / "stdout.log").read_text())
        pid = int((run / "pid").read_text())
        os.kill(pid, signal.SIGKILL)
        out, err = res.communicate(timeout=60)
    finally:
        if res.poll() is None:
            res.kill()
            res.communicate()
    assert res.returncode == 7, err
    assert out.splitlines()[-1] == (f"ANOMALY process_exit step=0: process {pid} is gone (killed by SIGKILL)")
    assert json.loads((run / "exit.json").read_text())["signal"] == "SIGKILL"


# --- any log --------------------------------------------------------------------------------------


def test_a_printing_program_is_supervised_from_its_output_and_resumes_with_its_own_flag(tmp_path):
    run = tmp_path / "run"
    res = _runwatch(
        "supervise",
        str(run),
        *FAST,
        "--stall",
        "20",
        "--format",
        "nanogpt",
        "--resume-args",
        "--init_from=resume",
        "--",
        sys.executable,
        PRINTING,
        str(run),
        "--max_iters=60",
        "--crash_at=35",
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1] == "OK done step=60"
    recs = _journal(run)
    assert [r["event"] for r in recs] == ["launch", "verdict", "relaunch", "verdict", "done"]
    pid = recs[0]["pid"]
    assert recs[1]["kind"] == "process_exit" and recs[1]["step"] == 35
    assert recs[1]["message"] == (
        f"process {pid} is gone (exit status 1); last error: RuntimeError: injected crash before iter 35"
    )
    launched = json.loads((run / "launch.json").read_text())["command"]
    assert launched[-1] == "--init_from=resume" and recs[0]["command"][-1] == "--crash_at=35"
    assert recs[2]["command"] == launched  # the relaunch ran with the resume flag, the first launch without
    assert recs[3]["message"] == "process exited with status 0"
    out = (run / "stdout.log").read_text()
    assert out.count("Initializing a new model from scratch") == 1
    assert out.count(f"Resuming training from {run} at iter 30") == 1
    g = recs[-1]["goodput"]
    # 35 iterations, then 30 from the checkpoint at 30; a text log's relaunch is seen at its first
    # line (iter 31), whose own update is not counted (where it resumed from is not in the log)
    assert g["steps_kept"] == 60 and g["steps_run"] == 35 + 29 and g["restarts"] == 1
    # status names what it measured and leaves out what the log does not say
    lines = format_status(status(str(run / "stdout.log"), gpus=False, read=_nanogpt()))
    rate = next(line for line in lines if line.startswith("rate "))
    assert rate.endswith(" updates/s") and "tokens/s" not in "\n".join(lines)
    last_loss = round(4.0 * math.exp(-59 / 40) + 1.0, 4)  # as the script prints it at iter 60
    assert next(line for line in lines if line.startswith("loss ")) == f"loss     {last_loss:.4g}"
    assert all("None" not in line for line in lines)


def _nanogpt():
    from runwatch.reading.readers import ReadOptions

    return ReadOptions(format="nanogpt")


def test_reading_options_are_checked_before_anything_starts(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["supervise", str(run), "--format", "nope", "--", "true"]) == 2
    assert capsys.readouterr().err.strip() == (
        "read.format must be one of jsonl, tensorboard, mlflow, csv, text, nanogpt, megatron, paddlenlp, hf, got 'nope'"
    )
    assert main(["supervise", str(run), "--resume-args", "--x='a", "--", "true"]) == 2
    assert capsys.readouterr().err.startswith('supervise.resume_args must split like shell words, got "--x=\'a"')
    assert main(["launch", str(run), "--format", "nanogpt", "--", "true"]) == 2
    assert capsys.readouterr().err.strip() == (
        "launch: --format, --pattern, --run and --log say how to watch: add --watch"
    )
    assert not (run / "pid").exists()


def test_log_names_the_file_to_follow(tmp_path):
    run = tmp_path / "run"
    script = (
        "import json, sys\n"
        "with open(sys.argv[1] + '/train_log.jsonl', 'w') as f:\n"
        "    [f.write(json.dumps({'iter': i, 'train/loss': 1.0 / i}) + '\\n') for i in range(1, 13)]\n"
    )
    res = _runwatch(
        "supervise",
        str(run),
        *FAST,
        "--log",
        "train_log.jsonl",
        "--map",
        "step=iter",
        "--",
        sys.executable,
        "-c",
        script,
        str(run),
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1] == "OK done step=12"


# --- the whole process tree: a stopped process ----------------------------------------------------


def test_a_sigstopped_process_is_stopped_at_once_and_the_message_says_how(tmp_path):
    run = tmp_path / "run"
    t0 = time.monotonic()
    res = _runwatch(
        "supervise",
        str(run),
        *FAST,
        "--stall",
        "3",
        "--format",
        "nanogpt",
        "--resume-args",
        "--init_from=resume",
        "--",
        sys.executable,
        PRINTING,
        str(run),
        "--max_iters=40",
        "--stop_at=25",
    )
    assert res.returncode == 0, res.stderr
    assert time.monotonic() - t0 < 25  # not 30 s of SIGTERM to a process that cannot take it
    recs = _journal(run)
    assert [r["event"] for r in recs] == ["launch", "verdict", "stop", "relaunch", "verdict", "done"]
    assert recs[1]["kind"] == "stall"
    assert recs[2]["message"] == (
        "runwatch supervise: stopped after a stall: SIGTERM (1 process; 1 was stopped by a signal: SIGCONT)"
    )
    assert recs[2]["stopped"] == 1 and recs[2]["seconds"] < 10
    assert not alive(recs[0]["pid"])
    assert "ignored" not in (run / "supervise.jsonl").read_text()


# --- no stale facts ------------------------------------------------------------------------------


# Every launch starts a new session, logs steps 1-4 and dies: no attempt after the first gets past step 4.
STUCK = """
import os, sys, time
from runwatch import RunLogger
recipe = {"batch_size": 1, "seq_len": 1, "gradient_accumulation_steps": 1, "qk_clip_threshold": None}
log = RunLogger(sys.argv[1], recipe=recipe, hardware={}, window=2)
for _ in range(4):
    log.step(loss=1.0, lr=1e-3, grad_norm=1.0)
time.sleep(0.5)
os._exit(1)
"""


def test_attempts_that_make_no_progress_give_up_saying_so_and_count_their_time(tmp_path):
    run = tmp_path / "run"
    res = _runwatch("supervise", str(run), *FAST, "--restarts", "3", "--", sys.executable, "-c", STUCK, str(run))
    assert res.returncode == 7, res.stderr
    last = res.stdout.splitlines()[-1]
    assert last.startswith("ANOMALY process_exit step=4: process ")
    assert last.endswith(" (gave up after 3 restarts: 3 attempts in a row made no progress)")
    recs = _journal(run)
    end = recs[-1]
    assert end["event"] == "gave_up" and end["no_progress"] == 3
    launches = [r["time"] for r in recs if r["event"] in ("launch", "relaunch")]
    assert len(launches) == 4
    # the time lost is the whole supervision but the last session's own time: the three attempts
    # before it, each with its start-up, count
    assert end["goodput"]["seconds_lost"] >= launches[3] - launches[0] - 0.1


def test_startup_grace_counts_from_each_attempt(tmp_path):
    run = tmp_path / "run"
    # the first attempt logs and dies; the relaunch hangs before its first record
    script = (
        "import json, os, sys, time\n"
        "p = os.path.join(sys.argv[1], 'metrics.jsonl')\n"
        "if os.path.exists(p): time.sleep(120)\n"
        "with open(p, 'w') as f: f.write(json.dumps({'step': 1, 'loss': 1.0}) + '\\n')\n"
        "time.sleep(3); sys.exit(1)\n"
    )
    res = _runwatch(
        "supervise",
        str(run),
        *FAST,
        "--startup-grace",
        "2",
        "--restarts",
        "1",
        "--",
        sys.executable,
        "-c",
        script,
        str(run),
    )
    assert res.returncode == 7, res.stderr
    recs = _journal(run)
    stall = [r for r in recs if r["event"] == "verdict"][-1]
    relaunch = next(r for r in recs if r["event"] == "relaunch")
    assert stall["kind"] == "stall" and stall["message"].startswith("no record ")
    assert stall["message"].endswith(" s after the process was launched (--startup-grace 2)")
    assert stall["time"] - relaunch["time"] >= 2  # the grace ran from the relaunch, not from the first launch


# --- watch of a folder that is not there yet -------------------------------------------------------


def test_watching_a_folder_that_appears_later_with_tensorboard_files(tmp_path):
    tb = pytest.importorskip("torch.utils.tensorboard")
    runs = tmp_path / "runs"
    watch = subprocess.Popen(
        [sys.executable, "-m", "runwatch", "watch", str(runs), "--poll", "0.1", "--startup-grace", "60"]
        + ["--stall", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = watch.stderr.readline()  # the watch runs, and the folder is not there yet
        w = tb.SummaryWriter(str(runs))
        for step in range(1, 6):
            w.add_scalar("train/loss", 1.0 / step, step)
        w.flush()
        out, err = watch.communicate(timeout=60)
        err = first + err
        w.close()
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.communicate()
    assert "metrics.jsonl" not in err and "could not write watchdog.json" not in err, err
    assert err.splitlines()[0].startswith(f"runwatch watch: waiting for {runs} to appear (poll 0.1 s")
    assert f"runwatch watch: {runs} appeared; reading {runs}" in err
    assert out.splitlines()[-1].startswith("ANOMALY stall step=")
