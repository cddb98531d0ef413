"""The producer invariant (docs/FORMAT.md, "What a writer keeps"), by property: any sequence of logger calls gives a log the summary
accepts, and every session_end's counters equal start + the sums of the session's train windows."""

from __future__ import annotations

import json
import math
import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runwatch import RunLogger, summarize
from runwatch.errors import InvalidRunError, NonFiniteLossError

RECIPE = {"batch_size": 3, "seq_len": 5, "gradient_accumulation_steps": 2, "qk_clip_threshold": 10.0}

step_op = st.tuples(
    st.just("step"),
    st.sampled_from([1.0, 0.5, 2.25, 0.0, 1e-30, 1e30, math.nan, math.inf]),  # loss (non-finite rarely drawn)
    st.sampled_from([0.0, 1.0, 3.5, math.inf, math.nan]),  # grad norm
    st.booleans(),  # clipped
    st.sampled_from([False, False, False, True]),  # skipped
    st.one_of(st.none(), st.tuples(st.integers(0, 8), st.integers(0, 8), st.sampled_from([None, 12.0, math.inf]))),
)
other_op = st.sampled_from(["val", "checkpoint", "profiling", "crash", "close", "error", "interrupt"])
ops_strategy = st.lists(st.one_of(step_op, step_op, step_op, other_op), max_size=80)


def _check_session(run_dir: str) -> None:
    with open(os.path.join(run_dir, "run.json")) as f:
        manifest = json.load(f)
    session = manifest["sessions"][-1]
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        recs = [r for r in map(json.loads, f) if r["session_id"] == session["session_id"]]
    train = [r for r in recs if r["event"] == "train"]
    if not train:
        with pytest.raises(InvalidRunError, match="no train window"):
            summarize(run_dir)
        return
    s = summarize(run_dir)
    ends = [r for r in recs if r["event"] == "session_end"]
    assert len(ends) <= 1
    if ends:
        end, start = ends[0], session["start"]
        assert recs[-1] is end
        assert end["step"] == start["step"] + sum(r["updates"] for r in train)
        assert end["totals"]["tokens"] == start["tokens"] + sum(r["tokens"] for r in train)
        assert end["totals"]["skipped"] == start["skipped"] + sum(r["skipped"] for r in train)
        assert s["completed"] == (end["reason"] == "normal")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops_strategy, window=st.integers(1, 6))
def test_any_call_sequence_gives_a_valid_log(ops, window):
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = os.path.join(tmp, "run")
        state = None
        log = None
        for op in ops + ["close"]:
            if log is None:
                log = RunLogger(run_dir, recipe=RECIPE, window=window, resume_from=state, hardware={})
            kind = op[0] if isinstance(op, tuple) else op
            if kind == "step":
                _, loss, grad, clipped, skipped, qk = op
                kwargs = {} if qk is None else dict(qk_observed=qk[0], qk_clipped=min(qk[1], qk[0]), qk_max_logit=qk[2])
                try:
                    log.step(loss=loss, lr=0.01, grad_norm=grad, clipped=clipped, skipped=skipped, **kwargs)
                except NonFiniteLossError:
                    _check_session(run_dir)
                    log = None
                continue
            if kind == "val":
                log.val(loss=0.5, metrics={"auroc": 0.7})
            elif kind == "checkpoint":
                state = log.state_dict()
                log.checkpoint(os.path.join(tmp, "ckpt"), seconds=0.01)
            elif kind == "profiling":
                with log.profiling():
                    pass
            else:
                if kind == "crash":
                    log._release()
                elif kind == "close":
                    log.close()
                elif kind == "error":
                    log.__exit__(RuntimeError, RuntimeError("boom"), None)
                elif kind == "interrupt":
                    log.__exit__(KeyboardInterrupt, KeyboardInterrupt(), None)
                _check_session(run_dir)
                log = None
