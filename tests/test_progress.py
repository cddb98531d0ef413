"""`no_progress` and `no_signal` (docs/WATCHDOG.md) as tables: (series, options, expected findings)."""

from __future__ import annotations

import json
import math
import random

import pytest

from runwatch.judging.rules import Replay, Rules, replay
from runwatch.judging.watchdog import Options
from runwatch.reading.records import Record


def tr(step, loss=1.0, session="s1", **kw):
    return Record("train", session, step, loss=loss, **kw)


def ev(step, loss, session="s1"):
    return Record("eval", session, step, eval_loss=loss)


def noisy(n, level, start=1, spread=0.05, seed=0, every=1):
    """`n` train records whose loss is `level(i)` times a noise of +-spread (a seeded, repeatable one)."""
    rng = random.Random(seed)
    return [tr(start + i * every, level(i) * (1 + rng.uniform(-spread, spread))) for i in range(n)]


def found(records, log_max_steps=None, **opts):
    """(kind, step, severity) of every finding of a replay (the end-of-session judgment included);
    `log_max_steps`: what the log says (run.json's recipe), `--max-steps` is an option."""
    r = Replay(Options(**opts), max_steps=lambda session: log_max_steps)
    out = []
    for rec in records:
        out.extend(r.observe(rec))
    out.extend(r.finish(records[-1].step if records else 0))
    return [(f.kind, f.step, f.severity) for f in out]


FLAT = lambda i: 1.0  # noqa: E731
FALLING = lambda i: 2.0 * math.exp(-i / 300)  # noqa: E731


PROGRESS_CASES = [
    # (name, records, max_steps, options, expected)
    ("flat, length unknown: judged after 500 records", noisy(700, FLAT), None, {}, [("no_progress", 500, "stop")]),
    ("falling", noisy(700, FALLING), None, {}, []),
    (
        "flat, max_steps known: judged from a quarter of it",
        noisy(1000, FLAT),
        1000,
        {},
        [("no_progress", 250, "stop")],
    ),
    (
        "max_steps known, before a quarter of it: only the end judges",
        noisy(200, FLAT),
        1000,
        {},
        [("no_progress", 200, "stop")],
    ),
    (
        "--progress-after-records",
        noisy(300, FLAT),
        None,
        {"progress_after_records": 100},
        [("no_progress", 100, "stop")],
    ),
    ("--max-steps", noisy(300, FLAT), None, {"max_steps": 400}, [("no_progress", 100, "stop")]),
    (
        # a fine-tune's quick first descent, then a plateau it keeps: progress was made
        "progress made in the first few records",
        [tr(1, 2.3), tr(2, 1.8), tr(3, 1.45)] + noisy(300, lambda i: 1.3, start=4, spread=0.03),
        None,
        {"progress_after_records": 100},
        [],
    ),
    (
        # progress made early and given back: found once the loss is back where it started
        "progress given back",
        [tr(1, 2.8), tr(2, 2.1), tr(3, 1.4)]
        + noisy(17, lambda i: 1.0, start=4, spread=0.02)
        + noisy(200, lambda i: 1.0 + i / 100, start=21, spread=0.02),
        None,
        {"progress_after_records": 100},
        [("no_progress", 164, "stop")],
    ),
    (
        "a drop of 4 % is not progress",
        noisy(600, lambda i: 1.0 - 0.04 * (i > 300), spread=0.0),
        None,
        {},
        [("no_progress", 500, "stop")],
    ),
    ("a drop of 6 % is", noisy(600, lambda i: 1.0 - 0.06 * (i > 300), spread=0.0), None, {}, []),
    (
        "--progress-min-drop",
        noisy(600, lambda i: 1.0 - 0.06 * (i > 300), spread=0.0),
        None,
        {"progress_min_drop": 0.1},
        [("no_progress", 500, "stop")],
    ),
    # the end of a session judges its whole length: its halves when it is short (>= 8 records each)
    ("a short flat session, judged at its end", noisy(28, FLAT, every=50), None, {}, [("no_progress", 1351, "stop")]),
    ("a short falling session", noisy(28, lambda i: 2.0 - i / 20, every=50), None, {}, []),
    ("too short to judge", noisy(15, FLAT), None, {}, []),
    (
        "each session on its own",
        noisy(30, lambda i: 2.0 - i / 20) + [tr(s, 1.0, session="s2") for s in range(1, 31)],
        None,
        {},
        [("no_progress", 30, "stop")],
    ),
    ("severity warn", noisy(600, FLAT), None, {"severity": ("no_progress=warn",)}, [("no_progress", 500, "warn")]),
    ("severity off", noisy(600, FLAT), None, {"severity": ("no_progress=off",)}, []),
]


