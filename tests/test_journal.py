"""runwatch.files.journal: atomic writes leave the old file or the new one, never a part or a temp file;
the watchdog's verdict file; one writer per run directory."""

from __future__ import annotations

import json
import os

import pytest

from runwatch.errors import LogWriteError, RunLockedError
from runwatch.files.journal import Journal, atomic_write, atomic_write_text
from runwatch.judging.verdict import read_verdict


def _names(folder) -> list[str]:
    return sorted(os.listdir(folder))


def test_atomic_write_text_replaces_the_file(tmp_path):
    path = str(tmp_path / "a.json")
    atomic_write_text(path, "old\n")
    atomic_write_text(path, "new ü\n")
    assert (tmp_path / "a.json").read_text(encoding="utf-8") == "new ü\n"
    assert _names(tmp_path) == ["a.json"]


def test_atomic_write_bytes_streams_into_the_file(tmp_path):
    path = str(tmp_path / "b.bin")
    with atomic_write(path, "wb") as f:
        for _ in range(4):
            f.write(b"\x00" * 1000)
        assert not os.path.exists(path)  # nothing at the path until the body is done
    assert os.path.getsize(path) == 4000
    assert _names(tmp_path) == ["b.bin"]


class Boom(Exception):
    pass


@pytest.mark.parametrize("error", [Boom, KeyboardInterrupt])
def test_a_failing_body_leaves_the_old_file_and_no_temp(tmp_path, error):
    path = str(tmp_path / "a.json")
    atomic_write_text(path, "old\n")
    with pytest.raises(error), atomic_write(path) as f:
        f.write("half of the new")
        f.flush()
        raise error()
    assert (tmp_path / "a.json").read_text() == "old\n"
    assert _names(tmp_path) == ["a.json"]


def test_a_failing_commit_leaves_no_temp(tmp_path):
    (tmp_path / "a.json").mkdir()  # os.replace of a file onto a directory fails
    with pytest.raises(IsADirectoryError):
        atomic_write_text(str(tmp_path / "a.json"), "new\n")
    assert _names(tmp_path) == ["a.json"]


def test_a_write_that_cannot_start_raises_and_leaves_nothing(tmp_path):
    with pytest.raises(FileNotFoundError):
        atomic_write_text(str(tmp_path / "no" / "a.json"), "x")
    assert _names(tmp_path) == []


def test_atomic_write_takes_text_or_bytes_only(tmp_path):
    with pytest.raises(ValueError, match="^atomic_write: mode must be 'w' or 'wb', got 'a'$"):
        with atomic_write(str(tmp_path / "a"), "a"):
            pass


# --- watchdog.json --------------------------------------------------------------------------------


DONE = {"verdict": "done", "kind": None, "class": None, "step": 40, "onset": None, "message": "normal", "time": 1.0}


@pytest.mark.parametrize(
    "content, expected",
    [
        (None, (None, None)),
        (json.dumps(DONE), (DONE, None)),
        (
            json.dumps({**DONE, "verdict": "anomaly", "kind": "stall"}),
            ({**DONE, "verdict": "anomaly", "kind": "stall"}, None),
        ),
        ('{"verdict": "watching", "step": 3}', (None, None)),
        ('{"verdict": "maybe"}', (None, "watchdog.json: no verdict")),
        ("[1, 2]", (None, "watchdog.json: no verdict")),
        ('{"verdict": "done", "time": NaN}', (None, "watchdog.json: malformed JSON: NaN is not a valid JSON number")),
        ('{"verdict": "do', (None, "watchdog.json: malformed JSON: Unterminated string starting at at column 13")),
    ],
)
def test_read_verdict(tmp_path, content, expected):
    if content is not None:
        (tmp_path / "watchdog.json").write_text(content)
    assert read_verdict(str(tmp_path)) == expected


def test_read_verdict_does_not_block_on_a_fifo(tmp_path):
    os.mkfifo(tmp_path / "watchdog.json")
    assert read_verdict(str(tmp_path)) == (None, "watchdog.json: not a regular file")


# --- the run directory's lock and run.json --------------------------------------------------------


def test_one_journal_per_run_directory(tmp_path):
    first = Journal(str(tmp_path), fsync=False)
    try:
        with pytest.raises(RunLockedError, match="in use by another RunLogger"):
            Journal(str(tmp_path), fsync=False)
    finally:
        first.close()
    Journal(str(tmp_path), fsync=False).close()  # the lock goes with the descriptor


def test_write_manifest_is_atomic_and_failures_are_log_write_errors(tmp_path):
    j = Journal(str(tmp_path), fsync=False)
    try:
        j.write_manifest({"schema_version": 1, "run_id": "r"})
        assert json.loads((tmp_path / "run.json").read_text()) == {"schema_version": 1, "run_id": "r"}
        os.unlink(tmp_path / "run.json")
        (tmp_path / "run.json").mkdir()
        with pytest.raises(LogWriteError, match="run.json: cannot write: Is a directory$"):
            j.write_manifest({"schema_version": 1, "run_id": "r"})
    finally:
        j.close()
    assert _names(tmp_path) == ["metrics.jsonl", "run.json"]
