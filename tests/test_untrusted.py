"""Nothing in a run directory is trusted (docs/RELIABILITY.md, "What runwatch trusts"): pids forged
into `pid`, `supervise.lock`, the journal and launch.json are never signalled (real processes,
real signals); symlinks in a run directory are never written through; FIFOs and /dev/zero never
hang or flood a read; a torn journal tail is closed; a supervisor whose write fails after a
launch stops what it launched (a full tmpfs where the machine lets a test mount one)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runwatch.cli import main
from runwatch.errors import UsageError
from runwatch.files import safeio
from runwatch.files.rundir import JOURNAL, LOCK
from runwatch.procs.launched import not_launched, not_supervisor
from runwatch.procs.process import alive, stop
from runwatch.procs.proctree import start_ticks
from runwatch.supervising.launch import launch
from runwatch.supervising.supervise import Supervisor
from runwatch.supervising.supervision import SuperviseOptions, append, last_record, lock_run_dir, read_journal
from runwatch.views.agent import act
from runwatch.views.agent.tools import Tools

pytestmark = pytest.mark.xdist_group("untrusted")


@contextlib.contextmanager
def victim(*argv: str) -> Iterator[subprocess.Popen[bytes]]:
    """A process runwatch did not start (a plain `sleep` by default), killed at the end if alive."""
    proc = subprocess.Popen(list(argv) or ["sleep", "60"], start_new_session=True)
    try:
        while start_ticks(proc.pid) is None:
            time.sleep(0.01)
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def forge(run: Path, pid: int) -> None:
    """What anyone who can write the run directory can write: the pid everywhere, and a launch.json
    with the victim's real start time and a made-up marker."""
    run.mkdir(parents=True, exist_ok=True)
    (run / "pid").write_text(f"{pid}\n")
    (run / LOCK).write_text(f"{pid}\n")
    info = {"pid": pid, "pgid": pid, "start_ticks": start_ticks(pid), "attempt_id": "forged", "waiter": pid}
    (run / "launch.json").write_text(json.dumps(info))
    rec = {"time": time.time(), "event": "launch", "attempt": 1, "pid": pid, "supervisor": pid}
    (run / JOURNAL).write_text(json.dumps(rec) + "\n")


def nan_log(run: Path) -> None:
    with open(run / "metrics.jsonl", "w") as f:
        for s in range(1, 6):
            f.write(json.dumps({"step": s, "t": 1000.0 + s, "loss": "NaN" if s == 5 else 1.0 / s}) + "\n")


def _gone(pid: int, timeout: float = 20.0) -> bool:
    end = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < end:
        time.sleep(0.02)
    return not alive(pid)


# --- signals: only what runwatch started ---------------------------------------------------------


def test_a_pid_forged_everywhere_is_refused_by_name_and_never_signalled(tmp_path):
    run = tmp_path / "runs" / "x"
    with victim() as v:
        forge(run, v.pid)
        assert (
            not_launched(str(run), v.pid)
            == "its environment has no RUNWATCH_ATTEMPT_ID of the launch that launch.json records"
        )
        assert not_supervisor(str(run), v.pid) == "it does not hold the run's supervise.lock"
        note = stop(v.pid, str(run), grace=0.5, where="runs/x/pid")
        assert note.startswith(f"pid {v.pid} in runs/x/pid was not started by runwatch for this run: not stopped (")
        tools = Tools(str(tmp_path))
        with pytest.raises(UsageError) as exc:
            act.stop_run(tools, "runs/x")
        assert str(exc.value) == (
            f"stop_run: pid {v.pid} in runs/x/supervise.jsonl was not started by runwatch for this run: not stopped "
            "(it does not hold the run's supervise.lock); "
            f"pid {v.pid} in runs/x/pid was not started by runwatch for this run: not stopped "
            "(its environment has no RUNWATCH_ATTEMPT_ID of the launch that launch.json records)"
        )
        time.sleep(0.2)
        assert v.poll() is None and alive(v.pid)  # no SIGTERM, no SIGINT, no SIGKILL


