"""`runwatch serve` for comparing runs, over HTTP: the CSV export, compare, markers, listings.

One folder of runs written by real producers: three RunLogger runs (one longer than a chart's
1000 points), two real `runwatch supervise` runs (a relaunch after SIGKILL, a rollback after a
loss spike), TensorBoard event files in Lightning's `version_N/` folders (SummaryWriter), a
Lightning CSVLogger `metrics.csv`, and a hand-written minimal log that was relaunched.
"""

from __future__ import annotations

import csv
import io
import math
import os
import shutil

import pytest

from runwatch.views.serve.markers import Checkpoints, markers
from runwatch.views.serve.runs import find_runs
from serve_runs import Served, minimal, supervised, sweep, tensorboard_versions

LONG = 1500  # records of sweep/a: more than a chart's 1000 points


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("export") / "runs"
    sweep(root / "sweep", {"a": 1e-3}, steps=LONG)
    sweep(root / "sweep", {"b": 3e-4, "c": 1e-4}, steps=200)
    supervised(root / "relaunched", "kill@12")
    supervised(root / "rolled", "spike@36")
    tensorboard_versions(root / "lightning_logs", 3)
    lit = pytest.importorskip("lightning.pytorch.loggers")
    logger = lit.CSVLogger(str(root), name="lit", version=0)
    for step in range(1, 41):
        logger.log_metrics({"train_loss": 1.0 / step, "lr-AdamW": 1e-3}, step=step)
    logger.save()
    (root / "minimal").mkdir()
    minimal(root / "minimal" / "train.jsonl", range(1, 31))
    minimal(root / "minimal" / "train.jsonl", range(21, 41), t0=1_700_000_100.0)  # relaunched from step 20
    return root


@pytest.fixture(scope="module")
def served(root):
    with Served(root) as s:
        for rel, t in find_runs(str(root)):
            s.wait_run(rel, lambda r: r["step"] is not None and not r["catching_up"], "read")
        s.wait_run("sweep/a", lambda r: r["step"] == LONG, f"at step {LONG}")
        for v in range(3):  # a TensorBoard step is shown once the file stayed quiet for a poll
            s.wait_run(f"lightning_logs/version_{v}", lambda r: r["step"] == 50, "at step 50")
        yield s


def read_csv(served, rel):
    code, headers, body = served.get(f"/api/run/{rel}.csv")
    assert code == 200, body[:300]
    assert headers["content-type"] == "text/csv; charset=utf-8"
    rows = list(csv.reader(io.StringIO(body.decode())))
    return rows[0], rows[1:]


def test_tensorboard_folders_one_level_down_are_one_run_each(root, served):
    runs = {r["path"]: r for r in served.json("/api/runs")["runs"]}
    assert {"lightning_logs/version_0", "lightning_logs/version_1", "lightning_logs/version_2"} <= set(runs)
    assert "lightning_logs" not in runs
    assert runs["lightning_logs/version_2"]["step"] >= 49
    # the folder of versions served on its own: three runs, not one
    assert sorted(rel for rel, _ in find_runs(str(root / "lightning_logs"))) == [
        "version_0",
        "version_1",
        "version_2",
    ]
    # a folder that holds event files itself is one run, as before
    assert [rel for rel, _ in find_runs(str(root / "lightning_logs" / "version_0"))] == ["version_0"]


def test_serving_the_folder_of_versions_lists_each(root):
    with Served(root / "lightning_logs") as s:
        assert sorted(r["path"] for r in s.json("/api/runs")["runs"]) == ["version_0", "version_1", "version_2"]


