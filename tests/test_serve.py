"""`runwatch serve`: a real server on a free port, real HTTP requests, a real headless Chromium.

One folder of runs serves the module: a schema-v1 run written by RunLogger, minimal telemetry with
a loss spike, a Trainer's trainer_state.json, a supervised run, and hostile entries (a FIFO, a
2 GiB line, bad JSON, markup in names and messages, symlinks leading out of the folder).
"""

from __future__ import annotations

import http.client
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from cdp import CHROMIUM_FLAGS, Browser
from runwatch.judging.watchdog import Verdict, check, write_verdict
from runwatch.logger.metrics import RunLogger
from runwatch.version import __version__ as runwatch_version
from runwatch.views import status as status_mod
from runwatch.views.serve import host_warning, serve
from runwatch.views.serve.runs import find_runs
from runwatch.views.serve.series import Series

SCREENSHOTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_screenshots")
EVIL = "<img src=x onerror=alert(1)>"
EVIL_FATAL = "<script>alert('pwned')</script> & more"
# Generous: two shared cores, a 2 GiB line being read in the background, a browser starting.
WAIT = 90.0


def _minimal(path: str, steps: range, spike: tuple[int, ...] = (), evals: int = 0) -> None:
    with open(path, "a") as f:
        for s in steps:
            loss = 2.0 / math.sqrt(s) + (8.0 if s in spike else 0.0)
            f.write(
                json.dumps(
                    {
                        "step": s,
                        "t": 1000.0 + s,
                        "loss": loss,
                        "lr": 1e-3 * min(1, s / 20),
                        "grad_norm": 1.0 + 0.2 * math.sin(s / 5),
                        "sps": 40.0 + s % 3,
                    }
                )
                + "\n"
            )
            if evals and s % evals == 0:
                f.write(json.dumps({"step": s, "eval_loss": 1.5 / math.sqrt(s), "eval_auroc": 0.8}) + "\n")


def _v1_run(run_dir: str, steps: int) -> None:
    recipe = {
        "batch_size": 4,
        "seq_len": 8,
        "gradient_accumulation_steps": 1,
        "qk_clip_threshold": None,
        "max_steps": 100,
    }
    with RunLogger(run_dir, recipe=recipe, window=1) as log:
        for i in range(steps):
            log.step(loss=3.0 / (1 + i / 10), lr=1e-3, grad_norm=0.5 + i / 100)
            if i % 10 == 9:
                log.val(2.0 / (1 + i / 10), metrics={"auroc": 0.75 + i / 200})


