"""`supervise` under a scheduler, with real processes and real signals: exit codes per outcome,
preemption (SIGTERM, SIGUSR1) and Ctrl-C, a supervision continued in a new allocation, the dead-man
heartbeat against a real local HTTP server, and the codes the recipes of docs/SUPERVISE.md name."""

from __future__ import annotations

import http.server
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest
import yaml

from runwatch import RunLogger
from runwatch.cli import main
from runwatch.judging.verdict import DEFAULT_EXIT_CODES, exit_status
from runwatch.procs.process import alive
from runwatch.reading.records import load_sessions
from runwatch.supervising.goodput import breakdown
from runwatch.supervising.supervision import SuperviseOptions, read_journal
from runwatch.views.agent.verdicts import watch_state
from runwatch.views.serve.supervision import SupervisionView
from runwatch.views.status import format_status, status

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "supervise_train.py")
DOC = os.path.join(os.path.dirname(HERE), "docs", "SUPERVISE.md")
FAST = ["--poll", "0.1", "--stall", "30", "--backoff", "0.1"]
RECIPE = {"batch_size": 2, "seq_len": 4, "gradient_accumulation_steps": 1, "qk_clip_threshold": None}


def _argv(run, opts=(), train=()):
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


def _start(run, opts=(), train=(), env=None):
    err = open(f"{run}.err", "w")  # noqa: SIM115 - the supervisor writes it while the test reads it
    proc = subprocess.Popen(_argv(run, opts, train), stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    err.close()
    return proc


def _stderr(run):
    with open(f"{run}.err") as f:
        return f.read()


def _journal(run):
    return read_journal(str(run))


def _events(run):
    return [r["event"] for r in _journal(run)]


def _wait(cond, timeout=60.0):
    end = time.time() + timeout
    while time.time() < end:
        value = cond()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out")


def _records(run):
    path = run / "metrics.jsonl"
    return path.exists() and path.stat().st_size > 0


def _ended(proc, timeout=90):
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


# --- exit codes -----------------------------------------------------------------------------------


def test_exit_codes_of_watch_and_check(tmp_path, capsys):
    log = RunLogger(str(tmp_path), recipe=RECIPE, hardware={}, window=1)
    log.step(1.0, 0.1, 1.0)
    log.close("interrupted")  # a transient verdict
    assert main(["check", str(tmp_path), "--exit-code", "transient=75"]) == 75
    assert main(["check", str(tmp_path), "--exit-code", "fatal=3"]) == 7
    assert main(["watch", str(tmp_path), "--exit-code", "transient=64", "--exit-code", "fatal=3"]) == 64
    assert main(["watch", str(tmp_path), "--exit-transient", "75", "--exit-code", "transient=75"]) == 75
    capsys.readouterr()


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--exit-code", "bogus=3"],
            "watch.exit_code must be CLASS=N with CLASS one of transient, divergence, fatal, preempted, gave_up, "
            "got 'bogus=3'",
        ),
        (
            ["--exit-code", "fatal"],
            "watch.exit_code must be CLASS=N with CLASS one of transient, divergence, "
            "fatal, preempted, gave_up, got 'fatal'",
        ),
        (["--exit-code", "fatal=0"], "watch.exit_code fatal must be an int in 1..255, got '0'"),
        (["--exit-code", "fatal=256"], "watch.exit_code fatal must be an int in 1..255, got '256'"),
        (
            ["--exit-transient", "75", "--exit-code", "transient=76"],
            "watch.exit_transient (75) and watch.exit_code (transient=76) disagree",
        ),
    ],
)
def test_bad_exit_codes_are_usage_errors(tmp_path, capsys, args, message):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n')
    assert main(["check", str(tmp_path), *args]) == 2
    assert capsys.readouterr().err == message + "\n"


def test_one_exit_status_for_every_outcome():
    assert [exit_status(x) for x in (None, "transient", "divergence", "fatal", "gave_up", "preempted")] == [
        0,
        7,
        7,
        7,
        7,
        75,
    ]
    assert exit_status("preempted", {**DEFAULT_EXIT_CODES, "preempted": 99}) == 99


