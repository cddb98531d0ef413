"""The workflow the skill teaches, end to end, on a program that only prints text, with only the
commands the skill names: bench → plan → subsample → audit-data → smoke (catching an inverted
metric, then passing) → supervise through a crash → wait (the verdict, then the events) → the
evidence (incident, series, compare)."""

from __future__ import annotations

import json
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")
TRAIN = os.path.join(HERE, "text_train.py")
STEP = r"^step (?P<step>\d+) loss (?P<loss>\S+) sps (?P<sps>\S+)"
EVAL = r"^eval step (?P<step>\d+) eval_loss (?P<eval_loss>\S+) auroc (?P<eval_auroc>\S+)"
READ = ["--pattern", STEP, "--pattern", EVAL]

pytestmark = pytest.mark.xdist_group("workflow")


def write_rows(path: str, n: int = 3000, seed: int = 3) -> None:
    """`{"text", "label"}` reviews with 10 % label noise; 1 % truncated, 3 % empty texts, 1 % no label."""
    rng = random.Random(seed)
    pos = ["great", "good", "wonderful", "fun", "loved", "best", "excellent"]
    neg = ["bad", "awful", "boring", "worst", "hated", "poor", "dull"]
    mid = ["movie", "film", "plot", "actor", "scene", "story", "the", "a", "was", "and"]
    with open(path, "w") as f:
        for _ in range(n):
            y = rng.random() < 0.5
            words = rng.sample(pos if y else neg, 2) + rng.sample(mid, 4)
            if rng.random() < 0.1:
                y = not y
            row = {"text": " ".join(rng.sample(words, len(words))), "label": int(y)}
            line = json.dumps(row)
            u = rng.random()
            if u < 0.01:
                line = line[:20]
            elif u < 0.04:
                line = json.dumps({**row, "text": ""})
            elif u < 0.05:
                line = json.dumps({"text": row["text"]})
            f.write(line + "\n")