def _journal(path: str) -> None:
    recs = [
        {
            "time": 1.0,
            "event": "launch",
            "attempt": 1,
            "pid": 111,
            "kind": None,
            "class": None,
            "step": 0,
            "checkpoint": None,
        },
        {
            "time": 5.0,
            "event": "verdict",
            "attempt": 1,
            "pid": 111,
            "kind": "process_exit",
            "class": "transient",
            "step": 12,
            "checkpoint": None,
        },
        {
            "time": 6.0,
            "event": "relaunch",
            "attempt": 2,
            "pid": 222,
            "kind": "process_exit",
            "class": "transient",
            "step": 12,
            "checkpoint": "ckpt/10",
            "budgets": {"restarts": 5, "rollbacks": 2},
        },
        {
            "time": 9.0,
            "event": "done",
            "attempt": 2,
            "pid": 222,
            "kind": None,
            "class": None,
            "step": 30,
            "checkpoint": None,
            "goodput": {
                "steps_kept": 30,
                "steps_run": 32,
                "ratio": 0.9375,
                "restarts": 1,
                "rollbacks": 0,
                "seconds_lost": 4.0,
            },
        },
    ]
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in recs)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    base = tmp_path_factory.mktemp("serve")
    root = base / "runs"
    outside = base / "outside"
    for d in (
        "proj/v1run",
        "proj/sweep/lr-1",
        "live",
        "hf/checkpoint-10",
        "bad",
        "fifo",
        "huge",
        EVIL,
        "supervised",
        "broken-hf",
        ".hidden",
        "a/b/c/d",
        "leak",
    ):
        (root / d).mkdir(parents=True)
    outside.mkdir()
    _v1_run(str(root / "proj/v1run"), 40)
    write_verdict(str(root / "proj/v1run"), Verdict("done", None, 40, "session ended normally", time.time()))
    _minimal(str(root / "proj/sweep/lr-1/train.jsonl"), range(1, 61), spike=(40, 41), evals=20)
    write_verdict(
        str(root / "proj/sweep/lr-1"), Verdict("anomaly", "loss_spike", 41, "loss 8.3 > 3 x median", time.time())
    )
    _minimal(str(root / "live/train.jsonl"), range(1, 41))
    history = [{"step": s, "loss": 1.0 / s, "learning_rate": 5e-5, "grad_norm": 0.7} for s in range(1, 21)]
    (root / "hf/trainer_state.json").write_text(json.dumps({"max_steps": 200, "log_history": history}))
    (root / "hf/checkpoint-10/trainer_state.json").write_text(
        json.dumps({"max_steps": 200, "log_history": history[:10]})
    )
    (root / "bad/metrics.jsonl").write_text('{not json\n{"step": 1, "loss": 1.5}\n')
    os.mkfifo(root / "fifo/metrics.jsonl")
    (root / "broken-hf/trainer_state.json").write_text('{"log_history": [')
    with open(root / "huge/metrics.jsonl", "wb") as f:  # a 2 GiB line (sparse), then a record
        f.truncate(2 * 2**30)
        f.seek(0, os.SEEK_END)
        f.write(b'\n{"step": 5, "loss": 1.25}\n')
    (root / EVIL / "train.jsonl").write_text(json.dumps({"step": 3, "FATAL": EVIL_FATAL}) + "\n")
    _minimal(str(root / "supervised/train.jsonl"), range(1, 31))
    _journal(str(root / "supervised/supervise.jsonl"))
    _minimal(str(root / ".hidden/train.jsonl"), range(1, 3))
    _minimal(str(root / "a/b/c/train.jsonl"), range(1, 3))  # 4 levels down: found
    _minimal(str(root / "a/b/c/d/train.jsonl"), range(1, 3))  # 5 levels down: not
    _minimal(str(outside / "train.jsonl"), range(1, 3))
    os.symlink(outside, root / "escape")  # a folder leading out
    os.symlink(outside / "train.jsonl", root / "leak/metrics.jsonl")  # a log leading out
    return str(root)


@pytest.fixture(scope="module")
def server(root):
    srv = serve(root, port=0)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.close()


def get(server, path: str, timeout: float = 30.0) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=timeout)
    try:
        conn.request("GET", path)  # sent as written: no client-side normalisation of ".."
        res = conn.getresponse()
        return res.status, res.read()
    finally:
        conn.close()


def get_json(server, path: str) -> dict:
    code, body = get(server, path)
    assert code == 200, (path, code, body[:200])
    return json.loads(body)


def wait_run(server, rel: str, pred, what: str) -> dict:
    deadline = time.monotonic() + WAIT
    while True:
        runs = {r["path"]: r for r in get_json(server, "/api/runs")["runs"]}
        if rel in runs and pred(runs[rel]):
            return runs[rel]
        if time.monotonic() > deadline:
            raise AssertionError(f"{rel}: never {what}: {runs.get(rel)}")
        time.sleep(0.2)


# --- the parts ------------------------------------------------------------------------------------


def test_find_runs(root):
    found = {rel: t.format for rel, t in find_runs(root)}
    assert found == {
        "proj/v1run": "jsonl",
        "proj/sweep/lr-1/train.jsonl": "jsonl",
        "live/train.jsonl": "jsonl",
        "hf": "trainer_state",
        "bad": "jsonl",
        "fifo": "jsonl",
        "huge": "jsonl",
        f"{EVIL}/train.jsonl": "jsonl",
        "supervised/train.jsonl": "jsonl",
        "a/b/c/train.jsonl": "jsonl",
        "broken-hf": "trainer_state",
    }  # not: .hidden, 5 levels down, hf/checkpoint-10, escape (out), leak (its log is out)