def test_a_shell_and_its_children_are_not_stopped_through_a_forged_pid(tmp_path):
    run = tmp_path / "run"
    with victim("sh", "-c", "sleep 60 & sleep 60 & wait") as v:
        forge(run, v.pid)
        (run / LOCK).unlink()
        (run / JOURNAL).unlink()
        with pytest.raises(UsageError, match=rf"^stop_run: pid {v.pid} in run/pid was not started by runwatch"):
            act.stop_run(Tools(str(tmp_path)), "run")
        time.sleep(0.2)
        assert v.poll() is None


def test_watch_stop_on_anomaly_leaves_a_forged_pid_alone(tmp_path, capsys):
    run = tmp_path / "run"
    with victim() as v:
        forge(run, v.pid)
        nan_log(run)
        code = main(["watch", str(run), "--stop-on-anomaly", "--poll", "0.05"])
        assert code == 7
        err = capsys.readouterr().err
        assert f"runwatch watch: pid {v.pid} in {run}/pid was not started by runwatch for this run: not stopped" in err
        assert v.poll() is None


def test_a_real_launch_is_proven_and_stopped(tmp_path):
    run = tmp_path / "runs" / "real"
    info = launch(str(run), ["sh", "-c", "sleep 60 & sleep 60"])
    pid = info["pid"]
    assert not_launched(str(run), pid) is None
    assert not_launched(str(tmp_path / "runs" / "other"), pid) == "launch.json does not record it"
    doc = json.loads(act.stop_run(Tools(str(tmp_path)), "runs/real")[0])
    assert doc["stopped"].startswith("stopped after stop_run: SIGTERM (")
    assert _gone(pid)


def test_a_live_launch_with_a_copied_launch_json_is_not_another_runs(tmp_path):
    """A process runwatch launched for run a, named in run b (launch.json copied): b's marker differs."""
    a, b = tmp_path / "a", tmp_path / "b"
    info = launch(str(a), ["sleep", "60"])
    try:
        b.mkdir()
        (b / "launch.json").write_text((a / "launch.json").read_text())
        (b / "pid").write_text(f"{info['pid']}\n")
        assert not_launched(str(b), info["pid"]) == "its RUNWATCH_RUN_DIR is not this run directory"
        assert "not stopped" in stop(info["pid"], str(b), grace=0.5)
        assert alive(info["pid"])
    finally:
        stop(info["pid"], str(a), grace=1.0)
    assert _gone(info["pid"])


def test_a_supervisor_is_proven_by_the_lock_it_holds(tmp_path):
    run = tmp_path / "run"
    fd = lock_run_dir(str(run))
    try:
        assert not_supervisor(str(run), os.getpid()) is None
        with victim() as v:
            assert not_supervisor(str(run), v.pid) == "it does not hold the run's supervise.lock"
    finally:
        os.close(fd)
    assert not_supervisor(str(run), os.getpid()) == "it does not hold the run's supervise.lock"


def test_a_supervisor_never_adopts_or_signals_a_forged_pid(tmp_path):
    run = tmp_path / "run"
    with victim() as v:
        forge(run, v.pid)
        (run / LOCK).unlink()
        # an ongoing supervision whose supervisor died, and its pid file naming the victim
        append(
            str(run),
            {
                "time": time.time(),
                "event": "verdict",
                "attempt": 1,
                "pid": v.pid,
                "kind": "stall",
                "class": "transient",
                "step": 3,
                "supervisor": 999999,
            },
        )
        lines: list[str] = []
        sup = Supervisor(
            str(run), ["true"], opts=SuperviseOptions(backoff=0, restarts=1), log=lines.append, out=lines.append
        )
        sup.run()
        assert v.poll() is None
        said = "\n".join(lines)
        assert f"pid {v.pid} in {run}/pid was not started by runwatch for this run: not adopted" in said
        written = read_journal(str(run))[2:]  # after the forged record and the verdict
        assert written and all(r.get("pid") != v.pid for r in written)


# --- writes: never through a symlink, never a file runwatch did not create ----------------------


