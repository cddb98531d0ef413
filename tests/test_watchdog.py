"""`runwatch watch` and `runwatch check`: every exit code and verdict line of docs/WATCHDOG.md, against real
writers in real subprocesses killed with real signals, and in-process through `cli.main`."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from runwatch import RunLogger
from runwatch.cli import main
from runwatch.judging.watchdog import Options, Watcher, load_options

RECIPE = {"batch_size": 2, "seq_len": 4, "gradient_accumulation_steps": 1, "qk_clip_threshold": None}

WRITER = textwrap.dedent("""
    import json, os, signal, sys, time
    mode, target, n, interval = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    def line(f, rec):
        f.write(json.dumps(rec) + "\\n"); f.flush()
    if mode == "v1":
        from runwatch import RunLogger
        with RunLogger(target, recipe={"batch_size": 2, "seq_len": 4, "gradient_accumulation_steps": 1,
                                       "qk_clip_threshold": None}, hardware={}, window=1) as log:
            for i in range(n):
                log.step(1.0, 0.1, 1.0)
                time.sleep(interval)
    elif mode == "v1-explode":  # metrics.jsonl exists (empty) a while before run.json, as with a slow start
        os.makedirs(target, exist_ok=True)
        open(os.path.join(target, "metrics.jsonl"), "a").close()
        time.sleep(0.5)
        from runwatch import RunLogger
        with RunLogger(target, recipe={"batch_size": 2, "seq_len": 4, "gradient_accumulation_steps": 1,
                                       "qk_clip_threshold": None}, hardware={}, window=1) as log:
            for i in range(n):
                log.step(1.0, 0.1, 1.0 if i < 3 else 500.0)
                time.sleep(interval)
    elif mode in ("minimal", "nan", "hang"):
        with open(target, "a") as f:
            for i in range(1, n + 1):
                line(f, {"step": i, "loss": 1.0, "grad_norm": 1.0, "sps": 10.0})
                time.sleep(interval)
            if mode == "nan":
                f.write('{"step": %d, "loss": NaN}\\n' % (n + 1)); f.flush()
                print("WROTE", time.time(), flush=True)
            time.sleep(600 if mode != "minimal" else 0)
    elif mode == "torn":
        with open(target, "a") as f:
            for i in range(1, n + 1):
                f.write('{"step": %d, "loss"' % i); f.flush()
                time.sleep(interval)
                f.write(': 1.0}\\n'); f.flush()
        open(os.path.join(os.path.dirname(target), "DONE"), "w").close()
    elif mode == "oom":
        print("Traceback (most recent call last):")
        print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", flush=True)
        sys.exit(1)
    elif mode == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ready", flush=True)
        time.sleep(600)
