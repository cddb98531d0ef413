"""The acceptance summary (docs/FORMAT.md): the corpus, the standalone script, hostile files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from runwatch import summarize
from runwatch.cli import main
from runwatch.errors import InvalidRunError
from runwatch.files import lines

DATA = os.path.join(os.path.dirname(__file__), "data")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "summarize_training_run.py")
INVALID = sorted(os.listdir(os.path.join(DATA, "invalid")))
VALID = sorted(os.listdir(os.path.join(DATA, "valid")))


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _case(name: str) -> tuple[str, list[str], str]:
    d = os.path.join(DATA, "invalid", name)
    args_path = os.path.join(d, "args.txt")
    args = _read(args_path).split() if os.path.exists(args_path) else []
    expected = _read(os.path.join(d, "expected.txt")).rstrip("\n")
    return d, args, expected


@pytest.mark.parametrize("name", INVALID)
def test_invalid_corpus_exact_message(name, capsys):
    d, args, expected = _case(name)
    assert main(["summarize", d, *args]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"Invalid training run: {expected}\n"


@pytest.mark.parametrize("name", INVALID)
def test_invalid_corpus_same_message_without_fast_path(name):
    d, args, expected = _case(name)
    kwargs = dict(zip(("after_step" if a == "--after-step" else "expect_step" for a in args[::2]), args[1::2]))
    with pytest.raises(InvalidRunError) as info:
        summarize(d, fast=False, **kwargs)
    assert str(info.value) == expected


@pytest.mark.parametrize("name", VALID)
def test_valid_corpus(name, capsys):
    d = os.path.join(DATA, "valid", name)
    assert main(["summarize", d]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result == summarize(d, fast=False)


def test_summary_values_of_two_sessions():
    s = summarize(os.path.join(DATA, "valid", "two_sessions"), after_step=20, expect_step=31)
    assert s["run_id"] == "r-20261202-ab12cd"
    assert s["session_id"] == "s-20261202T150000-9a9a"
    assert (s["sessions"], s["start_step"], s["last_step"]) == (2, 10, 31)
    assert (s["completed"], s["end_reason"]) == (True, "normal")
    assert (s["updates"], s["tokens"], s["skipped_updates"], s["nonfinite_grad_norms"], s["train_windows"]) == (
        21,
        23 * 64,
        2,
        2,
        3,
    )
    assert s["optimizer_algorithms"] == ["muon", "adamw"]
    assert s["loss"] == {"first": 0.69, "last": 0.4}
    assert s["gradient_norm_max"] == 3.0
    assert s["gradient_clipped_fraction"] == pytest.approx((1 / 3 * 3 + 0.25 * 8) / 21)
    assert s["qk_clip"] == {
        "threshold": 100.0,
        "observed_head_updates": 104,
        "clipped_head_updates": 3,
        "clipped_fraction": 3 / 104,
        "max_logit": 120.5,
    }
    # the window 13->23 starts before step 20: excluded whole
    assert (s["steady_train_tokens"], s["steady_train_seconds"]) == (8 * 64, 0.5)
    assert s["steady_train_tokens_per_second"] == 8 * 64 / 0.5
    assert s["memory_peaks"] == {"host_rss_peak_bytes": 1009}  # session_end's, the last record
    assert s["profiling"] is False
    assert s["last_val"] == {"step": 31, "loss": 0.45, "metrics": {"auroc": 0.93, "accuracy": 0.88}}
    assert (
        summarize(os.path.join(DATA, "valid", "two_sessions"), after_step=40)["steady_train_tokens_per_second"] is None
    )


def test_summary_keys_are_its_typed_dicts():
    """summary.Summary and its parts name exactly the keys summarize returns, in their order."""
    from runwatch.judging.summary import LossSummary, QKClipSummary, Summary, ValSummary

    s = summarize(os.path.join(DATA, "valid", "two_sessions"))
    assert list(s) == list(Summary.__annotations__)
    assert list(s["loss"]) == list(LossSummary.__annotations__)
    assert list(s["qk_clip"]) == list(QKClipSummary.__annotations__)
    assert list(s["last_val"]) == list(ValSummary.__annotations__)


def test_running_session_is_not_completed():
    s = summarize(os.path.join(DATA, "valid", "running"))
    assert (s["completed"], s["end_reason"], s["last_step"]) == (False, None, 15)
    assert s["qk_clip"] is None or s["qk_clip"]["observed_head_updates"] == 0


def test_no_qk_gives_null():
    assert summarize(os.path.join(DATA, "valid", "no_qk_no_memory"))["qk_clip"] is None
    assert summarize(os.path.join(DATA, "valid", "no_qk_no_memory"))["memory_peaks"] == {}


def test_after_step_rejects_bool():
    with pytest.raises(InvalidRunError, match="after_step must be an int >= 0, got True"):
        summarize(os.path.join(DATA, "valid", "two_sessions"), after_step=True)


def test_standalone_script_under_python_S_from_elsewhere(tmp_path):
    """`python -S` (no site-packages) from a directory outside the repository."""
    run = os.path.join(DATA, "valid", "two_sessions")
    proc = subprocess.run(
        [sys.executable, "-S", SCRIPT, run, "--expect-step", "31"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PATH": os.environ.get("PATH", "")},
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == summarize(run)
    bad = _case("step_gap")
    proc = subprocess.run(
        [sys.executable, "-S", SCRIPT, bad[0]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PATH": os.environ.get("PATH", "")},
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (1, "", f"Invalid training run: {bad[2]}\n")
    assert list(tmp_path.iterdir()) == []  # no files written


def _copy_valid(tmp_path) -> str:
    d = str(tmp_path / "run")
    shutil.copytree(os.path.join(DATA, "valid", "two_sessions"), d)
    return d


@pytest.mark.parametrize(
    "what, expected",
    [
        ("directory", "metrics.jsonl: a directory"),
        ("fifo", "metrics.jsonl: not a regular file"),
        ("missing", "metrics.jsonl: missing"),
        ("symlink_loop", "metrics.jsonl: cannot open: Too many levels of symbolic links"),
        ("dev_zero", "metrics.jsonl: not a regular file"),
    ],
)
def test_hostile_metrics_file(tmp_path, capsys, what, expected):
    d = _copy_valid(tmp_path)
    path = os.path.join(d, "metrics.jsonl")
    os.unlink(path)
    if what == "directory":
        os.mkdir(path)
    elif what == "fifo":
        os.mkfifo(path)
    elif what == "symlink_loop":
        os.symlink(path, path)
    elif what == "dev_zero":
        os.symlink("/dev/zero", path)
    assert main(["summarize", d]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"Invalid training run: {expected}") and err.count("\n") == 1


def test_run_json_directory(tmp_path, capsys):
    d = _copy_valid(tmp_path)
    os.unlink(os.path.join(d, "run.json"))
    os.mkdir(os.path.join(d, "run.json"))
    assert main(["summarize", d]) == 1
    assert capsys.readouterr().err.startswith("Invalid training run: run.json: a directory")


def test_run_dir_missing(tmp_path, capsys):
    assert main(["summarize", str(tmp_path / "nope")]) == 1
    assert capsys.readouterr().err == f"Invalid training run: {tmp_path / 'nope'}: not a directory\n"


def test_overlong_line_is_refused_without_reading_it_whole(tmp_path, monkeypatch, capsys):
    d = _copy_valid(tmp_path)
    monkeypatch.setattr(lines, "MAX_LINE_BYTES", 4096)
    with open(os.path.join(d, "metrics.jsonl"), "ab") as f:
        f.write(b'{"x": "' + b"a" * 100_000)  # no newline, far over the limit
    assert main(["summarize", d]) == 1
    assert capsys.readouterr().err == "Invalid training run: metrics.jsonl:11: line longer than 4096 bytes\n"


def test_other_sessions_records_are_skipped_but_parsed(tmp_path, capsys):
    d = _copy_valid(tmp_path)
    with open(os.path.join(d, "metrics.jsonl"), "rb") as f:
        lines = f.read().splitlines(keepends=True)
    # an old session's record with a broken step is not this session's business
    rec = json.loads(lines[0])
    rec["step"] = 999
    lines.insert(5, (json.dumps(rec) + "\n").encode())
    with open(os.path.join(d, "metrics.jsonl"), "wb") as f:
        f.write(b"".join(lines))
    assert main(["summarize", d]) == 0
    capsys.readouterr()