# --- preemption -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sig, opts, code", [(signal.SIGTERM, [], 75), (signal.SIGUSR1, ["--exit-code", "preempted=99"], 99)]
)
def test_a_preemption_stops_the_training_and_exits_with_the_preempted_code(tmp_path, sig, opts, code):
    run = tmp_path / "run"
    sup = _start(run, opts, ["--steps", "400", "--sleep", "0.05"])
    _wait(lambda: _records(run))
    child = int((run / "pid").read_text())
    t0 = time.time()
    sup.send_signal(sig)
    rc, out = _ended(sup)
    assert rc == code, _stderr(run)
    name = signal.Signals(sig).name
    step = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["step"]
    assert out.splitlines()[-1] == f"ANOMALY interrupted step={step}: preempted by {name}"
    assert not alive(child)
    recs = _journal(run)
    assert [r["event"] for r in recs] == ["launch", "stop", "preempted"]
    stop, pre = recs[1], recs[2]
    assert stop["message"] == f"runwatch supervise: stopped after the supervisor received {name}: SIGTERM (1 process)"
    assert (pre["kind"], pre["class"], pre["signal"], pre["restarts"]) == ("interrupted", "transient", name, 0)
    assert t0 - 1 <= pre["signal_time"] <= pre["time"] and "requeue" not in pre
    assert pre["goodput"]["steps_kept"] == step and pre["exit_code"] == code
    shown = format_status(status(str(run), gpus=False))
    assert "supervise attempt 1, restarts 0/5, rollbacks 0/2 (supervisor preempted)" in shown
    # the run page and the agent's wait_for_verdict read the same end, with the code it exited with
    view = SupervisionView(str(run / "supervise.jsonl"))
    view.refresh()
    facts = view.facts()
    assert facts is not None and facts["finished"] and facts["attempts"][-1]["end"]["event"] == "preempted"
    waited = watch_state(str(run))
    assert (waited["state"], waited["by"], waited["event"], waited["exit"]) == ("final", "supervise", "preempted", code)
    assert waited["verdict"]["kind"] == "interrupted" and waited["line"] == out.splitlines()[-1]
    # the training ended its session itself, after the SIGTERM the supervisor passed on
    last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert (last["event"], last["reason"], last["error"]) == ("session_end", "interrupted", "SIGTERM")


def test_a_training_that_ignores_sigterm_is_killed_after_the_preempt_grace(tmp_path):
    run = tmp_path / "run"
    sup = _start(run, ["--preempt-grace", "1"], ["--steps", "400", "--sleep", "0.05", "--ignore-term"])
    _wait(lambda: _records(run))
    t0 = time.monotonic()
    sup.send_signal(signal.SIGTERM)
    rc, _out = _ended(sup)
    assert rc == 75 and time.monotonic() - t0 < 30
    stop = next(r for r in _journal(run) if r["event"] == "stop")
    assert stop["message"].endswith(": SIGTERM, then SIGKILL after 1 s (1 process)")


def test_ctrl_c_stops_the_training_and_exits_130(tmp_path):
    run = tmp_path / "run"
    sup = _start(run, [], ["--steps", "400", "--sleep", "0.05"])
    _wait(lambda: _records(run))
    sup.send_signal(signal.SIGINT)
    rc, out = _ended(sup)
    assert rc == 130
    assert out.splitlines()[-1].endswith(": the supervisor received SIGINT; the training was stopped")
    end = _journal(run)[-1]
    assert (end["event"], end["kind"], end["signal"], end["exit_code"]) == ("gave_up", "interrupted", "SIGINT", 130)
    assert "SIGINT: stopping the training (SIGTERM to each of its processes, SIGKILL after 25 s); Ctrl-C again" in (
        _stderr(run)
    )


def test_a_second_ctrl_c_kills_the_training_at_once(tmp_path):
    run = tmp_path / "run"
    sup = _start(run, ["--preempt-grace", "120"], ["--steps", "4000", "--sleep", "0.05", "--ignore-term"])
    _wait(lambda: _records(run))
    child = int((run / "pid").read_text())
    t0 = time.monotonic()
    sup.send_signal(signal.SIGINT)
    _wait(lambda: "Ctrl-C again kills it now" in _stderr(run))
    assert alive(child)  # it ignores SIGTERM: the grace would last 120 s
    sup.send_signal(signal.SIGINT)
    rc, _out = _ended(sup)
    assert rc == 130 and time.monotonic() - t0 < 60 and not alive(child)
    stop = next(r for r in _journal(run) if r["event"] == "stop")
    assert stop["message"].endswith("; SIGKILL at a second Ctrl-C")


