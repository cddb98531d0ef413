"""`runwatch status`: one short check-in from the end of the log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from runwatch import RunLogger
from runwatch.cli import main
from runwatch.views.status import format_status, status

RECIPE = {"batch_size": 2, "seq_len": 4, "gradient_accumulation_steps": 1, "qk_clip_threshold": None, "max_steps": 1000}


def _run(path, steps=300):
    log = RunLogger(path, recipe=RECIPE, hardware={}, window=10)
    for i in range(steps):
        log.step(2.0 - i / 1000, 1e-3, 0.5)
    log.val(1.5, {"auroc": 0.81, "acc": 0.7})
    log._release()
    return log


def test_status_v1(tmp_path, capsys):
    _run(tmp_path)
    (tmp_path / "pid").write_text(f"{os.getpid()}\n")
    st = status(str(tmp_path), gpus=False)
    assert st["step"] == 300 and st["max_steps"] == 1000
    assert st["last_eval"] == {"step": 300, "loss": 1.5, "metrics": {"auroc": 0.81, "acc": 0.7}}
    assert st["process"] == {"pid": os.getpid(), "alive": True}
    assert abs(st["loss"] - (2.0 - 294.5 / 1000)) < 1e-9
    assert st["eta_seconds"] is not None and st["watchdog"] is None
    lines = format_status(st)
    assert len(lines) <= 20
    assert lines[1].startswith("step     300/1000")
    assert "eval     step 300 loss 1.5  auroc 0.81  acc 0.7" in lines
    assert "process  alive (pid %d)" % os.getpid() in lines
    assert main(["status", str(tmp_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["step"] == 300 and (doc["gpus"] == "no GPU" or isinstance(doc["gpus"], list))


def test_status_keys_are_its_typed_dicts(tmp_path):
    """status.Status and its parts name exactly the keys status returns, in their order."""
    from runwatch.views.status import Ended, GradNorm, LastEval, ProcessInfo, Status

    log = RunLogger(tmp_path, recipe=RECIPE, hardware={}, window=10)
    for _ in range(30):
        log.step(2.0, 1e-3, 0.5)
    log.val(1.5, {"auroc": 0.81})
    log.close("normal", None)
    (tmp_path / "pid").write_text(f"{os.getpid()}\n")
    st = status(str(tmp_path), gpus=False)
    assert list(st) == list(Status.__annotations__)
    assert list(st["grad_norm"]) == list(GradNorm.__annotations__)
    assert list(st["ended"]) == list(Ended.__annotations__)
    assert list(st["last_eval"]) == list(LastEval.__annotations__)
    assert list(st["process"]) == [k for k in ProcessInfo.__annotations__ if k != "host"]  # (another host's)


def test_status_reads_only_the_tail(tmp_path, monkeypatch):
    _run(tmp_path, steps=20000)
    import runwatch.reading.follow as follow

    reads = []
    real_pread = os.pread

    def spy(fd, n, offset):  # the tail is read back from the end (safeio.tail_lines), a chunk a call
        reads.append(n)
        return real_pread(fd, n, offset)

    monkeypatch.setattr(os, "pread", spy)
    st = status(str(tmp_path), gpus=False)
    assert st["step"] == 20000
    assert reads and all(0 < n <= 64 * 1024 for n in reads)
    assert sum(reads) < os.path.getsize(tmp_path / "metrics.jsonl") / 5
    del follow


def test_status_minimal_and_watchdog_verdict(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_text(
        '{"step": 10, "loss": 0.5, "lr": 0.1, "grad_norm": 2.0, "sps": 40}\n{"step": 20, "eval_auroc": 0.9}\n{"step": 2'
    )
    (tmp_path / "watchdog.json").write_text(
        json.dumps(
            {
                "verdict": "anomaly",
                "kind": "stall",
                "step": 20,
                "message": "no new record for 400 s (--stall 360)",
                "time": time.time(),
            }
        )
    )
    st = status(str(tmp_path), gpus=False)
    lines = format_status(st)
    assert "rate     40 samples/s" in lines  # the log's sps: no token count is known
    assert "watchdog ANOMALY stall step=20: no new record for 400 s (--stall 360)" in lines
    assert lines[-1] == "note     the log ends in a line still being written"


def test_status_no_records_yet(tmp_path):
    st = status(str(tmp_path), gpus=False)
    assert format_status(st)[1] == "step     no records yet"


def test_status_subprocess(tmp_path):
    _run(tmp_path)
    res = subprocess.run(
        [sys.executable, "-m", "runwatch", "status", str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0 and "step     300/1000" in res.stdout and len(res.stdout.splitlines()) <= 20


# --- check-ins that say what is true now ----------------------------------------------------------


def _minimal(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def test_the_rate_is_over_the_last_span_not_the_last_line(tmp_path):
    # 100 steps a second for 60 s, then one slow line (an eval, a checkpoint): 2 s for one step
    t0 = time.time() - 100
    rows = [{"step": i, "t": t0 + i / 100, "loss": 2.0} for i in range(1, 6001)]
    rows.append({"step": 6001, "t": t0 + 62.0, "loss": 2.0})
    _minimal(tmp_path / "metrics.jsonl", rows)
    st = status(str(tmp_path), gpus=False, throughput_span=30)
    assert st["throughput_span"] == 30 and 90 < st["steps_per_second"] < 100
    assert 0.4 < status(str(tmp_path), gpus=False, throughput_span=1)["steps_per_second"] < 0.6


def test_a_text_log_rate_is_over_the_span_of_its_lines(tmp_path):
    lines = [f"iter {i}: loss 2.0, time 7.00ms, mfu -100.00%" for i in range(1, 400)]
    lines.append("iter 400: loss 2.0, time 130.00ms, mfu -100.00%")  # the iteration that also evaluated
    (tmp_path / "train.log").write_text("\n".join(lines) + "\n")
    st = status(str(tmp_path / "train.log"), gpus=False)
    assert 130 < st["steps_per_second"] < 143  # not 1000 / 130 = 7.7


def test_eta_says_stalled_past_half_the_stall_limit(tmp_path):
    t0 = time.time() - 400
    _minimal(tmp_path / "metrics.jsonl", [{"step": i, "t": t0 + i, "loss": 2.0} for i in range(1, 101)])
    os.utime(tmp_path / "metrics.jsonl", (t0 + 100, t0 + 100))  # (minimal telemetry's age: the log's mtime)
    st = status(str(tmp_path), gpus=False, stall=360)
    assert st["stalled_seconds"] is not None and st["stalled_seconds"] >= 299 and st["eta_seconds"] is None
    assert any(
        x.startswith("eta      stalled for ") and x.endswith("(no record; --stall 360)") for x in format_status(st)
    )
    assert status(str(tmp_path), gpus=False, stall=3600)["stalled_seconds"] is None


def test_recorded_stall_and_span_are_used_when_none_given(tmp_path):
    t0 = time.time() - 400
    _minimal(tmp_path / "metrics.jsonl", [{"step": i, "t": t0 + i, "loss": 2.0} for i in range(1, 101)])
    os.utime(tmp_path / "metrics.jsonl", (t0 + 100, t0 + 100))
    (tmp_path / "launch.json").write_text(
        json.dumps({"read": {"log": None}, "rules": {"stall": 3600, "throughput_span": 5}, "by": "supervise"})
    )
    st = status(str(tmp_path), gpus=False)
    assert (st["stall_seconds"], st["throughput_span"], st["stalled_seconds"]) == (3600, 5, None)
    assert status(str(tmp_path), gpus=False, stall=10)["stall_seconds"] == 10


def test_samples_per_second_when_the_log_counts_samples_not_tokens(tmp_path):
    recipe = dict(RECIPE, seq_len=1, tokens="samples")
    log = RunLogger(tmp_path, recipe=recipe, hardware={}, window=10)
    for i in range(30):
        log.step(2.0 - i / 1000, 1e-3, 0.5)
    log._release()
    st = status(str(tmp_path), gpus=False)
    assert st["tokens_per_second"] is None and st["samples_per_second"] is not None
    assert any(x.startswith("rate     ") and x.endswith(" samples/s") for x in format_status(st))


def test_the_supervisors_own_stop_is_not_the_runs_error(tmp_path):
    _minimal(tmp_path / "metrics.jsonl", [{"step": i, "t": 1.7e9 + i, "loss": 2.0} for i in range(1, 11)])
    (tmp_path / "stdout.log").write_text("iter 10\nTraceback (most recent call last):\n  x\nKeyboardInterrupt\n")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (tmp_path / "pid").write_text(f"{gone.pid}\n")
    assert status(str(tmp_path), gpus=False)["last_error"] == "KeyboardInterrupt"
    stop = {"time": time.time(), "event": "stop", "attempt": 1, "pid": gone.pid, "kind": None, "class": None}
    (tmp_path / "supervise.jsonl").write_text(json.dumps(dict(stop, step=None, checkpoint=None)) + "\n")
    assert status(str(tmp_path), gpus=False)["last_error"] is None


def test_a_finished_multi_rank_run_names_no_rank_most_behind(tmp_path):
    from runwatch.judging.verdict import Verdict, write_verdict
    from test_heartbeats import _minimal_log, times, write

    _minimal_log(tmp_path)
    now = time.time()
    for k in range(3):
        write(tmp_path, times(k, [1.0] * 5, world_size=3, time=now, progress_time=now))
    assert any(x.startswith("most behind:") for x in status(str(tmp_path), gpus=False)["ranks"])
    write_verdict(str(tmp_path), Verdict.done(50, "process exited with status 0", now))
    ranks = status(str(tmp_path), gpus=False)["ranks"]
    assert ranks and ranks[0].startswith("ranks: 3/3 heartbeats") and not any("most behind" in x for x in ranks)
