"""The summary's fast paths give what the plain reading gives: block reading, the validator's
inline check (`SessionValidator.take_window`, `accept`) and orjson, against `check` and the
standard library."""

from __future__ import annotations

import copy
import json
import os
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runwatch import RunLogger, summarize
from runwatch.errors import InvalidRunError
from runwatch.files import lines
from runwatch.files.lines import iter_lines
from runwatch.files.schema import SessionValidator

DATA = os.path.join(os.path.dirname(__file__), "data")
VALID = os.path.join(DATA, "valid", "two_sessions")
RECIPE = {"batch_size": 4, "seq_len": 8, "gradient_accumulation_steps": 2, "qk_clip_threshold": 100.0}


def _outcome(run_dir: str, fast: bool):
    try:
        return summarize(run_dir, fast=fast)
    except InvalidRunError as exc:
        return f"error: {exc}"


def _same_both_ways(run_dir: str):
    """The summary (or the error) with orjson and without; they must be identical."""
    pytest.importorskip("orjson")
    fast, plain = _outcome(run_dir, True), _outcome(run_dir, False)
    assert json.dumps(fast) == json.dumps(plain)
    return plain


def _edit(tmp_path, lineno: int, edit) -> str:
    """A copy of the valid two-session run with line `lineno` (1-based) replaced by edit(text)."""
    d = str(tmp_path / "run")
    shutil.copytree(VALID, d)
    path = os.path.join(d, "metrics.jsonl")
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    lines[lineno - 1] = edit(lines[lineno - 1].decode()).encode("utf-8", "surrogatepass")
    with open(path, "wb") as f:
        f.write(b"\n".join(lines))
    return d


def _first_train_line() -> int:
    with open(os.path.join(VALID, "run.json")) as f:
        sid = json.load(f)["sessions"][-1]["session_id"]
    with open(os.path.join(VALID, "metrics.jsonl")) as f:
        for i, line in enumerate(f, 1):
            rec = json.loads(line)
            if rec["session_id"] == sid and rec["event"] == "train":
                return i
    raise AssertionError("no train record")


LINE = _first_train_line()
BIG = 2**70  # beyond 64 bits: orjson reads it as a float, the standard library as an int


@pytest.mark.parametrize(
    "field, value",
    [
        ("loss", BIG),  # valid either way, but the summary prints it
        ("loss", -BIG),
        ("time", BIG),
        ("train_seconds", BIG),
        ("lr", 2**64 + 1),
        ("memory", {"host_rss_peak_bytes": BIG}),  # an int: valid, and a memory peak
        ("tokens", BIG),  # the token identity names the int
        ("updates", BIG),
        ("session_id", BIG),  # the message shows the number as written
        ("grad_clipped_fraction", BIG),
        ("loss", 1e308),
        ("loss", "1e400"),  # inf to the standard library, refused by orjson
        ("loss", "NaN"),
        ("loss", True),
        ("grad_norm", [1, 2]),
        ("session", "x"),
        ("qk_clip", {"threshold": 100, "observed_head_updates": 1, "clipped_head_updates": 0, "max_logit": BIG}),
        ("qk_clip", {"threshold": 100.0, "observed_head_updates": 2, "clipped_head_updates": 3, "max_logit": None}),
    ],
)
def test_odd_values_give_the_same_outcome_with_and_without_orjson(tmp_path, field, value):
    def edit(text):
        rec = json.loads(text)
        if isinstance(value, str) and field != "session_id":
            rec[field] = "@@"
            return json.dumps(rec).replace('"@@"', value)  # a raw token, not a string
        rec[field] = value
        return json.dumps(rec)

    _same_both_ways(_edit(tmp_path, LINE, edit))


def test_big_int_loss_is_printed_as_written(tmp_path):
    d = _edit(tmp_path, LINE, lambda t: json.dumps(dict(json.loads(t), loss=BIG)))
    assert _same_both_ways(d)["loss"]["first"] == BIG


@pytest.mark.parametrize(
    "text",
    [
        '{"session_id": "\\ud800"}',  # a lone surrogate: the standard library reads it, orjson does not
        "[1, 2]",
        "null",
        str(BIG),
        '{"a": ' * 2000 + "1" + "}" * 2000,
        '{"run_id": "\udcff"}',  # encoded as invalid UTF-8
    ],
)
def test_odd_lines_give_the_same_outcome_with_and_without_orjson(tmp_path, text):
    _same_both_ways(_edit(tmp_path, LINE, lambda _: text))


