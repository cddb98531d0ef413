"""The Slurm recipe of docs/SUPERVISE.md on a real single-node Slurm (tests/slurm_cluster.py):
a requeue mid-run continues the supervision, a USR1 ends in `preempted` and a requeue, and the exit
codes show in `scontrol show job`. Skipped, with the reason, where Slurm cannot run."""

from __future__ import annotations

import json
import os
import re
import sys
import time

import pytest

from slurm_cluster import Cluster, Unavailable

HERE = os.path.dirname(os.path.abspath(__file__))
DOC = os.path.join(os.path.dirname(HERE), "docs", "SUPERVISE.md")
# The demo trainer ends in grad_collapse near step 2440 with its default seed: stay well below.
STEPS = 1500
# Generous: two cores shared with other work; a job's start, a torch import and 1500 steps.
JOB_SECONDS = 300.0


def recipe() -> str:
    """The batch script of docs/SUPERVISE.md: the sh block with `#SBATCH --requeue`."""
    with open(DOC, encoding="utf-8") as f:
        blocks = re.findall(r"```sh\n(.*?)```", f.read(), re.S)
    found = [b for b in blocks if "#SBATCH --requeue" in b]
    assert len(found) == 1, "docs/SUPERVISE.md must hold one batch script"
    return found[0]


@pytest.fixture(scope="module")
def slurm():
    try:
        cluster = Cluster().up()
    except Unavailable as exc:
        pytest.skip(f"Slurm cannot run here: {exc}")
    yield cluster
    cluster.down()
    cluster.remove()