def test_a_symlinked_lock_is_refused_and_the_file_outside_untouched(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    run = tmp_path / "run"
    run.mkdir()
    os.symlink(outside, run / LOCK)
    with pytest.raises(UsageError, match="supervise.lock is a symbolic link: runwatch does not write through one"):
        lock_run_dir(str(run))
    assert outside.read_text() == "precious\n"
    os.unlink(run / LOCK)
    os.link(outside, run / LOCK)  # a hard link is no better
    with pytest.raises(UsageError, match="supervise.lock has 2 hard links: not written"):
        lock_run_dir(str(run))
    os.unlink(run / LOCK)
    (run / LOCK).write_text("#!/bin/sh\nnot a pid\n")
    with pytest.raises(UsageError, match="supervise.lock holds something else than a pid: not written"):
        lock_run_dir(str(run))
    assert outside.read_text() == "precious\n"


@pytest.mark.parametrize("name", ["stdout.log", JOURNAL, "supervise.log"])
def test_runwatch_never_appends_through_a_symlink(tmp_path, name):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    run = tmp_path / "run"
    run.mkdir()
    os.symlink(outside, run / name)
    if name == "stdout.log":
        with pytest.raises(UsageError, match="stdout.log is a symbolic link"):
            launch(str(run), ["true"])
        assert not (run / "pid").exists()
    elif name == JOURNAL:
        with pytest.raises(OSError, match="supervise.jsonl is a symbolic link"):
            append(str(run), {"event": "launch"})
    else:
        with pytest.raises(UsageError, match="cannot write run/supervise.log: supervise.log is a symbolic link"):
            act.launch_supervised(Tools(str(tmp_path)), "run", ["true"])
    assert outside.read_text() == "precious\n"


def test_log_outside_the_run_directory_is_refused_to_an_agent(tmp_path):
    (tmp_path / "run").mkdir()
    for given in (str(tmp_path / "outside.jsonl"), "../outside.jsonl"):
        # the person at the shell names any log (a Trainer's folder beside the run directory)...
        Supervisor(str(tmp_path / "run"), ["true"], read=_read(log=given))
        # ...an agent's tool stays inside the run directory, under ROOT
        with pytest.raises(UsageError, match="^launch_supervised: "):
            act.launch_supervised(Tools(str(tmp_path)), "run", ["true"], ["--log", given])


def _read(**kw: object):  # type: ignore[no-untyped-def]
    from runwatch.reading.readers import ReadOptions

    return ReadOptions(**kw)  # type: ignore[arg-type]


def test_a_torn_journal_tail_is_closed_before_the_next_record(tmp_path):
    append(str(tmp_path), {"event": "launch", "attempt": 1})
    with open(tmp_path / JOURNAL, "a") as f:
        f.write('{"event": "sto')  # a supervisor killed mid-write
    append(str(tmp_path), {"event": "launch", "attempt": 2})
    assert [r["attempt"] for r in read_journal(str(tmp_path))] == [1, 2]
    assert last_record(str(tmp_path)) == {"event": "launch", "attempt": 2}
    recs = safeio.read_records(str(tmp_path / JOURNAL), 1 << 20)
    assert recs.notes(JOURNAL) == [f"{JOURNAL}:2: unreadable record skipped"]


# --- reads: regular files only, bounded, never blocking -----------------------------------------


def _run_cli(*argv: str, timeout: float = 60.0) -> tuple[int, str, str]:
    """`runwatch ARGV` in this process, on a daemon thread: a regression that hangs on a file fails
    at the timeout instead of hanging the suite. (code, stdout, stderr)."""
    result: list[Any] = []
    out, err = io.StringIO(), io.StringIO()

    def call() -> None:
        try:
            result.append(main(list(argv)))
        except BaseException as exc:  # noqa: BLE001 - reported below, as the failure it is
            result.append(exc)

    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        t = threading.Thread(target=call, daemon=True)
        t.start()
        t.join(timeout)
    assert result, f"runwatch {' '.join(argv)} did not answer within {timeout:g} s"
    if isinstance(result[0], BaseException):
        raise result[0]
    return result[0], out.getvalue(), err.getvalue()


@pytest.mark.parametrize("name", [JOURNAL, "stdout.log", "watchdog.json", "launch.json", "exit.json", "pid"])
def test_a_fifo_in_a_side_files_place_never_hangs_status(tmp_path, name):
    run = tmp_path / "run"
    run.mkdir()
    nan_log(run)
    os.mkfifo(run / name)
    code, out, err = _run_cli("status", str(run), "--json")
    assert code in (0, 7), err
    json.loads(out)
    if name == JOURNAL:
        recs = safeio.read_records(str(run / name), 1 << 20)
        assert recs.problem == "supervise.jsonl is not a regular file (a FIFO)"


def test_dev_zero_as_stdout_log_is_read_within_its_bound(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    nan_log(run)
    os.symlink("/dev/zero", run / "stdout.log")
    with pytest.raises(safeio.NotRegularFileError, match=r"^stdout.log is not a regular file \(a device\)$"):
        safeio.read_tail(str(run / "stdout.log"), 1 << 20)
    code, out, err = _run_cli("status", str(run), "--json")
    assert code in (0, 7), err
    json.loads(out)


def test_a_final_line_without_newline_is_read_from_the_end(tmp_path):
    path = tmp_path / "stdout.log"
    with open(path, "wb") as f:
        f.write(b"first\nsecond\n")
        f.write(b"x" * (8 << 20))  # no newline: a torn, huge last line
    lines, torn = safeio.tail_lines(str(path), 2, 1 << 20)
    assert (lines, torn) == ([], True)  # not within the bound: nothing, never the whole file
    lines, torn = safeio.tail_lines(str(path), 2, 16 << 20)
    assert (lines, torn) == ([b"first", b"second"], True)


@pytest.mark.parametrize(
    "line",
    [
        "[" * 30_000 + "]" * 30_000,
        '{"event": "launch", "time": NaN}',
        '{"event": "launch", "time": Infinity}',
        b"\xff\xfe not utf-8",
        '{"event": "launch", "attempt": ' + "9" * 5000 + "}",
    ],
    ids=["nested", "nan", "infinity", "utf8", "digits"],
)
def test_any_bytes_in_the_journal_are_a_skipped_line(tmp_path, line):
    run = tmp_path / "run"
    run.mkdir()
    nan_log(run)
    append(str(run), {"time": 1.0, "event": "launch", "attempt": 1, "pid": 1, "supervisor": 1})
    with open(run / JOURNAL, "ab") as f:
        f.write((line.encode() if isinstance(line, str) else line) + b"\n")
    append(str(run), {"time": 2.0, "event": "stop", "attempt": 1, "pid": 1, "supervisor": 1})
    assert [r["event"] for r in read_journal(str(run))] == ["launch", "stop"]
    for argv in (["status", str(run), "--json"], ["goodput", str(run), "--json"]):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)  # (an exception would escape here: no traceback means none did)
        assert code in (0, 7), err.getvalue()
        json.loads(out.getvalue(), parse_constant=lambda c: pytest.fail(f"{c} in {argv[0]} --json"))
    from runwatch.views.serve.supervision import SupervisionView

    view = SupervisionView(str(run / JOURNAL))
    view.refresh()
    assert view.error == f"{JOURNAL}:2: unreadable record skipped"


# --- the supervisor never leaves an orphan ------------------------------------------------------


def _supervise_until_error(run: Path) -> tuple[str, list[str]]:
    lines: list[str] = []
    sup = Supervisor(str(run), ["sleep", "60"], opts=SuperviseOptions(backoff=0), log=lines.append, out=lines.append)
    with pytest.raises(UsageError) as exc:
        sup.run()
    return str(exc.value), lines


def _sleeps_of(run: Path) -> list[int]:
    """The processes whose environment names `run` as their run directory (what a launch there started)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError), open(f"/proc/{name}/environ", "rb") as f:
                if f"RUNWATCH_RUN_DIR={run}\0".encode() in b"\0" + f.read() + b"\0":
                    out.append(int(name))
    return [p for p in out if alive(p)]


def test_a_journal_that_is_a_directory_stops_what_was_launched(tmp_path):
    run = tmp_path / "run"
    (run / JOURNAL).mkdir(parents=True)
    message, _ = _supervise_until_error(run)
    info = json.loads((run / "launch.json").read_text())
    assert message.startswith(f"supervise: cannot write {run}/supervise.jsonl: Is a directory; "), message
    assert message.endswith(f"stopped the process just launched (pid {info['pid']}): SIGTERM (1 process)")
    assert _gone(info["pid"]) and _sleeps_of(run) == []


@pytest.fixture
def tiny_fs(tmp_path):
    """A 4 MiB tmpfs mounted for the test (root only; skipped where mounting is not allowed)."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True).returncode
    ):
        pytest.skip("cannot mount a small file system here")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_disk_after_the_launch_stops_the_training(tmp_path, tiny_fs, monkeypatch):
    from runwatch.supervising import supervision

    monkeypatch.setattr(supervision, "MIN_FREE_BYTES", 0)
    run = tiny_fs / "run"
    run.mkdir()
    lock_fd = lock_run_dir(str(run))  # (the lock, then the header of stdout.log, take the last pages)
    os.close(lock_fd)
    (run / LOCK).unlink()
    fd = os.open(tiny_fs / "fill", os.O_WRONLY | os.O_CREAT)
    with contextlib.suppress(OSError):  # fill every page
        while True:
            os.write(fd, b"\0" * 4096)
    os.close(fd)
    os.truncate(tiny_fs / "fill", os.path.getsize(tiny_fs / "fill") - 2 * 4096)  # room for the lock and stdout.log
    message, _ = _supervise_until_error(run)
    assert message.startswith(f"launch: cannot write {run}/launch.json: No space left on device; "), message
    assert "stopped the process just launched (pid " in message, message
    assert _sleeps_of(run) == []