""")


@pytest.fixture
def writer(tmp_path):
    path = tmp_path / "writer.py"
    path.write_text(WRITER)
    procs = []

    def start(mode, target, n=5, interval=0.05, **kw):
        p = subprocess.Popen([sys.executable, str(path), mode, str(target), str(n), str(interval)], **kw)
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
        if p.stdout is not None:
            p.stdout.close()


def watch_proc(*args):
    return subprocess.Popen(
        [sys.executable, "-m", "runwatch", "watch", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(p, timeout=60):
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out.strip().splitlines()[-1] if out.strip() else "", err


def make_run(path, steps=6, window=2, val=None, end="normal"):
    log = RunLogger(path, recipe=RECIPE, hardware={}, window=window)
    for _ in range(steps):
        log.step(1.0, 0.1, 1.0)
    if val is not None:
        log.val(0.5, {"auroc": val})
    saved = log.state_dict()
    if end:
        log.close(end, None if end == "normal" else "boom")
    else:
        log._release()  # the process "died": no session_end
    return saved


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out.strip().splitlines(), err


# --- check ----------------------------------------------------------------------------------------


def test_check_clean(tmp_path, capsys):
    make_run(tmp_path)
    assert cli(capsys, "check", tmp_path) == (0, ["OK clean step=6"], "")


def _sessions(run_dir):
    return [s["session_id"] for s in json.loads((run_dir / "run.json").read_text())["sessions"]]


def test_check_every_session_an_error_a_later_session_went_on_from_is_recovered(tmp_path, capsys):
    # as `watch` across the relaunch (which drops the replaced session) and `supervise` (which
    # relaunched) judged it: the run completed
    saved = make_run(tmp_path, end="error")
    log = RunLogger(tmp_path, recipe=RECIPE, hardware={}, window=2, resume_from=saved)
    log.step(1.0, 0.1, 1.0)
    saved = log.state_dict()
    log.close()
    first, second = _sessions(tmp_path)
    recovered = f"RECOVERED session_error step=6: session ended with reason error: boom; recovered: the run went on in session {second}"
    code, lines, _ = cli(capsys, "check", tmp_path)
    assert (code, lines) == (0, [recovered, "OK clean step=7"])
    code = main(["check", str(tmp_path), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert (code, doc["verdict"], doc["warnings"], doc["recovered"], doc["class"]) == (0, "OK clean step=7", 0, 1, None)
    assert doc["findings"][0]["severity"] == "recovered" and doc["findings"][0]["session"] == first
    # the latest session's error is the run's verdict still
    log = RunLogger(tmp_path, recipe=RECIPE, hardware={}, window=2, resume_from=saved)
    log.step(1.0, 0.1, 1.0)
    log.close("error", "boom again")
    code, lines, _ = cli(capsys, "check", tmp_path)
    assert code == 7
    assert lines == [
        recovered,
        "FINDING session_error step=8: session ended with reason error: boom again",
        "ANOMALY session_error step=8: session ended with reason error: boom again",
    ]


def test_check_a_divergence_rolled_back_past_is_recovered_the_latest_session_s_stops(tmp_path, capsys):
    # the NaN came at the attempted update after step 6: a session resumed from step 6 redid it
    saved = make_run(tmp_path, end="nonfinite_loss")
    log = RunLogger(tmp_path, recipe=RECIPE, hardware={}, window=2, resume_from=saved)
    log.step(1.0, 0.1, 1.0)
    saved = log.state_dict()
    log.close("nonfinite_loss", "boom again")
    first, second = _sessions(tmp_path)
    recovered = (
        "RECOVERED nonfinite_loss step=6: session ended with reason nonfinite_loss: boom; "
        f"recovered: the run went on in session {second}"
    )
    stop = "nonfinite_loss step=7: session ended with reason nonfinite_loss: boom again"
    code, lines, _ = cli(capsys, "check", tmp_path)
    assert (code, lines) == (7, [recovered, f"FINDING {stop}", f"ANOMALY {stop}"])
    log = RunLogger(tmp_path, recipe=RECIPE, hardware={}, window=2, resume_from=saved)
    log.step(1.0, 0.1, 1.0)
    log.close()
    code, lines, _ = cli(capsys, "check", tmp_path)
    assert (code, lines[-1]) == (0, "OK clean step=8")


def _minimal_log(path, *sessions):
    """A minimal-telemetry log: each session's steps (a step in a tuple: a NaN loss there); a step
    that does not exceed the one before starts the next session, as a relaunch writes it."""
    with open(path, "w") as f:
        for i, steps in enumerate(sessions):
            for step in steps:
                # a run that learns; a relaunch sees other batches (a loss 10 % apart at the same step),
                # as a resumed process does, unlike a second writer of the same records
                f.write(
                    f'{{"step": {step[0]}, "loss": NaN}}\n'
                    if isinstance(step, tuple)
                    else f'{{"step": {step}, "loss": {2.0 / step * 0.9**i:.4f}}}\n'
                )
    return path


NAN = "nonfinite_loss step=6: train loss is NaN"


@pytest.mark.parametrize(
    ("sessions", "expected"),
    [
        # rolled back to before the onset: the NaN's steps are off the run's path
        (
            ([1, 2, 3, 4, 5, (6,), 7, 8], [4, 5, 6, 7, 8, 9, 10]),
            (0, [f"RECOVERED {NAN}; recovered: the run went on in session session-2", "OK clean step=10"]),
        ),
        # rolled back to the onset itself (the session redid step 6)
        (
            ([1, 2, 3, 4, 5, (6,), 7, 8], range(6, 11)),
            (0, [f"RECOVERED {NAN}; recovered: the run went on in session session-2", "OK clean step=10"]),
        ),
        # continued from after the onset: the NaN's step stays on the path
        (([1, 2, 3, 4, 5, (6,), 7, 8], range(7, 11)), (7, [f"FINDING {NAN}", f"ANOMALY {NAN}"])),
        # continued past it, then rolled back past it by a later session
        (
            ([1, 2, 3, 4, 5, (6,), 7, 8], [7, 8, 9], range(4, 11)),
            (0, [f"RECOVERED {NAN}; recovered: the run went on in session session-3", "OK clean step=10"]),
        ),
        # the latest session's divergence is the run's verdict
        (([1, 2, 3, 4, 5, 6, 7, 8], [4, 5, (6,), 7, 8, 9, 10]), (7, [f"FINDING {NAN}", f"ANOMALY {NAN}"])),
    ],
    ids=[
        "rolled-back-before",
        "rolled-back-to-onset",
        "continued-past",
        "continued-then-rolled-back",
        "latest-session",
    ],
)
def test_check_a_divergence_is_recovered_only_when_a_later_session_rolled_back_past_it(
    tmp_path, capsys, sessions, expected
):
    log = _minimal_log(tmp_path / "train.jsonl", *sessions)
    code, lines, _ = cli(capsys, "check", log)
    assert (code, lines) == expected
    code = main(["check", str(log), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert (code, doc["recovered"], doc["class"]) == (
        expected[0],
        int(expected[0] == 0),
        None if expected[0] == 0 else "divergence",
    )


def test_check_minimal_torn_tail_and_json(tmp_path, capsys):
    p = tmp_path / "train.log.jsonl"
    p.write_text('{"step": 1, "loss": 1.0}\n{"step": 2, "loss": NaN}\n{"step": 3, "loss": 1.0}\n{"step": 4, "lo')
    code, lines, err = cli(capsys, "check", p)
    assert code == 7
    assert lines == [
        "FINDING nonfinite_loss step=2: train loss is NaN",
        "ANOMALY nonfinite_loss step=2: train loss is NaN",
    ]
    assert err == "runwatch check: left out the torn last line 4 (no newline yet)\n"
    code, lines, _ = cli(capsys, "check", p, "--json")
    doc = json.loads("\n".join(lines))
    assert (code, doc["last_step"], doc["torn_line"], doc["verdict"]) == (
        7,
        3,
        4,
        "ANOMALY nonfinite_loss step=2: train loss is NaN",
    )


def test_check_empty_log_and_latest_start(tmp_path, capsys):
    (tmp_path / "a.jsonl").write_text("")
    assert cli(capsys, "check", tmp_path / "a.jsonl")[:2] == (0, ["OK clean step=0"])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["check", "{d}/nope"], "check: {d}/nope: no such run directory or log\n"),
        (["check", "{d}"], "check: {d}: no metrics.jsonl or trainer_state.json\n"),
        (["watch", "{d}", "--stall", "-5"], "watch.stall must be a number > 0, got -5\n"),
        (["watch", "{d}", "--grad-patience", "0"], "watch.grad_patience must be an int >= 1, got 0\n"),
        (["watch", "{d}", "--metric-min", "0.2"], "watch.metric_min must be a number in [0.5, 1], got 0.2\n"),
        (
            ["watch", "{d}", "--grad-min", "60", "--grad-max", "50"],
            "watch.grad_min must be < watch.grad_max 50, got 60\n",
        ),
        (["check", "{d}/x.jsonl", "--map", "los=x"], None),
    ],
)
def test_usage_errors_exit_2(tmp_path, capsys, argv, message):
    (tmp_path / "x.jsonl").write_text("")
    code, _, err = cli(capsys, *[a.format(d=tmp_path) for a in argv])
    assert code == 2
    if message:
        assert err == message.format(d=tmp_path)


def test_check_trainer_state(tmp_path, capsys):
    (tmp_path / "trainer_state.json").write_text(
        json.dumps(
            {
                "log_history": [
                    {"loss": 1.0, "grad_norm": 1.0, "step": 10},
                    {"loss": 0.0, "grad_norm": math.nan, "step": 20},
                ]
            }
        )
    )
    code, lines, _ = cli(capsys, "check", tmp_path)
    assert code == 7 and lines[-1].startswith("ANOMALY nonfinite_loss step=20: train loss is exactly 0")


# --- options --------------------------------------------------------------------------------------


def test_toml_options_and_command_line_wins(tmp_path):
    (tmp_path / "runwatch.toml").write_text('[watch]\nstall = 99\ngrad-max = 7.5\nmap = ["loss=l"]\n')
    opts = load_options(str(tmp_path), {"stall": 12.0})
    assert (opts.stall, opts.grad_max, opts.map, opts.poll) == (12.0, 7.5, ("loss=l",), 5.0)


@pytest.mark.parametrize(
    "toml, message",
    [
        ("[watch]\nstal = 1\n", "runwatch.toml: unknown option 'stal' in [watch]"),
        ("[watch]\nstall = 'x'\n", "watch.stall must be a number > 0, got 'x'"),
        ("[watch]\nstop-on-anomaly = 1\n", "watch.stop_on_anomaly must be true or false, got 1"),
    ],
)
def test_bad_toml(tmp_path, toml, message):
    from runwatch.errors import UsageError

    (tmp_path / "runwatch.toml").write_text(toml)
    with pytest.raises(UsageError) as exc:
        load_options(str(tmp_path), {})
    assert str(exc.value) == message


def test_options_declare_the_rank_checks():
    o = Options()
    assert (o.rank_stall, o.straggler_factor, o.straggler_patience) == (300.0, 1.5, 5)


# --- watch, in-process ------------------------------------------------------------------------------


def test_watch_completed_run_writes_watchdog_json(tmp_path, capsys):
    make_run(tmp_path)
    code, lines, _ = cli(capsys, "watch", tmp_path, "--poll", "0.05")
    assert (code, lines) == (0, ["OK done step=6"])
    doc = json.loads((tmp_path / "watchdog.json").read_text())
    assert doc["verdict"] == "done" and doc["kind"] is None and doc["step"] == 6
    assert doc["message"].endswith("ended normally at step 6") and isinstance(doc["time"], float)
    assert not [n for n in os.listdir(tmp_path) if ".tmp-" in n]


def test_watch_drops_replaced_session_findings_during_catch_up(tmp_path, capsys):
    saved = make_run(tmp_path, end="error")  # the old session's session_error is dropped
    log = RunLogger(tmp_path, recipe=RECIPE, hardware={}, window=2, resume_from=saved)
    log.step(1.0, 0.1, 1.0)
    log.close()
    assert cli(capsys, "watch", tmp_path, "--poll", "0.05")[:2] == (0, ["OK done step=7"])


def test_watch_minimal_relaunch_drops_old_findings(tmp_path, capsys):
    p = tmp_path / "log.jsonl"
    p.write_text('{"step": 1, "loss": 1.0}\n{"step": 2, "loss": NaN}\n{"step": 1, "loss": 1.0}\n')
    (tmp_path / "DONE").write_text("")
    assert cli(capsys, "watch", p, "--poll", "0.05", "--done", "DONE")[:2] == (0, ["OK done step=1"])
    q = tmp_path / "log2.jsonl"
    q.write_text('{"step": 1, "loss": 1.0}\n{"step": 2, "loss": NaN}\n')
    assert cli(capsys, "watch", q, "--poll", "0.05", "--done", "DONE")[:2] == (
        7,
        ["ANOMALY nonfinite_loss step=2: train loss is NaN"],
    )


def test_watch_latest_session_anomaly(tmp_path, capsys):
    make_run(tmp_path, val=0.2, steps=600, window=100)
    code, lines, _ = cli(capsys, "watch", tmp_path, "--poll", "0.05")
    assert code == 7
    assert lines == [
        "ANOMALY inverted_metric step=600: auroc 0.2 < 0.3 (1 - metric-min 0.7): labels look inverted (chance 0.5)"
    ]


@pytest.mark.parametrize(
    "argv, line",
    [
        (["--startup-grace", "0.3"], "ANOMALY stall step=0: no record 0 s after the watch began (--startup-grace 0.3)"),
        (["--timeout", "0.3"], "ANOMALY timeout step=0: the watch ran 0 s (--timeout 0.3)"),
    ],
)
def test_watch_waits_for_a_missing_run(tmp_path, capsys, argv, line):
    code, lines, _ = cli(capsys, "watch", tmp_path / "not-yet", "--poll", "0.05", *argv)
    assert code == 7 and lines == [line]


def test_watch_stall_on_an_old_log(tmp_path, capsys):
    make_run(tmp_path, end=None)
    old = time.time() - 100
    os.utime(tmp_path / "metrics.jsonl", (old, old))
    code, lines, _ = cli(capsys, "watch", tmp_path, "--poll", "0.05", "--stall", "50")
    assert (
        code == 7
        and lines[0].startswith("ANOMALY stall step=6: no new record for 10")
        and lines[0].endswith("s (--stall 50)")
    )


def test_poll_checks_plug_in(tmp_path):
    from runwatch.judging.rules import Finding

    make_run(tmp_path, end=None)
    calls = []

    def rank_check(w):
        calls.append(w.last_step)
        return (
            Finding("rank_stall", w.last_step, "rank 3 on host-b (pid 42) stopped at step 4")
            if len(calls) > 1
            else None
        )

    v = Watcher(str(tmp_path), Options(poll=0.05), poll_checks=[rank_check], log=lambda m: None).run()
    assert v.line() == "ANOMALY rank_stall step=6: rank 3 on host-b (pid 42) stopped at step 4"


# --- watch against real processes -----------------------------------------------------------------


def test_live_run_completes_without_false_stall(tmp_path, writer):
    # records every 0.4 s, stall 1 s: a slow but live run never stalls
    w = watch_proc(tmp_path / "run", "--poll", "0.1", "--stall", "1", "--startup-grace", "20")
    writer("v1", tmp_path / "run", 8, 0.4)
    code, last, err = finish(w)
    assert (code, last) == (0, "OK done step=8"), err


def test_schema_v1_decided_once_the_log_has_bytes(tmp_path, writer):
    w = watch_proc(tmp_path / "run", "--poll", "0.05", "--stall", "5", "--grad-max", "50")
    time.sleep(0.3)
    writer("v1-explode", tmp_path / "run", 8, 0.05)
    code, last, err = finish(w)
    assert (code, last) == (
        7,
        "ANOMALY grad_explosion step=6: gradient norm 500 > 50 for 3 consecutive train records",
    ), err


def test_torn_line_completed_later_is_never_invalid(tmp_path, writer):
    log = tmp_path / "t.jsonl"
    w = watch_proc(log, "--poll", "0.05", "--done", "DONE", "--stall", "5")
    writer("torn", log, 4, 0.3)
    code, last, err = finish(w)
    assert (code, last) == (0, "OK done step=4"), err


def test_nan_detected_live(tmp_path, writer):
    log = tmp_path / "n.jsonl"
    p = writer("nan", log, 5, 0.05)
    w = watch_proc(log, "--poll", "0.1", "--pid", p.pid)
    code, last, _ = finish(w)
    assert (code, last) == (7, "ANOMALY nonfinite_loss step=6: train loss is NaN")


def test_killed_process_is_process_exit(tmp_path, writer):
    log = tmp_path / "h.jsonl"
    p = writer("hang", log, 3, 0.01)
    w = watch_proc(log, "--poll", "0.1", "--pid", p.pid, "--stall", "30")
    time.sleep(0.8)
    p.send_signal(signal.SIGKILL)
    p.wait()
    code, last, _ = finish(w)
    assert (code, last) == (7, f"ANOMALY process_exit step=3: process {p.pid} is gone")


def test_zombie_counts_as_gone(tmp_path, writer):
    log = tmp_path / "z.jsonl"
    p = writer("hang", log, 2, 0.01)
    time.sleep(0.5)
    p.send_signal(signal.SIGKILL)
    time.sleep(0.3)  # exited, not reaped: a zombie of this test process
    with open(f"/proc/{p.pid}/stat") as f:
        assert f.read().split(")")[1].split()[0] == "Z"
    v = Watcher(str(log), Options(poll=0.05, pid=p.pid), log=lambda m: None).run()
    assert v.kind == "process_exit"


def test_stall_then_stop_on_anomaly_stops_the_launched_group(tmp_path, capsys):
    run = tmp_path / "run"
    code, lines, _ = cli(
        capsys,
        "launch",
        run,
        "--watch",
        "--poll",
        "0.1",
        "--stall",
        "1",
        "--stop-on-anomaly",
        "--",
        sys.executable,
        "-c",
        "import json,os,time\nf=open(os.environ['RUNWATCH_RUN_DIR']+'/metrics.jsonl','a')\n"
        "f.write(json.dumps({'step':1,'loss':1.0})+'\\n');f.flush()\ntime.sleep(600)",
    )
    assert code == 7 and lines[-1] == "ANOMALY stall step=1: no new record for 1 s (--stall 1)"
    info = json.loads((run / "launch.json").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(info["pid"], 0)


def test_oom_through_launch(tmp_path, capsys, writer):
    wpath = tmp_path / "writer.py"
    code, lines, _ = cli(
        capsys,
        "launch",
        tmp_path / "run",
        "--watch",
        "--poll",
        "0.1",
        "--",
        sys.executable,
        wpath,
        "oom",
        "x",
        "0",
        "0",
    )
    assert code == 7
    pid = json.loads((tmp_path / "run" / "launch.json").read_text())["pid"]
    assert lines[-1] == (
        f"ANOMALY oom step=0: process {pid} ran out of memory: "
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    )


def test_sigterm_ignored_then_sigkill(tmp_path, writer):
    p = writer("ignore-term", "x", 0, 0, stdout=subprocess.PIPE)
    assert p.stdout.readline().strip() == b"ready"
    log = tmp_path / "l.jsonl"
    log.write_text('{"step": 1, "loss": NaN}\n')
    notes = []
    v = Watcher(str(log), Options(poll=0.05, pid=p.pid, stop_on_anomaly=True), stop_grace=0.5, log=notes.append).run()
    assert v.kind == "nonfinite_loss"
    assert notes[-1] == "runwatch watch: stopped after a nonfinite_loss: SIGTERM, then SIGKILL after 0.5 s (1 process)"
    from runwatch.procs.process import alive, how_ended

    assert not alive(p.pid) and how_ended(p.pid) == "killed by SIGKILL"  # reaped by the watchdog


def test_new_session_in_run_json_is_followed(tmp_path, writer):
    run = tmp_path / "run"
    saved = make_run(run, end=None, steps=4)
    w = watch_proc(run, "--poll", "0.1", "--stall", "10")
    first = w.stderr.readline()  # the watch has started and caught up on the first session
    time.sleep(0.3)
    log = RunLogger(run, recipe=RECIPE, hardware={}, window=1, resume_from=saved)
    for _ in range(3):
        log.step(1.0, 0.1, 1.0)
        time.sleep(0.1)
    log.close()
    code, last, err = finish(w)
    assert (code, last) == (0, "OK done step=7"), first + err
    assert f"runwatch watch: new session {log.session_id} in run.json; rules restart" in err


def test_a_run_being_set_up_is_not_read_as_minimal_telemetry(tmp_path):
    """RunLogger creates metrics.jsonl a moment before run.json: a watch that starts in between must
    still read the run as schema v1 (else its session_end is never recognised)."""
    import threading

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").touch()

    def later():
        time.sleep(0.4)
        os.unlink(run / "metrics.jsonl")
        make_run(run, steps=4, window=2, val=0.9)

    t = threading.Thread(target=later)
    t.start()
    v = Watcher(str(run), Options(poll=0.05, stall=30), log=lambda m: None).run()
    t.join()
    assert v.line() == "OK done step=4"


def test_truncated_log_is_read_again_once(tmp_path):
    log = tmp_path / "m.jsonl"
    log.write_text('{"step": 1, "loss": 1.0}\n{"step": 2, "loss": 1.0}\n')
    notes = []
    w = Watcher(str(log), Options(poll=0.05, grad_patience=1, grad_max=50.0), log=notes.append)
    assert w.poll_once() is None and w.last_step == 2
    log.write_text('{"step": 1, "loss": 1.0, "grad_norm": 99}\n')  # replaced: a new inode or a shrink
    v = w.poll_once()
    assert notes[-1].endswith("m.jsonl was replaced; reading it again from the start") or notes[-1].endswith(
        "was truncated; reading it again from the start"
    )
    assert v.line() == "ANOMALY grad_explosion step=1: gradient norm 99 > 50 for 1 consecutive train records"


def test_fresh_run_in_the_same_directory_is_waited_for(tmp_path):
    """A new run started over an old one: metrics.jsonl replaced by an empty file while run.json
    is gone. The watch waits for the new run's first bytes (no traceback), then judges it."""
    make_run(tmp_path, steps=4, window=2, end=None)
    w = Watcher(str(tmp_path), Options(poll=0.05), log=lambda m: None)
    assert w.poll_once() is None and w.last_step == 4
    os.unlink(tmp_path / "run.json")
    os.unlink(tmp_path / "metrics.jsonl")
    (tmp_path / "metrics.jsonl").touch()
    assert w.poll_once() is None
    os.unlink(tmp_path / "metrics.jsonl")
    make_run(tmp_path, steps=6, window=2)
    assert w.poll_once().line() == "OK done step=6"


