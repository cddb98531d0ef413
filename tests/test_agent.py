"""runwatch.views.agent in process: the tools' results against the commands they mirror, the 8 KB bound,
confinement to ROOT, the last records of every format, the verdict states wait_for_verdict
decides on, `runwatch skill`, and `runwatch mcp` without its extra. The MCP server itself, over
stdio with the SDK's own client and against live runs, is tests/test_mcp.py."""

from __future__ import annotations

import csv
import fcntl
import json
import math
import os
import re
import sys
import time

import pytest

from runwatch import RunLogger
from runwatch.cli import main
from runwatch.errors import UsageError
from runwatch.judging.verdict import Verdict, write_verdict
from runwatch.reading.records import Record, resolve_target
from runwatch.views.agent import bound, skill_text
from runwatch.views.agent.tail import MAX_METRICS, last_records, metrics_left_out, minimal_rows, seq_len_of
from runwatch.views.agent.tools import MAX_LIST_RUNS, Tools
from runwatch.views.agent.verdicts import watch_state
from runwatch.views.status import status

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPE = {"batch_size": 4, "seq_len": 8, "gradient_accumulation_steps": 1, "qk_clip_threshold": None, "max_steps": 100}


def minimal_log(path: str, steps: range, nan_at: int | None = None, evals: int = 0) -> None:
    """A hand-written loop's minimal telemetry (as json.dumps writes it: NaN is a bare token)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a") as f:
        for s in steps:
            loss = math.nan if s == nan_at else 2.0 / math.sqrt(s)
            f.write(json.dumps({"step": s, "t": 1000.0 + s, "loss": loss, "lr": 1e-3, "grad_norm": 1.0, "sps": 40.0}))
            f.write("\n")
            if evals and s % evals == 0:
                f.write(json.dumps({"step": s, "eval_loss": 1.5, "eval_auroc": 0.8}) + "\n")


def v1_run(run_dir: str, steps: int) -> None:
    with RunLogger(run_dir, recipe=RECIPE, window=1) as log:
        for i in range(steps):
            log.step(loss=3.0 / (1 + i / 10), lr=1e-3, grad_norm=0.5)
            if i % 10 == 9:
                log.val(2.0 / (1 + i / 10), metrics={"auroc": 0.9})


def size(text: str) -> int:
    return bound.result_bytes(text)


# --- the bound ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "doc, cut, keep, expect_items, expect_note",
    [
        ({"a": 1, "items": [1, 2, 3]}, "items", "head", [1, 2, 3], None),
        ({"items": list(range(5000))}, "items", "head", "head", r"^\d+ of 5000 items shown \(8192-byte limit\)$"),
        ({"items": list(range(5000))}, "items", "tail", "tail", r"^\d+ of 5000 items shown \(8192-byte limit\)$"),
        ({"s": "x" * 20000}, None, "head", None, r"^long strings shortened$"),
        ({"big": list(range(5000)), "keep": 1}, None, "head", None, r"left out: big$"),
    ],
)
def test_fit_keeps_every_result_within_8_kb_as_valid_json(doc, cut, keep, expect_items, expect_note):
    text, out = bound.fit(doc, cut=cut, keep=keep)
    assert json.loads(text) == out
    assert size(text) <= bound.MAX_RESULT_BYTES
    if expect_note is None:
        assert "truncated" not in out
    else:
        assert re.search(expect_note, out["truncated"]), out["truncated"]
    if expect_items == "head":
        assert out[cut] == doc[cut][: len(out[cut])] and len(out[cut]) > 100
    elif expect_items == "tail":
        assert out[cut] == doc[cut][-len(out[cut]) :] and out[cut][-1] == 4999
    elif expect_items is not None:
        assert out[cut] == expect_items


def test_fit_is_strict_json_and_counts_what_the_client_receives():
    text, out = bound.fit({"loss": math.nan, "x": [math.inf, -math.inf], "s": 'quote " and é'})
    assert out == {"loss": "nan", "x": ["inf", "-inf"], "s": 'quote " and é'}
    json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in strict JSON"))
    # the text, its copy as a JSON string (escapes counted), the envelope
    assert bound.result_bytes(text) == len(text.encode()) + len(json.dumps(text, ensure_ascii=False).encode()) + 160
    _, capped = bound.fit({"runs": [1, 2]}, cut="runs", total=70)
    assert capped["truncated"] == "2 of 70 runs shown (at most 2)"


# --- confinement -------------------------------------------------------------------------------------


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "root"
    minimal_log(str(r / "runs" / "a" / "metrics.jsonl"), range(1, 31), evals=10)
    v1_run(str(r / "runs" / "v1"), 25)
    outside = tmp_path / "outside"
    minimal_log(str(outside / "metrics.jsonl"), range(1, 5))
    os.symlink(outside, r / "runs" / "out")  # leads out of ROOT
    os.symlink(r / "runs" / "a", r / "runs" / "alias")  # stays inside
    return r


@pytest.mark.parametrize(
    "path, message",
    [
        ("../outside", "run_status: ../outside: '..' is not allowed; give a path inside {root}"),
        ("runs/../runs/a", "run_status: runs/../runs/a: '..' is not allowed; give a path inside {root}"),
        ("{outside}", "run_status: {outside}: outside {root}"),
        ("/etc", "run_status: /etc: outside {root}"),
        ("runs/out", "run_status: runs/out: outside {root}"),
        ("runs/nope", "run_status: runs/nope: no such run under {root}"),
        ("", "run_status: run must be a path inside {root}, got ''"),
    ],
)
def test_paths_outside_root_are_refused_as_serve_refuses_them(root, path, message):
    tools = Tools(str(root))
    real = os.path.realpath(root)
    outside = os.path.realpath(root.parent / "outside")
    with pytest.raises(UsageError) as exc:
        tools.run_status(path.format(outside=outside))
    assert str(exc.value) == message.format(root=real, outside=outside)


def test_paths_inside_root_relative_absolute_or_through_a_link_inside(root):
    tools = Tools(str(root))
    for path in ("runs/a", str(root / "runs" / "a"), "runs/alias", "./runs/a"):
        _, doc = tools.run_status(path)
        assert doc["step"] == 30, path
    with pytest.raises(UsageError, match="no such folder"):
        Tools(str(root / "nope"))


# --- the tools against their commands ------------------------------------------------------------------


def test_run_status_is_status_json_with_the_supervision(root, capsys):
    tools = Tools(str(root))
    _, doc = tools.run_status("runs/v1")
    assert main(["status", str(root / "runs" / "v1"), "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    for key in cli:
        if key not in ("age_seconds", "gpus"):
            assert doc[key] == cli[key], key
    assert doc["run"] == "runs/v1" and doc["step"] == 25 and doc["max_steps"] == 100
    assert "supervision" not in doc  # never supervised


def test_check_run_is_check_json_with_options(root, capsys):
    minimal_log(str(root / "runs" / "nan" / "metrics.jsonl"), range(1, 21), nan_at=12)
    tools = Tools(str(root))
    _, doc = tools.check_run("runs/nan")
    assert main(["check", str(root / "runs" / "nan"), "--json"]) == 7
    cli = json.loads(capsys.readouterr().out)
    assert {k: doc[k] for k in cli} == json.loads(json.dumps(cli))  # the same facts, NaN-free
    assert doc["exit"] == 7 and doc["findings_total"] == 1
    assert doc["verdict"].startswith("ANOMALY nonfinite_loss step=12: ")
    assert doc["findings"][0]["class"] == "divergence" and doc["onset"] == 12
    _, clean = tools.check_run("runs/a", ["--metric-min", "0.75"])
    assert clean["verdict"] == "OK clean step=30" and clean["exit"] == 0
    # the exit status is the command's, --exit-code included (verdict.exit_status)
    _, coded = tools.check_run("runs/nan", ["--exit-code", "divergence=3"])
    assert coded["exit"] == 3 == main(["check", str(root / "runs" / "nan"), "--exit-code", "divergence=3"])
    capsys.readouterr()
    _, chance = tools.check_run("runs/a", ["--chance-loss", "0.3", "--chance-after-step", "0"])
    assert chance["findings"][0]["kind"] == "loss_at_chance"
    with pytest.raises(UsageError, match=r"^check_run: runwatch: unrecognized arguments: --bogus$"):
        tools.check_run("runs/a", ["--bogus"])
    with pytest.raises(UsageError, match=r"^check_run: --help is not available here$"):
        tools.check_run("runs/a", ["--help"])
    with pytest.raises(UsageError, match="watch.metric_min"):
        tools.check_run("runs/a", ["--metric-min", "7"])


def test_check_run_keeps_the_first_findings_within_the_bound(root):
    path = root / "runs" / "bad" / "metrics.jsonl"
    os.makedirs(path.parent)
    # a falling loss: the 1500 invalid lines are the only findings (a flat one is also no_progress)
    path.write_text("".join(f'{{"step": {i}, "loss": {2 / i}}}\nnot json {i}\n' for i in range(1, 1501)))
    _, doc = Tools(str(root)).check_run("runs/bad")
    assert doc["findings_total"] == 1500 and 0 < len(doc["findings"]) < 1500
    assert doc["findings"][0]["message"].startswith("metrics.jsonl:2: ")
    assert doc["truncated"].startswith(f"{len(doc['findings'])} of 1500 findings shown")
    assert doc["verdict"].startswith("ANOMALY invalid_log step=1: metrics.jsonl:2: ")


def test_list_runs_is_the_page_list_anomalies_first_at_most_50(root):
    for i in range(60):
        minimal_log(str(root / "sweep" / f"run-{i:02d}" / "metrics.jsonl"), range(1, 6))
    write_verdict(str(root / "sweep" / "run-42"), Verdict("anomaly", "stall", 5, "no record for 400 s", time.time()))
    tools = Tools(str(root))
    _, doc = tools.list_runs("sweep")
    assert doc["total"] == 60 and len(doc["runs"]) <= MAX_LIST_RUNS
    assert doc["runs"][0] == {
        "path": "sweep/run-42",
        "verdict": "ANOMALY stall",
        "class": "transient",
        "step": 5,
        "loss": pytest.approx(2.0 / math.sqrt(5)),
        "samples_per_second": 40.0,  # a minimal log's `sps`: samples, not tokens
        "age_seconds": doc["runs"][0]["age_seconds"],
        "warnings": 0,
        "findings": 0,
    }
    assert doc["truncated"].startswith(f"{len(doc['runs'])} of 60 runs shown")
    _, everything = tools.list_runs()
    assert everything["total"] == 63 and everything["under"] == "."
    with pytest.raises(UsageError, match="list_runs: runs/a/metrics.jsonl: not a folder"):
        tools.list_runs("runs/a/metrics.jsonl")


def test_plan_run_fits_does_not_fit_or_cannot(root):
    tools = Tools(str(root))
    _, fits = tools.plan_run(1000, "1h", run="runs/a")
    assert fits["exit"] == 0 and fits["meaning"] == "fits" and fits["verdict"].startswith("FITS: ")
    _, over = tools.plan_run(10**9, "1h", run="runs/a", epochs=2)
    assert over["exit"] == 1 and over["meaning"] == "does not fit"
    assert over["subsample"].startswith("runwatch subsample DATA.jsonl --n ")
    minimal_log(str(root / "runs" / "short" / "metrics.jsonl"), range(1, 4))
    _, cannot = tools.plan_run(1000, "1h", run="runs/short")
    assert cannot["exit"] == 2 and cannot["meaning"] == "cannot project" and cannot["reason"]
    with pytest.raises(UsageError, match="give either run"):
        tools.plan_run(1000, "1h")
    with pytest.raises(UsageError, match="window: expected a duration"):
        tools.plan_run(1000, "soon", run="runs/a")


def test_explain_every_kind(root):
    _, doc = Tools(str(root)).explain("nonfinite_loss")
    assert doc["class"] == "divergence" and doc["meaning"] and doc["action"]
    with pytest.raises(UsageError, match=r"^explain: unknown kind 'nope'; known: done, "):
        Tools(str(root)).explain("nope")


# --- the last records, every format -----------------------------------------------------------------


def test_tail_records_minimal_keys_and_eval_rows(root):
    tools = Tools(str(root))
    _, doc = tools.tail_records("runs/a", 3)
    assert doc["records"] == [
        {"step": 29, "t": 1029.0, "loss": 2 / math.sqrt(29), "lr": 1e-3, "grad_norm": 1.0, "sps": 40.0},
        {"step": 30, "t": 1030.0, "loss": 2 / math.sqrt(30), "lr": 1e-3, "grad_norm": 1.0, "sps": 40.0},
        {"step": 30, "eval_loss": 1.5, "eval_auroc": 0.8},
    ]
    assert (doc["run"], doc["log"], doc["format"], doc["n"]) == ("runs/a", "runs/a/metrics.jsonl", "jsonl", 3)
    _, v1 = tools.tail_records("runs/v1", 7)
    with open(root / "runs" / "v1" / "metrics.jsonl") as f:
        last = [r for r in map(json.loads, f) if r["event"] == "train"][-1]
    # schema v1: samples/s = tokens / train_seconds / seq_len; its val records are eval rows
    assert v1["records"][-1] == {
        "step": 25,
        "t": last["time"],
        "loss": last["loss"],
        "lr": 1e-3,
        "grad_norm": 0.5,
        "sps": pytest.approx(last["tokens"] / last["train_seconds"] / RECIPE["seq_len"]),
    }
    assert [r["step"] for r in v1["records"]] == [20, 20, 21, 22, 23, 24, 25]
    assert v1["records"][1] == {"step": 20, "t": v1["records"][1]["t"], "eval_loss": 2.0 / 2.9, "eval_auroc": 0.9}


def test_tail_records_clamps_n_and_stays_within_the_bound(root):
    minimal_log(str(root / "runs" / "long" / "metrics.jsonl"), range(1, 1001))
    tools = Tools(str(root))
    text, doc = tools.tail_records("runs/long", 5000)
    assert doc["n"] == 200 and doc["clamped"] == "n 5000 clamped to 200"
    assert size(text) <= 8192 and doc["truncated"].startswith(f"{len(doc['records'])} of 200 records shown")
    assert doc["records"][-1]["step"] == 1000  # the newest kept
    with pytest.raises(UsageError, match=r"tail_records: n must be an int >= 1, got 0"):
        tools.tail_records("runs/long", 0)


def test_tail_records_nan_is_text(root):
    minimal_log(str(root / "runs" / "nan" / "metrics.jsonl"), range(1, 6), nan_at=5)
    _, doc = Tools(str(root)).tail_records("runs/nan", 1)
    assert doc["records"] == [{"step": 5, "t": 1005.0, "loss": "nan", "lr": 1e-3, "grad_norm": 1.0, "sps": 40.0}]


def test_tail_of_a_1_gb_log_reads_its_end_only(tmp_path):
    """A sparse 1 GB log (holes read as NUL bytes) with its records at the end: the tail is there."""
    path = tmp_path / "big" / "metrics.jsonl"
    os.makedirs(path.parent)
    with open(path, "wb") as f:
        f.truncate(1 << 30)
        f.seek(0, os.SEEK_END)
        f.write(b"\n")
        for s in range(1, 101):
            f.write(json.dumps({"step": s, "loss": 1.0, "sps": 10.0}).encode() + b"\n")
    recs, _ = last_records(resolve_target(str(path.parent)), 20)
    assert [r.step for r in recs] == list(range(81, 101))


def test_tail_records_of_other_tools_logs(tmp_path):
    torch_tb = pytest.importorskip("torch.utils.tensorboard")
    root = tmp_path
    w = torch_tb.SummaryWriter(str(root / "tb"))
    for step in range(1, 31):
        w.add_scalar("train/loss", 2.0 - step / 100, step)
        w.add_scalar("lr", 1e-3, step)
    w.close()
    os.makedirs(root / "lit")
    with open(root / "lit" / "metrics.csv", "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["step", "train_loss", "val_loss"])
        for step in range(1, 21):
            out.writerow([step, 1.5, "" if step % 10 else 1.2])
    with open(root / "trainer_state.json", "w") as f:
        json.dump(
            {"max_steps": 50, "log_history": [{"step": s, "loss": 0.5, "learning_rate": 1e-4} for s in (10, 20)]}, f
        )
    tools = Tools(str(root))
    _, tb = tools.tail_records("tb", 3)
    assert tb["format"] == "tensorboard"
    assert [(r["step"], r["loss"], r["lr"]) for r in tb["records"]][-2:] == [
        (29, pytest.approx(1.71), pytest.approx(1e-3)),
        (30, pytest.approx(1.70), pytest.approx(1e-3)),
    ]
    _, lit = tools.tail_records("lit/metrics.csv", 3)
    assert lit["format"] == "csv"
    assert [{k: v for k, v in r.items() if k != "t"} for r in lit["records"]] == [
        {"step": 19, "loss": 1.5},
        {"step": 20, "loss": 1.5},
        {"step": 20, "eval_loss": 1.2},
    ]
    _, hf = tools.tail_records("trainer_state.json", 5)
    assert hf["format"] == "trainer_state" and hf["records"] == [
        {"step": 10, "loss": 0.5, "lr": 1e-4},
        {"step": 20, "loss": 0.5, "lr": 1e-4},
    ]


def test_tail_records_ends_at_the_step_status_says_the_log_reached(root):
    """A record of no kind (no loss, no eval values) is a row `{"step", "t"}` where it moves the
    step on; one below the step reached (a hyperparameter logged at step 0 at the end) is left out."""
    path = root / "runs" / "acc" / "metrics.jsonl"
    minimal_log(str(path), range(1, 11))
    with open(path, "a") as f:
        f.write(json.dumps({"step": 12, "t": 1012.0, "accuracy": 0.9}) + "\n")
        f.write(json.dumps({"step": 0, "hp_metric": -1.0}) + "\n")
    _, doc = Tools(str(root)).tail_records("runs/acc", 3)
    assert [r["step"] for r in doc["records"]] == [9, 10, 12]
    assert doc["records"][-1] == {"step": 12, "t": 1012.0}
    assert status(str(path.parent), gpus=False)["step"] == 12


def test_a_huge_eval_row_keeps_its_first_metrics_and_says_how_many_went(root):
    path = root / "runs" / "wide" / "metrics.jsonl"
    minimal_log(str(path), range(1, 21))
    with open(path, "a") as f:
        f.write(json.dumps({"step": 20, "eval_loss": 1.5, **{f"eval_m{i:04d}": 0.5 for i in range(3000)}}) + "\n")
    _, doc = Tools(str(root)).tail_records("runs/wide", 5)
    assert [r["step"] for r in doc["records"]] == [17, 18, 19, 20, 20] and "truncated" not in doc
    assert list(doc["records"][-1]) == ["step", "eval_loss", *(f"eval_m{i:04d}" for i in range(MAX_METRICS))]
    assert doc["metrics_left_out"] == f"{3000 - MAX_METRICS} eval metrics left out (at most {MAX_METRICS} a row)"


def test_minimal_rows_split_eval_values_and_show_a_nonfinite_norm():
    rec = Record("train", "s", 7, time=1.0, loss=0.5, lr=1e-3, nonfinite_grads=1, eval_loss=0.4, metrics={"acc": 0.9})
    assert minimal_rows(rec) == [
        {"step": 7, "t": 1.0, "loss": 0.5, "lr": 1e-3, "grad_norm": "nan"},
        {"step": 7, "t": 1.0, "eval_loss": 0.4, "eval_acc": 0.9},
    ]
    assert minimal_rows(Record("fatal", "s", 3, error="boom")) == [{"step": 3, "FATAL": "boom"}]
    assert minimal_rows(Record("other", "s", 9, time=2.0)) == [{"step": 9, "t": 2.0}]
    many = Record("eval", "s", 7, metrics={f"m{i}": 0.5 for i in range(12)})
    assert len(minimal_rows(many)[0]) == 1 + MAX_METRICS and metrics_left_out(many) == 12 - MAX_METRICS
    assert seq_len_of(None, rec) is None


# --- the verdict states wait_for_verdict decides on -------------------------------------------------


def _watching(run_dir: str, pid: int, polled_at: float) -> None:
    from runwatch.judging.liveness import watching_record

    with open(os.path.join(run_dir, "watchdog.json"), "w") as f:
        json.dump(watching_record(pid, polled_at - 10, polled_at, 12, 5.0, {"x": 1}), f)


def _journal(run_dir: str, *events: tuple[str, int]) -> None:
    with open(os.path.join(run_dir, "supervise.jsonl"), "a") as f:
        for event, sup in events:
            rec = {"time": time.time(), "event": event, "attempt": 1, "pid": 1, "kind": None, "class": None, "step": 30}
            rec.update(supervisor=sup, line="OK done step=30" if event == "done" else None)
            f.write(json.dumps(rec) + "\n")


def test_watch_state_of_every_case(tmp_path):
    d = str(tmp_path)
    now = time.time()
    assert watch_state(d)["state"] == "unwatched"
    assert watch_state(d)["message"] == "nothing is watching this run (no watchdog.json)"
    _watching(d, os.getpid(), now)  # this process: alive, polled just now
    state = watch_state(d)
    assert (state["state"], state["by"], state["watchdog"]["step"]) == ("watching", "watch", 12)
    assert "state" not in state["watchdog"]  # the watch's resumable state is not for an agent
    _watching(d, os.getpid(), now - 3600)  # polled an hour ago
    assert watch_state(d)["state"] == "unwatched"
    assert watch_state(d)["message"].startswith("nothing is watching this run: watchdog not running (pid ")
    write_verdict(d, Verdict("anomaly", "nonfinite_loss", 30, "loss is nan", now, 28))
    state = watch_state(d)
    assert state["state"] == "final" and state["line"] == "ANOMALY nonfinite_loss step=30: loss is nan"
    assert state["verdict"]["class"] == "divergence" and state["verdict"]["onset"] == 28
    with open(os.path.join(d, "launch.json"), "w") as f:
        json.dump({"pid": 1, "time": now + 5}, f)  # launched again after that verdict
    assert watch_state(d)["state"] == "unwatched"
    # a live supervisor (this process holds the lock) acting on the verdict: not final
    _journal(d, ("launch", os.getpid()), ("verdict", os.getpid()))
    with open(os.path.join(d, "supervise.lock"), "w") as f:
        f.write(f"{os.getpid()}\n")
        f.flush()
        state = watch_state(d)  # the pid is written there, but the lock is not held: no supervisor
        assert (state["state"], state["by"]) == ("unwatched", None)
        fcntl.flock(f, fcntl.LOCK_EX)
        state = watch_state(d)
        assert (state["state"], state["by"], state["supervisor_pid"]) == ("watching", "supervise", os.getpid())
        _journal(d, ("done", os.getpid()))  # its end written: final, though it has not exited yet
        state = watch_state(d)
        assert (state["state"], state["by"], state["line"]) == ("final", "supervise", "OK done step=30")
    os.remove(os.path.join(d, "supervise.lock"))
    _watching(d, os.getpid(), time.time() + 20)  # a watch begun after the supervision ended is the news
    assert (watch_state(d)["state"], watch_state(d)["by"]) == ("watching", "watch")


def test_stop_run_of_an_unsupervised_run_stops_its_process_group(tmp_path):
    from runwatch.views.agent.act import stop_run

    run = tmp_path / "plain"
    train = [sys.executable, os.path.join(REPO, "tests", "supervise_train.py"), str(run), "--steps", "100000"]
    assert main(["launch", str(run), "--", *train, "--sleep", "0.05"]) == 0
    pid = int((run / "pid").read_text())
    try:
        _, doc = stop_run(Tools(str(tmp_path)), "plain")
        assert doc["stopped"] == "stopped after stop_run: SIGTERM (1 process)"
        assert doc["process"] == {"pid": pid, "alive": False} and doc["supervise"] is None
        _, again = stop_run(Tools(str(tmp_path)), "plain")
        assert again["stopped"] == "nothing was running"
    finally:
        try:
            os.killpg(pid, 9)
        except ProcessLookupError:
            pass


# --- the skill and the command line -------------------------------------------------------------------


def test_the_skill_is_shipped_and_printed(capsys):
    with open(os.path.join(REPO, "skills", "supervising-training-runs", "SKILL.md"), encoding="utf-8") as f:
        source = f.read()
    assert skill_text() == source  # the package's copy is the repository's
    front = re.match(r"^---\n(.*?)\n---\n", source, re.S)
    assert front is not None
    fields = dict(line.split(": ", 1) for line in front.group(1).splitlines())
    assert fields["name"] == "supervising-training-runs" and len(fields["description"]) > 50
    for tool in ("wait_for_verdict", "run_status", "tail_records", "launch_supervised", "plan_run", "explain"):
        assert tool in source
    for command in ("runwatch bench", "runwatch audit-data", "runwatch smoke", "runwatch supervise"):
        assert command in source
    assert main(["skill"]) == 0
    assert capsys.readouterr().out == source


def test_mcp_without_its_extra_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "mcp", None)  # `import mcp` raises ImportError
    assert main(["mcp", str(tmp_path)]) == 2
    assert capsys.readouterr().err == "runwatch mcp needs the MCP Python SDK: pip install 'runwatch[mcp]'\n"
    assert main(["mcp", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err == f"mcp: {tmp_path / 'nope'}: no such folder\n"


def test_list_runs_under_a_run_lists_that_run(root):
    _, doc = Tools(str(root)).list_runs("runs/a")
    assert [r["path"] for r in doc["runs"]] == ["runs/a"] and doc["total"] == 1


def test_list_runs_reads_one_bounded_pass_a_call_and_says_catching_up(tmp_path, monkeypatch, capsys):
    from runwatch.views.serve import runs

    monkeypatch.setattr(runs, "POLL_BYTES", 16 << 10)  # a poll, a pass (and the page's 1 MiB, 32 MiB) made small
    monkeypatch.setattr(runs, "REFRESH_BYTES", 64 << 10)
    log = tmp_path / "big" / "metrics.jsonl"
    minimal_log(str(log), range(1, 4001))
    size = os.path.getsize(log)
    assert size > 5 * runs.REFRESH_BYTES
    read: list[int] = []
    real = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, off: read.append(len(data := real(fd, n, off))) or data)
    tools = Tools(str(tmp_path))
    rows = []
    for _ in range(size // runs.REFRESH_BYTES + 2):
        read.clear()
        _, doc = tools.list_runs()
        assert sum(read) <= runs.REFRESH_BYTES  # one pass a call, at most its bound
        rows.append(doc["runs"][0])
        if "catching_up" not in rows[-1]:
            break
    assert rows[0]["catching_up"] is True and 1 < rows[0]["step"] < 4000
    assert all(r["catching_up"] is True for r in rows[:-1]) and len(rows) >= size // runs.REFRESH_BYTES
    assert [r["step"] for r in rows] == sorted({r["step"] for r in rows})  # each call continues the last
    assert rows[-1]["step"] == 4000 and "catching_up" not in rows[-1]
    # the shell form is one pass of the same catalog: a new listing starts at the log's start
    assert main(["runs", str(tmp_path), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["runs"][0]
    assert row["catching_up"] is True and row["step"] == rows[0]["step"]
    assert main(["runs", str(tmp_path)]) == 0
    assert "catching up (the log read in part)" in capsys.readouterr().out


def test_launch_supervised_refuses_before_starting_anything(root):
    from runwatch.views.agent.act import launch_supervised

    tools = Tools(str(root))
    before = sorted(os.listdir(root / "runs"))
    for run_dir, command, options, message in [
        ("runs/a/metrics.jsonl", ["true"], None, "launch_supervised: runs/a/metrics.jsonl: not a directory"),
        (
            "runs/new",
            ["true"],
            ["--backoff", "-3"],
            "launch_supervised: supervise.backoff must be a number >= 0, got -3",
        ),
        ("runs/new", ["true"], ["--nope"], "launch_supervised: runwatch supervise: unrecognized arguments: --nope"),
        (
            "runs/new",
            ["true"],
            ["--exit-code", "preempted=0"],
            "launch_supervised: watch.exit_code preempted must be an int in 1..255, got '0'",
        ),
        ("runs/new", ["true"], ["--version"], "launch_supervised: --version is not available here"),
        ("runs/new", ["", "x"], None, "launch_supervised: command must be a non-empty list of strings, got ['', 'x']"),
        ("/tmp", ["true"], None, f"launch_supervised: /tmp: outside {os.path.realpath(root)}"),
    ]:
        with pytest.raises(UsageError) as exc:
            launch_supervised(tools, run_dir, command, options)
        assert str(exc.value) == message
    assert sorted(os.listdir(root / "runs")) == before


def test_run_status_and_tail_records_read_a_log_with_the_options_check_run_takes(root):
    """A text log in no preset's format is read only with its pattern: given it, the three tools
    read it alike; without it, there is nothing to read."""
    os.makedirs(root / "text")
    with open(root / "text" / "train.out", "w") as f:
        f.writelines(f"epoch {e} loss={2.0 - e / 10:.2f}\n" for e in range(1, 8))
    opts = ["--pattern", r"^epoch (?P<step>\d+) loss=(?P<loss>\S+)"]
    tools = Tools(str(root))
    _, st = tools.run_status("text", opts)
    _, tail = tools.tail_records("text", 3, opts)
    _, checked = tools.check_run("text", opts)
    assert st["step"] == checked["last_step"] == tail["records"][-1]["step"] == 7
    assert (st["loss"], tail["records"][-1]["loss"]) == (1.3, 1.3)
    _, mapped = tools.tail_records("text/train.out", 1, [*opts, "--map", "loss=nothing"])
    assert mapped["records"] == [{"step": 7}]  # --map, as status takes it: no loss read
    with pytest.raises(UsageError, match=r"train.out: not a JSON-lines log .*; name its format with --format"):
        tools.run_status("text/train.out")  # never read as JSONL for want of a format
    with pytest.raises(UsageError, match=r"^run_status: read.pattern"):
        tools.run_status("text", ["--pattern", "no step group"])


def test_plan_run_reads_a_text_log_with_options(tmp_path):
    os.makedirs(tmp_path / "t")
    with open(tmp_path / "t" / "train.log", "w") as f:
        f.writelines(f"step {s} loss {1 / s:.4f} sps 400.0\n" for s in range(1, 31))
    tools = Tools(str(tmp_path))
    pattern = ["--pattern", r"^step (?P<step>\d+) loss (?P<loss>\S+) sps (?P<sps>\S+)"]
    _, doc = tools.plan_run(4000, "20s", run="t/train.log", options=pattern)
    assert (doc["exit"], doc["meaning"]) == (0, "fits")
    assert doc["report"]["steady_samples_per_second"] == pytest.approx(400.0)
    with pytest.raises(UsageError, match=r"train.log: not a JSON-lines log"):  # never read as JSONL without it
        tools.plan_run(4000, "20s", run="t/train.log")
