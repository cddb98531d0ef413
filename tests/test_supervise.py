"""`runwatch supervise`: real trainings (tests/supervise_train.py) under a real supervisor process,
real signals, a real local HTTP server for notifications."""

from __future__ import annotations

import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from runwatch.cli import main
from runwatch.procs.process import alive
from runwatch.supervising.notify import mask_url
from runwatch.views.status import format_status, status

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "supervise_train.py")
FAST = ["--poll", "0.1", "--stall", "4", "--backoff", "0.1"]


def _cmd(run, opts=(), train=()):
    return [
        sys.executable,
        "-m",
        "runwatch",
        "supervise",
        str(run),
        *FAST,
        *opts,
        "--",
        sys.executable,
        TRAIN,
        str(run),
        *train,
    ]


def _supervise(run, opts=(), train=(), timeout=90):
    return subprocess.run(_cmd(run, opts, train), capture_output=True, text=True, timeout=timeout)


def _journal(run):
    with open(run / "supervise.jsonl") as f:
        return [json.loads(line) for line in f]


def _events(run):
    return [r["event"] for r in _journal(run)]


def _wait(cond, timeout=30.0):
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.05)
    return False


def test_crash_is_relaunched_and_the_run_completes(tmp_path):
    run = tmp_path / "run"
    res = _supervise(run, train=["--steps", "30", "--fault", "kill@12"])
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1] == "OK done step=30"
    recs = _journal(run)
    assert [r["event"] for r in recs] == ["launch", "verdict", "relaunch", "verdict", "done"]
    v = recs[1]
    assert (v["kind"], v["class"], v["step"], v["attempt"]) == ("process_exit", "transient", 10, 1)
    assert recs[2]["attempt"] == 2 and recs[2]["pid"] != recs[0]["pid"] and recs[2]["backoff_seconds"] == 0.1
    assert recs[2]["checkpoint"] == str(run / "ckpt-10.json") and recs[2]["env"] == {}
    for r in recs:
        assert {"time", "event", "attempt", "pid", "kind", "class", "step", "checkpoint"} <= r.keys()
    # the kill came at step 12, after the window closing at 10 was logged: 10 updates redone from 10
    assert recs[-1]["goodput"]["steps_kept"] == 30 and recs[-1]["goodput"]["steps_run"] == 30
    assert recs[-1]["goodput"]["restarts"] == 1 and recs[-1]["goodput"]["rollbacks"] == 0
    st = status(str(run), gpus=False)
    assert st["supervise"]["attempt"] == 2 and st["supervise"]["restarts"] == 1 and st["supervise"]["max_restarts"] == 5
    assert "supervise attempt 2, restarts 1/5, rollbacks 0/2 (supervisor done)" in format_status(st)
    out = (run / "stdout.log").read_text()
    assert out.count("--- runwatch launch") == 2 and "step 12: kill (injected)" in out


def test_nan_rolls_back_to_the_checkpoint_before_the_window(tmp_path):
    run = tmp_path / "run"
    # window 5: the NaN at update 27 ends the session at step 26 (the window 26-30 never closes)
    res = _supervise(run, train=["--steps", "40", "--fault", "nan@27"])
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1] == "OK done step=40"
    recs = _journal(run)
    assert [r["event"] for r in recs] == ["launch", "verdict", "stop", "rollback", "verdict", "done"] or [
        r["event"] for r in recs
    ] == ["launch", "verdict", "rollback", "verdict", "done"]
    v = next(r for r in recs if r["event"] == "verdict")
    assert (v["kind"], v["class"], v["step"]) == ("nonfinite_loss", "divergence", 26)
    rb = next(r for r in recs if r["event"] == "rollback")
    assert rb["checkpoint"] == str(run / "ckpt-20.json") and rb["skip_steps"] == "21-27"
    assert rb["env"] == {
        "RUNWATCH_RESUME_FROM": str(run / "ckpt-20.json"),
        "RUNWATCH_ROLLBACK": "1",
        "RUNWATCH_SKIP_STEPS": "21-27",
    }
    out = (run / "stdout.log").read_text()
    assert f"resume path={run / 'ckpt-20.json'} rollback=1 skip=21-27" in out and "skipping steps 21-27" in out
    g = recs[-1]["goodput"]
    assert g["steps_kept"] == 40 and g["steps_run"] == 26 + 20 and g["rollbacks"] == 1
    assert g["steps_ratio"] == round(40 / 46, 4)
    assert 0 < g["ratio"] == round(g["productive_seconds"] / g["wall_seconds"], 4) <= 1


