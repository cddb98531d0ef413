"""A train window's row, fields and line (window.py): the line written without the JSON encoder is
the very text the encoder makes of the record, whatever the window held."""

from __future__ import annotations

import json
import math
import os
import tempfile

from hypothesis import given
from hypothesis import strategies as st

from fuzzing import FUZZ
from runwatch import RunLogger
from runwatch.files.schema import dumps
from runwatch.logger.window import TRAIN_FIELDS, OpenWindow, TrainLine, columns, window_fields, window_row

RECIPE = {"batch_size": 3, "seq_len": 7, "gradient_accumulation_steps": 1}
NUMBERS = [0.0, 1.0, 0.1, 2.5, 1 / 3, 1e-300, 1e-7, 123456.789, 1e22, 7, True, False]


def fields_of(updates: list[tuple], lr=3e-4, seconds=0.0123) -> dict:
    win = OpenWindow(0.0)
    for update in updates:
        win.values += update
    win.lr = lr
    values = win.convert()
    n = len(updates)
    row = window_row(values, n, seconds)
    fields = window_fields(columns([row]), n, 21, values.lr, None)
    assert fields is not None
    return fields


def record(fields: dict, session: tuple, memory: dict, step=40, now=1765432101.2345678) -> dict:
    """The record's dict as the logger builds it (RunLogger._record_at)."""
    rec = {"run_id": "r-20261203-abcdef", "session_id": "s-20261203T101010-0a1b", "event": "train", "step": step}
    rec["time"] = now
    rec.update(fields)
    elapsed, tokens, per_second, profiling = session
    rec["session"] = {
        "elapsed_seconds": elapsed,
        "tokens": tokens,
        "tokens_per_second": per_second,
        "profiling_seconds": profiling,
    }
    if memory:
        rec["memory"] = memory
    return rec


LINE = TrainLine("r-20261203-abcdef", "s-20261203T101010-0a1b")
MEMORY = [
    {},
    {"host_rss_peak_bytes": 812345344},
    {"cuda_allocated_peak_bytes": 3 * 2**30, "cuda_reserved_peak_bytes": 4 * 2**30, "host_rss_peak_bytes": 10**10},
]


@FUZZ
@given(
    updates=st.lists(
        st.tuples(
            st.sampled_from(NUMBERS[:-2] + [-0.5]),  # loss
            st.sampled_from(NUMBERS + [math.nan, math.inf]),  # grad norm (non-finite ones are counted)
            st.booleans(),
            st.sampled_from([False, False, True]),
        ),
        min_size=1,
        max_size=12,
    ).filter(lambda u: not all(s for *_, s in u)),
    lr=st.sampled_from([0.0, 3e-4, 1, 0.1 + 0.2]),
    seconds=st.floats(1e-9, 1e6),
    session=st.tuples(st.floats(1e-6, 1e7), st.integers(0, 10**15), st.floats(0, 1e12), st.floats(0, 1e4)),
    memory=st.sampled_from(MEMORY),
)
def test_the_line_is_the_encoders_text_of_the_record(updates, lr, seconds, session, memory):
    fields = fields_of(updates, lr, seconds)
    line = LINE(40, 1765432101.2345678, fields, session, memory)
    assert line == dumps(record(fields, session, memory))


def test_other_shapes_and_non_finite_values_are_left_to_the_encoder():
    fields = fields_of([(1.0, 1.0, False, False)])
    session = (2.0, 63, 31.5, 0.0)
    assert tuple(fields) == TRAIN_FIELDS and LINE(1, 2.0, fields, session, {}) is not None
    assert LINE(1, 2.0, fields, (0.0, 63, None, 0.0), {}) is None  # tokens_per_second null
    assert LINE(1, 2.0, dict(fields, qk_clip={"threshold": 1.0}), session, {}) is None  # another shape
    assert LINE(1, math.nan, fields, session, {}) is None
    assert LINE(1, 2.0, dict(fields, loss=math.inf), session, {}) is None
    assert LINE(1, 2.0, fields, (2.0, 63, 31.5, 1e308), {"x_bytes": 1}) is not None
    assert LINE(1, 1e308, fields, (2.0, 63, 31.5, 1e308), {}) is None  # past the largest float: the encoder


@FUZZ
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(NUMBERS[:-2]),
            st.sampled_from(NUMBERS + [math.nan]),
            st.booleans(),
            st.sampled_from([False, False, False, True]),
            st.sampled_from([None, None, (4, 1, 12.5)]),
        ),
        max_size=40,
    ),
    window=st.integers(1, 5),
)
def test_every_train_line_a_logger_writes_is_the_encoders_text(steps, window):
    """End to end: each train line equals dumps() of the record it parses to (key order, float text)."""
    with tempfile.TemporaryDirectory() as tmp:
        recipe = dict(RECIPE, qk_clip_threshold=50.0)
        with RunLogger(tmp, recipe=recipe, window=window) as log:
            for loss, grad, clipped, skipped, qk in steps:
                kwargs = {} if qk is None else dict(qk_observed=qk[0], qk_clipped=qk[1], qk_max_logit=qk[2])
                log.step(loss, 0.1, grad, clipped, skipped, **kwargs)  # finite losses only: no session end
        with open(os.path.join(tmp, "metrics.jsonl"), encoding="utf-8") as f:
            lines = f.read().splitlines()
    for line in lines:
        assert line == dumps(json.loads(line))
