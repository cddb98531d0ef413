"""One run, one story: every surface reads a supervised run as its supervisor did.

Real programs run as their users run them: a Hugging Face `Trainer` that logs to TensorBoard only
(`hf_tb_train.py`, supervised through its `runs/` folder with `--log runs`), and a program that
only prints nanoGPT's lines (`printing_train.py`). The run directory records how the log is read;
`check`, `status`, `goodput`, the page and the MCP tools then read it alike, and agree."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from runwatch.cli import main
from runwatch.reading.readers import ReadOptions
from runwatch.reading.records import load_sessions, resolve_target
from runwatch.views.agent.tools import Tools
from runwatch.views.serve.server import Catalog, to_json
from runwatch.views.status import format_status, status

HERE = os.path.dirname(os.path.abspath(__file__))
HF = os.path.join(HERE, "hf_tb_train.py")
PRINTING = os.path.join(HERE, "printing_train.py")
FAST = ["--poll", "0.2", "--backoff", "0.2"]


def _runwatch(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, "-m", "runwatch", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def _journal(run) -> list[dict]:
    with open(run / "supervise.jsonl") as f:
        return [json.loads(line) for line in f]


# --- a Hugging Face Trainer supervised through its TensorBoard folder -------------------------------


@pytest.fixture(scope="module")
def hf_resumed(tmp_path_factory):
    """An HF run killed (SIGKILL) at step 12 of 30 and resumed by `supervise --resume-args --resume`."""
    pytest.importorskip("transformers")
    pytest.importorskip("tensorboard")
    root = tmp_path_factory.mktemp("hf")
    run = root / "r"
    res = _runwatch(
        "supervise", str(run), "--log", "runs", *FAST, "--restarts", "2", "--resume-args", "--resume",
        "--", sys.executable, HF, "--output_dir", str(run), "--max_steps", "30", "--kill_at", "12",
    )  # fmt: skip
    return root, run, res


def test_an_hf_run_that_exits_0_is_done_once(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("tensorboard")
    run = tmp_path / "hf_v1"
    res = _runwatch(
        "supervise", str(run), "--log", "runs", *FAST, "--restarts", "1", "--resume-args", "--resume",
        "--", sys.executable, HF, "--output_dir", str(run), "--max_steps", "20",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1] == "OK done step=20"
    recs = _journal(run)
    assert [r["event"] for r in recs] == ["launch", "verdict", "done"]
    assert recs[1]["message"] == "process exited with status 0"
    assert (run / "stdout.log").read_text().count("--- runwatch launch") == 1
    # the run's own files stay in RUN_DIR, whatever --log names
    assert (run / "exit.json").is_file() and (run / "watchdog.json").is_file()
    assert not (run / "runs" / "exit.json").exists() and not (run / "runs" / "watchdog.json").exists()
    launch = json.loads((run / "launch.json").read_text())
    assert launch["read"] == {"log": "runs", "format": None, "pattern": [], "run": None, "map": []}
    assert launch["by"] == "supervise" and recs[0]["log"]["log"] == "runs"


def test_a_killed_and_resumed_hf_run_is_one_story_on_every_surface(hf_resumed, capsys):
    root, run, res = hf_resumed
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1] == "OK done step=30"
    recs = _journal(run)
    assert [r["event"] for r in recs] == ["launch", "verdict", "stop", "relaunch", "verdict", "done"] or [
        r["event"] for r in recs
    ] == ["launch", "verdict", "relaunch", "verdict", "done"]
    assert recs[1]["kind"] == "process_exit" and "killed by SIGKILL" in recs[1]["message"]
    end = recs[-1]["goodput"]

    # two launches, two TensorBoard folders: the sessions of one run
    assert len(os.listdir(run / "runs")) == 2
    t = resolve_target(str(run))
    assert (t.format, t.log_path, t.run_dir, t.recorded_by) == ("tensorboard", str(run / "runs"), str(run), "supervise")
    sessions = [s for s in load_sessions(t) if s.records]
    assert len(sessions) == 2 and sessions[-1].records[-1].step == 30
    assert sessions[0].records[0].step == 1 and sessions[1].records[0].step <= 12

    # check: no option needed
    assert main(["check", str(run)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "OK clean step=30"

    # goodput: the journal's figure, the time ratio, with the steps beside it
    assert 0 < end["ratio"] == round(end["productive_seconds"] / end["wall_seconds"], 4) <= 1
    assert end["steps_kept"] == 30 and end["steps_run"] >= 30 and end["restarts"] == 1
    assert main(["goodput", str(run), "--json"]) == 0
    g = json.loads(capsys.readouterr().out)
    assert (g["ratio"], g["steps_kept"], g["steps_run"]) == (end["ratio"], end["steps_kept"], end["steps_run"])
    assert (g["wall_seconds"], g["productive_seconds"]) == (end["wall_seconds"], end["productive_seconds"])

    # status: the log as supervised, the same goodput
    st = status(str(run), gpus=False)
    assert st["step"] == 30 and st["read_as"] == "tensorboard, as supervised" and st["goodput"] == end
    lines = format_status(st)
    assert lines[0] == f"log      {run / 'runs'} (tensorboard, as supervised)"
    ratio, steps = f"{end['ratio']:.3f}", f"{end['steps_ratio']:.3f}"
    assert any(x.startswith(f"goodput {ratio}: ") and f"steps {steps} (30 kept of" in x for x in lines)
    assert st["last_error"] is None

    # the page: one run (not its checkpoints, not each launch's folder), both sessions, the same goodput
    catalog = Catalog(str(root))
    try:
        while catalog.refresh():
            pass
        assert sorted(v.rel for v in catalog.views()) == ["r"]
        view = catalog.get("r")
        assert view is not None
        with view.lock:
            detail = json.loads(to_json(view.detail()))
        assert detail["step"] == 30
        assert detail["supervise"]["goodput"] == end
    finally:
        catalog.stop()

    # the MCP tool
    _text, doc = Tools(str(root)).run_status("r")
    assert doc["step"] == 30 and doc["goodput"] == end and doc["read_as"] == "tensorboard, as supervised"


# --- a program that prints its records ---------------------------------------------------------------


def test_a_printing_run_is_read_everywhere_as_supervised(tmp_path, capsys):
    run = tmp_path / "a"
    res = _runwatch(
        "supervise", str(run), "--format", "nanogpt", *FAST, "--stall", "40",
        "--", sys.executable, PRINTING, str(run / "out"), "--max_iters", "30",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    launch = json.loads((run / "launch.json").read_text())
    assert launch["read"]["format"] == "nanogpt" and launch["read"]["log"] == "stdout.log"
    assert launch["rules"] == {"stall": 40.0}
    assert main(["check", str(run)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "OK clean step=30"
    st = status(str(run), gpus=False)
    assert format_status(st)[0] == f"log      {run / 'stdout.log'} (nanogpt, as supervised)"
    assert (st["step"], st["stall_seconds"]) == (30, 40.0)
    assert status(str(run), gpus=False, stall=7)["stall_seconds"] == 7  # given options win
    # a reading option given on the command line wins over the recorded one
    assert main(["check", str(run), "--pattern", r"^never (?P<step>\d+)"]) == 7
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"ANOMALY no_signal step=0: --pattern '^never (?P<step>\\d+)' on {run / 'stdout.log'}: 37 lines, none "
        "matched; the first: 'Initializing a new model from scratch'; no record"
    )
    # ... and the recorded format is not claimed for a log read another way
    assert status(str(run), gpus=False, read=ReadOptions(format="tensorboard"))["read_as"] is None


def test_a_format_that_reads_nothing_is_no_signal_not_done(tmp_path):
    run = tmp_path / "x"
    res = _runwatch(
        "supervise", str(run), "--format", "tensorboard", "--log", "out", *FAST,
        "--", sys.executable, PRINTING, str(run / "out"), "--max_iters", "20",
    )  # fmt: skip
    assert res.returncode == 7, res.stderr
    assert res.stdout.splitlines()[-1] == (
        f"ANOMALY no_signal step=0: --format tensorboard on {run / 'out'}: "
        "no event file (in the folder or one level down); no record"
    )
    assert [r["event"] for r in _journal(run)] == ["launch", "verdict", "gave_up"]


def test_a_pattern_that_never_matches_stalls_saying_the_log_grew(tmp_path):
    run = tmp_path / "p"
    res = _runwatch(
        "supervise", str(run), "--pattern", r"^never (?P<step>\d+)", "--startup-grace", "2", "--restarts", "0", *FAST,
        "--", sys.executable, PRINTING, str(run / "out"), "--max_iters", "400", "--iter_seconds", "0.02",
    )  # fmt: skip
    assert res.returncode == 7, res.stderr
    last = res.stdout.splitlines()[-1]
    assert last.startswith("ANOMALY stall step=0: no record ")
    assert f"; the log grew but gave no record (--pattern '^never (?P<step>\\d+)' on {run / 'stdout.log'}: " in last
    assert "none matched" in last and last.endswith("(gave up after 0 restarts)")


def test_a_program_that_printed_nothing_yet_stalls_without_blaming_the_format(tmp_path):
    run = tmp_path / "q"
    res = _runwatch(
        "supervise", str(run), "--format", "nanogpt", "--startup-grace", "1", "--restarts", "0", *FAST,
        "--", sys.executable, "-c", "import time; time.sleep(60)",
    )  # fmt: skip
    assert res.returncode == 7, res.stderr
    last = res.stdout.splitlines()[-1]
    assert last.startswith("ANOMALY stall step=0: no record ") and "gave no record" not in last


# --- a fault a relaunch went on from ------------------------------------------------------------------


def test_a_fault_the_supervisor_relaunched_after_is_recovered_on_every_surface(tmp_path, capsys):
    """A run that SIGTERMs itself at step 15 (its session ends `interrupted`) and is relaunched by
    `supervise`, which completes it: `check`, `check_run`, `plot` and the page list the first
    session's `interrupted` as recovered, and the run is clean, as its supervisor said."""
    run = tmp_path / "p"
    train = os.path.join(HERE, "supervise_train.py")
    res = _runwatch(
        "supervise", str(run), *FAST,
        "--", sys.executable, train, str(run), "--steps", "40", "--ckpt-every", "10", "--fault", "sigterm@15",
    )  # fmt: skip
    assert (res.returncode, res.stdout.splitlines()[-1]) == (0, "OK done step=40"), res.stderr
    recs = _journal(run)
    assert [(r["event"], r["kind"], r["class"]) for r in recs if r["event"] == "verdict"] == [
        ("verdict", "interrupted", "transient"),
        ("verdict", None, None),
    ]
    first, second = [s["session_id"] for s in json.loads((run / "run.json").read_text())["sessions"]]
    message = f"session ended with reason interrupted: SIGTERM; recovered: the run went on in session {second}"

    assert main(["check", str(run)]) == 0
    assert capsys.readouterr().out.splitlines() == [f"RECOVERED interrupted step=15: {message}", "OK clean step=40"]
    _text, doc = Tools(str(tmp_path)).check_run("p")
    assert (doc["exit"], doc["verdict"], doc["class"], doc["warnings"], doc["recovered"]) == (
        0, "OK clean step=40", None, 0, 1,
    )  # fmt: skip
    found = doc["findings"][0]
    assert (found["kind"], found["severity"], found["session"], found["message"]) == (
        "interrupted", "recovered", first, message,
    )  # fmt: skip

    # the page: the same finding, recovered; nothing that stops; the watchdog's verdict
    catalog = Catalog(str(tmp_path))
    try:
        while catalog.refresh():
            pass
        view = catalog.get("p")
        assert view is not None
        with view.lock:
            detail = json.loads(to_json(view.detail()))
    finally:
        catalog.stop()
    assert [(f["kind"], f["severity"], f["message"]) for f in detail["findings_list"]] == [
        ("interrupted", "recovered", message)
    ]
    assert (detail["findings"], detail["warnings"], detail["warning_kinds"]) == (1, 1, ["interrupted"])
    assert detail["first_finding"]["severity"] == "recovered" and detail["verdict"]["state"] == "ok"
    assert [m["type"] for m in detail["markers"] if m.get("kind") == "interrupted"] == ["warn"]

    # status and goodput: the journal's figures, the supervisor's verdict
    end = recs[-1]["goodput"]
    st = status(str(run), gpus=False)
    assert st["goodput"] == end and st["watchdog"]["verdict"] == "done" and detail["supervise"]["goodput"] == end
    assert main(["goodput", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ratio"] == end["ratio"]

    pytest.importorskip("matplotlib")
    from runwatch.views.plot import snapshot

    shot = snapshot(str(run), str(tmp_path / "p.png"))
    assert [(f["kind"], f["severity"]) for f in shot["findings"]] == [("interrupted", "recovered")]
