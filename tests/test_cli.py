"""runwatch.cli: exit codes decided in one place, one line on stderr, no traceback, also when the
reader of stdout goes away; the standalone summary script maps errors the same way."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from runwatch import __version__
from runwatch.cli import main, run_guarded
from runwatch.errors import (
    EXIT_ANOMALY,
    EXIT_FAIL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    CheckpointError,
    ConfigError,
    InvalidRunError,
    UsageError,
)
from runwatch.judging.summary import main as script_main

DATA = os.path.join(os.path.dirname(__file__), "data")
VALID = os.path.join(DATA, "valid", "two_sessions")
STEP_GAP = os.path.join(DATA, "invalid", "step_gap")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "summarize_training_run.py")


def test_the_codes():
    assert (EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_ANOMALY, EXIT_INTERRUPTED) == (0, 1, 2, 7, 130)


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "runwatch: the following arguments are required: COMMAND"),
        (["nope"], "runwatch: argument COMMAND: invalid choice: 'nope'"),
        (["summarize"], "runwatch summarize: the following arguments are required: RUN_DIR"),
        (["summarize", VALID, "--bogus"], "runwatch: unrecognized arguments: --bogus"),
        (["summarize", VALID, "--after-step"], "runwatch summarize: argument --after-step: expected one argument"),
    ],
)
def test_usage_mistakes_exit_2_with_one_line(capsys, argv, message):
    assert main(argv) == EXIT_USAGE
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(message) and err.count("\n") == 1, err


@pytest.mark.parametrize("argv", [["--help"], ["summarize", "--help"], ["check", "--help"]])
def test_help_exits_0(capsys, argv):
    assert main(argv) == EXIT_OK
    assert "usage: runwatch" in capsys.readouterr().out


def test_version(capsys):
    assert main(["--version"]) == EXIT_OK
    assert capsys.readouterr().out == f"runwatch {__version__}\n"


def test_an_invalid_run_exits_1(capsys):
    assert main(["summarize", STEP_GAP]) == EXIT_FAIL
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("Invalid training run: metrics.jsonl:") and err.count("\n") == 1


def test_a_valid_run_exits_0(capsys):
    assert main(["summarize", VALID]) == EXIT_OK
    assert capsys.readouterr().out.startswith("{\n")


@pytest.mark.parametrize(
    "argv, code, err",
    [
        ([VALID, "--after-step", "x"], EXIT_FAIL, "Invalid training run: after_step must be an int >= 0, got 'x'\n"),
        ([], EXIT_USAGE, "summarize_training_run.py: the following arguments are required: RUN_DIR\n"),
        ([VALID, "--nope"], EXIT_USAGE, "summarize_training_run.py: unrecognized arguments: --nope\n"),
    ],
)
def test_the_script_maps_errors_like_runwatch(capsys, argv, code, err):
    assert script_main(argv) == code
    assert capsys.readouterr() == ("", err)


def _raise(exc: BaseException):
    def command() -> int:
        raise exc

    return command


@pytest.mark.parametrize(
    "exc, code, err",
    [
        (
            UsageError("plot: -o x.png: directory /x does not exist"),
            EXIT_USAGE,
            "plot: -o x.png: directory /x does not exist\n",
        ),
        (
            ConfigError("runwatch.toml: [watch] stall must be > 0, got 0"),
            EXIT_USAGE,
            "runwatch.toml: [watch] stall must be > 0, got 0\n",
        ),
        (InvalidRunError("run.json: missing"), EXIT_FAIL, "Invalid training run: run.json: missing\n"),
        (CheckpointError("c.pt: no tensors"), EXIT_FAIL, "runwatch: c.pt: no tensors\n"),
        (KeyboardInterrupt(), EXIT_INTERRUPTED, "runwatch: interrupted\n"),
        (SystemExit(3), 3, ""),
    ],
)
def test_run_guarded_maps_exceptions(capsys, exc, code, err):
    assert run_guarded(_raise(exc)) == code
    assert capsys.readouterr() == ("", err)


def test_run_guarded_returns_the_commands_code():
    assert run_guarded(lambda: EXIT_ANOMALY) == EXIT_ANOMALY


def test_other_exceptions_are_bugs_and_propagate():
    with pytest.raises(ZeroDivisionError):
        run_guarded(lambda: 1 // 0)


@pytest.mark.parametrize(
    "command",
    [
        [sys.executable, "-m", "runwatch", "summarize", VALID],
        [sys.executable, "-S", SCRIPT, VALID],
    ],
)
def test_a_closed_stdout_ends_quietly(command):
    """The reader is gone before the summary is printed (`... | true`): exit 1, no traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write to the pipe now fails with EPIPE
    try:
        proc = subprocess.run(command, stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write_end)
    assert (proc.returncode, proc.stderr) == (EXIT_FAIL, "")


def test_the_version_is_the_packages():
    import tomllib

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        assert tomllib.load(f)["project"]["version"] == __version__


# --- the MCP tools as commands, and short help ------------------------------------------------------


