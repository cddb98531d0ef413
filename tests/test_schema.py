"""runwatch.files.schema: the manifest's and the records' rules, strict JSON and its messages, reading
only regular files, and the orjson guard."""

from __future__ import annotations

import copy
import json
import os

import pytest

from runwatch.errors import InvalidRunError
from runwatch.files import lines
from runwatch.files.lines import open_run_file, read_regular_file
from runwatch.files.schema import (
    SessionValidator,
    json_problem,
    loads,
    orjson_misread,
    read_manifest,
    strict_json,
    validate_manifest,
)

MANIFEST = {
    "schema_version": 1,
    "run_id": "r-1",
    "sessions": [
        {
            "session_id": "s-1",
            "start": {"step": 10, "tokens": 0, "skipped": 0},
            "recipe": {"batch_size": 2, "seq_len": 3, "gradient_accumulation_steps": 1, "qk_clip_threshold": 50.0},
            "optimizers": [{"algorithm": "adamw"}],
            "hardware": {},
        }
    ],
}
SESSION = {"elapsed_seconds": 1.0, "tokens": 12, "tokens_per_second": 12.0, "profiling_seconds": 0.0}
TRAIN = {
    "run_id": "r-1",
    "session_id": "s-1",
    "event": "train",
    "step": 12,
    "time": 1.0,
    "session": SESSION,
    "updates": 2,
    "skipped": 0,
    "attempted": 2,
    "tokens": 12,
    "train_seconds": 0.5,
    "loss": 0.7,
    "lr": 0.001,
    "grad_norm": {"mean": 1.0, "max": 2.0},
    "nonfinite_grad_norms": 0,
    "grad_clipped_fraction": 0.5,
    "qk_clip": {"threshold": 50.0, "observed_head_updates": 8, "clipped_head_updates": 1, "max_logit": 30.0},
}


def _edited(base: dict, path: str, value: object) -> dict:
    """`base` with `path` ("a.b.c", list indices as numbers) set to `value` (a `...` value: removed)."""
    out = copy.deepcopy(base)
    *parents, last = path.split(".")
    node = out
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if value is ...:
        del node[last]
    elif isinstance(node, list):
        node.append(value)
    else:
        node[last] = value
    return out


# --- run.json -------------------------------------------------------------------------------------


def test_a_valid_manifest_passes():
    validate_manifest(copy.deepcopy(MANIFEST))


@pytest.mark.parametrize(
    "path, value, message",
    [
        ("schema_version", 2, "schema_version must be 1, got 2"),
        ("schema_version", True, "schema_version must be 1, got true"),
        ("run_id", ..., "missing run_id"),
        ("run_id", 7, "run_id must be a string, got 7"),
        ("sessions", [], "sessions must be a non-empty list, got []"),
        ("sessions.0.start.skipped", -1, "sessions[0].start.skipped must be an int >= 0, got -1"),
        ("sessions.0.recipe.batch_size", 0, "sessions[0].recipe.batch_size must be an int >= 1, got 0"),
        ("sessions.0.recipe.seq_len", 2.0, "sessions[0].recipe.seq_len must be an int >= 1, got 2.0"),
        (
            "sessions.0.recipe.qk_clip_threshold",
            0,
            "sessions[0].recipe.qk_clip_threshold must be a positive number or null, got 0",
        ),
        ("sessions.0.recipe.qk_clip_threshold", ..., "missing sessions[0].recipe.qk_clip_threshold"),
        ("sessions.0.optimizers.x", {"name": "x"}, "missing sessions[0].optimizers[1].algorithm"),
        ("sessions.0.hardware", [], "sessions[0].hardware must be an object, got []"),
    ],
)
def test_manifest_rules(path, value, message):
    with pytest.raises(InvalidRunError) as info:
        validate_manifest(_edited(MANIFEST, path, value))
    assert str(info.value) == f"run.json: {message}"


def test_session_ids_are_unique():
    m = copy.deepcopy(MANIFEST)
    m["sessions"].append(copy.deepcopy(m["sessions"][0]))
    with pytest.raises(InvalidRunError, match=r"^run\.json: sessions\[1\]\.session_id 's-1' is not unique$"):
        validate_manifest(m)


def test_unknown_keys_are_allowed():
    validate_manifest({**copy.deepcopy(MANIFEST), "future": {"anything": [1, 2]}})


# --- records --------------------------------------------------------------------------------------


def _check(*records: dict) -> SessionValidator:
    v = SessionValidator("r-1", MANIFEST["sessions"][0])
    for i, rec in enumerate(records, 1):
        v.check(rec, f"metrics.jsonl:{i}")
    return v


