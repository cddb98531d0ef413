"""The record rules of docs/WATCHDOG.md as tables: (records, options) -> findings."""

from __future__ import annotations

import json
import math

import pytest

from runwatch.judging.rules import RULE_ORDER, Replay, Rules, replay
from runwatch.judging.watchdog import Options
from runwatch.reading.records import Record

NAN = math.nan
INF = math.inf


def tr(step, loss=1.0, grad=1.0, tp=100.0, nf=0, session="s1", **kw):
    return Record(
        "train", session, step, loss=loss, grad_mean=grad, grad_max=grad, nonfinite_grads=nf, throughput=tp, **kw
    )


def ev(step, loss=None, session="s1", **metrics):
    return Record("eval", session, step, eval_loss=loss, metrics=metrics or None)


def kinds(records, **opts):
    # These tables are about the other record rules: a series without a train loss would also end
    # in `no_signal`, a flat one in `no_progress` (their own tables are below); both are off unless
    # a case sets severities.
    opts.setdefault("severity", ("no_signal=off", "no_progress=off"))
    return [(f.kind, f.step) for f in replay(records, Options(**opts))]


def train_series(losses, start=1, **kw):
    return [tr(start + i, loss=l, **kw) for i, l in enumerate(losses)]


CASES = [
    # (name, records, options, expected [(kind, step)])
    ("clean", train_series([1.0] * 10), {}, []),
    ("nan loss", [tr(1), tr(2, loss=NAN)], {}, [("nonfinite_loss", 2)]),
    ("inf loss", [tr(1, loss=INF)], {}, [("nonfinite_loss", 1)]),
    ("hf filtered nan: loss 0 with non-finite grad", [tr(1, loss=0.0, grad=None, nf=1)], {}, [("nonfinite_loss", 1)]),
    ("fatal", [tr(1), Record("fatal", "s1", 30, error="non-finite loss")], {}, [("nonfinite_loss", 30)]),
    ("end nonfinite", [Record("end", "s1", 5, reason="nonfinite_loss", error="x")], {}, [("nonfinite_loss", 5)]),
    ("end error", [Record("end", "s1", 5, reason="error", error="boom")], {}, [("session_error", 5)]),
    ("end interrupted", [Record("end", "s1", 5, reason="interrupted")], {}, [("interrupted", 5)]),
    ("end normal", [Record("end", "s1", 5, reason="normal")], {}, []),
    ("nonfinite grad below patience", [tr(1, nf=1), tr(2, nf=1), tr(3)], {}, []),
    ("nonfinite grad at patience", [tr(1, nf=1), tr(2, nf=2), tr(3, nf=1)], {}, [("nonfinite_grad", 3)]),
    # --grad-max is the absolute limit, judged from the first record (off by default)
    ("explosion", [tr(i, grad=100.0) for i in range(1, 4)], {"grad_max": 50.0}, [("grad_explosion", 3)]),
    ("no absolute limit by default", [tr(i, grad=100.0) for i in range(1, 4)], {}, []),
    (
        "explosion broken streak",
        [tr(1, grad=100.0), tr(2, grad=100.0), tr(3), tr(4, grad=100.0)],
        {"grad_max": 50.0},
        [],
    ),
    (
        "explosion custom",
        [tr(i, grad=6.0) for i in range(1, 3)],
        {"grad_max": 5.0, "grad_patience": 2},
        [("grad_explosion", 2)],
    ),
    (
        "explosion reports again after clearing",
        [
            tr(1, grad=99.0),
            tr(2, grad=99.0),
            tr(3, grad=99.0),
            tr(4, grad=99.0),
            tr(5),
            tr(6, grad=99.0),
            tr(7, grad=99.0),
            tr(8, grad=99.0),
        ],
        {"grad_max": 50.0},
        [("grad_explosion", 3), ("grad_explosion", 8)],
    ),
    # grad_collapse is judged after the session's first 5 norms
    ("collapse", train_series([1.0] * 5) + [tr(i, grad=1e-5) for i in range(6, 9)], {}, [("grad_collapse", 8)]),
    ("collapse not in the first 5 records", [tr(i, grad=1e-5) for i in range(1, 6)], {}, []),
    (
        "records without a norm are not looked at",
        train_series([1.0] * 5) + [tr(6, grad=1e-5), tr(7, grad=None), tr(8, grad=1e-5), tr(9, grad=1e-5)],
        {},
        [("grad_collapse", 9)],
    ),
    ("spike", train_series([1.0] * 6 + [5.0, 5.0]), {}, [("loss_spike", 8)]),
    ("spike needs patience", train_series([1.0] * 6 + [5.0, 1.0, 5.0]), {}, []),
    # fewer than 5 records before: the early path (the median of those, and F x their lowest)
    ("early spike", train_series([1.0] * 4 + [5.0, 5.0]), {}, [("loss_spike", 6)]),
    ("spike needs median > 0", train_series([0.0] * 4 + [-1.0, 5.0, 5.0]), {"collapse_patience": 99}, []),
    ("spike factor", train_series([1.0] * 6 + [2.5, 2.5]), {"spike_factor": 2.0}, [("loss_spike", 8)]),
    ("loss collapse", train_series([1.0, 0.0, 0.0, 0.0, 0.0, 0.0]), {}, [("loss_collapse", 6)]),
    ("loss collapse patience", train_series([0.0, 0.0]), {"collapse_patience": 2}, [("loss_collapse", 2)]),
    ("chance off by default", [tr(s, loss=0.7) for s in (400, 410, 420)], {}, []),
    ("chance", [tr(s, loss=0.69) for s in (400, 410, 420)], {"chance_loss": 0.693}, [("loss_at_chance", 420)]),
    (
        "chance diverging counts",
        [tr(400, loss=0.69), tr(410, loss=3.0), tr(420, loss=50.0)],
        {"chance_loss": 0.693, "spike_patience": 9},  # (the jump to 50 is an early spike too)
        [("loss_at_chance", 420)],
    ),
    ("chance before after-step", [tr(s, loss=0.69) for s in (390, 410, 420)], {"chance_loss": 0.693}, []),
    ("chance below tolerance", [tr(s, loss=0.6) for s in (400, 410, 420)], {"chance_loss": 0.693}, []),
    (
        "throughput drop",
        [tr(1, tp=10.0)] + [tr(s, tp=100.0) for s in range(20, 201, 20)] + [tr(s, tp=50.0) for s in (220, 240, 260)],
        {"throughput_span": 0.01},
        [("throughput_drop", 260)],
    ),
    (
        "throughput first record left out of the baseline",
        [tr(1, tp=1000.0)] + [tr(s, tp=100.0) for s in (100, 200)] + [tr(s, tp=80.0) for s in (220, 240, 260)],
        {"throughput_span": 0.01},
        [],
    ),
    (
        "throughput needs patience",
        [tr(1)] + [tr(s, tp=100.0) for s in (100, 200)] + [tr(220, tp=10.0), tr(240, tp=100.0), tr(260, tp=10.0)],
        {"throughput_span": 0.01},
        [],
    ),
    (
        "throughput baseline steps",
        [tr(1)] + [tr(s, tp=100.0) for s in (5, 11)] + [tr(s, tp=50.0) for s in (12, 13)],
        {"throughput_baseline_steps": 10, "throughput_patience": 2, "throughput_span": 0.01},
        [("throughput_drop", 13)],
    ),
    # spans of >= --throughput-span seconds of training (default 30): one line per update at 10 ms,
    # three slow lines at 14-22 ms among them are one bit of one span, not a drop
    (
        "throughput: slow single updates inside a span",
        [tr(s, tp=100.0) for s in range(1, 8001)]
        + [tr(8001, tp=1000 / 22), tr(8002, tp=1000 / 14), tr(8003, tp=1000 / 18)]
        + [tr(s, tp=100.0) for s in range(8004, 20001)],
        {},
        [],
    ),
    (
        "throughput: a sustained drop is found span by span",
        # 1/128 s and then 1/64 s an update (exact in binary): spans of 128, then 64 records
        [tr(s, tp=128.0) for s in range(1, 1001)] + [tr(s, tp=64.0) for s in range(1001, 2001)],
        {"throughput_span": 1.0},
        [("throughput_drop", 1177)],
    ),
    (
        "throughput: wall time between records measures the span",
        [tr(s, tp=100.0, time=1000.0 + 10 * s) for s in range(1, 30)]
        + [tr(s, tp=40.0, time=1000.0 + 10 * s) for s in range(30, 41)],
        {"throughput_baseline_steps": 20},
        [("throughput_drop", 39)],
    ),
    ("eval nan", [ev(10, NAN)], {}, [("nonfinite_loss", 10)]),
    ("overfitting", [ev(s, l) for s, l in [(1, 1.0), (2, 1.2), (3, 1.3), (4, 1.15)]], {}, [("overfitting", 4)]),
    ("overfitting tolerance", [ev(s, l) for s, l in [(1, 1.0), (2, 1.05), (3, 1.05), (4, 1.05)]], {}, []),
    ("overfitting best moves", [ev(s, l) for s, l in [(1, 1.0), (2, 1.2), (3, 0.5), (4, 1.0)]], {}, []),
    ("inverted metric", [ev(600, auroc=0.2)], {}, [("inverted_metric", 600)]),
    ("stuck metric", [ev(600, auroc=0.55)], {}, [("stuck_metric", 600)]),
    ("metric ok", [ev(600, auroc=0.8)], {}, []),
    ("metric before after-step", [ev(499, auroc=0.2)], {}, []),
    ("metric name", [ev(600, auroc=0.9, acc=0.5)], {"metric": "acc"}, [("stuck_metric", 600)]),
    (
        "inverted then stuck",
        [ev(600, auroc=0.2), ev(700, auroc=0.5)],
        {},
        [("inverted_metric", 600), ("stuck_metric", 700)],
    ),
    ("stuck reported once", [ev(600, auroc=0.5), ev(700, auroc=0.5)], {}, [("stuck_metric", 600)]),
    (
        "invalid",
        [
            tr(1),
            Record("invalid", "s1", 1, error="bad"),
            Record("invalid", "s1", 1, error="bad"),
            tr(2),
            Record("invalid", "s1", 2, error="bad"),
        ],
        {},
        [("invalid_log", 1), ("invalid_log", 2)],
    ),
    (
        "new session restarts windows",
        [tr(1, grad=99.0), tr(2, grad=99.0), tr(3, grad=99.0, session="s2"), tr(4, grad=99.0, session="s2")],
        {},
        [],
    ),
]


