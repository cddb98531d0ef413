"""The log's dialect is answered once, in `reading/`: every other module asks the facts.

Which dialect a log is (schema v1 with its run.json, minimal telemetry, another tool's log) is
`reading/`'s business; a caller asks `RecordParser` / `RecordSource` / `Target` for the fact it
needs (`manifest`, `start_step`, `entry`, `sessions_by`, `windows`, `throughput`,
`record_times`, `has_manifest`), which holds for every dialect.
"""

from __future__ import annotations

import ast
import csv
import json
import pathlib

import pytest

from runwatch import RunLogger
from runwatch.reading.parsing import SAMPLES, TOKENS
from runwatch.reading.records import load_sessions, parser_for, resolve_target
from runwatch.reading.source import RecordSource

SRC = pathlib.Path(__file__).resolve().parent.parent / "src" / "runwatch"
RECIPE = {"batch_size": 2, "seq_len": 4, "gradient_accumulation_steps": 1, "qk_clip_threshold": None, "max_steps": 100}

# Modules outside reading/ still asking the dialect, by path under src/runwatch.
ALLOWED: set[str] = set()  # (a module still asking would be named here, with why)


def _dialect_questions(text: str, name: str) -> list[str]:
    """Where the module `name` reads a parser's `.mode`, a `.v1` attribute, or `schema_v1`."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Attribute) and node.attr in ("mode", "v1", "schema_v1"):
            found.append((node.lineno, f"{name}:{node.lineno}: .{node.attr}"))
    return [x for _, x in sorted(found)]


def test_no_module_outside_reading_asks_the_dialect():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith("reading/") or rel in ALLOWED:
            continue
        found += _dialect_questions(path.read_text(encoding="utf-8"), rel)
    assert found == []


def test_the_measurement_finds_each_question():
    """The measurement is not blind: each form of the question is found, and the allowed module
    still asks it (drop it from ALLOWED once it asks the facts)."""
    probe = "a = p.mode == 'v1'\nb = source.v1\nc = t.schema_v1()\n"
    assert _dialect_questions(probe, "probe.py") == ["probe.py:1: .mode", "probe.py:2: .v1", "probe.py:3: .schema_v1"]
    for rel in ALLOWED:
        assert _dialect_questions((SRC / rel).read_text(encoding="utf-8"), rel) != []


def _facts(parser):
    return {
        "sessions_by": parser.sessions_by,
        "windows": parser.windows,
        "throughput": parser.throughput,
        "record_times": parser.record_times,
        "has_manifest": parser.manifest is not None,
    }


def test_schema_v1_run_directory(tmp_path):
    with RunLogger(tmp_path, recipe=RECIPE, hardware={}, window=2) as log:
        for i in range(4):
            log.step(1.0 - i * 0.1, 0.1, 1.0)
        saved = log.state_dict()
        first = log.session_id
    with RunLogger(tmp_path, recipe=RECIPE, hardware={}, window=2, resume_from=saved) as log:
        log.step(0.5, 0.1, 2.0)
        second = log.session_id
    t = resolve_target(str(tmp_path))
    assert t.has_manifest
    parser = parser_for(t)
    assert _facts(parser) == {
        "sessions_by": "manifest",
        "windows": True,
        "throughput": TOKENS,
        "record_times": True,
        "has_manifest": True,
    }
    assert (TOKENS.counts, TOKENS.unit, TOKENS.column) == ("tokens", "tokens/s of training time", "tokens_per_second")
    assert parser.latest_session() == second
    assert (parser.start_step(first), parser.start_step(second)) == (0, 4)
    assert parser.entry(second)["recipe"]["seq_len"] == 4
    assert parser.manifest["run_id"] == json.loads((tmp_path / "run.json").read_text())["run_id"]
    source = RecordSource(str(tmp_path))
    assert (source.sessions_by, source.parser) == (None, None)  # not open yet: no facts
    recs = list(source.records())
    assert source.sessions_by == "manifest"
    train = next(r for r in recs if r.kind == "train")
    assert train.raw is not None and train.raw["updates"] == 2  # a window of updates
    assert train.throughput == train.tokens / train.seconds


def test_minimal_telemetry_jsonl(tmp_path):
    log = tmp_path / "train.jsonl"
    rows = [
        {"step": 1, "t": 10.0, "loss": 2.0, "sps": 8.0},
        {"step": 2, "t": 11.0, "loss": 1.9, "sps": 8.0},
        {"step": 1, "t": 20.0, "loss": 2.1, "sps": 7.0},  # a step that goes back: a relaunch
        {"step": 2, "t": 21.0, "loss": 1.8, "sps": 7.0},
    ]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    t = resolve_target(str(log))
    assert not t.has_manifest
    parser = parser_for(t)
    assert _facts(parser) == {
        "sessions_by": "records",
        "windows": False,
        "throughput": SAMPLES,
        "record_times": False,  # its `t` may count from anything: the log's mtime says when
        "has_manifest": False,
    }
    assert (SAMPLES.counts, SAMPLES.unit, SAMPLES.column) == ("samples", "the log's sps", "samples_per_second")
    source = RecordSource(str(log))
    recs = list(source.records())
    assert [r.session for r in recs] == ["session-1", "session-1", "session-2", "session-2"]
    assert source.sessions_by == "records"
    parser = source.parser
    assert parser is not None
    assert (parser.start_step("session-2"), parser.entry("session-2"), parser.manifest) == (None, None, None)
    assert recs[0].throughput == 8.0  # the log's own sps
    assert [s.start_step for s in load_sessions(str(log))] == [1, 1]  # the sessions' first steps


def test_another_tools_logs(tmp_path):
    path = tmp_path / "metrics.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "loss", "time"])
        w.writerows([[1, 2.0, 1700000000.0], [2, 1.9, 1700000001.0], [3, 1.8, 1700000002.0]])
    t = resolve_target(str(path))
    assert (t.format, t.has_manifest) == ("csv", False)
    source = RecordSource(str(path))
    recs = list(source.records())
    assert [r.step for r in recs] == [1, 2, 3] and recs[-1].time == 1700000002.0
    assert source.parser is not None
    assert _facts(source.parser) == {
        "sessions_by": "records",
        "windows": False,
        "throughput": SAMPLES,
        "record_times": True,  # the tool's own times
        "has_manifest": False,
    }
    state = tmp_path / "out" / "trainer_state.json"
    state.parent.mkdir()
    history = [{"step": 10, "loss": 2.0, "learning_rate": 1e-3}, {"step": 20, "loss": 1.5, "learning_rate": 1e-3}]
    state.write_text(json.dumps({"log_history": history, "max_steps": 40, "global_step": 20}))
    t = resolve_target(str(state.parent))
    assert (t.format, t.has_manifest) == ("trainer_state", False)
    source = RecordSource(t)
    assert [r.step for r in source.records()] == [10, 20]
    assert source.parser is not None
    assert _facts(source.parser) == {
        "sessions_by": "records",
        "windows": False,
        "throughput": SAMPLES,
        "record_times": False,
        "has_manifest": False,
    }
    assert source.max_steps() == 40 and source.parser.start_step("session-1") is None


@pytest.mark.parametrize("mode", ["v1", "minimal"])
def test_the_facts_follow_the_mode(mode):
    """Every fact is decided by the parser alone, never asked of the caller."""
    from runwatch.reading.parsing import RecordParser

    parser = RecordParser(mode, manifest=None)
    assert parser.sessions_by == ("manifest" if mode == "v1" else "records")
    assert parser.windows is (mode == "v1")
    assert parser.throughput is (TOKENS if mode == "v1" else SAMPLES)
