"""runwatch.procs.process on real processes: alive or gone (a zombie is gone), how our child ended, the
pid file, the out-of-memory line, and stopping a process group that ignores SIGTERM."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from runwatch.procs.process import OOM_TAIL_BYTES, alive, how_ended, oom_line, read_pid_file, stop
from runwatch.procs.proctree import start_ticks


def _wait_for(condition, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


def _state(pid: int) -> bytes:
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    return data[data.rindex(b")") + 2 :][:1]


def test_this_process_is_alive():
    assert alive(os.getpid())


def test_a_pid_beyond_pid_max_is_gone():
    with open("/proc/sys/kernel/pid_max") as f:
        assert not alive(int(f.read()) + 1)


@pytest.mark.parametrize(
    "code, sig, expected",
    [
        ("raise SystemExit(3)", None, "exit status 3"),
        ("import time; time.sleep(60)", signal.SIGKILL, "killed by SIGKILL"),
    ],
)
def test_our_child_is_reaped_and_its_end_kept(code, sig, expected):
    with subprocess.Popen([sys.executable, "-c", code]) as child:  # its wait() after ours: ECHILD, fine
        if sig is not None:
            child.send_signal(sig)
        assert _wait_for(lambda: not alive(child.pid))
        assert how_ended(child.pid) == expected
        assert not alive(child.pid)  # asked again: still gone, not a new process by that number


def test_a_zombie_that_is_not_our_child_is_gone():
    # The holder never reaps its child (nothing polls it): a zombie that we cannot wait for.
    holding = (
        "import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'pass']); "
        "print(p.pid, flush=True); time.sleep(60)"
    )
    with subprocess.Popen([sys.executable, "-c", holding], stdout=subprocess.PIPE, text=True) as holder:
        try:
            zombie = int(holder.stdout.readline())
            assert _wait_for(lambda: _state(zombie) == b"Z")
            assert not alive(zombie)
            assert how_ended(zombie) is None  # not ours: nothing reaped here
        finally:
            holder.kill()


@pytest.mark.parametrize(
    "content, pid, noted",
    [
        (b"1234\n", 1234, False),
        (b"  42  ", 42, False),
        (b"0\n", None, True),
        (b"-5\n", None, True),
        (b"abc\n", None, True),
        (b"", None, True),
        (b"\xff\xfe12", None, True),
        (b"12 34\n", None, True),
    ],
)
def test_read_pid_file(tmp_path, content, pid, noted):
    path = tmp_path / "pid"
    path.write_bytes(content)
    notes: list[str] = []
    assert read_pid_file(str(path), notes.append) == pid
    assert bool(notes) == noted
    if noted:
        assert notes[0].startswith(f"runwatch watch: {path}: expected a process id, got ")


def test_read_pid_file_missing_is_silent(tmp_path):
    notes: list[str] = []
    assert read_pid_file(str(tmp_path / "pid"), notes.append) is None
    assert notes == []


@pytest.mark.parametrize(
    "text, expected",
    [
        ("step 1\nstep 2\n", None),
        (
            "Traceback ...\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\nbye\n",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        ),
        (
            "MemoryError\nlater: terminate called after throwing an instance of 'std::bad_alloc'\n",
            "later: terminate called after throwing an instance of 'std::bad_alloc'",
        ),
        ("   MemoryError: " + "x" * 300 + "\n", "MemoryError: " + "x" * 184 + "..."),
    ],
)
def test_oom_line(tmp_path, text, expected):
    path = tmp_path / "stdout.log"
    path.write_text(text)
    assert oom_line(str(path)) == expected


def test_oom_line_reads_only_the_tail(tmp_path):
    path = tmp_path / "stdout.log"
    path.write_text("CUDA out of memory\n" + "fine\n" * (OOM_TAIL_BYTES // 5 + 10))
    assert oom_line(str(path)) is None
    assert oom_line(str(tmp_path / "missing.log")) is None


# --- stop -----------------------------------------------------------------------------------------

STUBBORN = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(120)"],
    stdout=subprocess.PIPE, text=True)
child.stdout.readline()
print(child.pid, flush=True)
time.sleep(120)
"""


def test_stop_kills_a_launched_group_that_ignores_sigterm(tmp_path):
    """A training process and its worker both ignore SIGTERM: after the grace, SIGKILL to the group."""
    marker = {"RUNWATCH_ATTEMPT_ID": "a-1", "RUNWATCH_RUN_DIR": str(tmp_path)}  # what `launch` sets
    with subprocess.Popen(
        [sys.executable, "-c", STUBBORN],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, **marker},
    ) as proc:
        try:
            worker = int(proc.stdout.readline())
            info = {
                "pid": proc.pid,
                "pgid": os.getpgid(proc.pid),
                "attempt_id": "a-1",
                "start_ticks": start_ticks(proc.pid),
            }
            (tmp_path / "launch.json").write_text(json.dumps(info))
            note = stop(proc.pid, str(tmp_path), grace=0.5)
            assert note == "stopped after an anomaly: SIGTERM, then SIGKILL after 0.5 s (2 processes)"
            assert how_ended(proc.pid) == "killed by SIGKILL"
            assert _wait_for(lambda: not alive(worker))  # the group's other member went with it
        finally:
            if alive(proc.pid):
                os.killpg(proc.pid, signal.SIGKILL)


@contextlib.contextmanager
def _sleeper():
    """A child that sleeps until signalled, once it is running; killed if a test leaves it."""
    with subprocess.Popen(
        [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(120)"],
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            proc.stdout.readline()
            yield proc
        finally:
            if alive(proc.pid):
                proc.kill()


def test_stop_a_process_that_obeys_sigterm(tmp_path):
    with _sleeper() as proc:
        # a pid the user gave (`watch --pid`), no launch.json: only the process itself is signalled
        assert stop(proc.pid, str(tmp_path), grace=30, given=True) == "stopped after an anomaly: SIGTERM (1 process)"
        assert how_ended(proc.pid) == "killed by SIGTERM"


def test_stop_a_process_already_gone(tmp_path):
    with subprocess.Popen([sys.executable, "-c", "pass"]) as proc:
        assert _wait_for(lambda: not alive(proc.pid))
        assert stop(proc.pid, str(tmp_path), grace=0.5) == f"process {proc.pid} had already exited"


def test_a_launch_json_of_another_process_is_not_trusted(tmp_path):
    """A pid written into launch.json and pid by hand is no launch of runwatch's: nothing is signalled."""
    with _sleeper() as proc:
        (tmp_path / "launch.json").write_text(json.dumps({"pid": proc.pid, "pgid": os.getpgid(os.getpid()) + 100000}))
        assert stop(proc.pid, str(tmp_path), grace=30, why="a stall", where="runs/x/pid") == (
            f"pid {proc.pid} in runs/x/pid was not started by runwatch for this run: not stopped "
            "(launch.json records no start time or marker for it)"
        )
        assert alive(proc.pid)
