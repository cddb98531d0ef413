"""The run logger (docs/FORMAT.md, docs/SCHEMA.md "Writing")."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from runwatch import RunLogger, summarize
from runwatch.errors import ConfigError, NonFiniteLossError, RunLockedError, RunwatchError

RECIPE = {"batch_size": 2, "seq_len": 3, "gradient_accumulation_steps": 1}


def records(run_dir) -> list[dict]:
    with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def manifest(run_dir) -> dict:
    with open(os.path.join(run_dir, "run.json"), encoding="utf-8") as f:
        return json.load(f)


def test_windows_val_checkpoint_and_end(tmp_path):
    d = tmp_path / "run"
    with RunLogger(d, recipe=RECIPE, optimizers=[{"name": "all", "algorithm": "adamw"}], window=4) as log:
        for i in range(10):
            log.step(loss=1.0 / (i + 1), lr=0.1, grad_norm=float(i), clipped=i % 2 == 0)
        log.val(loss=0.5, metrics={"auroc": 0.75})
        log.checkpoint(d / "ckpt.pt", seconds=0.5, bytes=10, verified=True)
        log.step(loss=0.1, lr=0.05, grad_norm=1.0)
    recs = records(d)
    assert [r["event"] for r in recs] == ["train", "train", "train", "val", "checkpoint", "train", "session_end"]
    assert [r["step"] for r in recs] == [4, 8, 10, 10, 10, 11, 11]
    first = recs[0]
    assert (first["updates"], first["skipped"], first["attempted"], first["tokens"]) == (4, 0, 4, 24)
    assert first["loss"] == pytest.approx((1 + 1 / 2 + 1 / 3 + 1 / 4) / 4)
    assert first["grad_norm"] == {"mean": 1.5, "max": 3.0}
    assert first["grad_clipped_fraction"] == 0.5
    assert recs[3]["metrics"] == {"auroc": 0.75} and recs[3]["loss"] == 0.5
    assert recs[4]["path"].endswith("ckpt.pt") and recs[4]["verified"] is True and recs[4]["bytes"] == 10
    assert recs[-1]["reason"] == "normal" and recs[-1]["totals"] == {"tokens": 66, "skipped": 0}
    assert recs[-1]["memory"]["host_rss_peak_bytes"] > 0
    s = summarize(str(d), expect_step=11)
    assert s["updates"] == 11 and s["optimizer_algorithms"] == ["adamw"]
    m = manifest(d)
    assert m["schema_version"] == 1 and m["sessions"][0]["start"] == {"step": 0, "tokens": 0, "skipped": 0}
    assert m["sessions"][0]["recipe"]["qk_clip_threshold"] is None
    assert m["sessions"][0]["hardware"]["world_size"] == 1


def test_skipped_updates_wait_for_a_successful_one(tmp_path):
    d = tmp_path / "run"
    with RunLogger(d, recipe=RECIPE, window=2) as log:
        log.step(loss=1.0, lr=0.1, grad_norm=float("inf"), skipped=True)
        log.step(loss=1.0, lr=0.1, grad_norm=float("nan"), skipped=True)
        log.step(loss=2.0, lr=0.1, grad_norm=2.0)
        log.step(loss=3.0, lr=0.1, grad_norm=4.0, skipped=True)  # left out at the end: no success after it
    recs = records(d)
    train = recs[0]
    assert (train["updates"], train["skipped"], train["attempted"], train["step"]) == (1, 2, 3, 1)
    assert (
        train["loss"] == 2.0 and train["nonfinite_grad_norms"] == 2 and train["grad_norm"] == {"mean": 2.0, "max": 2.0}
    )
    assert recs[-1]["totals"] == {"tokens": 18, "skipped": 2}
    assert summarize(str(d))["skipped_updates"] == 2


def test_resume_starts_from_the_checkpoint_state(tmp_path):
    d = tmp_path / "run"
    log = RunLogger(d, recipe=RECIPE, window=3)
    for _ in range(7):
        log.step(loss=1.0, lr=0.1, grad_norm=1.0, skipped=False)
    state = log.state_dict()
    assert state == {
        "schema_version": 1,
        "run_id": log.run_id,
        "session_id": log.session_id,
        "step": 7,
        "tokens": 42,
        "skipped": 0,
    }
    assert json.loads(json.dumps(state)) == state
    for _ in range(2):
        log.step(loss=1.0, lr=0.1, grad_norm=1.0)
    log._release()  # a crash: no session_end
    with RunLogger(d, recipe=RECIPE, window=3, resume_from=state) as log2:
        log2.step(loss=0.5, lr=0.1, grad_norm=1.0)
    m = manifest(d)
    assert len(m["sessions"]) == 2 and m["sessions"][1]["start"] == {"step": 7, "tokens": 42, "skipped": 0}
    s = summarize(str(d), expect_step=8)
    assert (s["sessions"], s["start_step"], s["updates"]) == (2, 7, 1)


def test_resume_into_a_new_directory_keeps_the_run_id(tmp_path):
    log = RunLogger(tmp_path / "a", recipe=RECIPE)
    log.step(loss=1.0, lr=0.1, grad_norm=1.0)
    state = log.state_dict()
    log.close()
    with RunLogger(tmp_path / "b", recipe=RECIPE, resume_from=state) as log2:
        log2.step(loss=1.0, lr=0.1, grad_norm=1.0)
    assert manifest(tmp_path / "b")["run_id"] == state["run_id"]


def test_resume_of_another_run_is_refused(tmp_path):
    RunLogger(tmp_path / "a", recipe=RECIPE).close()
    with pytest.raises(ValueError, match="resume_from is of run 'r-other', but run.json is of run"):
        RunLogger(
            tmp_path / "a", recipe=RECIPE, resume_from={"run_id": "r-other", "step": 0, "tokens": 0, "skipped": 0}
        )


def test_nonfinite_float_loss_fails_loud_at_once(tmp_path):
    d = tmp_path / "run"
    with pytest.raises(
        NonFiniteLossError,
        match=r"^runwatch: non-finite loss nan at the attempted update after step 2; session ended \(reason nonfinite_loss\)$",
    ):
        with RunLogger(d, recipe=RECIPE, window=10) as log:
            log.step(loss=1.0, lr=0.1, grad_norm=1.0)
            log.step(loss=1.0, lr=0.1, grad_norm=1.0)
            log.step(loss=float("nan"), lr=0.1, grad_norm=1.0)
    recs = records(d)
    assert [r["event"] for r in recs] == ["train", "session_end"]
    assert recs[0]["updates"] == 2 and recs[-1]["reason"] == "nonfinite_loss" and recs[-1]["step"] == 2
    s = summarize(str(d))
    assert (s["completed"], s["end_reason"]) == (False, "nonfinite_loss")
    with pytest.raises(RunwatchError, match="is closed"):
        log.step(loss=1.0, lr=0.1, grad_norm=1.0)


def test_nonfinite_val_loss_fails_loud(tmp_path):
    d = tmp_path / "run"
    log = RunLogger(d, recipe=RECIPE)
    log.step(loss=1.0, lr=0.1, grad_norm=1.0)
    with pytest.raises(NonFiniteLossError, match="non-finite validation loss inf at step 1"):
        log.val(loss=float("inf"))
    assert records(d)[-1]["reason"] == "nonfinite_loss"
    summarize(str(d))


def test_nonfinite_metric_is_left_out_with_a_warning(tmp_path):
    d = tmp_path / "run"
    with RunLogger(d, recipe=RECIPE) as log:
        log.step(loss=1.0, lr=0.1, grad_norm=1.0)
        with pytest.warns(RuntimeWarning, match="val metric 'auroc' is nan; left out of the record"):
            log.val(loss=0.5, metrics={"auroc": float("nan"), "accuracy": 0.5})
    assert records(d)[1]["metrics"] == {"accuracy": 0.5}


@pytest.mark.parametrize(
    "exc, reason, error",
    [
        (RuntimeError("boom"), "error", "RuntimeError: boom"),
        (KeyboardInterrupt(), "interrupted", "KeyboardInterrupt"),
    ],
)
def test_exceptions_end_the_session(tmp_path, exc, reason, error):
    d = tmp_path / "run"
    with pytest.raises(type(exc)), RunLogger(d, recipe=RECIPE) as log:
        log.step(loss=1.0, lr=0.1, grad_norm=1.0)
        raise exc
    end = records(d)[-1]
    assert (end["event"], end["reason"], end["error"]) == ("session_end", reason, error)
    assert summarize(str(d))["end_reason"] == reason


def test_second_logger_is_refused_and_first_unharmed(tmp_path):
    d = tmp_path / "run"
    with RunLogger(d, recipe=RECIPE, window=1) as log:
        log.step(loss=1.0, lr=0.1, grad_norm=1.0)
        with pytest.raises(RunLockedError, match="in use by another RunLogger"):
            RunLogger(d, recipe=RECIPE)
        log.step(loss=1.0, lr=0.1, grad_norm=1.0)
    assert len(manifest(d)["sessions"]) == 1
    assert summarize(str(d), expect_step=2)["train_windows"] == 2


def test_torn_tail_is_set_aside_and_the_next_session_is_clean(tmp_path):
    d = tmp_path / "run"
    log = RunLogger(d, recipe=RECIPE, window=1)
    log.step(loss=1.0, lr=0.1, grad_norm=1.0)
    state = log.state_dict()
    log._release()
    with open(d / "metrics.jsonl", "ab") as f:
        f.write(b'{"run_id": "half a rec')
    with RunLogger(d, recipe=RECIPE, resume_from=state) as log2:
        log2.step(loss=1.0, lr=0.1, grad_norm=1.0)
    aside = [p for p in os.listdir(d) if p.startswith("metrics.jsonl.torn-")]
    assert len(aside) == 1
    assert (d / aside[0]).read_bytes() == b'{"run_id": "half a rec'
    assert summarize(str(d), expect_step=2)["sessions"] == 2


def test_tensors_are_converted_once_per_window_not_per_step(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    counts = {"item": 0, "tolist": 0, "__float__": 0, "__bool__": 0}
    for name in counts:
        original = getattr(torch.Tensor, name)

        def counting(self, *a, _name=name, _original=original, **k):
            counts[_name] += 1
            return _original(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, counting)
    d = tmp_path / "run"
    w = torch.ones(3, requires_grad=True)
    log = RunLogger(d, recipe=RECIPE, window=5)
    for i in range(5 * 4 - 1):
        loss = (w * (i + 1)).sum()  # requires grad: the logger must keep only the value
        norm = torch.tensor(float(i))
        log.step(loss=loss, lr=0.1, grad_norm=norm, clipped=norm > 3, skipped=torch.tensor(False))
        if (i + 1) % 5:
            assert sum(counts.values()) == (i + 1) // 5, f"a sync at step {i + 1}"
    assert counts == {"item": 0, "tolist": 3, "__float__": 0, "__bool__": 0}
    log.close()
    assert counts["tolist"] == 4
    recs = records(d)
    assert recs[0]["loss"] == pytest.approx(3 * (1 + 2 + 3 + 4 + 5) / 5)
    assert recs[0]["grad_clipped_fraction"] == pytest.approx(1 / 5)
    summarize(str(d), expect_step=19)


def test_nonfinite_tensor_loss_is_caught_at_the_window(tmp_path):
    torch = pytest.importorskip("torch")
    d = tmp_path / "run"
    log = RunLogger(d, recipe=RECIPE, window=4)
    log.step(loss=torch.tensor(1.0), lr=0.1, grad_norm=torch.tensor(1.0))
    log.step(loss=torch.tensor(float("nan")), lr=0.1, grad_norm=torch.tensor(1.0))
    with pytest.raises(NonFiniteLossError):
        log.step(loss=torch.tensor(1.0), lr=0.1, grad_norm=torch.tensor(1.0))
        log.step(loss=torch.tensor(1.0), lr=0.1, grad_norm=torch.tensor(1.0))
    recs = records(d)
    assert [(r["event"], r["step"]) for r in recs] == [("train", 1), ("session_end", 1)]
    summarize(str(d))


def test_qk_clip_counts(tmp_path):
    d = tmp_path / "run"
    recipe = dict(RECIPE, qk_clip_threshold=100.0)
    with RunLogger(d, recipe=recipe, window=2) as log:
        log.step(loss=1.0, lr=0.1, grad_norm=1.0, qk_observed=8, qk_clipped=1, qk_max_logit=120.0)
        log.step(loss=1.0, lr=0.1, grad_norm=1.0, qk_observed=8, qk_clipped=0, qk_max_logit=90.0)
    assert records(d)[0]["qk_clip"] == {
        "threshold": 100.0,
        "observed_head_updates": 16,
        "clipped_head_updates": 1,
        "max_logit": 120.0,
    }
    assert summarize(str(d))["qk_clip"]["clipped_fraction"] == 1 / 16
    with pytest.raises(ConfigError, match="qk_observed and qk_clipped need recipe.qk_clip_threshold"):
        with RunLogger(tmp_path / "b", recipe=RECIPE) as log:
            log.step(loss=1.0, lr=0.1, grad_norm=1.0, qk_observed=8, qk_clipped=1)


def test_profiling_seconds(tmp_path):
    import time

    d = tmp_path / "run"
    with RunLogger(d, recipe=RECIPE) as log:
        with log.profiling():
            time.sleep(0.01)
        log.step(loss=1.0, lr=0.1, grad_norm=1.0)
    assert records(d)[0]["session"]["profiling_seconds"] >= 0.01
    assert summarize(str(d))["profiling"] is True


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(window=0), "RunLogger.window must be an int >= 1, got 0"),
        (
            dict(recipe={"batch_size": 1, "seq_len": 1}),
            r"RunLogger.recipe.gradient_accumulation_steps must be a positive int, got none \(the key is missing\)",
        ),
        (dict(recipe=dict(RECIPE, seq_len=0)), "RunLogger.recipe.seq_len must be a positive int, got 0"),
        (
            dict(recipe=dict(RECIPE, qk_clip_threshold=-1)),
            "RunLogger.recipe.qk_clip_threshold must be a positive number or None, got -1",
        ),
        (dict(optimizers=[{"name": "x"}]), r"RunLogger.optimizers\[0\] must be a dict with a string 'algorithm'"),
        (dict(resume_from={"step": -1}), "RunLogger.resume_from.step must be an int >= 0, got -1"),
    ],
)
def test_bad_configuration_names_the_option(tmp_path, kwargs, message):
    kwargs.setdefault("recipe", RECIPE)
    with pytest.raises(ConfigError, match=message):
        RunLogger(tmp_path / "run", **kwargs)
    assert not (tmp_path / "run" / "run.json").exists()


def test_run_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNWATCH_RUN_DIR", str(tmp_path / "env"))
    with RunLogger(recipe=RECIPE) as log:
        log.step(loss=1.0, lr=0.1, grad_norm=1.0)
    assert (tmp_path / "env" / "run.json").exists()
    monkeypatch.delenv("RUNWATCH_RUN_DIR")
    with pytest.raises(ConfigError, match=r"^RunLogger.run_dir must be a path \(or RUNWATCH_RUN_DIR set\), got None$"):
        RunLogger(recipe=RECIPE)


def _child(tmp_path, body: str) -> subprocess.Popen:
    code = textwrap.dedent(f"""
        import sys, time
        from runwatch import RunLogger
        log = RunLogger({str(tmp_path / "run")!r}, recipe={RECIPE!r}, window=1)
    """) + textwrap.dedent(body)
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_sigterm_ends_the_session_interrupted(tmp_path):
    proc = _child(
        tmp_path,
        """
        with log:
            log.step(loss=1.0, lr=0.1, grad_norm=1.0)
            print("ready", flush=True)
            while True:
                time.sleep(0.01)
    """,
    )
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=20)
    proc.stdout.close()
    proc.stderr.close()
    assert proc.returncode != 0
    end = records(tmp_path / "run")[-1]
    assert (end["reason"], end["error"]) == ("interrupted", "SIGTERM")
    assert summarize(str(tmp_path / "run"))["end_reason"] == "interrupted"


def test_exit_without_close_is_recorded(tmp_path):
    proc = _child(
        tmp_path,
        """
        log.step(loss=1.0, lr=0.1, grad_norm=1.0)
    """,
    )
    proc.communicate(timeout=20)
    end = records(tmp_path / "run")[-1]
    assert (end["reason"], end["error"]) == ("error", "the process exited without RunLogger.close()")


def test_sigkill_leaves_a_valid_log_up_to_the_last_record(tmp_path):
    proc = _child(
        tmp_path,
        """
        for i in range(3):
            log.step(loss=1.0, lr=0.1, grad_norm=1.0)
        print("ready", flush=True)
        time.sleep(60)
    """,
    )
    assert proc.stdout.readline() == "ready\n"
    proc.kill()
    proc.communicate(timeout=20)
    s = summarize(str(tmp_path / "run"))
    assert (s["completed"], s["last_step"], s["train_windows"]) == (False, 3, 3)