def test_poll_checks_judge_before_the_end_is_called_done(tmp_path):
    """A finding of a poll check (heartbeats, written before the end record) wins over the normal
    session_end read in the same poll."""
    from runwatch.judging.rules import Finding

    make_run(tmp_path, end="normal")

    def straggler(w):
        return Finding("straggler", w.last_step, "rank 2 (host h) took 3.0x the median window time")

    v = Watcher(str(tmp_path), Options(poll=0.05), poll_checks=[straggler], log=lambda m: None).run()
    assert v.line() == "ANOMALY straggler step=6: rank 2 (host h) took 3.0x the median window time"
    v = Watcher(str(tmp_path), Options(poll=0.05), poll_checks=[lambda w: None], log=lambda m: None).run()
    assert v.line() == "OK done step=6"


def test_docs_options_tables_are_the_code():
    """docs/WATCHDOG.md's options tables are generated from the one declaration per option."""
    import re

    from runwatch.judging.rules import RuleOptions
    from runwatch.options import markdown_table

    with open(os.path.join(os.path.dirname(__file__), "..", "docs", "WATCHDOG.md")) as f:
        text = f.read()
    tables = dict(re.findall(r"<!-- options: (\w+) -->\n(.*?)\n<!-- /options -->", text, re.S))
    assert tables["rules"] == markdown_table(RuleOptions, "check")
    assert tables["watch"] == markdown_table(Options, "watch", without=RuleOptions)