def test_a_valid_session_passes_and_keeps_its_step():
    val = {k: TRAIN[k] for k in ("run_id", "session_id", "step", "time", "session")} | {"event": "val", "loss": 0.5}
    end = {**val, "event": "session_end", "reason": "normal", "error": None, "totals": {"tokens": 12, "skipped": 0}}
    del end["loss"]
    v = _check(TRAIN, val, end)
    assert (v.step, v.ended) == (12, True)


@pytest.mark.parametrize(
    "path, value, message",
    [
        ("run_id", "r-2", "run_id 'r-2' differs from the manifest's 'r-1'"),
        ("event", "eval", "event must be one of train, val, checkpoint, session_end, got 'eval'"),
        ("updates", 0, "updates must be an int >= 1, got 0"),
        ("attempted", 3, "attempted 3 != updates 2 + skipped 0"),
        ("step", 13, "step 13 after 10 with 2 updates (expected 12)"),
        (
            "tokens",
            13,
            "tokens 13 != batch_size 2 * seq_len 3 * gradient_accumulation_steps 1 * attempted 2 (expected 12)",
        ),
        ("train_seconds", 0, "train_seconds must be a finite number > 0, got 0"),
        ("loss", True, "loss must be a finite number, got true"),
        ("loss", float("inf"), "loss must be a finite number, got Infinity"),
        ("lr", -1e-3, "lr must be a finite number >= 0, got -0.001"),
        ("grad_norm.max", "2", "grad_norm.max must be a finite number >= 0, got '2'"),
        ("grad_clipped_fraction", 1.5, "grad_clipped_fraction must be a number in [0, 1], got 1.5"),
        ("qk_clip.threshold", 60.0, "qk_clip.threshold 60.0 differs from the recipe's qk_clip_threshold 50.0"),
        ("qk_clip.clipped_head_updates", 9, "qk_clip.clipped_head_updates 9 > observed_head_updates 8"),
        ("session.tokens_per_second", -1, "session.tokens_per_second must be a finite number >= 0, got -1"),
        ("memory", {"host_rss_peak_bytes": 1.5}, "memory.host_rss_peak_bytes must be an int >= 0, got 1.5"),
        ("session", ..., "missing session"),
    ],
)
def test_train_record_rules(path, value, message):
    rec = _edited(TRAIN, path, value)
    with pytest.raises(InvalidRunError) as info:
        _check(rec)
    assert str(info.value) == f"metrics.jsonl:1: {message}"
    v = SessionValidator("r-1", MANIFEST["sessions"][0])
    assert v.take_window(rec) is None  # the fast check never takes what check() refuses


@pytest.mark.parametrize(
    "event, fields, message",
    [
        ("val", {"loss": 0.5, "step": 11}, "val step 11 is not the current step 12"),
        ("val", {"loss": 0.5, "metrics": {"auroc": "high"}}, "metrics.auroc must be a finite number, got 'high'"),
        ("checkpoint", {"path": "c.pt", "seconds": -1}, "seconds must be a finite number >= 0, got -1"),
        ("checkpoint", {"path": "c.pt", "seconds": 1, "verified": "yes"}, "verified must be a bool, got 'yes'"),
        (
            "session_end",
            {"reason": "done", "error": None, "totals": {"tokens": 12, "skipped": 0}},
            "reason must be one of normal, nonfinite_loss, error, interrupted, got 'done'",
        ),
        ("session_end", {"reason": "normal", "error": None}, "missing totals"),
    ],
)
def test_other_event_rules(event, fields, message):
    rec = {k: TRAIN[k] for k in ("run_id", "session_id", "step", "time", "session")} | {"event": event} | fields
    with pytest.raises(InvalidRunError) as info:
        _check(TRAIN, rec)
    assert str(info.value) == f"metrics.jsonl:2: {message}"


def test_nothing_follows_session_end():
    end = {k: TRAIN[k] for k in ("run_id", "session_id", "step", "time", "session")}
    end |= {"event": "session_end", "reason": "normal", "error": None, "totals": {"tokens": 12, "skipped": 0}}
    with pytest.raises(InvalidRunError, match="^metrics.jsonl:3: record after session_end$"):
        _check(TRAIN, end, _edited(TRAIN, "step", 14))


# --- strict JSON and its messages -----------------------------------------------------------------


@pytest.mark.parametrize(
    "text, problem",
    [
        ('{"loss": NaN}', "malformed JSON: NaN is not a valid JSON number"),
        ('{"loss": -Infinity}', "malformed JSON: -Infinity is not a valid JSON number"),
        ('{"step": 1,', "malformed JSON: Expecting property name enclosed in double quotes at column 12"),
        ('{\n "step": 1,\n "x" 2}', "malformed JSON: Expecting ':' delimiter at line 3 column 6"),
        (b'{"host": "\xff"}', "invalid UTF-8 at byte 10"),
        ("[" * 100_000 + "]" * 100_000, "JSON nested too deeply"),
        ("", "malformed JSON: Expecting value at column 1"),
    ],
)
def test_strict_json_and_its_messages(text, problem):
    with pytest.raises((ValueError, RecursionError)) as info:
        strict_json(text)
    assert json_problem(info.value) == problem
    with pytest.raises(InvalidRunError) as info:
        loads(text, "f.json")
    assert str(info.value) == f"f.json: {problem}"


