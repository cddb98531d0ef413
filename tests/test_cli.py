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
