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