def test_spike_rolls_back_before_the_first_spiking_window(tmp_path):
    run = tmp_path / "run"
    res = _supervise(run, train=["--steps", "60", "--fault", "spike@36"])
    assert res.returncode == 0, res.stderr
    v = next(r for r in _journal(run) if r["event"] == "verdict")
    assert (v["kind"], v["onset"], v["step"]) == ("loss_spike", 40, 45)
    rb = next(r for r in _journal(run) if r["event"] == "rollback")
    # the onset window holds steps 36-40: the latest checkpoint below 36 is the one at 30
    assert rb["checkpoint"] == str(run / "ckpt-30.json") and rb["skip_steps"] == "31-45"


def test_fatal_exits_7_without_a_relaunch(tmp_path):
    run = tmp_path / "run"
    res = _supervise(run, train=["--fault", "error@13"])
    assert res.returncode == 7
    assert res.stdout.splitlines()[-1] == (
        "ANOMALY session_error step=12: session ended with reason error: RuntimeError: injected error at step 13"
    )
    assert _events(run) == ["launch", "verdict", "gave_up"]
    assert _journal(run)[-1]["class"] == "fatal"


def test_a_process_lingering_after_its_session_ended_is_stopped_after_the_grace(tmp_path):
    run = tmp_path / "run"
    t0 = time.monotonic()
    res = _supervise(run, opts=["--exit-grace", "1"], train=["--fault", "error_hang@13"])
    assert res.returncode == 7 and time.monotonic() - t0 < 60
    assert _events(run) == ["launch", "verdict", "stop", "gave_up"]
    stop = next(r for r in _journal(run) if r["event"] == "stop")
    assert "still running 1 s after its session ended (session_error)" in stop["message"]


def test_divergence_in_a_log_that_names_no_checkpoint_is_fatal_saying_so(tmp_path):
    run = tmp_path / "run"
    res = _supervise(run, train=["--ckpt-every", "100", "--fault", "nan@7"])
    assert res.returncode == 7
    assert res.stdout.splitlines()[-1].endswith("(the log names no checkpoints to roll back to)")
    assert "rollback" not in _events(run)


@pytest.mark.parametrize(
    "opts, code",
    # a spent budget exits with gave_up's code, whatever the class of the last verdict
    [([], 7), (["--exit-transient", "75"], 7), (["--exit-code", "gave_up=9", "--exit-code", "transient=3"], 9)],
)
def test_a_spent_restart_budget_gives_up(tmp_path, opts, code):
    run = tmp_path / "run"
    res = _supervise(run, ["--restarts", "1", *opts], train=["--fault", "crash@7", "--fault", "crash@17"])
    assert res.returncode == code
    last = res.stdout.splitlines()[-1]
    assert last.startswith("ANOMALY process_exit step=15: process ") and last.endswith("(gave up after 1 restarts)")
    assert _events(run) == ["launch", "verdict", "relaunch", "verdict", "gave_up"]
    assert _journal(run)[-1]["goodput"]["restarts"] == 1


def test_a_rollback_budget_of_zero_gives_up(tmp_path):
    run = tmp_path / "run"
    res = _supervise(run, ["--rollbacks", "0"], train=["--fault", "nan@27"])
    assert res.returncode == 7 and res.stdout.splitlines()[-1].endswith("(gave up after 0 rollbacks)")


def test_a_hang_is_stopped_and_relaunched_with_back_off(tmp_path):
    run = tmp_path / "run"
    res = _supervise(run, ["--stall", "1.5"], train=["--steps", "30", "--fault", "hang@12"])
    assert res.returncode == 0, res.stderr
    recs = _journal(run)
    assert [r["event"] for r in recs] == ["launch", "verdict", "stop", "relaunch", "verdict", "done"]
    assert recs[1]["kind"] == "stall" and recs[2]["message"] == (
        "runwatch supervise: stopped after a stall: SIGTERM (1 process)"
    )
    assert recs[2]["stopped"] == 1 and recs[2]["left"] == []


def test_a_lingering_process_is_stopped_after_done(tmp_path):
    run = tmp_path / "run"
    res = _supervise(run, ["--exit-grace", "1"], train=["--steps", "10", "--fault", "exit_hang@10"])
    assert res.returncode == 0 and res.stdout.splitlines()[-1] == "OK done step=10"
    recs = _journal(run)
    assert [r["event"] for r in recs] == ["launch", "verdict", "stop", "done"]
    assert recs[2]["message"] == (
        "runwatch supervise: stopped when still running 1 s after the run completed: SIGTERM (1 process)"
    )
    assert not alive(recs[0]["pid"])