@pytest.mark.parametrize("block", [1, 7, 64, 333, 4096])
def test_block_size_changes_nothing(monkeypatch, tmp_path, block):
    expected = summarize(VALID, fast=False)
    monkeypatch.setattr(lines, "READ_BLOCK_BYTES", block)
    assert summarize(VALID, fast=False) == expected
    assert summarize(VALID) == expected
    torn = _edit(tmp_path, LINE, lambda t: t)
    with open(os.path.join(torn, "metrics.jsonl"), "ab") as f:
        f.write(b'{"half": ')
    with pytest.raises(InvalidRunError, match=r"^Uncommitted metrics tail at line 11$"):
        summarize(torn)


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\n",
        b"a\n",
        b"a\nbb\n\nccc\n",
        b"x" * 40 + b"\n" + b"y" * 39 + b"\n",
    ],
)
@pytest.mark.parametrize("block", [1, 3, 40, 1 << 20])
def test_iter_lines_reads_every_line_with_its_newline(monkeypatch, tmp_path, content, block):
    path = tmp_path / "m.jsonl"
    path.write_bytes(content)
    monkeypatch.setattr(lines, "READ_BLOCK_BYTES", block)
    assert list(iter_lines(str(path))) == list(enumerate(content.splitlines(keepends=True), 1))


@pytest.mark.parametrize(
    "content, message",
    [
        (b"a" * 41 + b"\n", "m:1: line longer than 40 bytes"),
        (b"ok\n" + b"a" * 41 + b"\n", "m:2: line longer than 40 bytes"),
        (b"ok\n" + b"a" * 100, "m:2: line longer than 40 bytes"),
        (b"ok\n" + b"a" * 40, "Uncommitted metrics tail at line 2"),
    ],
)
@pytest.mark.parametrize("block", [1, 16, 41, 1 << 20])
def test_line_limit_whatever_the_block(monkeypatch, tmp_path, content, message, block):
    path = tmp_path / "m"
    path.write_bytes(content)
    monkeypatch.setattr(lines, "MAX_LINE_BYTES", 40)
    monkeypatch.setattr(lines, "READ_BLOCK_BYTES", block)
    with pytest.raises(InvalidRunError) as info:
        list(iter_lines(str(path), "m"))
    assert str(info.value) == message


# --- accept() takes only what check() takes ------------------------------------------------------


def _logger_records(tmp_path) -> tuple[str, dict, list[dict]]:
    d = tmp_path / "run"
    with RunLogger(d, recipe=RECIPE, window=2, hardware={}) as log:
        for i in range(6):
            log.step(
                loss=1.0 / (i + 1),
                lr=0.1,
                grad_norm=1.5,
                clipped=i % 2 == 0,
                skipped=i == 3,
                qk_observed=4,
                qk_clipped=i % 3,
                qk_max_logit=90.0 + i,
            )
    with open(d / "run.json") as f:
        manifest = json.load(f)
    with open(d / "metrics.jsonl") as f:
        return manifest["run_id"], manifest["sessions"][-1], [json.loads(line) for line in f]


def test_the_loggers_train_records_take_the_fast_path(tmp_path):
    run_id, session, recs = _logger_records(tmp_path)
    v = SessionValidator(run_id, session)
    taken = [v.accept(rec) or bool(v.check(rec, "x")) for rec in recs]
    assert taken == [rec["event"] == "train" for rec in recs]


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.text(max_size=3)
    | st.sampled_from(
        [
            0,
            1,
            -1,
            0.0,
            -0.0,
            0.5,
            1.0,
            1.5,
            -1e-9,
            2.0**63,
            -(2.0**63),
            1e308,
            100,
            100.0,
            float("nan"),
            float("inf"),
            -float("inf"),
        ]
    )
    | st.floats(allow_nan=True, allow_infinity=True),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=2), inner, max_size=2),
    max_leaves=4,
)
_FIELDS = [
    "run_id",
    "session_id",
    "event",
    "step",
    "time",
    "updates",
    "skipped",
    "attempted",
    "tokens",
    "train_seconds",
    "loss",
    "lr",
    "grad_norm",
    "grad_norm.mean",
    "grad_norm.max",
    "nonfinite_grad_norms",
    "grad_clipped_fraction",
    "qk_clip",
    "qk_clip.threshold",
    "qk_clip.observed_head_updates",
    "qk_clip.clipped_head_updates",
    "qk_clip.max_logit",
    "session",
    "session.elapsed_seconds",
    "session.tokens",
    "session.tokens_per_second",
    "session.profiling_seconds",
    "memory",
    "memory.host_rss_peak_bytes",
]