def test_requeue_outside_slurm_is_a_usage_error(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert main(["supervise", str(tmp_path / "run"), "--requeue", "--", "true"]) == 2
    assert capsys.readouterr().err == "supervise: --requeue needs a Slurm job (SLURM_JOB_ID is not set)\n"
    assert not (tmp_path / "run" / "pid").exists()


# --- a new allocation continues the supervision ---------------------------------------------------


def test_a_preempted_supervision_continues_its_budgets_attempts_and_goodput(tmp_path):
    run = tmp_path / "run"
    go = tmp_path / "go"
    # a crash at 12 spends a restart; the relaunched attempt holds before 31 until it is preempted
    train = ["--steps", "60", "--fault", "kill@12", "--hold", f"{go}@31"]
    sup = _start(run, [], train)
    _wait(lambda: "relaunch" in _events(run) and (run / "ckpt-30.json").exists())
    sup.send_signal(signal.SIGTERM)
    assert _ended(sup)[0] == 75
    go.touch()
    again = subprocess.run(_argv(run, [], train), capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[-1] == "OK done step=60"
    assert (
        "continuing the supervision of" in again.stderr and "(after preempted): attempt 3, restarts 1/5" in again.stderr
    )
    recs = _journal(run)
    assert [r["event"] for r in recs] == [
        "launch",
        "verdict",
        "relaunch",
        "stop",
        "preempted",
        "launch",
        "verdict",
        "done",
    ]
    cont = recs[5]
    assert (cont["attempt"], cont["restarts"], cont["continued"]) == (3, 1, True)
    assert cont["checkpoint"] == str(run / "ckpt-30.json") and cont["first_launch"] == recs[0]["first_launch"]
    assert f"resume path={run / 'ckpt-30.json'}" in (run / "stdout.log").read_text().split("--- runwatch launch")[-1]
    assert recs[-1]["goodput"]["restarts"] == 1  # the preemption spent none
    assert (recs[4]["exit_code"], recs[-1]["exit_code"]) == (75, 0)
    split = breakdown(load_sessions(str(run)), recs)
    assert split["buckets"]["preempted"] > 0 and split["advice"]["interruptions"] == 2
    assert abs(split["wall_seconds"] - (recs[-1]["time"] - recs[0]["first_launch"])) < 0.002
    # the supervision ended (done): a new one on the same directory starts afresh
    third = subprocess.run(_argv(run, [], train), capture_output=True, text=True, timeout=120)
    assert third.returncode == 0 and _journal(run)[-3]["attempt"] == 1 and "continued" not in _journal(run)[-3]


def test_a_requeued_slurm_job_continues_after_giving_up(tmp_path):
    """A journal of the same Slurm job at a lower SLURM_RESTART_COUNT is an earlier allocation, even
    when it gave up (a recipe that requeues on that code); the tests with a real Slurm are in
    test_slurm.py."""
    run = tmp_path / "run"
    env = dict(os.environ, SLURM_JOB_ID="4242")
    env.pop("SLURM_RESTART_COUNT", None)
    first = subprocess.run(
        _argv(run, ["--restarts", "0"], ["--steps", "30", "--fault", "kill@12"]),
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert first.returncode == 7 and (_journal(run)[-1]["event"], _journal(run)[-1]["exit_code"]) == ("gave_up", 7)
    assert _journal(run)[0]["slurm_job_id"] == "4242" and _journal(run)[0]["slurm_restart_count"] == 0
    env["SLURM_RESTART_COUNT"] = "1"
    second = subprocess.run(
        _argv(run, ["--restarts", "0"], ["--steps", "30", "--fault", "kill@12"]),
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert second.returncode == 0, second.stderr
    launch = [r for r in _journal(run) if r["event"] == "launch"][-1]
    assert (launch["attempt"], launch["continued"], launch["slurm_restart_count"]) == (2, True, 1)


# --- the dead-man heartbeat -----------------------------------------------------------------------


class _Ping(http.server.BaseHTTPRequestHandler):
    got: list = []
    status = 200
    delay = 0.0

    def do_GET(self):  # noqa: N802 - http.server's name
        type(self).got.append((time.time(), self.path))
        if self.delay:
            time.sleep(self.delay)
        self.send_response(self.status)
        self.end_headers()
        self.wfile.write(b"OK")

    def log_message(self, *args):
        pass


@pytest.fixture
def ping_server():
    servers = []

    def make(status=200, delay=0.0):
        handler = type("Ping", (_Ping,), {"got": [], "status": status, "delay": delay})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}/ping", handler

    yield make
    for server in servers:
        server.shutdown()
        server.server_close()


def test_the_heartbeat_is_fetched_only_while_records_arrive(tmp_path, ping_server):
    url, handler = ping_server()
    run = tmp_path / "run"
    go = tmp_path / "go"
    sup = _start(
        run,
        ["--heartbeat-url", url, "--heartbeat-every", "0.2"],
        ["--steps", "40", "--sleep", "0.05", "--hold", f"{go}@21"],
    )
    # held before update 21: the record at 20 is the last for now
    _wait(lambda: _records(run) and '"step":20' in (run / "metrics.jsonl").read_text().replace(" ", ""))
    _wait(lambda: handler.got)
    time.sleep(1.0)  # a fetch begun when the record at 20 was read has begun by now
    held = len(handler.got)
    time.sleep(2.0)  # ten heartbeat periods without a new record
    assert len(handler.got) == held
    go.touch()
    rc, out = _ended(sup)
    assert rc == 0 and out.splitlines()[-1] == "OK done step=40"
    assert len(handler.got) > held and {path for _t, path in handler.got} == {"/ping"}
    assert "heartbeat_failed" not in _events(run)


def test_a_slow_heartbeat_url_never_delays_a_verdict(tmp_path, ping_server):
    url, handler = ping_server(delay=60.0)
    run = tmp_path / "run"
    t0 = time.monotonic()
    res = subprocess.run(
        _argv(
            run,
            ["--heartbeat-url", url, "--heartbeat-every", "0.1"],
            ["--steps", "30", "--sleep", "0.05", "--fault", "kill@12"],
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    # each fetch hangs until its 10 s timeout; the supervision went on without waiting for one
    assert time.monotonic() - t0 < 40 and handler.got
    assert [r["event"] for r in _journal(run) if r["event"] != "heartbeat_failed"] == [
        "launch",
        "verdict",
        "relaunch",
        "verdict",
        "done",
    ]


def test_heartbeat_failures_are_journaled_and_never_fatal(tmp_path, ping_server):
    url, handler = ping_server(status=500)
    run = tmp_path / "run"
    res = subprocess.run(
        _argv(
            run,
            ["--heartbeat-url", url + "?key=s3cretkey", "--heartbeat-every", "0.1"],
            ["--steps", "30", "--sleep", "0.05"],
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0 and res.stdout.splitlines()[-1] == "OK done step=30"
    failed = [r for r in _journal(run) if r["event"] == "heartbeat_failed"]
    assert failed and {r["error"] for r in failed} == {"HTTP 500 Internal Server Error"}
    assert {r["url"] for r in failed} == {url + "?key=***"}
    assert "s3cretkey" not in (run / "supervise.jsonl").read_text() + res.stderr
    assert f"heartbeat to {url}?key=*** failed: HTTP 500 Internal Server Error" in res.stderr


def test_a_heartbeat_url_must_be_http(tmp_path, capsys):
    assert main(["supervise", str(tmp_path / "run"), "--heartbeat-url", "ftp://x/y", "--", "true"]) == 2
    assert capsys.readouterr().err == "supervise.heartbeat_url must be an http:// or https:// URL, got 'ftp://***/y'\n"


# --- the recipes ----------------------------------------------------------------------------------


def _blocks(lang):
    with open(DOC, encoding="utf-8") as f:
        return re.findall(rf"```{lang}\n(.*?)```", f.read(), re.S)


def test_the_kubernetes_recipe_acts_on_the_codes_runwatch_exits_with():
    jobs = [d for d in map(yaml.safe_load, _blocks("yaml")) if isinstance(d, dict) and d.get("kind") == "Job"]
    assert len(jobs) == 1
    spec = jobs[0]["spec"]
    rules = spec["podFailurePolicy"]["rules"]
    by_action: dict[str, set[int]] = {}
    for rule in rules:
        if "onExitCodes" in rule:
            assert rule["onExitCodes"]["operator"] == "In" and rule["onExitCodes"]["containerName"] == "trainer"
            by_action.setdefault(rule["action"], set()).update(rule["onExitCodes"]["values"])
    assert by_action["Ignore"] == {exit_status("preempted")}  # replaced, not counted
    assert by_action["FailJob"] == {exit_status(x) for x in ("gave_up", "fatal")}
    assert {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]} in rules
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"  # what podFailurePolicy requires
    assert pod["terminationGracePeriodSeconds"] > SuperviseOptions().preempt_grace
    container = pod["containers"][0]
    assert container["name"] == "trainer" and container["command"][:2] == ["runwatch", "supervise"]
    assert not any(a.startswith("--exit-") for a in container["command"])  # the default codes


def test_the_skypilot_recipe_recovers_on_the_preempted_code():
    tasks = [d for d in map(yaml.safe_load, _blocks("yaml")) if isinstance(d, dict) and "run" in d]
    assert len(tasks) == 1
    recovery = tasks[0]["resources"]["job_recovery"]
    assert recovery["recover_on_exit_codes"] == [exit_status("preempted")]
    assert recovery["max_restarts_on_errors"] == 0
    assert "runwatch supervise" in tasks[0]["run"] and "--exit-" not in tasks[0]["run"]


def test_the_slurm_recipes_name_the_preempted_code():
    (ini,) = _blocks("ini")
    assert ini.strip() == f"RequeueExit={exit_status('preempted')}"
    (script,) = [b for b in _blocks("sh") if "#SBATCH" in b]
    assert "#SBATCH --requeue" in script and "#SBATCH --signal=B:USR1@" in script
    assert "exec runwatch supervise runs/a --requeue -- python train.py" in script