@pytest.mark.parametrize("n, limit", [(10, 1000), (999, 1000), (1001, 1000), (100_000, 1000), (5000, 10)])
def test_series_keeps_at_most_limit_points_and_every_spike(n, limit):
    s = Series(limit)
    spike = n * 2 // 3
    for i in range(n):
        s.add(i, float(i % 7) + (1000.0 if i == spike else 0.0), 100.0 + i)
    s.add(n, math.nan)  # not drawable: skipped
    pts = s.points()
    assert len(pts) <= limit
    assert max(y for _, y, _ in pts) == 1000.0 + spike % 7
    assert min(y for _, y, _ in pts) == 0.0
    assert pts[-1] == [n - 1, float((n - 1) % 7), 100.0 + n - 1]
    assert [x for x, _, _ in pts] == sorted(x for x, _, _ in pts)
    assert all(t == 100.0 + x for x, _, t in pts)  # each point keeps its own time
    if n <= limit - 1:
        assert len(pts) == n


@pytest.mark.parametrize("n, limit", [(60, 1000), (5000, 100)])
@pytest.mark.parametrize("cut", [(30, True), (31, False)])
def test_series_cut_drops_the_redone_steps_and_keeps_the_path(n, limit, cut):
    # a rollback to step 30: the steps after it are logged again, and drawn once
    s = Series(limit)
    for i in range(1, n + 1):
        s.add(i, 1.0 / i)
    s.cut(cut)
    assert all(x <= 30 for x, _, _ in s.points()) and s.last is not None and s.last[0] <= 30
    for i in range(31, n + 1):
        s.add(i, 2.0 / i)
    xs = [x for x, _, _ in s.points()]
    assert xs == sorted(xs) and len(xs) == len(set(xs))  # no line back in time, no step twice
    assert s.points()[-1][:2] == [n, 2.0 / n]
    if n < limit:
        assert xs == list(range(1, n + 1)) and s.points()[29][1] == 1.0 / 30 and s.points()[30][1] == 2.0 / 31


def test_host_warning():
    assert host_warning("127.0.0.1") is None and host_warning("localhost") is None and host_warning("::1") is None
    assert host_warning("0.0.0.0").startswith("WARNING: runwatch serve listens on 0.0.0.0: anyone who can reach")


# --- the API --------------------------------------------------------------------------------------


def test_list_has_every_run_with_the_status_keys_trouble_first(server, root):
    wait_run(server, "proj/v1run", lambda r: r["step"] == 40, "at step 40")
    runs = get_json(server, "/api/runs")["runs"]
    paths = [r["path"] for r in runs]
    assert sorted(paths) == sorted(rel for rel, _ in find_runs(root))
    assert paths[0] == "proj/sweep/lr-1/train.jsonl"  # the anomaly first
    assert paths[-1] == "proj/v1run"  # OK last
    keys = set(status_mod.status(os.path.join(root, "proj/v1run"), gpus=False))
    for r in runs:
        assert keys <= set(r), r["path"]
    v1 = runs[-1]
    assert v1["verdict"] == {"state": "ok", "label": "OK"}
    assert (v1["step"], v1["max_steps"], v1["sessions"]) == (40, 100, 1)
    assert runs[0]["verdict"] == {"state": "anomaly", "label": "ANOMALY loss_spike", "class": "divergence"}