def rw(cwd: str, *argv: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "runwatch", *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_the_skill_names_every_command_used_here():
    from runwatch.views.agent import skill_text

    text = skill_text()
    for command in ("bench", "plan", "subsample", "audit-data", "smoke", "launch", "supervise", "wait", "incident"):
        assert f"runwatch {command} " in text, command


def test_workflow_on_a_program_that_prints_text(tmp_path):
    d = str(tmp_path)
    write_rows(os.path.join(d, "data.jsonl"))
    train = [sys.executable, TRAIN]

    # bench: the printed lines read with --pattern, as `check` reads them
    r = rw(
        d,
        "bench",
        "runs/bench",
        *READ,
        "--",
        *train,
        "--data",
        "data.jsonl",
        "--steps",
        "1000",
        "--step-seconds",
        "0.02",
    )
    assert r.returncode == 0, r.stderr
    with open(os.path.join(d, "runs", "bench", "bench.json")) as f:
        bench = json.load(f)
    # 8 samples a step of 20 ms and more (a loaded machine makes it longer, never shorter)
    assert bench["format"] == "text" and 10 < bench["samples_per_second"] < 400
    assert 0.015 < bench["seconds_per_step"]["median"] < 1.0

    # plan: 3 epochs of 3000 samples in 10 s does not fit; it names the subsample that does
    r = rw(d, "plan", "runs/bench", "--samples", "3000", "--epochs", "3", "--window", "10s", "--data", "data.jsonl",
           "--stratify", "label")  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    assert "DOES NOT FIT" in r.stdout
    nxt = r.stdout.strip().splitlines()[-1]
    assert nxt.startswith("next: runwatch subsample data.jsonl --n ")

    # subsample: the command plan printed
    argv = shlex.split(nxt.removeprefix("next: runwatch "))
    r = rw(d, *argv)
    assert r.returncode == 0, r.stderr
    sub = argv[argv.index("--out") + 1]
    n = int(argv[argv.index("--n") + 1])
    with open(os.path.join(d, sub)) as f:
        assert sum(1 for _ in f) == n
    assert "unreadable rows never drawn (malformed_json" in r.stderr

    # audit-data: the empty texts drawn are rejected (exit 1); the kept rows pass a second audit
    r = rw(d, "audit-data", sub, "--field", "text", "--check", "text", "--require", "label", "--out", "audit")
    assert r.returncode == 1
    assert re.match(r"audit-data: [\d,]+ of [\d,]+ rows kept, \d+ rejected; most common: check empty_text", r.stdout)
    r = rw(d, "audit-data", "audit/kept.raw.jsonl", "--field", "text", "--check", "text", "--require", "label",
           "--out", "audit2")  # fmt: skip
    assert r.returncode == 0 and r.stdout.splitlines()[0].endswith("0 rejected: every row passed")

    # smoke: a short run whose AUROC is computed the wrong way round fails as inverted_metric
    smoke_argv = ["--data", "audit/kept.raw.jsonl", "--steps", "80", "--step-seconds", "0"]
    r = rw(d, "launch", "runs/smoke", "--watch", *READ, "--", *train, *smoke_argv, "--invert")
    assert r.returncode == 0, r.stdout + r.stderr
    judge = ["smoke", "runs/smoke", *READ, "--chance-loss", "0.693", "--checkpoint", "ckpt.json"]
    r = rw(d, *judge)
    assert r.returncode == 1, r.stdout
    assert r.stdout.splitlines()[-1] == "SMOKE FAIL: metric"
    assert "inverted_metric: auroc " in r.stdout
    # without options, the log is read as it was launched (launch.json recorded the reading options)
    r = rw(d, "smoke", "runs/smoke", "--chance-loss", "0.693", "--checkpoint", "ckpt.json")
    assert r.returncode == 1 and r.stdout.splitlines()[-1] == "SMOKE FAIL: metric", r.stdout
    # the same output where nothing says how to read it: SMOKE CANNOT JUDGE, exit 2
    os.makedirs(os.path.join(d, "runs", "bare"))
    shutil.copy(os.path.join(d, "runs", "smoke", "stdout.log"), os.path.join(d, "runs", "bare", "stdout.log"))
    r = rw(d, "smoke", "runs/bare")
    assert r.returncode == 2 and r.stdout.splitlines()[-1].startswith("SMOKE CANNOT JUDGE: "), r.stdout
    # the sign fixed, it passes
    r = rw(d, "launch", "runs/smoke2", "--watch", *READ, "--", *train, *smoke_argv)
    assert r.returncode == 0, r.stdout + r.stderr
    r = rw(d, *[("runs/smoke2" if a == "runs/smoke" else a) for a in judge])
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == "SMOKE PASS", r.stdout

    # supervise: the node dies once at step 70; the relaunch resumes from the checkpoint
    os.makedirs(os.path.join(d, "runs", "main"))
    env = {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"}
    sup = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runwatch",
            "supervise",
            "runs/main",
            "--restarts",
            "2",
            "--backoff",
            "0",
            "--resume-args",
            "--resume",
            *READ,
            "--",
            *train,
            "--data",
            "audit/kept.raw.jsonl",
            "--steps",
            "150",
            "--batch",
            "64",
            "--step-seconds",
            "0.01",
            "--crash-at",
            "70",
        ],  # fmt: skip
        cwd=d,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        r = rw(d, "wait", "runs/main", "--timeout", "200")
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.strip() == "OK done step=150"
        assert sup.wait(timeout=60) == 0
    finally:
        if sup.poll() is None:
            os.killpg(sup.pid, signal.SIGKILL)
    r = rw(d, "wait", "runs/main", "--events", "--json", "--timeout", "5")
    assert r.returncode == 0
    doc = json.loads(r.stdout)
    kinds = [e["kind"] for e in doc["events"]]
    assert kinds == ["stop", "relaunch", "done"]
    assert doc["events"][0]["what"] == "process_exit" and "lost the node at step 70" in doc["events"][0]["message"]
    # nothing new after the cursor: exit 3
    r = rw(d, "wait", "runs/main", "--events", "--since", doc["cursor"], "--timeout", "0.5")
    assert r.returncode == 3 and r.stdout.splitlines()[-1] == f"cursor {doc['cursor']}"
    # the evidence in one call each: why it stopped, its curve, what differs from the smoke run
    r = rw(d, "incident", "runs/main", *READ, "--json")
    assert r.returncode == 0, r.stderr
    inc = json.loads(r.stdout)
    assert inc["verdict"]["kind"] == "process_exit" and "lost the node at step 70" in inc["verdict"]["message"]
    assert [x["step"] for x in inc["before"]][-1] == 68 and inc["after"][0]["step"] == 69
    assert inc["after"][1]["step"] == 61  # the relaunch resumed from the checkpoint of step 60
    assert inc["argv"][-1] == "--resume" and inc["output"]
    r = rw(d, "series", "runs/main", *READ, "--key", "loss", "--key", "eval_auroc", "--points", "10", "--json")
    series = json.loads(r.stdout)
    assert series["steps"] == [1, 150] and len(series["series"]["loss"]) == 10
    assert all(b[2] <= b[4] <= b[3] for b in series["series"]["loss"])
    r = rw(d, "compare", "runs/main", "runs/smoke2", "--json")
    assert "argv" in json.loads(r.stdout)["differs"]
    with open(os.path.join(d, "runs", "main", "stdout.log")) as f:
        out = f.read()
    assert "resumed from" in out and "at step 60" in out  # the relaunch continued from its checkpoint