@pytest.mark.parametrize(
    "records, max_steps, opts, expected", [c[1:] for c in PROGRESS_CASES], ids=[c[0] for c in PROGRESS_CASES]
)
def test_no_progress_table(records, max_steps, opts, expected):
    assert found(records, max_steps, **opts) == expected


def test_no_progress_message_gives_both_medians_and_the_steps():
    recs = [tr(s, 2.0) for s in range(1, 41)]
    f = replay(recs, Options(progress_after_records=40))
    assert [x.line() for x in f] == [
        "ANOMALY no_progress step=40: median train loss 2 over steps 21-40 is not below (1 - 0.05) x the median 2 "
        "over steps 1-2: the loss has not fallen"
    ]
    assert f[0].onset == 21 and f[0].cls == "fatal"


def test_no_progress_is_judged_again_only_after_it_cleared():
    recs = noisy(600, FLAT) + noisy(200, lambda i: 0.5, start=601) + noisy(600, FLAT, start=801)
    assert [k for k, _s, _v in found(recs)] == ["no_progress", "no_progress"]


NO_SIGNAL = [
    Record("eval", "s1", s, eval_loss=1.0, where=f"metrics.csv:{s}", raw={"epoch": s, "val/box_loss": 1.0})
    for s in range(1, 61)
]


def test_no_signal_in_a_watch_after_50_records():
    rules = Rules(Options(), live=True)
    out = [f for rec in NO_SIGNAL for f in rules.observe(rec)]
    assert [(f.kind, f.step, f.severity) for f in out] == [("no_signal", 50, "warn")]
    assert out[0].message == "no train loss in metrics.csv; keys seen: epoch, val/box_loss; use --map loss=KEY"


def test_no_signal_in_check_judges_the_whole_log():
    assert found(NO_SIGNAL) == [("no_signal", 60, "warn")]
    assert found(NO_SIGNAL[:10]) == [("no_signal", 10, "warn")]  # fewer than 50 records: still the whole log
    assert found(NO_SIGNAL + [tr(61, 1.0)]) == []  # one train loss anywhere: a signal


def test_no_signal_names_at_most_12_keys():
    raw = {f"k{i}": 1 for i in range(20)}
    rules = Rules(Options(), live=True)
    out = [f for s in range(1, 51) for f in rules.observe(Record("other", "s1", s, where="x.csv:1", raw=raw))]
    assert out[0].message == (
        "no train loss in x.csv; keys seen: k0, k1, k2, k3, k4, k5, k6, k7, k8, k9, k10, k11, ...; use --map loss=KEY"
    )


@pytest.mark.parametrize("cut", [0, 10, 39, 40, 300, 599])
def test_state_save_load_equal(cut):
    """no_progress and no_signal state (and the session facts) through JSON: the same future."""
    opts = Options(progress_after_records=100)
    recs = noisy(600, FLAT)
    a = Rules(opts, 0, max_steps=None, live=True)
    for r in recs[:cut]:
        a.observe(r)
    saved = json.loads(json.dumps(a.state_dict(), allow_nan=False))
    b = Rules(opts, live=True)
    b.load_state_dict(saved)
    assert b.state_dict() == a.state_dict()
    assert [a.observe(r) for r in recs[cut:]] == [b.observe(r) for r in recs[cut:]]
    assert a.finish("s1") == b.finish("s1")
