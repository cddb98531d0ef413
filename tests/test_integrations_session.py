"""What the framework callbacks share: options, the stored state, feeding a window. No framework needed."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from runwatch import summarize
from runwatch.errors import InvalidRunError, NonFiniteLossError
from runwatch.integrations.session import (
    STATE_FILE,
    CallbackOptions,
    feed,
    folder_bytes,
    read_state,
    resume_state,
    write_state,
)
from runwatch.logger.metrics import RunLogger

RECIPE = {"batch_size": 4, "seq_len": 8, "gradient_accumulation_steps": 2}


def test_state_save_load_equal(tmp_path):
    state = {
        "schema_version": 1,
        "run_id": "r-1",
        "session_id": "s-1",
        "step": 40,
        "tokens": 2560,
        "skipped": 2,
        "seq_len": 8,
        "tokens_source": "seq_len",
    }
    write_state(str(tmp_path), state)
    assert read_state(str(tmp_path)) == state
    assert [p.name for p in tmp_path.iterdir()] == [STATE_FILE]  # no temp file left behind


def test_no_state_is_none(tmp_path):
    assert read_state(str(tmp_path)) is None


@pytest.mark.parametrize(
    "text, message",
    [
        ("[1]", "runwatch_state.json: the runwatch state must be an object, got list"),
        ('{"step": -1, "tokens": 0, "skipped": 0}', "runwatch_state.json: step must be an int >= 0, got -1"),
        (
            '{"step": 1, "tokens": NaN, "skipped": 0}',
            "runwatch_state.json: malformed JSON: NaN is not a valid JSON number",
        ),
        ('{"step": 1, "tokens": 0}', "runwatch_state.json: skipped must be an int >= 0, got None"),
    ],
)
def test_bad_state_is_a_clear_error(tmp_path, text, message):
    (tmp_path / STATE_FILE).write_text(text)
    with pytest.raises(InvalidRunError) as info:
        read_state(str(tmp_path))
    assert str(info.value) == f"{tmp_path}{os.sep}{message}"


def test_resume_state_must_match_the_step():
    assert resume_state(None, 5, "x") is None
    with pytest.raises(InvalidRunError, match="^x: runwatch state is at step 4, but the training resumes at step 5$"):
        resume_state({"step": 4, "tokens": 0, "skipped": 0}, 5, "x")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"window": True}, "RunwatchCallback.window must be an int >= 1 or None, got True"),
        ({"seq_len": 0}, "RunwatchCallback.seq_len must be an int >= 1 or None, got 0"),
        ({"run_dir": 3}, "RunwatchCallback.run_dir must be a path or None, got 3"),
    ],
)
def test_options_name_the_option(kwargs, message):
    with pytest.raises(ValueError) as info:
        CallbackOptions(**kwargs)
    assert str(info.value) == message


def test_run_dir_resolution(monkeypatch, tmp_path):
    monkeypatch.delenv("RUNWATCH_RUN_DIR", raising=False)
    assert CallbackOptions().resolve_run_dir(tmp_path) == str(tmp_path / "runwatch")
    monkeypatch.setenv("RUNWATCH_RUN_DIR", "/env/run")
    assert CallbackOptions().resolve_run_dir(tmp_path) == "/env/run"
    assert CallbackOptions(run_dir="/opt/run").resolve_run_dir(tmp_path) == "/opt/run"


def test_feed_writes_one_window_and_counts_skipped_updates(tmp_path):
    log = RunLogger(str(tmp_path), recipe=RECIPE, window=1 << 30)
    updates = [(0.5, False), (0.7, True), (0.3, False)]
    feed(log, updates, lr=0.1, grad_norm=2.0, clipped=True)
    assert updates == []
    log.close()
    with open(tmp_path / "metrics.jsonl", encoding="utf-8") as f:
        train = json.loads(f.readline())
    assert (train["updates"], train["skipped"], train["attempted"], train["tokens"]) == (2, 1, 3, 3 * 64)
    assert train["loss"] == pytest.approx(0.4)  # mean over the successful updates
    assert train["nonfinite_grad_norms"] == 1 and train["grad_norm"] == {"mean": 2.0, "max": 2.0}
    assert train["grad_clipped_fraction"] == 1.0
    assert summarize(str(tmp_path))["completed"]


def test_feed_ends_the_session_on_a_nonfinite_loss(tmp_path):
    log = RunLogger(str(tmp_path), recipe=RECIPE, window=1 << 30)
    with pytest.raises(NonFiniteLossError):
        feed(log, [(0.5, False), (math.nan, False)], lr=0.1, grad_norm=1.0)
    assert summarize(str(tmp_path))["end_reason"] == "nonfinite_loss"


def test_folder_bytes(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * 10)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b").write_bytes(b"y" * 5)
    assert folder_bytes(str(tmp_path)) == 15 and folder_bytes(str(tmp_path / "a")) == 10


def test_the_package_imports_no_framework():
    code = (
        "import sys, runwatch.integrations, runwatch.integrations.session\n"
        "print(sorted(m for m in ('torch', 'transformers', 'lightning', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=dict(os.environ))
    assert out.stdout.strip() == "[]"