def test_run_facts_equal_status_and_check(server, root):
    run_dir = os.path.join(root, "proj/v1run")
    wait_run(server, "proj/v1run", lambda r: r["step"] == 40, "at step 40")
    d = get_json(server, "/api/run/proj/v1run")
    st = status_mod.status(run_dir, gpus=False)
    for key in (
        "run_id",
        "session_id",
        "sessions",
        "max_steps",
        "step",
        "loss",
        "lr",
        "grad_norm",
        "tokens_per_second",
        "steps_per_second",
        "eta_seconds",
        "ended",
        "last_eval",
        "torn_tail",
        "process",
        "watchdog",
    ):
        assert d[key] == st[key], key
    without_age = [line for line in status_mod.format_status(st) if not line.startswith("step")]
    assert [line for line in d["status_lines"] if not line.startswith("step")] == without_age
    charts = {c["name"]: c for c in d["charts"]}
    assert set(charts) == {"loss", "lr", "grad_norm", "throughput", "eval_auroc", "memory"}
    # the memory peaks the logger recorded, as it recorded them (the page writes bytes as MiB)
    rss = charts["memory"]["series"][0]
    assert (rss["name"], rss["key"], charts["memory"]["unit"]) == ("host_rss", "mem_host_rss_peak_bytes", "bytes")
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        peaks = [json.loads(line)["memory"]["host_rss_peak_bytes"] for line in f]
    assert rss["last"][1] == peaks[-1] and max(p[1] for p in rss["points"]) == max(peaks)
    # where it came from: run.json's latest session (recipe, provenance); no launch.json here
    with open(os.path.join(run_dir, "run.json")) as f:
        session = json.load(f)["sessions"][-1]
    assert d["recipe"] == session["recipe"] and d["provenance"] == session["provenance"]
    assert d["provenance"]["runwatch"] == runwatch_version and d["launch"] is None
    assert [(s["name"], s["key"]) for s in charts["loss"]["series"]] == [("train", "loss"), ("eval", "eval_loss")]
    assert len(charts["loss"]["series"][0]["points"]) == 40 and charts["loss"]["series"][0]["points"][-1][0] == 40
    assert [(s["name"], s["key"]) for s in charts["eval_auroc"]["series"]] == [("auroc", "eval_auroc")]
    assert charts["throughput"]["title"] == "throughput (tokens/s)"
    assert d["supervise"] is None
    # the findings of `check` on the same log, the same kinds, steps and messages
    sweep = get_json(server, "/api/run/proj/sweep/lr-1/train.jsonl")
    expected = [(f.kind, f.step, f.message) for f in check(os.path.join(root, "proj/sweep/lr-1/train.jsonl")).findings]
    assert expected and [(f["kind"], f["step"], f["message"]) for f in sweep["findings_list"]] == expected


def test_trainer_state_and_supervision(server):
    hf = wait_run(server, "hf", lambda r: r["step"] == 20, "at step 20")
    assert (hf["max_steps"], hf["loss"]) == (200, 0.05)
    wait_run(server, "supervised/train.jsonl", lambda r: r["step"] == 30, "at step 30")
    deadline = time.monotonic() + WAIT
    while (s := get_json(server, "/api/run/supervised/train.jsonl")["supervise"]) is None or not s["finished"]:
        assert time.monotonic() < deadline, "the journal was never read"
        time.sleep(0.2)
    assert (s["attempt"], s["restarts"], s["rollbacks"], s["budgets"], s["finished"]) == (
        2,
        1,
        0,
        {"restarts": 5, "rollbacks": 2},
        True,
    )
    assert s["goodput"]["ratio"] == 0.9375
    assert [(a["attempt"], a["pid"], a["how"], a["checkpoint"]) for a in s["attempts"]] == [
        (1, 111, "launch", None),
        (2, 222, "relaunch", "ckpt/10"),
    ]
    assert s["attempts"][0]["verdict"] == {"kind": "process_exit", "class": "transient", "step": 12, "line": None}
    assert s["attempts"][0]["end"] == {"event": "relaunch", "step": 12, "time": 6.0}
    assert s["attempts"][1]["end"] == {"event": "done", "step": 30, "time": 9.0}


def test_hostile_logs_are_errors_of_their_run_and_never_block(server, root):
    # The list answers at once while the 2 GiB line is still being read (a request never reads).
    t0 = time.monotonic()
    runs = {r["path"]: r for r in get_json(server, "/api/runs")["runs"]}
    assert "huge" in runs and "fifo" in runs and time.monotonic() - t0 < WAIT
    real = os.path.realpath(root)
    fifo = wait_run(server, "fifo", lambda r: r["error"], "an error")
    assert fifo["error"] == f"{real}/fifo/metrics.jsonl: not a regular file"
    bad = wait_run(server, "bad", lambda r: r["step"] == 1, "at step 1")
    assert (
        bad["error"] == "metrics.jsonl:1: malformed JSON: Expecting property name enclosed in double quotes at column 2"
    )
    assert bad["first_finding"]["kind"] == "invalid_log"
    broken = wait_run(server, "broken-hf", lambda r: r["error"], "an error")
    # the message `check` gives for the same file (one reader of trainer_state.json)
    assert broken["error"] == "trainer_state.json: malformed JSON: Expecting value at column 18"
    passes = server.catalog.passes
    while server.catalog.passes < passes + 2:  # read once; the error stays while the file does not change
        time.sleep(0.1)
    assert get_json(server, "/api/run/broken-hf")["error"] == broken["error"]
    huge = wait_run(server, "huge", lambda r: r["error"], "an error")
    assert huge["error"] == "metrics.jsonl:1: line longer than 16777216 bytes"
    huge = wait_run(server, "huge", lambda r: r["step"] == 5, "past its 2 GiB line")
    assert huge["loss"] == 1.25 and huge["findings"] == 1