_BOUNDARIES = st.sampled_from(
    [
        0,
        1,
        2,
        -1,
        0.0,
        -0.0,
        1.0,
        1.5,
        -1e-9,
        2.0**63,
        -(2.0**63),
        2**63,
        2**64,
        100.0,
        float("nan"),
        float("inf"),
        None,
        True,
        "1",
        [],
        {},
        KeyError,
    ]
)


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    edits=st.lists(st.tuples(st.sampled_from(_FIELDS), st.one_of(_BOUNDARIES, _json_values)), min_size=1, max_size=2),
    index=st.integers(0, 2),
)
def test_accept_never_takes_what_check_refuses(tmp_path_factory, edits, index):
    if not hasattr(test_accept_never_takes_what_check_refuses, "cache"):
        test_accept_never_takes_what_check_refuses.cache = _logger_records(tmp_path_factory.mktemp("r"))
    run_id, session, recs = test_accept_never_takes_what_check_refuses.cache
    trains = [r for r in recs if r["event"] == "train"]
    before = trains[:index]
    rec = copy.deepcopy(trains[index])
    for path, value in edits:
        obj = rec
        *parents, last = path.split(".")
        for key in parents:
            obj = obj.get(key) if isinstance(obj, dict) else None
        if not isinstance(obj, dict):
            continue
        if value is KeyError:
            obj.pop(last, None)
        else:
            obj[last] = value

    def validator() -> SessionValidator:
        v = SessionValidator(run_id, session)
        for r in before:
            v.check(r, "before")
        return v

    fast = validator()
    values = fast.take_window(rec)
    assert validator().accept(rec) is (values is not None)  # accept() decides as take_window() does
    if values is not None:
        precise = validator()
        precise._check_fields(rec, "x")  # raises if take_window() took a record the field checks refuse
        assert precise.step == fast.step
        assert values == SessionValidator.window_values(rec)  # what the summary sums: the record's own


@pytest.mark.parametrize("rec", [None, [], "train", 3, [{"event": "train"}]])
def test_take_window_declines_what_is_not_an_object(tmp_path, rec):
    run_id, session, _ = _logger_records(tmp_path)
    assert SessionValidator(run_id, session).take_window(rec) is None


@pytest.mark.parametrize(
    "field, value",
    [
        ("loss", 0),
        ("lr", 0),
        ("train_seconds", 3),
        ("time", 1800000000),
        ("grad_clipped_fraction", 1),
        ("grad_clipped_fraction", 0),
        ("grad_norm", {"mean": 0, "max": 2}),
        ("qk_clip", {"threshold": 100, "observed_head_updates": 4, "clipped_head_updates": 4, "max_logit": -5}),
        ("qk_clip", {"threshold": 100.0, "observed_head_updates": 0, "clipped_head_updates": 0, "max_logit": None}),
        ("memory", {}),
        ("memory", None),
        ("qk_clip", None),
    ],
)
def test_ints_and_nulls_where_allowed_still_take_the_fast_path(tmp_path, field, value):
    """The fast check compares floats with float constants; ints and nulls must pass it all the same."""
    run_id, session, recs = _logger_records(tmp_path)
    rec = dict(next(r for r in recs if r["event"] == "train"), **{field: value})
    assert SessionValidator(run_id, session).take_window(rec) == SessionValidator.window_values(rec)


@pytest.mark.parametrize(
    "field, value",
    [
        ("updates", 0),
        ("skipped", -1),
        ("nonfinite_grad_norms", -1),
        ("step", 0),
        ("tokens", 1),
        ("attempted", 99),
        ("time", 2.0**63),
        ("time", -(2.0**63)),
        ("loss", float("inf")),
        ("loss", float("nan")),
        ("loss", True),
        ("train_seconds", 0.0),
        ("train_seconds", 0),
        ("lr", -1e-300),
        ("grad_clipped_fraction", 1.0000000000000002),
        ("grad_clipped_fraction", -0.1),
        ("grad_norm", {"mean": -0.5, "max": 1.0}),
        ("grad_norm", {"mean": 1.0, "max": 2.0**63}),
        ("session", {"elapsed_seconds": -1.0, "tokens": 0, "tokens_per_second": None, "profiling_seconds": 0.0}),
        ("session", {"elapsed_seconds": 1.0, "tokens": 0, "tokens_per_second": -1.0, "profiling_seconds": 0.0}),
        ("session", {"elapsed_seconds": 1.0, "tokens": 0, "tokens_per_second": None, "profiling_seconds": -0.5}),
        ("session", {"elapsed_seconds": 1.0, "tokens": 0.0, "tokens_per_second": None, "profiling_seconds": 0.0}),
        ("memory", {"host_rss_peak_bytes": -1}),
        ("memory", {"host_rss_peak_bytes": 1.0}),
        ("memory", [1]),
        ("qk_clip", {"threshold": 99.0, "observed_head_updates": 4, "clipped_head_updates": 0, "max_logit": None}),
        ("qk_clip", {"threshold": 100.0, "observed_head_updates": 4, "clipped_head_updates": 5, "max_logit": None}),
        ("qk_clip", {"threshold": 100.0, "observed_head_updates": 4, "clipped_head_updates": 0, "max_logit": 2.0**63}),
        ("qk_clip", {"threshold": True, "observed_head_updates": 4, "clipped_head_updates": 0, "max_logit": None}),
    ],
)
def test_take_window_declines_each_value_out_of_bounds(tmp_path, field, value):
    run_id, session, recs = _logger_records(tmp_path)
    rec = dict(next(r for r in recs if r["event"] == "train"), **{field: value})
    assert SessionValidator(run_id, session).take_window(rec) is None