def _submit(slurm, tmp_path, run, train_args, *sbatch_args, toml=""):
    """Write the docs' script with `runs/a` and `python train.py` replaced, submit it; the job id."""
    script = recipe()
    assert script.count("runs/a") == 1 and script.count("python train.py") == 1
    train = f"{sys.executable} -m runwatch.demo.tinytrain {run} --steps {STEPS} --ckpt-every 100 {train_args}"
    script = script.replace("runs/a", str(run)).replace("python train.py", train)
    run.mkdir()
    # the supervisor's own settings for a quick test, the way a user sets them: runwatch.toml. The
    # trainer's speed on two cores shared with other tests swings by half: no throughput_drop here.
    (run / "runwatch.toml").write_text(
        "[watch]\npoll = 0.2\nthroughput-patience = 100000\n[supervise]\nbackoff = 0.5\n" + toml
    )
    path = tmp_path / "job.sh"
    path.write_text(script)
    env = dict(slurm.env, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    out = slurm.run(
        "sbatch",
        "--parsable",
        f"--output={tmp_path}/slurm-%j.out",
        f"--chdir={tmp_path}",
        "--time=20",  # far beyond the test: the USR1 it asks for never comes on its own
        *sbatch_args,
        str(path),
        env=env,
    )
    return out.strip().split(";")[0]


def _journal(run):
    try:
        with open(run / "supervise.jsonl") as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def _checkpoints(run):
    try:
        with open(run / "metrics.jsonl") as f:
            return [r for r in map(json.loads, f) if r.get("event") == "checkpoint"]
    except FileNotFoundError:
        return []


def _wait(cond, timeout=JOB_SECONDS, what="a condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = cond()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def _state(slurm, job):
    return slurm.job(job).get("JobState")


def _release(slurm, job):
    """A requeued job waits about two minutes (BeginTime): let it start now."""
    _wait(lambda: _state(slurm, job) == "PENDING", what=f"job {job} pending again")
    # The killed allocation's job credential is revoked with a whole-second time stamp; a launch in
    # that same second is refused ("Job credential revoked") and fails the job with exit 1.
    time.sleep(2.0)
    held = slurm.job(job)
    slurm.run("scontrol", "update", f"JobId={job}", "StartTime=now")
    return held


def _finished(slurm, job):
    _wait(lambda: _state(slurm, job) in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), what=f"job {job} to end")
    return slurm.job(job)


def test_a_requeue_mid_run_continues_the_supervision(slurm, tmp_path):
    run = tmp_path / "run"
    t0 = time.monotonic()
    job = _submit(slurm, tmp_path, run, "--step-sleep 0.005 --fault crash@150")
    # the crash at 150 spends a restart; then wait for the relaunched attempt's checkpoint at 400
    _wait(lambda: any(c["step"] >= 400 for c in _checkpoints(run)), what="a checkpoint at step 400")
    before = _checkpoints(run)[-1]
    slurm.run("scontrol", "requeue", job)
    held = _release(slurm, job)
    assert held["Restarts"] == "1"
    info = _finished(slurm, job)
    elapsed = time.monotonic() - t0
    assert (info["JobState"], info["ExitCode"], info["Restarts"]) == ("COMPLETED", "0:0", "1"), info
    recs = _journal(run)
    launches = [r for r in recs if r["event"] in ("launch", "relaunch")]
    assert [(r["event"], r["attempt"], r["restarts"], r["slurm_restart_count"]) for r in launches] == [
        ("launch", 1, 0, 0),
        ("relaunch", 2, 1, 0),
        ("launch", 3, 1, 1),  # the requeued run: attempt numbers and the spent restart go on
    ]
    assert {r["slurm_job_id"] for r in launches} == {job}
    assert launches[2]["continued"] is True
    pre = next(r for r in recs if r["event"] == "preempted")
    assert (pre["signal"], pre["attempt"], pre["restarts"]) == ("SIGTERM", 2, 1)
    # the requeued run resumed from the latest checkpoint the first run wrote
    latest = [c for c in _checkpoints(run) if c["time"] <= pre["time"]][-1]
    assert latest["step"] >= before["step"] and launches[2]["checkpoint"] == latest["path"]
    assert f"resuming from {latest['path']} at step {latest['step']}" in (run / "stdout.log").read_text()
    end = recs[-1]
    assert end["event"] == "done" and end["line"] == f"OK done step={STEPS}"
    assert end["goodput"]["restarts"] == 1 and end["first_launch"] == recs[0]["first_launch"]
    assert end["goodput"]["steps_kept"] == STEPS
    print(f"\nslurm requeue test: {elapsed:.1f} s")


def test_usr1_ends_in_preempted_and_a_requeue(slurm, tmp_path):
    run = tmp_path / "run"
    t0 = time.monotonic()
    job = _submit(slurm, tmp_path, run, "--step-sleep 0.005")
    _wait(lambda: any(c["step"] >= 300 for c in _checkpoints(run)), what="a checkpoint at step 300")
    slurm.run("scancel", "--batch", "--signal=USR1", job)  # what --signal=B:USR1@90 sends
    pre = _wait(lambda: next((r for r in _journal(run) if r["event"] == "preempted"), None), what="preempted")
    assert pre["signal"] == "SIGUSR1" and pre["kind"] == "interrupted"
    assert pre["line"] == f"ANOMALY interrupted step={pre['step']}: preempted by SIGUSR1"
    assert pre["requeue"]["requeued"] is True and pre["requeue"]["command"] == ["scontrol", "requeue", job]
    held = _release(slurm, job)
    assert held["Restarts"] == "1"
    out = (tmp_path / f"slurm-{job}.out").read_text()
    assert f"ANOMALY interrupted step={pre['step']}: preempted by SIGUSR1" in out
    info = _finished(slurm, job)
    elapsed = time.monotonic() - t0
    assert (info["JobState"], info["ExitCode"], info["Restarts"]) == ("COMPLETED", "0:0", "1"), info
    recs = _journal(run)
    assert [r["event"] for r in recs if r["event"] in ("launch", "preempted", "done")] == [
        "launch",
        "preempted",
        "launch",
        "done",
    ]
    second = [r for r in recs if r["event"] == "launch"][1]
    assert (second["attempt"], second["restarts"], second["slurm_restart_count"]) == (2, 0, 1)
    # the training ended its session interrupted: SIGTERM reached it through the supervisor
    ends = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if '"session_end"' in x]
    assert [e["reason"] for e in ends] == ["interrupted", "normal"]
    print(f"\nslurm USR1 test: {elapsed:.1f} s")


def test_exit_codes_show_in_scontrol(slurm, tmp_path):
    t0 = time.monotonic()
    # a preemption that cannot be requeued (--no-requeue) still exits with the preempted code
    (tmp_path / "a").mkdir()
    run_a = tmp_path / "a" / "run"
    job_a = _submit(slurm, tmp_path / "a", run_a, "--step-sleep 0.005", "--no-requeue")
    # a spent budget: gave_up's code, whatever the class of the last verdict (transient here)
    (tmp_path / "b").mkdir()
    run_b = tmp_path / "b" / "run"
    job_b = _submit(slurm, tmp_path / "b", run_b, "--fault crash@50", toml="restarts = 0\n")
    _wait(lambda: _checkpoints(run_a), what="a checkpoint")
    slurm.run("scancel", "--batch", "--signal=USR1", job_a)
    a, b = _finished(slurm, job_a), _finished(slurm, job_b)
    elapsed = time.monotonic() - t0
    assert (a["JobState"], a["ExitCode"], a["Restarts"]) == ("FAILED", "75:0", "0"), a
    pre = _journal(run_a)[-1]
    assert pre["event"] == "preempted" and pre["requeue"]["requeued"] is False
    assert (b["JobState"], b["ExitCode"]) == ("FAILED", "7:0"), b
    assert _journal(run_b)[-1]["event"] == "gave_up"
    print(f"\nslurm exit codes test: {elapsed:.1f} s")