def test_every_flag_has_a_help_line():
    from runwatch.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, p in sub.choices.items():
        for action in p._actions:
            if action.option_strings and action.dest != "help":
                text = action.help or ""
                assert text and not text.startswith("("), f"runwatch {name} {action.option_strings[0]}: {text!r}"


def test_a_warning_is_printed_kept_in_watchdog_json_and_never_ends_the_watch(tmp_path):
    """overfitting warns: its WARNING line on stdout when it starts, `warnings` in the watching
    record and in the verdict; the watch goes on to its end."""
    log = tmp_path / "m.jsonl"
    recs = []
    for s in range(1, 41):
        recs.append({"step": s, "loss": 2.0 - s / 40})
        if s % 10 == 0:
            recs.append({"step": s, "eval_loss": {10: 1.0, 20: 1.2, 30: 1.3, 40: 1.4}[s]})
    log.write_text("".join(json.dumps(r) + "\n" for r in recs))
    out: list[str] = []
    w = Watcher(str(log), Options(poll=0.01, done="DONE"), log=lambda m: None, out=out.append, poll_checks=[])
    assert w.poll_once() is None
    w.heartbeat()
    warning = {
        "kind": "overfitting",
        "step": 40,
        "message": "eval loss 1.4 > 1.1 ((1 + 0.1) x best 1) for 3 consecutive eval records",
    }
    watching = json.loads((tmp_path / "watchdog.json").read_text())
    assert (watching["verdict"], watching["warnings"]) == ("watching", [warning])
    (tmp_path / "DONE").write_text("")
    v = w.run()
    assert out == ["WARNING overfitting step=40: " + warning["message"]]
    assert v.line() == "OK done step=40"
    done = json.loads((tmp_path / "watchdog.json").read_text())
    assert (done["verdict"], done["warnings"]) == ("done", [warning])
    from runwatch.views.status import format_status, status

    st = status(str(log), gpus=False)
    assert st["watchdog"]["warnings"] == [warning]
    assert "warnings 1: overfitting step=40" in format_status(st)