# The steps on the path to each run's final step, from what its producer did: each step once, in
# order; a relaunched or rolled-back session's steps replace the earlier session's.
PATHS = {
    "sweep/a": range(1, LONG + 1),
    "sweep/b": range(1, 201),
    "relaunched": range(5, 61, 5),  # window 5; killed at 12 after the window at 10, resumed from 10
    "rolled": range(5, 61, 5),  # the spike at 36-45 rolled back to the checkpoint at 30, 35-60 redone
    "lightning_logs/version_1": range(1, 51),
    "lit/version_0/metrics.csv": range(1, 41),
    "minimal/train.jsonl": range(1, 41),  # 1-30, then relaunched at 21: 1-20 and the new 21-40
}


@pytest.mark.parametrize("rel", sorted(PATHS))
def test_csv_has_one_row_per_step_on_the_path_and_equals_the_api(served, rel):
    head, rows = read_csv(served, rel)
    assert head[:2] == ["step", "loss"]
    steps = [float(r[0]) for r in rows]
    assert steps == [float(s) for s in PATHS[rel]]  # every record, each step once, in order
    detail = served.json(f"/api/run/{rel}")
    by_step = {float(r[0]): dict(zip(head, r, strict=True)) for r in rows}
    compared = 0
    for chart in detail["charts"]:
        for s in chart["series"]:
            assert s["key"] in head, (s["key"], head)
            for x, y, t in s["points"]:
                cell = by_step[float(x)][s["key"]]
                assert math.isclose(float(cell), y, rel_tol=1e-6), (rel, s["key"], x, cell, y)
                compared += 1
            assert s["points"][-1][0] == steps[-1] or s["key"] != "loss"
    assert compared > 0
    if "time" in head:  # the time of the step's first record, as the page's loss points carry it
        loss = next(c for c in detail["charts"] if c["name"] == "loss")["series"][0]["points"]
        assert all(float(by_step[float(x)]["time"]) == t for x, _, t in loss)


def test_csv_of_a_long_run_is_not_downsampled(served):
    head, rows = read_csv(served, "sweep/a")
    assert len(rows) == LONG
    assert head == [
        "step",
        "loss",
        "eval_loss",
        "lr",
        "grad_norm",
        "tokens_per_second",
        "eval_auroc",
        "mem_host_rss_peak_bytes",  # the logger's memory peaks: the page's "memory peaks" chart
        "time",
    ]
    api = served.json("/api/run/sweep/a")
    loss = next(c for c in api["charts"] if c["name"] == "loss")["series"][0]
    assert len(loss["points"]) <= 1000 < len(rows)
    # eval values sit on the train row of the same step; other rows leave them empty
    assert rows[49][2] != "" and rows[48][2] == ""


def test_csv_of_a_run_whose_path_ends_in_csv_and_of_unknown_runs(served):
    # the run's own path is its JSON; its CSV is at the path with ".csv" once more
    assert served.json("/api/run/lit/version_0/metrics.csv")["path"] == "lit/version_0/metrics.csv"
    head, rows = read_csv(served, "lit/version_0/metrics.csv")
    assert head == ["step", "loss", "lr"] and len(rows) == 40
    code, headers, body = served.get("/api/run/lit/version_0/metrics.csv.csv", method="HEAD")
    assert code == 200 and body == b"" and headers["content-type"].startswith("text/csv")
    for path in ("/api/run/nope.csv", "/api/run/sweep.csv", "/api/run/%2e%2e/x.csv", "/api/run/sweep/a.csv.csv"):
        assert served.get(path)[0] == 404, path


def test_csv_of_a_run_that_cannot_be_read_says_why(tmp_path):
    (tmp_path / "fifo").mkdir()
    os.mkfifo(tmp_path / "fifo" / "metrics.jsonl")
    with Served(tmp_path) as s:
        code, _, body = s.get("/api/run/fifo.csv")
    assert code == 422
    assert (
        body.decode()
        == f"422 fifo: cannot export: {os.path.realpath(tmp_path)}/fifo/metrics.jsonl: not a regular file\n"
    )