def _minimal(path, steps, **extra):
    import json

    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        for s in steps:
            f.write(json.dumps({"step": s, "t": 1000.0 + s, "loss": 1.0 / s, "sps": 50.0, **extra}) + "\n")


@pytest.mark.parametrize("command", ["watch", "check", "launch", "supervise"])
def test_help_names_the_rule_options_in_one_line(capsys, command):
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) < 120
    assert "--spike-factor F" not in out and "--spike-factor" in out  # named, not explained
    assert out.count("runwatch rules") == 1
    assert "--stall S" in out or command == "check"  # the watch's own options still have their help


def test_rules_come_from_the_declarations_and_the_runbook(capsys):
    import json

    from runwatch.judging.runbook import kinds
    from runwatch.views.agent.shell import rules_table

    assert main(["rules", "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert table == rules_table() and [r["kind"] for r in table] == kinds()
    spike = next(r for r in table if r["kind"] == "loss_spike")
    assert (spike["class"], spike["severity"]) == ("divergence", "stop")
    assert [o["flag"] for o in spike["options"]] == [
        "--spike-factor",
        "--spike-window",
        "--spike-patience",
        "--spike-min-excess",
    ]
    assert spike["options"][0]["default"] == "3"
    throughput = next(r for r in table if r["kind"] == "throughput_drop")
    assert "--throughput-span" in [o["flag"] for o in throughput["options"]]  # by its family
    assert next(r for r in table if r["kind"] == "overfitting")["severity"] == "warn"
    assert main(["rules"]) == 0
    text = capsys.readouterr().out
    assert "\nloss_spike  [divergence, stop; record rule]  " in text and "  --spike-factor (3): " in text


def test_explain_tail_runs(tmp_path, capsys):
    import json

    assert main(["explain", "stall"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "stall (transient, stop by default)" and out[1].startswith("  means:  no new record for")
    assert main(["explain", "nope"]) == 2
    assert capsys.readouterr().err.startswith("explain: unknown kind 'nope'; known: done, ")
    _minimal(str(tmp_path / "runs" / "a" / "metrics.jsonl"), range(1, 31))
    _minimal(str(tmp_path / "runs" / "b" / "metrics.jsonl"), range(1, 4))
    assert main(["tail", str(tmp_path / "runs" / "a"), "-n", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:] == [
        "step=29  t=1029.0  loss=0.034482758620689655  sps=50.0",
        "step=30  t=1030.0  loss=0.03333333333333333  sps=50.0",
    ]
    assert main(["tail", str(tmp_path / "runs" / "a"), "-n", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["records"] == [{"step": 30, "t": 1030.0, "loss": 1 / 30, "sps": 50.0}]
    assert main(["runs", str(tmp_path / "runs"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["total"] == 2 and sorted(r["path"] for r in doc["runs"]) == ["a", "b"]
    assert main(["runs", str(tmp_path / "runs")]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"2 runs under {tmp_path / 'runs'}"


def test_wait_exit_codes(tmp_path, capsys):
    import json
    import time

    run = tmp_path / "r"
    _minimal(str(run / "metrics.jsonl"), range(1, 4))
    assert main(["wait", str(run), "--timeout", "1"]) == 1  # nothing watches it
    assert capsys.readouterr().out.strip() == "nothing is watching this run (no watchdog.json)"
    # a watch that is alive (this process) and never ends: timed out, exit 3
    with open(run / "watchdog.json", "w") as f:
        json.dump(
            {"verdict": "watching", "pid": os.getpid(), "host": os.uname().nodename, "since": time.time(),
             "polled_at": time.time(), "step": 3, "poll": 3600, "warnings": []},
            f,
        )  # fmt: skip
    assert main(["wait", str(run), "--timeout", "0.3"]) == 3
    assert capsys.readouterr().out.startswith("timed out after 0.3s: ")
    for doc, code, line in (
        ({"verdict": "done", "kind": None, "step": 3, "message": "completed"}, 0, "OK done step=3"),
        ({"verdict": "anomaly", "kind": "loss_spike", "step": 3, "message": "up"}, 7, "ANOMALY loss_spike step=3: up"),
    ):
        with open(run / "watchdog.json", "w") as f:
            json.dump({**doc, "class": None, "onset": 3, "time": time.time(), "warnings": []}, f)
        assert main(["wait", str(run)]) == code
        assert capsys.readouterr().out.strip() == line
    # the events: the verdict once, then none after the cursor (exit 3)
    assert main(["wait", str(run), "--events", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [(e["kind"], e["what"]) for e in got["events"]] == [("stop", "loss_spike")]
    assert main(["wait", str(run), "--events", "--since", got["cursor"], "--timeout", "0.2"]) == 3
    assert capsys.readouterr().out.splitlines() == ["no event in 0.2s", f"cursor {got['cursor']}"]
    assert main(["wait", str(run), "--since", got["cursor"]]) == 2
    assert capsys.readouterr().err.strip() == "wait: --since and --kind go with --events"