@pytest.mark.parametrize(
    "path",
    [
        "/run/..",
        "/run/../../etc/passwd",
        "/run/%2e%2e/%2e%2e/etc/passwd",
        "/api/run/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
        "/api/run/proj/v1run/..",
        "/api/run/proj/v1run/%2E%2E/sweep",
        "/run/escape",
        "/run/escape/train.jsonl",
        "/api/run/leak",
        "/api/run/nope",
        "/run/proj",
        "/run/%00",
        "/run/%ff",
        "/static/../serve/server.py",
        "/static/%2e%2e/server.py",
        "//etc/passwd",
        "/api/run/",
        "/run/.hidden/train.jsonl",
        "/run/a/b/c/d/train.jsonl",
    ],
)
def test_paths_outside_the_catalog_are_404(server, path):
    code, body = get(server, path)
    assert code == 404, (path, body[:200])
    assert b"root:" not in body


def test_read_only_and_loopback_host_only(server):
    port = server.server_address[1]
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request(method, "/api/runs", body=b"{}")
        assert conn.getresponse().status == 501, method
        conn.close()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/api/runs", headers={"Host": "attacker.example:80"})  # DNS rebinding
    assert conn.getresponse().status == 403
    conn.close()


def test_pages_carry_no_markup_from_runs(server):
    name = f"{EVIL}/train.jsonl"
    run = wait_run(server, name, lambda r: r["findings"] - r["warnings"] == 1, "with its finding")
    assert run["first_finding"]["message"] == f"FATAL: {EVIL_FATAL}"
    for path in ("/", "/run/" + urllib.request.quote(name), "/compare?run=" + urllib.request.quote(EVIL, safe="")):
        code, body = get(server, path)
        assert code == 200
        text = body.decode()
        assert "<img" not in text and "<script>alert" not in text and "onerror=alert(1)>" not in text
        assert "\\u003cimg src=x onerror=alert(1)\\u003e" in text
    code, body = get(server, "/static/app.js")
    assert code == 200 and b"innerHTML" not in body  # the script builds the DOM with textContent only


# --- the command line -----------------------------------------------------------------------------