def test_compare_names_the_runs_missing(served):
    d = served.json("/api/compare?run=sweep/a&run=nope%2Fx&run=sweep%2Fb&run=sweep/a")
    assert [r["path"] for r in d["runs"]] == ["sweep/a", "sweep/b"]  # in the order asked, once each
    assert d["missing"] == ["nope/x"]
    assert all(r["charts"] and "markers" in r for r in d["runs"])
    code, headers, body = served.get("/compare?run=sweep/a&run=nope%2Fx&run=..%2Fetc")
    assert code == 200 and headers["content-type"] == "text/html; charset=utf-8"
    assert '"missing":["nope/x","../etc"]' in body.decode()
    assert served.json("/api/compare")["runs"] == []


def test_a_rolled_back_run_keeps_the_path_to_its_final_step_and_marks_what_happened(served):
    d = served.json("/api/run/rolled")
    loss = next(c for c in d["charts"] if c["name"] == "loss")["series"][0]["points"]
    # window 5, 60 steps; the spike at 36-45 was rolled back to the checkpoint at 30 and redone
    assert [p[0] for p in loss] == list(range(5, 61, 5))
    assert max(p[1] for p in loss) < 1.0  # the spiking losses (x20) are not on the path
    times = [p[2] for p in loss]
    assert times == sorted(times)
    marks = {(m["type"], m["step"]): m["title"] for m in d["markers"]}
    assert marks[("rollback", 30)] == "rollback to step 30 (ckpt-30.json), attempt 2"
    assert marks[("warn", 45)].startswith("loss_spike (recovered) at step 45: loss ")  # rolled back past
    assert sorted(s for t, s in marks if t == "checkpoint") == [10, 20, 30, 40, 50, 60]  # the undone save at 40 once
    r = served.json("/api/run/relaunched")
    marks = {(m["type"], m["step"]): m["title"] for m in r["markers"]}
    assert marks[("relaunch", 10)] == "relaunch from step 10 (ckpt-10.json), attempt 2"
    assert ("stop", 10) not in marks  # process_exit is the supervisor's verdict, not a record rule's


def test_supervision_of_a_finished_run_says_how_its_last_attempt_ended(served):
    s = served.json("/api/run/rolled")["supervise"]
    assert s["finished"] and (s["restarts"], s["rollbacks"]) == (0, 1)
    first, last = s["attempts"]
    assert first["verdict"]["kind"] == "loss_spike" and first["end"]["event"] in ("stop", "rollback")
    assert last["verdict"] == {"kind": None, "class": None, "step": 60, "line": "OK done step=60"}
    assert last["end"] == {"event": "done", "step": 60, "time": last["end"]["time"]}


def test_a_journal_event_the_page_does_not_know_is_not_an_error(root, tmp_path):
    # a later supervisor's event (or notify_failed) after done: skipped, the run stays finished
    run = tmp_path / "run"
    shutil.copytree(root / "relaunched", run)
    with open(run / "supervise.jsonl", "a") as f:
        f.write(
            '{"time": 1.0, "event": "notify_failed", "attempt": 2, "pid": 1, "url": "json://x", "error": "refused"}\n'
        )
    from runwatch.views.serve.supervision import SupervisionView

    view = SupervisionView(str(run / "supervise.jsonl"))
    view.refresh()
    facts = view.facts()
    assert facts is not None and facts["error"] is None and facts["finished"] and facts["last_event"]["event"] == "done"


def test_markers_tell_warnings_from_stops():
    findings = [
        {"kind": "loss_spike", "step": 40, "message": "loss 9 > 3 x median 1", "time": 5.0},  # no severity: a stop
        {"kind": "overfitting", "severity": "warn", "step": 300, "message": "eval loss up", "time": 9.0},
    ]
    watchdog = {
        "verdict": "watching",
        "warnings": [
            {"kind": "overfitting", "step": 300, "message": "eval loss up"},  # the same: drawn once
            {"kind": "no_signal", "step": 50, "message": "no train loss"},
        ],
    }
    got = [(m["type"], m.get("kind"), m["step"], m["title"]) for m in markers(findings, Checkpoints(), [], watchdog)]
    assert got == [
        ("stop", "loss_spike", 40, "loss_spike (stop) at step 40: loss 9 > 3 x median 1"),
        ("warn", "overfitting", 300, "overfitting (warn) at step 300: eval loss up"),
        ("warn", "no_signal", 50, "no_signal (warn) at step 50: no train loss"),
    ]