def test_launch_supervised_through_a_symlinked_lock_starts_nothing_and_writes_nothing_outside(tmp_path):
    outside, root = tmp_path / "outside.txt", tmp_path / "root"
    (root / "run").mkdir(parents=True)
    beside = root / "notes.txt"  # inside ROOT, but not the run's
    for f in (outside, beside):
        f.write_text("precious\n")
    os.symlink(outside, root / "run" / LOCK)
    tools = Tools(str(root))
    with pytest.raises(UsageError) as exc:
        act.launch_supervised(tools, "run", ["sleep", "60"])
    assert str(exc.value) == f"launch_supervised: run/supervise.lock leads outside {tools.root}: refused"
    os.unlink(root / "run" / LOCK)
    os.symlink(beside, root / "run" / LOCK)
    with pytest.raises(UsageError) as exc:
        act.launch_supervised(tools, "run", ["sleep", "60"])
    assert str(exc.value) == (
        f"launch_supervised: supervise exited at once: supervise: cannot write to {tools.root}/run: "
        "supervise.lock is a symbolic link: runwatch does not write through one"
    )
    assert outside.read_text() == beside.read_text() == "precious\n"
    assert not (root / "run" / "pid").exists()


def test_the_page_reads_about_its_per_pass_bound_of_a_long_log(tmp_path, monkeypatch):
    from runwatch.views.serve.runs import RunView, run_target

    path = tmp_path / "metrics.jsonl"
    line = json.dumps({"step": 0, "t": 1000.0, "loss": 0.5, "lr": 1e-3, "note": "x" * 60})
    with open(path, "w") as f:
        f.writelines(line.replace('"step": 0', f'"step": {s}') + "\n" for s in range(1, 200_001))
    assert os.path.getsize(path) > 20 << 20
    target = run_target(str(path))
    assert target is not None
    view = RunView("run", target)
    read: list[int] = []
    real = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, off: read.append(len(data := real(fd, n, off))) or data)
    assert view.refresh(max_bytes=4 << 20)  # more is waiting: the run is catching up
    assert 4 << 20 <= sum(read) <= 5 << 20  # a pass reads about its bound, never a 16 MiB read a poll
    assert view.summary()["catching_up"] is True  # the list says so (the unread tail is no line being written)


def test_a_fifo_as_runwatch_toml_is_one_line_never_a_hang(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    nan_log(run)
    os.mkfifo(run / "runwatch.toml")
    code, _, err = _run_cli("check", str(run))
    assert (code, err) == (2, "runwatch.toml: runwatch.toml is not a regular file (a FIFO)\n")