def test_a_killed_supervisor_is_replaced_and_adopts_the_training(tmp_path):
    run = tmp_path / "run"
    go = run / "go"
    # the training waits before update 21 until the test says go: the kill at 22 comes after the adoption
    train = ["--steps", "40", "--fault", "kill@22", "--hold", f"{go}@21"]
    opts = ["--stall", "120"]
    first = subprocess.Popen(_cmd(run, opts, train), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    third = None
    try:
        assert _wait(
            lambda: (
                (run / "pid").exists()
                and (run / "metrics.jsonl").exists()
                and (run / "metrics.jsonl").stat().st_size > 0
            )
        )
        second = _supervise(run, opts, train, timeout=60)
        assert second.returncode == 2
        assert second.stderr.strip() == f"supervise: {run}: another supervisor (pid {first.pid}) is running there"
        child = int((run / "pid").read_text())
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        assert alive(child)  # the training runs on without its supervisor
        third = subprocess.Popen(_cmd(run, opts, train), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert _wait(lambda: len(_journal(run)) >= 2, timeout=60)
        go.touch()
        out, err = third.communicate(timeout=90)
    finally:
        for p in (first, third):
            if p is not None and p.poll() is None:
                p.kill()
        first.communicate()
        if third is not None and third.returncode is None:
            third.communicate()
    assert third.returncode == 0, err
    assert f"adopting the running process {child} (attempt 1)" in err
    recs = _journal(run)
    assert [r["event"] for r in recs] == ["launch", "launch", "verdict", "relaunch", "verdict", "done"]
    assert recs[1]["adopted"] is True and recs[1]["pid"] == child and recs[1]["supervisor"] == third.pid
    assert recs[3]["restarts"] == 1 and recs[3]["attempt"] == 2
    assert (run / "stdout.log").read_text().count("--- runwatch launch") == 2  # never a second copy


# --- bad input ------------------------------------------------------------------------------------


def test_a_command_that_cannot_start_is_a_usage_error(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["supervise", str(run), "--", "/nonexistent/cmd"]) == 2
    assert capsys.readouterr().err == "launch: cannot start '/nonexistent/cmd': No such file or directory\n"
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\n")
    assert main(["supervise", str(run), "--", str(script)]) == 2
    assert capsys.readouterr().err == f"launch: cannot start {str(script)!r}: Permission denied\n"
    assert not (run / "pid").exists()
    assert main(["supervise", str(run), "true"]) == 2
    assert capsys.readouterr().err == "supervise: expected RUN_DIR [options] -- CMD ...\n"
    assert main(["supervise", str(run), "--restarts", "-1", "--", "true"]) == 2
    assert capsys.readouterr().err == "supervise.restarts must be an int >= 0, got -1\n"


def test_a_command_that_dies_before_its_first_record_is_not_relaunched(tmp_path):
    run = tmp_path / "run"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "runwatch",
            "supervise",
            str(run),
            *FAST,
            "--",
            sys.executable,
            "-c",
            "import sys; sys.exit('no such data set: /data/x')",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2
    assert res.stderr.splitlines()[-1].endswith("not relaunched. Last output: no such data set: /data/x")
    assert _events(run) == ["launch", "verdict", "gave_up"]


@pytest.mark.parametrize("where", ["file", "proc"])
def test_a_run_dir_that_cannot_be_written_fails_before_launching(tmp_path, capsys, where):
    if where == "file":
        (tmp_path / "f").write_text("")
        run = tmp_path / "f" / "run"
        expected = f"supervise: cannot create {run}: Not a directory\n"
    else:
        run = "/proc/runwatch-test-run"
        expected = f"supervise: cannot create {run}: No such file or directory\n"
    assert main(["supervise", str(run), "--", sys.executable, "-c", "open('launched', 'w')"]) == 2
    assert capsys.readouterr().err == expected
    assert not os.path.exists("launched")


@pytest.fixture
def tmpfs(tmp_path):
    """A tiny tmpfs (root and mount(2) needed; skipped otherwise)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()

    def mount(opts):
        res = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(mnt)], capture_output=True)
        if res.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {res.stderr.decode().strip()}")
        return mnt

    yield mount
    subprocess.run(["umount", str(mnt)], capture_output=True)


def test_a_read_only_run_dir_fails_before_launching(tmpfs, capsys):
    mnt = tmpfs("ro,size=1m")
    assert main(["supervise", str(mnt), "--", "true"]) == 2
    assert capsys.readouterr().err == f"supervise: cannot write to {mnt}: Read-only file system\n"


def test_a_full_disk_fails_before_launching(tmpfs, capsys):
    mnt = tmpfs("size=2m")
    assert main(["supervise", str(mnt), "--", "true"]) == 2
    assert capsys.readouterr().err.startswith(f"supervise: {mnt}: only ")
    assert not (mnt / "pid").exists()


# --- notifications --------------------------------------------------------------------------------


class _Hook(http.server.BaseHTTPRequestHandler):
    received: list = []
    status = 200

    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).received.append((self.path, json.loads(body)))
        self.send_response(self.status)
        self.end_headers()

    def log_message(self, *args):
        pass


def _server(status):
    handler = type("Hook", (_Hook,), {"received": [], "status": status})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, handler


def test_notifications_reach_a_local_server_and_failures_do_not_stop_supervision(tmp_path):
    pytest.importorskip("apprise")
    good, good_h = _server(200)
    bad, bad_h = _server(500)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]  # nothing listens there once the socket is closed
    try:
        run = tmp_path / "run"
        urls = [
            f"json://127.0.0.1:{good.server_port}/hook",
            f"json://127.0.0.1:{bad.server_port}/hook",
            f"json://127.0.0.1:{closed}/hook",
        ]
        opts = [x for u in urls for x in ("--notify", u)]
        res = _supervise(run, opts, train=["--steps", "20", "--fault", "kill@7"])
    finally:
        for server in (good, bad):
            server.shutdown()
            server.server_close()
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1] == "OK done step=20"
    bodies = [msg["message"] for path, msg in good_h.received]
    assert [b.splitlines()[1].split(" ")[1] for b in bodies] == ["verdict", "relaunch", "verdict", "done"]
    assert bodies[0].startswith("ANOMALY process_exit step=5: process ")
    assert f"run: {run}" in bodies[0] and f"host: {socket.gethostname()}" in bodies[0]
    assert "last lines of stdout.log:" in bodies[0] and "step 7: kill (injected)" in bodies[0]
    assert good_h.received[0][0] == "/hook" and good_h.received[0][1]["title"] == "runwatch verdict: run"
    assert len(bad_h.received) == 4  # tried each time, failed each time
    failed = [r for r in _journal(run) if r["event"] == "notify_failed"]
    assert len(failed) == 8 and {r["url"] for r in failed} == set(urls[1:])
    assert f"notification to json://127.0.0.1:{closed}/hook failed:" in res.stderr


def test_a_warning_is_journaled_and_notified_once_and_never_acted_on(tmp_path):
    """`--severity loss_spike=warn`: the spike is a warning — a `warning` record and one
    notification — and the run goes on to completion without a rollback."""
    pytest.importorskip("apprise")
    server, hook = _server(200)
    try:
        run = tmp_path / "run"
        opts = ["--severity", "loss_spike=warn", "--notify", f"json://127.0.0.1:{server.server_port}/hook"]
        res = _supervise(run, opts, train=["--steps", "40", "--fault", "spike@12"])
    finally:
        server.shutdown()
        server.server_close()
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[-1] == "OK done step=40"
    assert [line.split(":")[0] for line in lines if line.startswith("WARNING")] == ["WARNING loss_spike step=20"]
    assert _events(run) == ["launch", "warning", "verdict", "done"]
    warning = _journal(run)[1]
    assert (warning["kind"], warning["step"], warning["warned"]) == ("loss_spike", 20, 1)
    bodies = [msg["message"] for _path, msg in hook.received]
    assert [b.splitlines()[1].split(" ")[1] for b in bodies] == ["warning", "verdict", "done"]
    assert bodies[0].startswith("WARNING loss_spike step=20: loss ")
    verdict = json.loads((run / "watchdog.json").read_text())
    assert [(w["kind"], w["step"]) for w in verdict["warnings"]] == [("loss_spike", 20)]


@pytest.mark.parametrize(
    "url, shown",
    [
        ("json://127.0.0.1:8080/hook", "json://127.0.0.1:8080/hook"),
        ("json://user:s3cret@example.com/hook", "json://***@example.com/hook"),
        ("slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ/#general", "slack://***/***/***/#***"),
        ("ntfy://ntfy.sh/topic?token=tk_abcdef123456", "ntfy://ntfy.sh/topic?token=***"),
        ("mailto://user:password@gmail.com?to=a@b.c", "mailto://***@gmail.com?to=***"),
        ("tgram://123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/987654", "tgram://***/***"),
        ("not a url", "***"),
    ],
)
def test_mask_url(url, shown):
    assert mask_url(url) == shown


def test_no_secret_reaches_the_journal_or_stderr(tmp_path):
    pytest.importorskip("apprise")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = tmp_path / "run"
    url = f"json://admin:hunter2secret@127.0.0.1:{port}/hook/tok3nABCDEF?key=topsecretkey"
    res = _supervise(run, ["--notify", url], train=["--steps", "10"])
    assert res.returncode == 0, res.stderr
    text = (run / "supervise.jsonl").read_text() + res.stderr + res.stdout
    for secret in ("hunter2secret", "tok3nABCDEF", "topsecretkey", "admin"):
        assert secret not in text
    assert f"json://***@127.0.0.1:{port}/hook/***?key=***" in text


def test_toml_supervise_table(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "runwatch.toml").write_text("[supervise]\nrestarts = -3\n")
    assert main(["supervise", str(run), "--", "true"]) == 2
    assert capsys.readouterr().err == "supervise.restarts must be an int >= 0, got -3\n"
    (run / "runwatch.toml").write_text("[supervise]\nbackoff = 0.1\nrestarts = 0\n[watch]\npoll = 0.1\n")
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "runwatch",
            "supervise",
            str(run),
            "--",
            sys.executable,
            TRAIN,
            str(run),
            "--fault",
            "kill@7",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 7 and res.stdout.splitlines()[-1].endswith("(gave up after 0 restarts)")
    assert _journal(run)[-1]["budgets"] == {"restarts": 0, "rollbacks": 2}


def test_docs_table_is_generated_from_the_options():
    from runwatch.options import markdown_table
    from runwatch.reading.readers import ReadOptions
    from runwatch.supervising.supervise import SuperviseOptions

    with open(os.path.join(os.path.dirname(HERE), "docs", "SUPERVISE.md")) as f:
        text = f.read()
    assert markdown_table(SuperviseOptions, "supervise") in text
    assert markdown_table(ReadOptions, "supervise") in text


def test_demo_without_torch_says_what_to_install(tmp_path):
    # python -S: no site-packages, as after `pip install runwatch` alone
    src = os.path.join(os.path.dirname(HERE), "src")
    res = subprocess.run(
        [
            sys.executable,
            "-S",
            "-c",
            f"import sys; sys.path.insert(0, {src!r}); "
            "from runwatch.cli import main; sys.exit(main(['demo', '--dir', sys.argv[1]]))",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ.get("PATH", "")},
    )
    assert res.returncode == 2
    assert res.stderr == "runwatch demo needs torch: pip install 'runwatch[torch]'\n"
    assert os.listdir(tmp_path) == []


def test_the_demo_completes_and_check_judges_its_log_as_the_supervisor_did(tmp_path):
    # a crash, a NaN and a hang: relaunched, rolled back to before the NaN, relaunched; `check` of
    # the log finds the NaN and the hang recovered (the crash left no end record: nothing to find)
    pytest.importorskip("torch", reason="runwatch[torch] is not installed")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    demo = [sys.executable, "-m", "runwatch", "demo", "--dir", str(tmp_path), "--steps", "300"]
    res = subprocess.run(demo, capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    run = tmp_path / "torch"
    acts = [r["event"] for r in _journal(run) if r["event"] in ("relaunch", "rollback", "done")]
    assert acts == ["relaunch", "rollback", "relaunch", "done"]
    with open(run / "run.json") as f:
        sessions = [(s["session_id"], s["start"]["step"]) for s in json.load(f)["sessions"]]
    assert [step for _, step in sessions] == [0, 50, 100, 200]  # the rollback went to step 100, before the NaN
    res = subprocess.run([sys.executable, "-m", "runwatch", "check", str(run)], capture_output=True, text=True, env=env)
    assert (res.returncode, res.stdout.splitlines()) == (
        0,
        [
            "RECOVERED nonfinite_loss step=146: session ended with reason nonfinite_loss: non-finite loss nan at the "
            f"attempted update after step 146; recovered: the run went on in session {sessions[2][0]}",
            "RECOVERED interrupted step=220: session ended with reason interrupted: SIGTERM; "
            f"recovered: the run went on in session {sessions[3][0]}",
            "OK clean step=300",
        ],
    )