def test_list_facts_are_kept_until_the_log_or_a_side_file_changes(tmp_path):
    from runwatch.judging.watchdog import Verdict, write_verdict
    from runwatch.views.serve.runs import RunView

    (tmp_path / "run").mkdir()
    minimal(tmp_path / "run" / "train.jsonl", range(1, 6))
    (rel, target), *_ = find_runs(str(tmp_path))
    view = RunView(rel, target)
    view.refresh()
    calls = []
    compute = view._summary
    view._summary = lambda now, catching_up: calls.append(now) or compute(now, catching_up)  # type: ignore[method-assign]
    first = view.summary(1000.0)
    again = view.summary(1003.0)
    assert len(calls) == 1 and again["age_seconds"] == round(first["age_seconds"] + 3.0, 1)
    write_verdict(target.run_dir, Verdict("done", None, 5, "session ended normally", 1001.0))  # a side file
    assert view.summary(1004.0)["verdict"] == {"state": "ok", "label": "OK"} and len(calls) == 2
    minimal(tmp_path / "run" / "train.jsonl", range(6, 8))  # the log grows
    view.refresh()
    assert view.summary(1005.0)["step"] == 7 and len(calls) == 3
    view.facts.at -= view.facts.max_age  # and with time alone (a process may die without a file changing)
    view.summary(1006.0)
    assert len(calls) == 4


def test_gpu_samples_are_charted_per_device_and_exported(tmp_path):
    """A RunLogger run whose train records carry NVML samples (a stand-in NVML module: no GPU here)."""
    import subprocess
    import sys
    import textwrap

    from runwatch.reading.records import resolve_target
    from runwatch.views.serve.export import csv_chunks
    from runwatch.views.serve.runs import RunView
    from test_metrics_provenance import FAKE_PYNVML, RECIPE

    (tmp_path / "nvml").mkdir()
    (tmp_path / "nvml" / "pynvml.py").write_text(FAKE_PYNVML)
    code = f"""
        import sys, time
        from runwatch import RunLogger
        with RunLogger(sys.argv[1], recipe={RECIPE!r}, window=1) as log:
            for i in range(3):
                log.step(loss=1.0 / (i + 1), lr=0.1, grad_norm=1.0)
                time.sleep(1.05)
    """
    run = tmp_path / "gpu-run"
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "nvml")}
    subprocess.run([sys.executable, "-c", textwrap.dedent(code), str(run)], env=env, check=True, timeout=120)
    view = RunView("gpu-run", resolve_target(str(run)))
    view.refresh()
    with view.lock:
        charts = {c["name"]: c for c in view.detail()["charts"]}
    mem, util = charts["gpu_memory"], charts["gpu_util"]
    assert (mem["title"], mem["unit"], util["title"]) == ("GPU memory in use", "bytes", "GPU utilisation (%)")
    assert [(s["name"], s["key"]) for s in mem["series"]] == [
        ("gpu0", "gpu0_memory_used_bytes"),
        ("gpu1", "gpu1_memory_used_bytes"),
    ]
    assert [p[:2] for p in util["series"][1]["points"]] == [[1, 87], [2, 87], [3, 87]]
    head = b"".join(csv_chunks(resolve_target(str(run)))).decode().splitlines()[0].split(",")
    assert {"gpu0_memory_used_bytes", "gpu1_util_percent", "mem_host_rss_peak_bytes"} <= set(head)