@pytest.mark.parametrize(
    "threshold, value, taken",
    [
        (1.0, True, False),  # a bool equals 1.0, but is no number
        (1.0, 1, True),
        (1e19, 1e19, False),  # 2**63 or more: left to check(), which takes it
        (1e19, 10**19, False),
        (100.0, 100, True),
    ],
)
def test_take_window_qk_threshold(tmp_path, threshold, value, taken):
    run_id, session, recs = _logger_records(tmp_path)
    session = dict(session, recipe=dict(session["recipe"], qk_clip_threshold=threshold))
    rec = next(r for r in recs if r["event"] == "train")
    rec = dict(rec, qk_clip=dict(rec["qk_clip"], threshold=value))
    assert (SessionValidator(run_id, session).take_window(rec) is not None) is taken
    if type(value) is not bool:
        SessionValidator(run_id, session).check(rec, "x")  # valid all the same


# --- the summary's fast loop sums what the field-by-field path sums -------------------------------


def _logger_run(tmp_path) -> str:
    """A one-session run: train windows with and without QK-Clip, skips, vals, a checkpoint."""
    d = tmp_path / "run"
    with RunLogger(d, recipe=RECIPE, window=3, hardware={}) as log:
        for i in range(20):
            qk = {} if i // 3 in (2, 3) else {"qk_observed": 4, "qk_clipped": i % 3, "qk_max_logit": 90.0 + i % 7}
            log.step(loss=2.0 / (i + 1), lr=0.1, grad_norm=1.5 + i % 4, clipped=i % 2 == 0, skipped=i % 7 == 3, **qk)
            if i % 6 == 5:
                log.val(loss=1.0 / (i + 1), metrics={"auroc": 0.6})
            if i == 10:
                log.checkpoint("ckpt", seconds=0.5, bytes=10, verified=True)
    return str(d)


def _three_ways(monkeypatch, run_dir: str, after_step: int = 0) -> list:
    """The outcome with orjson, without, and with every line taken through `check` on its own."""
    pytest.importorskip("orjson")

    def outcome(fast: bool):
        try:
            return json.dumps(summarize(run_dir, after_step, fast=fast))
        except InvalidRunError as exc:
            return f"error: {exc}"

    outcomes = [outcome(True), outcome(False)]
    with monkeypatch.context() as m:
        m.setattr(SessionValidator, "take_window", lambda self, rec: None)
        outcomes.append(outcome(True))
    return outcomes


@pytest.mark.parametrize("after_step", [0, 7, 10_000])
def test_the_fast_loop_sums_what_the_slow_path_sums(monkeypatch, tmp_path, after_step):
    fast, plain, slow = _three_ways(monkeypatch, _logger_run(tmp_path), after_step)
    assert fast == plain == slow
    summary = json.loads(fast)
    assert summary["qk_clip"] is not None and summary["last_val"] is not None and summary["completed"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    edits=st.lists(st.tuples(st.sampled_from(_FIELDS), st.one_of(_BOUNDARIES, _json_values)), min_size=1, max_size=2),
    line=st.integers(0, 20),
    after_step=st.sampled_from([0, 5]),
)
def test_any_edit_gives_the_same_outcome_whichever_path(monkeypatch, tmp_path_factory, edits, line, after_step):
    if not hasattr(test_any_edit_gives_the_same_outcome_whichever_path, "cache"):
        test_any_edit_gives_the_same_outcome_whichever_path.cache = _logger_run(tmp_path_factory.mktemp("r"))
    source = test_any_edit_gives_the_same_outcome_whichever_path.cache
    d = tmp_path_factory.mktemp("e")
    shutil.copy(os.path.join(source, "run.json"), d)
    with open(os.path.join(source, "metrics.jsonl")) as f:
        recs = [json.loads(text) for text in f]
    rec = recs[line % len(recs)]
    for path, value in edits:
        obj = rec
        *parents, last = path.split(".")
        for key in parents:
            obj = obj.get(key) if isinstance(obj, dict) else None
        if not isinstance(obj, dict):
            continue
        if value is KeyError:
            obj.pop(last, None)
        else:
            obj[last] = value
    with open(d / "metrics.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in recs)  # NaN and Infinity as the tokens
    fast, plain, slow = _three_ways(monkeypatch, str(d), after_step)
    assert fast == plain == slow