@pytest.mark.parametrize("records, opts, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rule_table(records, opts, expected):
    assert kinds(records, **opts) == expected


ORDER_CASES = [
    # several rules start on one record: the first in the documented order is reported
    (
        "nonfinite_loss before nonfinite_grad",
        [tr(1, loss=NAN, nf=1, grad=None)],
        {"grad_patience": 1},
        "nonfinite_loss",
    ),
    ("nonfinite_grad before explosion", [tr(1, nf=1, grad=99.0)], {"grad_patience": 1}, "nonfinite_grad"),
    (
        "explosion before spike",
        train_series([1.0] * 6) + [tr(7, loss=9.0, grad=99.0)],
        {"grad_patience": 1, "spike_patience": 1},
        "grad_explosion",
    ),
    (
        "spike before at-chance",
        train_series([0.1] * 6, start=400) + [tr(406, loss=0.9)],
        {"spike_patience": 1, "chance_loss": 0.693, "chance_patience": 1},
        "loss_spike",
    ),
    (
        "collapse before at-chance",
        [tr(400, loss=0.0)],
        {"collapse_patience": 1, "chance_loss": 0.0, "chance_patience": 1},
        "loss_collapse",
    ),
    (
        "train rules before eval values",
        [Record("train", "s1", 600, loss=NAN, eval_loss=NAN, metrics={"auroc": 0.1})],
        {},
        "nonfinite_loss",
    ),
    (
        "eval nonfinite before overfitting",
        [ev(1, 1.0), Record("eval", "s1", 2, eval_loss=NAN, metrics={"auroc": 0.1})],
        {"metric_after_step": 0},
        "nonfinite_loss",
    ),
    ("overfitting before inverted", [ev(600, 1.0), ev(601, 2.0, auroc=0.1)], {"overfit_patience": 1}, "overfitting"),
    ("inverted excludes stuck", [ev(600, auroc=0.1)], {}, "inverted_metric"),
]


@pytest.mark.parametrize("records, opts, first", [c[1:] for c in ORDER_CASES], ids=[c[0] for c in ORDER_CASES])
def test_reporting_order_on_one_record(records, opts, first):
    findings = replay(records, Options(severity=("no_signal=off",), **opts))
    last = [f for f in findings if f.step == records[-1].step]
    assert last and last[0].kind == first


def test_a_warning_never_hides_a_stop_on_one_record():
    """overfitting (a warning) comes before inverted_metric in the order: both are reported."""
    rules = Rules(Options(overfit_patience=1))
    rules.observe(ev(600, 1.0))
    found = rules.observe(ev(601, 2.0, auroc=0.1))
    assert [(f.kind, f.severity) for f in found] == [("overfitting", "warn"), ("inverted_metric", "stop")]


def test_messages_are_pinned():
    f = replay([tr(i, grad=120.5) for i in range(1, 4)], Options(grad_max=50.0))
    assert f[0].line() == "ANOMALY grad_explosion step=3: gradient norm 120.5 > 50 for 3 consecutive train records"
    f = replay([ev(600, auroc=0.2)], Options())
    assert (
        f[0].line("FINDING")
        == "FINDING inverted_metric step=600: auroc 0.2 < 0.3 (1 - metric-min 0.7): labels look inverted (chance 0.5)"
    )
    f = replay([Record("end", "s", 9, reason="error", error="CUDA error")], Options())
    assert f[0].message == "session ended with reason error: CUDA error"
    f = replay(train_series([1.0] * 6 + [5.0, 5.0]), Options())
    assert f[0].message == "loss 5 > 3 x median 1 of the previous 6 train records for 2 consecutive records"


def _mixed_series():
    recs = [tr(1, tp=5.0)] + [tr(s, loss=1.0 + s / 1000, grad=2.0, tp=100.0) for s in range(10, 210, 10)]
    recs += [tr(220, loss=0.7, nf=1, grad=None, tp=60.0), ev(220, 0.9, auroc=0.6), tr(230, loss=0.0, tp=60.0)]
    return recs


@pytest.mark.parametrize("cut", [0, 1, 5, 21, 22, 23, 24])
def test_state_save_load_equal(cut):
    """Any point of a series: state → JSON → load gives the same state and the same future."""
    opts = Options(chance_loss=0.693, chance_after_step=0, metric_after_step=0)
    recs = _mixed_series()
    a = Rules(opts, 0)
    for r in recs[:cut]:
        a.observe(r)
    saved = json.loads(json.dumps(a.state_dict(), allow_nan=False))
    b = Rules(opts)
    b.load_state_dict(saved)
    assert b.state_dict() == a.state_dict()
    rest_a = [a.observe(r) for r in recs[cut:]]
    rest_b = [b.observe(r) for r in recs[cut:]]
    assert rest_a == rest_b
    assert a.state_dict() == b.state_dict()


def test_state_names_every_rule():
    state = Rules(Options()).state_dict()
    assert list(state["rules"]) == [cls.name for cls in RULE_ORDER]
    assert len(set(state["rules"])) == len(RULE_ORDER)


# --- judged relative to the run itself ----------------------------------------------------------------


def grads(norms, start=1, loss=1.0):
    return [tr(start + i, loss=loss, grad=g) for i, g in enumerate(norms)]


RELATIVE_CASES = [
    # (name, records, options, expected [(kind, step)])
    # gradient norms: above 10 x the median of the 20 before (and above their largest), 3 in a row
    ("grad: 10 x the median", grads([1.0] * 10 + [20.0] * 3), {}, [("grad_explosion", 13)]),
    ("grad: below 10 x", grads([1.0] * 10 + [9.0] * 5), {}, []),
    ("grad: warm-up norms are not judged", grads([286.0, 67.0, 52.0, 45.0, 42.0] + [20.0] * 20), {}, []),
    ("grad: judged from the 6th finite norm", grads([1.0, 1.0, 1.0, 50.0, 50.0, 50.0]), {}, []),
    (
        # a trainer that logs one step's norm: bursts the run came through lately are not an explosion
        "grad: a heavy-tailed series",
        grads([0.1, 0.2, 0.1, 22.7, 0.1, 29.3, 0.1, 0.2, 0.1, 0.1] + [6.0, 19.6, 15.4]),
        {},
        [],
    ),
    ("grad: a model family at 1e5-1e6", grads([2e6, 2.2e6, 1.4e6, 1.5e6, 1.6e6] + [2e5] * 30 + [4e6]), {}, []),
    ("grad: --grad-factor", grads([1.0] * 10 + [6.0] * 3), {"grad_factor": 5.0}, [("grad_explosion", 13)]),
    ("grad: --grad-window", grads([1.0] * 3 + [5.0] * 10 + [20.0] * 3), {"grad_window": 3}, []),
    ("grad: --grad-max fires from the first record", grads([60.0] * 3), {"grad_max": 50.0}, [("grad_explosion", 3)]),
    # grad_collapse: after 5 norms, while the loss is above half the reference loss
    ("collapse while learning", grads([1.0] * 5) + grads([1e-4] * 3, start=6, loss=0.8), {}, [("grad_collapse", 8)]),
    ("collapse of a converged model is not", grads([1.0] * 5) + grads([1e-4] * 3, start=6, loss=0.4), {}, []),
    # loss spikes: above 3 x the median, by at least 0.5 x the reference loss
    (
        "spike: noise near zero in a run that began at 2.5",
        train_series([2.5] * 20 + [0.02] * 20 + [0.08, 0.08]),
        {},
        [],
    ),
    (
        "spike: x20 in the middle of training",
        train_series([2.5] * 20 + [0.5] * 20 + [10.0, 10.0]),
        {},
        [("loss_spike", 42)],
    ),
    (
        "spike: --spike-min-excess 0",
        train_series([2.5] * 20 + [0.02] * 20 + [0.08, 0.08]),
        {"spike_min_excess": 0.0},
        [("loss_spike", 42)],
    ),
    (
        "spike: a first record is never one",
        train_series([9.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]),
        {"spike_patience": 1},
        [],
    ),
    ("spike: early, against the records it has", train_series([1.0, 1.0, 20.0, 20.0, 1.0]), {}, [("loss_spike", 4)]),
    ("spike: a fast first descent is not one", train_series([10.0, 6.0, 4.0, 3.0, 2.5, 2.2, 2.0]), {}, []),
    # several eval loss series, each judged by the eval rules
    (
        "overfitting of a named eval loss series",
        [ev(s, g0_loss=v, g1_loss=1.0) for s, v in [(1, 1.0), (2, 1.2), (3, 1.3), (4, 1.4)]],
        {},
        [("overfitting", 4)],
    ),
    ("a NaN in a named eval loss series", [ev(1, g0_loss=1.0), ev(2, g0_loss=NAN)], {}, [("nonfinite_loss", 2)]),
    (
        # a wobble small against what the eval loss had gained (3.0 -> 0.6) is noise
        "overfitting: a small rise after a large gain",
        [ev(s, v) for s, v in [(1, 3.0), (2, 1.0), (3, 0.6), (4, 0.68), (5, 0.68), (6, 0.68)]],
        {},
        [],
    ),
    (
        "overfitting: a rise that gives back a tenth of the gain",
        [ev(s, v) for s, v in [(1, 3.0), (2, 1.0), (3, 0.6), (4, 0.9), (5, 0.9), (6, 0.9)]],
        {},
        [("overfitting", 6)],
    ),
    # the metric's chance level
    (
        "a 10-class accuracy below metric-min",
        [ev(600, acc=0.2)],
        {"metric": "acc", "metric_chance": 0.1},
        [("stuck_metric", 600)],
    ),
    ("is never inverted", [ev(600, acc=0.05)], {"metric": "acc", "metric_chance": 0.1}, [("stuck_metric", 600)]),
    ("above metric-min", [ev(600, acc=0.75)], {"metric": "acc", "metric_chance": 0.1}, []),
]


@pytest.mark.parametrize("records, opts, expected", [c[1:] for c in RELATIVE_CASES], ids=[c[0] for c in RELATIVE_CASES])
def test_relative_rules(records, opts, expected):
    assert kinds(records, **opts) == expected


def test_relative_messages_are_pinned():
    f = replay(grads([1.0] * 10 + [20.0] * 3), Options())
    assert f[0].message == (
        "gradient norm 20 > 10 x median 1 of the previous 10 train records (and above their largest) "
        "for 3 consecutive train records; the loss stayed in its band"
    )
    f = replay([ev(s, g0_loss=v) for s, v in [(1, 1.0), (2, 1.2), (3, 1.3), (4, 1.4)]], Options())
    assert f[0].line() == (
        "WARNING overfitting step=4: eval_g0_loss 1.4 > 1.1 ((1 + 0.1) x best 1) for 3 consecutive eval records"
    )
    f = replay([ev(600, acc=0.3)], Options(metric="acc", metric_chance=0.1))
    assert f[0].message == "acc 0.3 < metric-min 0.7: the model looks stuck near chance (0.1)"


# --- severities ---------------------------------------------------------------------------------------


SEVERITY_CASES = [
    # (name, records, --severity, expected [(kind, severity)])
    (
        "overfitting warns by default",
        [ev(s, v) for s, v in [(1, 1.0), (2, 1.2), (3, 1.3), (4, 1.4)]],
        (),
        [("overfitting", "warn")],
    ),
    (
        "overfitting=stop",
        [ev(s, v) for s, v in [(1, 1.0), (2, 1.2), (3, 1.3), (4, 1.4)]],
        ("overfitting=stop",),
        [("overfitting", "stop")],
    ),
    ("loss_spike=warn", train_series([1.0] * 6 + [5.0, 5.0]), ("loss_spike=warn",), [("loss_spike", "warn")]),
    ("nonfinite_loss=off", [tr(1), tr(2, loss=NAN), ev(3, NAN)], ("nonfinite_loss=off",), []),
    (
        "the last one given wins",
        [tr(1), tr(2, loss=NAN)],
        ("nonfinite_loss=off", "nonfinite_loss=warn"),
        [("nonfinite_loss", "warn")],
    ),
]


@pytest.mark.parametrize(
    "records, severity, expected", [c[1:] for c in SEVERITY_CASES], ids=[c[0] for c in SEVERITY_CASES]
)
def test_severity_table(records, severity, expected):
    got = replay(records, Options(severity=(*severity, "no_signal=off", "no_progress=off")))
    assert [(f.kind, f.severity) for f in got] == expected


@pytest.mark.parametrize(
    "items, message",
    [
        (("overfitting=maybe",), "watch.severity must be KIND=stop|warn|off, got 'overfitting=maybe'"),
        (("overfitting",), "watch.severity must be KIND=stop|warn|off, got 'overfitting'"),
        (("stall=warn",), "watch.severity: 'stall' is not a record rule's kind (expected one of invalid_log, "),
    ],
)
def test_severity_errors_name_the_option(items, message):
    from runwatch.errors import ConfigError

    with pytest.raises(ConfigError) as exc:
        Options(severity=items)
    assert str(exc.value).startswith(message)


def test_state_of_the_relative_rules_round_trips():
    opts = Options()
    recs = (
        grads([1.0] * 10 + [20.0] * 2)
        + train_series([2.5] * 3 + [0.5] * 5, start=13)
        + [ev(30, g0_loss=1.0), ev(31, g0_loss=1.3), ev(32, 0.9)]
    )
    for cut in range(len(recs) + 1):
        a = Rules(opts, 0, live=True)
        for r in recs[:cut]:
            a.observe(r)
        saved = json.loads(json.dumps(a.state_dict(), allow_nan=False))
        b = Rules(opts, live=True)
        b.load_state_dict(saved)
        assert b.state_dict() == a.state_dict()
        assert [a.observe(r) for r in recs[cut:]] == [b.observe(r) for r in recs[cut:]]


def test_a_preview_of_the_end_of_the_log_leaves_the_replay_as_it_was():
    """`finish(commit=False)`: what the end would decide now (the run page's settled log), said
    again at the real end; a committed finish says it once."""
    r = Replay(Options())
    for s in range(1, 41):
        assert r.observe(Record("train", "s", s, loss=0.693 + (s * 7 % 5) / 1000)) == ()
    preview = r.finish(40, commit=False)
    assert [(f.kind, f.step) for f in preview] == [("no_progress", 40)]
    assert r.finish(40, commit=False) == preview
    assert r.finish(40) == preview
    assert r.finish(40) == []
    lossless = Replay(Options())
    lossless.observe(Record("other", "s", 5))
    assert [f.kind for f in lossless.finish(5, commit=False)] == ["no_signal"]
    assert [f.kind for f in lossless.finish(5)] == ["no_signal"]
