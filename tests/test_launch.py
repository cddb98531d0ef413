"""`runwatch launch`: detached, own process group, environment, stdout.log, pid, launch.json."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from runwatch.cli import main
from runwatch.procs.process import alive
from runwatch.supervising.launch import LAUNCH_ENV


def _wait_gone(pid, timeout=20.0):
    end = time.time() + timeout
    while alive(pid) and time.time() < end:
        time.sleep(0.02)
    return not alive(pid)


def test_launch_detached(tmp_path, capsys):
    run = tmp_path / "run"
    code = main(
        [
            "launch",
            str(run),
            "--",
            sys.executable,
            "-c",
            "import os,json; print(json.dumps({k: os.environ.get(k) for k in "
            "['PYTHONUNBUFFERED','HF_HUB_DISABLE_PROGRESS_BARS','TRANSFORMERS_VERBOSITY','TOKENIZERS_PARALLELISM','RUNWATCH_RUN_DIR']}));"
            "print(os.getpgid(0) == os.getpid(), os.getsid(0) == os.getpid())",
        ]
    )
    out = capsys.readouterr().out.splitlines()
    info = json.loads((run / "launch.json").read_text())
    assert code == 0
    assert out[0] == f"launched pid {info['pid']} (process group {info['pid']}); output in {run}/stdout.log"
    assert out[1:] == [f"  runwatch status {run}", f"  runwatch watch {run}", f"  tail -f {run}/stdout.log"]
    assert (run / "pid").read_text() == f"{info['pid']}\n"
    assert _wait_gone(info["pid"])
    log = (run / "stdout.log").read_text().splitlines()
    env = json.loads(log[1])
    assert env == dict(LAUNCH_ENV, RUNWATCH_RUN_DIR=str(run))
    assert log[2] == "True True"
    assert info["command"][0] == sys.executable and info["pgid"] == info["pid"]
    assert info["env"] == dict(env, RUNWATCH_ATTEMPT_ID=info["attempt_id"])


def test_launch_watch_completes_with_exit_0(tmp_path):
    run = tmp_path / "run"
    script = (
        "from runwatch import RunLogger\n"
        "with RunLogger(None, recipe={'batch_size':1,'seq_len':1,'gradient_accumulation_steps':1,'qk_clip_threshold':None},"
        " hardware={}, window=1) as log:\n"
        "    [log.step(1.0, 0.1, 1.0) for _ in range(3)]\n"
    )
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "runwatch",
            "launch",
            str(run),
            "--watch",
            "--poll",
            "0.1",
            "--",
            sys.executable,
            "-c",
            script,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1] == "OK done step=3"


def test_launch_refuses_a_running_one_and_bad_commands(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "pid").write_text(f"{os.getpid()}\n")  # a pid runwatch did not launch there stops nothing
    assert main(["launch", str(run), "--", "sleep", "30"]) == 0
    pid = int((run / "pid").read_text())
    assert pid != os.getpid() and alive(pid)
    capsys.readouterr()
    try:
        assert main(["launch", str(run), "--", "true"]) == 2
        assert capsys.readouterr().err == f"launch: {run}: the process {pid} launched there is still running\n"
    finally:
        os.kill(pid, signal.SIGKILL)
    _wait_gone(pid)
    (run / "pid").unlink()
    assert main(["launch", str(run), "--", "/nonexistent/cmd"]) == 2
    assert capsys.readouterr().err == "launch: cannot start '/nonexistent/cmd': No such file or directory\n"
    assert main(["launch", str(run), "true"]) == 2
    assert main(["launch", str(run), "--watch", "--stall", "0", "--", "true"]) == 2
    assert not (run / "pid").exists()