def test_cli_prints_its_url_serves_and_stops_on_sigint(root):
    proc = subprocess.Popen(
        [sys.executable, "-m", "runwatch", "serve", root, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("runwatch serve: 11 runs under ") and " at http://127.0.0.1:" in line, line
        url = line.rsplit(" at ", 1)[1].strip()
        body = json.load(urllib.request.urlopen(url + "api/runs", timeout=30))
        assert len(body["runs"]) == 11
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert err.strip() == "runwatch serve: stopped"


@pytest.mark.parametrize(
    "args, message",
    [
        (["/nonexistent-runs"], "serve: /nonexistent-runs: no such folder"),
        (["{root}", "--port", "70000"], "serve.port must be an int in [0, 65535], got 70000"),
        (["{root}", "--port", "x"], "runwatch serve: argument --port: invalid int value: 'x'"),
    ],
)
def test_cli_usage_errors(root, capsys, args, message):
    from runwatch.cli import main

    assert main(["serve", *[a.replace("{root}", root) for a in args]]) == 2
    assert capsys.readouterr().err.strip() == message


def test_cli_port_in_use(root, server, capsys):
    from runwatch.cli import main

    port = server.server_address[1]
    assert main(["serve", root, "--port", str(port)]) == 2
    assert capsys.readouterr().err.strip() == f"serve: cannot listen on 127.0.0.1:{port}: Address already in use"


# --- a real browser -------------------------------------------------------------------------------


def _chromium(chromium, tmp_path, *args: str) -> str:
    profile = tmp_path / f"profile-{time.monotonic_ns()}"
    res = subprocess.run(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True, timeout=180
    )
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def test_browser_renders_the_list_and_a_run(server, chromium, tmp_path):
    wait_run(server, "proj/sweep/lr-1/train.jsonl", lambda r: r["findings"] >= 1, "with findings")
    wait_run(server, f"{EVIL}/train.jsonl", lambda r: r["findings"] - r["warnings"] == 1, "with its finding")
    base = server.url
    dom = _chromium(chromium, tmp_path, "--dump-dom", base)
    assert '<table class="runs">' in dom and 'data-path="proj/v1run"' in dom
    assert dom.index("proj/sweep/lr-1/train.jsonl") < dom.index(">proj/v1run<")  # the anomaly first
    assert '<span class="badge state-anomaly">ANOMALY loss_spike</span>' in dom
    assert '<span class="badge state-ok">OK</span>' in dom
    assert "&lt;img src=x onerror=alert(1)&gt;/train.jsonl" in dom and "<img" not in dom  # text, not an element
    assert "not a regular file" in dom
    run_url = base + "run/proj/sweep/lr-1/train.jsonl"
    dom = _chromium(chromium, tmp_path, "--dump-dom", run_url)
    assert 'data-chart="loss"' in dom and 'data-chart="eval_auroc"' in dom and "<polyline" in dom
    assert 'data-points="63"' in dom  # 60 train losses + 3 eval losses on the loss chart
    assert 'data-kind="loss_spike"' in dom and "ANOMALY loss_spike" in dom
    evil_url = base + "run/" + urllib.request.quote(f"{EVIL}/train.jsonl")
    dom = _chromium(chromium, tmp_path, "--dump-dom", evil_url)
    assert "FATAL: &lt;script&gt;alert('pwned')&lt;/script&gt; &amp; more" in dom
    assert "<script>alert" not in dom and "<img" not in dom
    os.makedirs(SCREENSHOTS, exist_ok=True)
    for name, url, size in (
        ("list", base, "1280,900"),
        ("run", run_url, "1280,1700"),
        ("list-phone", base, "390,844"),
        ("run-phone", base + "run/supervised/train.jsonl", "390,1600"),
    ):
        out = os.path.join(SCREENSHOTS, f"{name}.png")
        _chromium(chromium, tmp_path, f"--screenshot={out}", f"--window-size={size}", url)
        assert os.path.getsize(out) > 5000


@pytest.mark.parametrize(
    "page, probe",
    [
        ("/", "document.querySelector('tr[data-path=\"live/train.jsonl\"] td.step').textContent"),
        ("/run/live/train.jsonl", "document.querySelector('.run > .facts').textContent"),
    ],
)
def test_browser_updates_without_reload(server, root, chromium, tmp_path, page, probe):
    log = os.path.join(root, "live/train.jsonl")
    with open(log) as f:
        last = json.loads(f.read().splitlines()[-1])["step"]
    wait_run(server, "live/train.jsonl", lambda r: r["step"] == last, f"at step {last}")
    with Browser(chromium, server.url.rstrip("/") + page, str(tmp_path / "profile")) as b:
        b.wait_for(f"document.readyState === 'complete' && ({probe}).includes('{last}')")
        b.evaluate("window.__sameDocument = 42")
        _minimal(log, range(last + 1, last + 18))
        b.wait_for(f"({probe}).includes('{last + 17}')")
        assert b.evaluate("window.__sameDocument") == 42  # the same document: no reload
        assert b.evaluate("performance.getEntriesByType('navigation').length") == 1
        assert b.exceptions == []


def test_other_tools_logs_are_runs_read_incrementally(tmp_path):
    """TensorBoard event files and a CSV log of steps are listed and read like any run; a data
    table and another SQLite file are not runs."""
    import csv

    torch_tb = pytest.importorskip("torch.utils.tensorboard")
    tb_dir = tmp_path / "tb" / "version_0"
    w = torch_tb.SummaryWriter(str(tb_dir))
    for step in range(1, 31):
        w.add_scalar("train/loss", 2.0 - step / 100, step)
        w.add_scalar("lr", 1e-3, step)
    w.close()
    (tmp_path / "lit").mkdir()
    with open(tmp_path / "lit" / "metrics.csv", "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["step", "train_loss", "lr-AdamW"])
        for step in range(1, 21):
            out.writerow([step, 1.5, 1e-3])
    (tmp_path / "data.csv").write_text("text,label\nhello,1\n")
    (tmp_path / "other.sqlite").write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
    runs = dict(find_runs(str(tmp_path)))
    assert sorted(runs) == ["lit/metrics.csv", "tb/version_0"]  # (a folder of event files is the run)
    from runwatch.views.serve.runs import RunView

    for rel, target in runs.items():
        view = RunView(rel, target)
        while view.refresh():
            pass
        assert view.error is None, view.error
        # every step, the last one too: a refresh that leaves a step held back polls once more
        assert view.records == (30 if rel.startswith("tb") else 20) and view.tail[-1].kind == "train"
        # nothing new: a refresh applies nothing
        records = view.records
        assert view.refresh() is False and view.records == records


def test_a_dangling_run_json_is_an_error_of_its_run(tmp_path):
    # run.json a link to nothing: the run says so (as `check` does), and reads once it is back
    from runwatch.views.serve.runs import RunView

    run = tmp_path / "run"
    _v1_run(str(run), 5)
    os.rename(run / "run.json", tmp_path / "run.json.saved")
    os.symlink(tmp_path / "nowhere.json", run / "run.json")
    (rel, target), *others = find_runs(str(tmp_path))
    assert rel == "run" and not others
    view = RunView(rel, target)
    assert view.refresh() is False
    assert view.error == f"run.json: missing ({run / 'run.json'})"
    assert view.summary()["error"] == view.error
    os.remove(run / "run.json")
    os.rename(tmp_path / "run.json.saved", run / "run.json")
    view.refresh()
    assert view.error is None and view.records == 6 and view.summary()["step"] == 5


def test_the_page_adds_the_end_of_the_log_findings_once_the_log_has_settled(tmp_path):
    """A log without a train loss: `check` warns no_signal at the step reached. The page says so
    once the log is judged as a whole: not while it may still grow, then once it has not grown
    for SETTLED_SECONDS; a run whose latest session ended (an end record) is settled at once."""
    from runwatch.reading.records import resolve_target
    from runwatch.views.serve.runs import SETTLED_SECONDS, RunView

    path = tmp_path / "acc" / "train.jsonl"
    os.makedirs(path.parent)
    with open(path, "w") as f:
        for s in range(1, 101):
            f.write(json.dumps({"step": s, "t": 1000.0 + s, "accuracy": 0.5 + s / 1000}) + "\n")
    view = RunView("acc/train.jsonl", resolve_target(str(path)))
    while view.refresh():
        pass
    now = time.time()
    live = view.summary(now)
    assert (live["findings"], live["first_finding"], view.detail(now)["findings_list"]) == (0, None, [])
    later = now + SETTLED_SECONDS + 1  # nothing written since
    settled = view.summary(later)
    assert settled["findings"] == settled["warnings"] == 1
    assert (settled["first_finding"]["kind"], settled["first_finding"]["step"]) == ("no_signal", 100)
    expected = [(f.kind, f.step, f.message) for f in check(str(path)).findings]
    assert [(f["kind"], f["step"], f["message"]) for f in view.detail(later)["findings_list"]] == expected
    assert view.summary(later)["findings"] == 1  # a preview: said once, however often asked

    flat = tmp_path / "flat"
    with RunLogger(
        str(flat),
        recipe={
            "batch_size": 4,
            "seq_len": 8,
            "gradient_accumulation_steps": 1,
            "qk_clip_threshold": None,
            "max_steps": 600,
        },
        window=1,
    ) as log:
        for i in range(40):  # too short for the live rule's window: judged at the end only
            log.step(loss=0.693 + (i * 7 % 5) / 1000, lr=1e-3, grad_norm=0.5)
    view = RunView("flat", resolve_target(str(flat)))
    while view.refresh():
        pass
    expected = [(f.kind, f.step) for f in check(str(flat)).findings]
    assert expected == [("no_progress", 40)]  # judged on the session's whole length, at its end
    assert [(f["kind"], f["step"]) for f in view.detail(time.time())["findings_list"]] == expected
