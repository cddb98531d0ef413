"""The record rules of docs/WATCHDOG.md as tables: (records, options) -> findings."""

from __future__ import annotations

import json
import math

import pytest

from runwatch.records import Record
from runwatch.rules import RULE_ORDER, Rules, replay
from runwatch.watchdog import Options

NAN = math.nan
INF = math.inf


def tr(step, loss=1.0, grad=1.0, tp=100.0, nf=0, session="s1", **kw):
    return Record(
        "train", session, step, loss=loss, grad_mean=grad, grad_max=grad, nonfinite_grads=nf, throughput=tp, **kw
    )


def ev(step, loss=None, session="s1", **metrics):
    return Record("eval", session, step, eval_loss=loss, metrics=metrics or None)


def kinds(records, **opts):
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
    ("explosion", [tr(i, grad=100.0) for i in range(1, 4)], {}, [("grad_explosion", 3)]),
    ("explosion broken streak", [tr(1, grad=100.0), tr(2, grad=100.0), tr(3), tr(4, grad=100.0)], {}, []),
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
        {},
        [("grad_explosion", 3), ("grad_explosion", 8)],
    ),
    ("collapse", [tr(i, grad=1e-5) for i in range(1, 4)], {}, [("grad_collapse", 3)]),
    (
        "records without a norm are not looked at",
        [tr(1, grad=1e-5), tr(2, grad=None), tr(3, grad=1e-5), tr(4, grad=1e-5)],
        {},
        [("grad_collapse", 4)],
    ),
    ("spike", train_series([1.0] * 6 + [5.0, 5.0]), {}, [("loss_spike", 8)]),
    ("spike needs patience", train_series([1.0] * 6 + [5.0, 1.0, 5.0]), {}, []),
    ("spike needs 5 records before", train_series([1.0] * 4 + [5.0, 5.0]), {}, []),
    ("spike needs median > 0", train_series([0.0] * 4 + [-1.0, 5.0, 5.0]), {"collapse_patience": 99}, []),
    ("spike factor", train_series([1.0] * 6 + [2.5, 2.5]), {"spike_factor": 2.0}, [("loss_spike", 8)]),
    ("loss collapse", train_series([1.0, 0.0, 0.0, 0.0, 0.0, 0.0]), {}, [("loss_collapse", 6)]),
    ("loss collapse patience", train_series([0.0, 0.0]), {"collapse_patience": 2}, [("loss_collapse", 2)]),
    ("chance off by default", [tr(s, loss=0.7) for s in (400, 410, 420)], {}, []),
    ("chance", [tr(s, loss=0.69) for s in (400, 410, 420)], {"chance_loss": 0.693}, [("loss_at_chance", 420)]),
    (
        "chance diverging counts",
        [tr(400, loss=0.69), tr(410, loss=3.0), tr(420, loss=50.0)],
        {"chance_loss": 0.693, "grad_max": 1e9},
        [("loss_at_chance", 420)],
    ),
    ("chance before after-step", [tr(s, loss=0.69) for s in (390, 410, 420)], {"chance_loss": 0.693}, []),
    ("chance below tolerance", [tr(s, loss=0.6) for s in (400, 410, 420)], {"chance_loss": 0.693}, []),
    (
        "throughput drop",
        [tr(1, tp=10.0)] + [tr(s, tp=100.0) for s in range(20, 201, 20)] + [tr(s, tp=50.0) for s in (220, 240, 260)],
        {},
        [("throughput_drop", 260)],
    ),
    (
        "throughput first record left out of the baseline",
        [tr(1, tp=1000.0)] + [tr(s, tp=100.0) for s in (100, 200)] + [tr(s, tp=80.0) for s in (220, 240, 260)],
        {},
        [],
    ),
    (
        "throughput needs patience",
        [tr(1)] + [tr(s, tp=100.0) for s in (100, 200)] + [tr(220, tp=10.0), tr(240, tp=100.0), tr(260, tp=10.0)],
        {},
        [],
    ),
    (
        "throughput baseline steps",
        [tr(1)] + [tr(s, tp=100.0) for s in (5, 11)] + [tr(s, tp=50.0) for s in (12, 13)],
        {"throughput_baseline_steps": 10, "throughput_patience": 2},
        [("throughput_drop", 13)],
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
    findings = replay(records, Options(**opts))
    assert findings and findings[-1].kind == first
    assert findings[-1].step == records[-1].step


def test_messages_are_pinned():
    f = replay([tr(i, grad=120.5) for i in range(1, 4)], Options())
    assert f[0].line() == "ANOMALY grad_explosion step=3: gradient norm 120.5 > 50 for 3 consecutive train records"
    f = replay([ev(600, auroc=0.2)], Options())
    assert (
        f[0].line("FINDING")
        == "FINDING inverted_metric step=600: auroc 0.2 < 0.3 (1 - metric-min 0.7): labels look inverted"
    )
    f = replay([Record("end", "s", 9, reason="error", error="CUDA error")], Options())
    assert f[0].message == "session ended with reason error: CUDA error"
    f = replay(train_series([1.0] * 6 + [5.0, 5.0]), Options())
    assert f[0].message == "loss 5 > 3 x median 1 of the previous 7 train records for 2 consecutive records"


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