def test_check_with_warnings_only_is_clean(tmp_path, capsys):
    log = tmp_path / "m.jsonl"
    log.write_text("".join(json.dumps({"step": s, "eval_loss": 1.0 + s / 10}) + "\n" for s in range(1, 6)))
    assert main(["check", str(log), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(f["kind"], f["severity"]) for f in doc["findings"]] == [("overfitting", "warn"), ("no_signal", "warn")]
    assert (doc["warnings"], doc["verdict"], doc["class"]) == (2, "OK clean step=5", None)
    assert main(["check", str(log), "--severity", "overfitting=stop"]) == 7
    assert capsys.readouterr().out.splitlines() == [
        "FINDING overfitting step=5: eval loss 1.5 > 1.21 ((1 + 0.1) x best 1.1) for 3 consecutive eval records",
        "WARNING no_signal step=5: no train loss in m.jsonl; keys seen: eval_loss; use --map loss=KEY",
        "ANOMALY overfitting step=5: eval loss 1.5 > 1.21 ((1 + 0.1) x best 1.1) for 3 consecutive eval records",
    ]


def test_a_text_logs_watch_continues_from_its_state(tmp_path):
    """A relaunch's watch (supervise) takes up a text log where the last one stopped: the reader's
    offset travels in the state, so no line is read twice."""
    from runwatch.reading.readers import ReadOptions

    log = tmp_path / "stdout.log"

    def lines(a, b):
        return "".join(f"iter {i}: loss {2.0 / i:.4f}, time 10.00ms, mfu 1.00%\n" for i in range(a, b))

    log.write_text(lines(1, 11))
    read = ReadOptions(format="nanogpt")
    w = Watcher(str(log), Options(poll=0.05), poll_checks=[], log=lambda m: None, read=read)
    assert w.poll_once() is None and (w.applied, w.last_step) == (10, 10)
    state = json.loads(json.dumps(w.state_dict(), allow_nan=False))
    with open(log, "a") as f:
        f.write(lines(11, 16))
    again = Watcher(str(log), Options(poll=0.05), poll_checks=[], log=lambda m: None, read=read)
    assert again.load_state_dict(state) and again.state_dict() == state
    assert again.poll_once() is None and (again.applied, again.last_step) == (5, 15)