def test_strict_json_takes_bytes_and_text_alike():
    assert strict_json(b'{"a": [1, 2.5, null]}') == strict_json('{"a": [1, 2.5, null]}') == {"a": [1, 2.5, None]}


def test_lenient_loads_takes_nan_tokens():
    value = loads(b'{"loss": NaN}', "log", strict=False)
    assert value["loss"] != value["loss"]
    with pytest.raises(InvalidRunError, match="^log: malformed JSON: Expecting value at column 10$"):
        loads(b'{"loss": }', "log", strict=False)


@pytest.mark.parametrize(
    "raw", [b'{"m": 123456789012345678901}', '{"m": -9223372036854775809}', b'[1, {"x": [18446744073709551617]}]']
)
def test_orjson_misread_finds_wide_integers(raw):
    orjson = pytest.importorskip("orjson")
    value = orjson.loads(raw)
    assert orjson_misread(raw, value)
    assert json.loads(raw) != value  # what the guard exists for


@pytest.mark.parametrize("raw", [b'{"m": 9223372036854775807}', '{"id": "1234567890123456789012345"}', b'{"x": 1.5}'])
def test_orjson_misread_passes_what_orjson_reads_right(raw):
    orjson = pytest.importorskip("orjson")
    value = orjson.loads(raw)
    assert not orjson_misread(raw, value)
    assert json.loads(raw) == value


# --- reading only regular files -------------------------------------------------------------------


def _make(tmp_path, what: str) -> str:
    path = str(tmp_path / "f.json")
    if what == "fifo":
        os.mkfifo(path)  # a plain open() would wait for a writer for ever
    elif what == "directory":
        os.mkdir(path)
    elif what == "symlink":
        (tmp_path / "real.json").write_text('{"a": 1}')
        os.symlink(tmp_path / "real.json", path)
    elif what == "dev_zero":
        os.symlink("/dev/zero", path)
    elif what == "symlink_loop":
        os.symlink(path, path)
    elif what == "big":
        (tmp_path / "f.json").write_bytes(b" " * 101)
    return path


@pytest.mark.parametrize(
    "what, show_path, message",
    [
        ("fifo", False, "f.json: not a regular file"),
        ("dev_zero", False, "f.json: not a regular file"),
        ("directory", False, "f.json: not a regular file"),
        ("directory", True, "f.json: a directory ({path})"),
        ("symlink_loop", False, "f.json: cannot open: Too many levels of symbolic links"),
        ("missing", False, "f.json: cannot open: No such file or directory"),
        ("missing", True, "f.json: missing ({path})"),
        ("big", False, "f.json: larger than 100 bytes"),
    ],
)
def test_read_regular_file_refuses(tmp_path, what, show_path, message):
    path = _make(tmp_path, what)
    with pytest.raises(InvalidRunError) as info:
        read_regular_file(path, "f.json", 100, show_path=show_path)
    assert str(info.value) == message.format(path=path)


def test_read_regular_file_follows_a_symlink_to_a_regular_file(tmp_path):
    assert read_regular_file(_make(tmp_path, "symlink"), "f.json", 100) == b'{"a": 1}'


@pytest.mark.parametrize(
    "what, name_directory, message",
    [
        ("directory", True, "w: a directory"),
        ("directory", False, "w: not a regular file"),
        ("fifo", True, "w: not a regular file"),
    ],
)
def test_open_run_file_closes_what_it_refuses(tmp_path, what, name_directory, message):
    path = _make(tmp_path, what)
    before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(InvalidRunError) as info:
        open_run_file(path, "w", name_directory=name_directory)
    assert str(info.value) == message
    assert len(os.listdir("/proc/self/fd")) == before


def test_open_run_file_leaves_missing_files_to_the_caller(tmp_path):
    with pytest.raises(FileNotFoundError):
        open_run_file(str(tmp_path / "nope"), "w")


def test_read_manifest_reads_a_run_directory(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps(MANIFEST, indent=1))
    assert read_manifest(str(tmp_path)) == MANIFEST
    (tmp_path / "run.json").write_text('{\n "schema_version": 1,\n "run_id" "r"\n}')
    with pytest.raises(
        InvalidRunError, match="^run.json: malformed JSON: Expecting ':' delimiter at line 3 column 11$"
    ):
        read_manifest(str(tmp_path))


def test_line_blocks_refuse_a_torn_tail(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"a": 1}\n{"b": 2}\n{"c"')
    with pytest.raises(InvalidRunError, match="^Uncommitted metrics tail at line 3$"):
        list(lines.iter_lines(str(path)))
