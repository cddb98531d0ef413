"""Detection that holds on logs nobody tuned it to (docs/WATCHDOG.md): rules judged against the
run's own band, no_progress against the run's first losses, metric_stuck, a resumed session judged
as one history; and the reading of logs as people write them (padded CSV headers, CSV by content,
integer step keys over epoch, interleaved writers, text lines without a step, presets)."""

from __future__ import annotations

import json
import random

import pytest

from runwatch.judging.replay import check
from runwatch.judging.rules import Replay, replay
from runwatch.judging.watchdog import Options
from runwatch.reading.readers import ReadOptions
from runwatch.reading.records import Record, iter_records, resolve_target


def tr(step, loss=1.0, session="s1", grad=None):
    return Record("train", session, step, loss=loss, grad_mean=grad, grad_max=grad)


def ev(step, session="s1", **metrics):
    return Record("eval", session, step, metrics=metrics)


def found(records, **opts):
    opts.setdefault("severity", ("no_signal=off",))
    return [(f.kind, f.step, f.severity) for f in replay(records, Options(**opts))]


def series(losses, start=1, session="s1"):
    return [tr(start + i, x, session) for i, x in enumerate(losses)]


def heavy_tailed(n, seed=1):
    """Per-batch losses of a converged model: near 0.01, with one hard batch in ten at 5-15x."""
    rng = random.Random(seed)
    return [0.01 * (rng.uniform(5, 15) if rng.random() < 0.1 else rng.uniform(0.5, 1.5)) for _ in range(n)]


CASES = [
    # (name, records, options, expected [(kind, step, severity)])
    (
        "a loss x20 mid-run for two records stops",
        series([2.5] * 20 + [0.02 + 0.001 * (i % 3) for i in range(100)] + [0.41, 0.41] + [0.02] * 5),
        {},
        [("loss_spike", 122, "stop")],
    ),
    (
        "a spike by step 27 of 300 is found",
        series([1.0] * 25 + [20.0, 20.0] + [0.9] * 273),
        {},
        [("loss_spike", 27, "stop")],
    ),
    ("heavy-tailed noise near zero is not", series([2.5] * 20 + heavy_tailed(600)), {}, []),
    (
        "a gradient excursion that leaves the loss in its band warns",
        [tr(i, 1.0 + 0.01 * (i % 3), grad=1.0) for i in range(1, 21)] + [tr(i, 1.01, grad=30.0) for i in range(21, 24)],
        {"severity": ("no_signal=off", "no_progress=off")},
        [("grad_explosion", 23, "warn")],
    ),
    (
        "a gradient excursion with the loss out of its band stops",
        [tr(i, 1.0 + 0.01 * (i % 3), grad=1.0) for i in range(1, 21)] + [tr(i, 4.0, grad=30.0) for i in range(21, 24)],
        {"severity": ("no_signal=off", "loss_spike=off", "no_progress=off")},
        [("grad_explosion", 23, "stop")],
    ),
    (
        "learned in its first records, then at its noise floor: progress",
        series([2.0, 1.2, 0.7] + [0.5 + 0.05 * ((i * 7) % 5) for i in range(3000)]),
        {},
        [],
    ),
    (
        "a frozen model cycling through four values: no_progress",
        series([2.891, 2.884, 2.548, 2.114] * 40),
        {},
        [("no_progress", 160, "stop")],
    ),
    ("a flat run: no_progress", series([0.693] * 600), {}, [("no_progress", 500, "stop")]),
]


@pytest.mark.parametrize("records, opts, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rules_table(records, opts, expected):
    assert found(records, **opts) == expected


METRIC_CASES = [
    ("identical accuracy at every eval", [0.6428571] * 18, "accuracy", True),
    ("mAP50 below 0.05 throughout", [0.0, 0.0014, 0.006, 0.002, 0.0031], "metrics_mAP50(B)", True),
    ("a binary classifier that never improves", [0.52, 0.50, 0.51, 0.515, 0.505], "accuracy", True),
    ("an accuracy that improves (in percent)", [41.0, 55.0, 60.0, 63.0], "acc", False),
    ("a WER that falls", [0.40, 0.36, 0.34, 0.32], "wer", False),
    ("a WER that does not", [0.40, 0.40, 0.41, 0.405], "wer", True),
    ("three evals are too few", [0.5, 0.5, 0.5], "accuracy", False),
    ("an AUROC at its bound from the first eval", [0.9956, 0.998, 1.0, 0.999], "auroc", False),
    ("a WER near zero from the first eval", [0.012, 0.011, 0.012, 0.010], "wer", False),
    ("not a task metric by name", [0.5] * 6, "runtime", False),
]


@pytest.mark.parametrize("values, name, stuck", [c[1:] for c in METRIC_CASES], ids=[c[0] for c in METRIC_CASES])
def test_metric_stuck_table(values, name, stuck):
    recs = []
    for i, v in enumerate(values):
        recs += series([2.0 - 0.01 * j for j in range(10)], start=i * 10 + 1)[:10]
        recs.append(ev(i * 10 + 10, **{name: v}))
    kinds = [(k, sev) for k, _s, sev in found(recs)]
    assert (("metric_stuck", "warn") in kinds) is stuck


def test_metric_stuck_message():
    recs = []
    for i in range(5):
        recs += [tr(i * 10 + j, 2.0 - 0.03 * (i * 10 + j)) for j in range(1, 10)] + [ev(i * 10 + 10, accuracy=0.4)]
    f = [x for x in replay(recs, Options()) if x.kind == "metric_stuck"]
    assert [x.line() for x in f] == [
        "WARNING metric_stuck step=49: eval_accuracy is 0.4 at all 5 evals: the task metric never moved"
    ]


def test_a_resumed_session_inherits_the_runs_first_losses():
    # learned from 2.0 to 0.5 by step 300, crashed at 400, resumed from the checkpoint at 350 and flat
    # at 0.5 since: judged on the run's path, not as a fresh run whose loss never fell
    first = series([2.0 - 1.5 * min(i, 300) / 300 for i in range(400)], start=1, session="a")
    second = series([0.5] * 600, start=350, session="b")
    assert found(first + second) == []
    # a relaunch from scratch (step 1 again) is judged on its own
    fresh = series([0.5] * 600, start=1, session="c")
    assert found(first + fresh) == [("no_progress", 500, "stop")]


def test_watch_and_check_judge_a_resume_alike():
    first = series([2.0 - 1.5 * min(i, 300) / 300 for i in range(400)], start=1, session="a")
    second = series([0.5] * 600, start=350, session="b")
    r = Replay(Options())
    replayed = [f for rec in first + second for f in r.observe(rec)] + r.finish(second[-1].step)
    from runwatch.judging.rules import Rules

    live = Rules(Options(), live=True)
    watched = [f for rec in first for f in live.observe(rec)]
    live.reset(350)  # the watch's switch to the new session
    state = json.loads(json.dumps(live.state_dict()))  # saved and resumed in between
    live.load_state_dict(state)
    watched += [f for rec in second for f in live.observe(rec)]
    assert replayed == watched == []


# --- reading ------------------------------------------------------------------------------------------


def kinds_steps(path, read=None):
    t = resolve_target(str(path), read)
    return [(r.kind, r.session, r.step, r.loss) for r in iter_records(t)]


def test_ultralytics_padded_header(tmp_path):
    path = tmp_path / "results.csv"
    head = ["epoch", "train/box_loss", "train/cls_loss", "metrics/mAP50(B)", "val/box_loss"]
    rows = [",".join(f"{h:>20}" for h in head)]
    for e in range(1, 9):
        rows.append(",".join(f"{v:>20}" for v in (e, "nan", "nan", 0, "nan")))
    path.write_text("\n".join(rows) + "\n")
    res = check(str(path))
    assert res.first_stop is not None and res.first_stop.kind == "nonfinite_loss"
    assert [f.kind for f in res.findings if f.kind == "metric_stuck"] == ["metric_stuck"]


def test_keras_csvlogger_training_log_is_read_as_csv(tmp_path):
    path = tmp_path / "training.log"
    lines = ["epoch,accuracy,loss,val_accuracy,val_loss"]
    lines += [f"{e},{0.5 + e / 40:.4f},{1.2 - e / 25:.4f},{0.5 + e / 45:.4f},{1.25 - e / 30:.4f}" for e in range(20)]
    path.write_text("\n".join(lines) + "\n")
    res = check(str(path))
    assert [f.kind for f in res.findings] == [] and res.last_step == 19


def test_interleaved_writers_with_integer_steps_over_epoch(tmp_path):
    path = tmp_path / "trainer_log.jsonl"
    rows = []
    for step in range(10, 410, 10):  # two processes: each step twice, then the second a step behind
        copy = step if step <= 200 else step - 10
        rows.append({"current_steps": step, "loss": 2.0 - step / 400, "epoch": step / 937})
        rows.append({"current_steps": copy, "loss": 2.0 - copy / 400 + 0.001, "epoch": copy / 937})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    recs = kinds_steps(path)
    assert {s for _k, s, _st, _l in recs} == {"session-1"}
    assert recs[0][2] == 10 and max(r[2] for r in recs) == 400


def test_a_relaunch_is_still_a_new_session(tmp_path):
    path = tmp_path / "log.jsonl"
    rows = [{"step": s, "loss": 1.0} for s in (1, 2, 3, 4, 5)] + [{"step": 3, "loss": 0.7}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [r[1] for r in kinds_steps(path)] == ["session-1"] * 5 + ["session-2"]


PADDLE = """[2022-09-19 15:25:07,836] [    INFO] - loss: 0.62592459, learning_rate: 3e-06, global_step: 10, interval_runtime: 25.5, epoch: 0.0189
[2022-09-19 15:25:32,223] [    INFO] - loss: 0.62428403, learning_rate: 3e-06, global_step: 20, interval_runtime: 24.3, epoch: 0.0377
[2022-09-19 15:40:43,176] [    INFO] - eval_loss: 0.5982705950737, eval_accuracy: 0.12871287128712872, eval_runtime: 473.5, epoch: 0.377
[2022-09-19 15:41:07,836] [    INFO] - loss: 0.60, learning_rate: 3e-06, global_step: 30, interval_runtime: 25.5, epoch: 0.0566
"""


def test_paddlenlp_preset_and_eval_lines_without_a_step(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text(PADDLE)
    want = [("train", 10, 0.62592459, None), ("train", 20, 0.62428403, None), ("eval", 20, None, 0.5982705950737)]
    want.append(("train", 30, 0.60, None))
    for read in (
        ReadOptions(format="paddlenlp"),
        ReadOptions(
            pattern=(
                r"- loss: (?P<loss>[^,]+), learning_rate: (?P<lr>[^,]+), global_step: (?P<step>\d+)",
                r"- eval_loss: (?P<eval_loss>[^,]+), eval_accuracy: (?P<eval_accuracy>[^,]+)",
            )
        ),
    ):
        t = resolve_target(str(path), read)
        recs = list(iter_records(t))
        assert [(r.kind, r.step, r.loss, r.eval_loss) for r in recs] == want
        assert recs[2].metrics == {"accuracy": 0.12871287128712872}


def test_a_pattern_needs_a_named_group():
    from runwatch.errors import ConfigError

    with pytest.raises(ConfigError, match=r"read.pattern must have a named group \(\?P<NAME>...\), got 'loss'"):
        ReadOptions(pattern=("loss",))


HF_PRINTED = (
    "  5%|5         | 10/200 [00:01<00:20]\r{'loss': 0.6931, 'grad_norm': 1.25, 'learning_rate': 5e-05, 'epoch': 0.05}\n"
    "{'loss': nan, 'grad_norm': nan, 'learning_rate': 4e-05, 'epoch': 0.1}\n"
    "{'eval_loss': 0.52, 'eval_accuracy': 0.81, 'eval_runtime': 1.2, 'epoch': 0.1}\n"
    "{'train_runtime': 20.1, 'train_samples_per_second': 9.9, 'epoch': 0.1}\n"
)


def test_hf_preset_reads_the_trainers_printed_dicts(tmp_path):
    path = tmp_path / "stdout.log"
    path.write_text(HF_PRINTED)
    for read in (ReadOptions(format="hf"), None):  # named, or recognised by its lines
        t = resolve_target(str(path), read)
        recs = [r for r in iter_records(t) if r.kind in ("train", "eval")]
        assert [(r.kind, r.step) for r in recs] == [("train", 0.05), ("train", 0.1), ("eval", 0.1)]
        assert recs[0].loss == 0.6931 and recs[0].lr == 5e-05 and recs[2].metrics == {"accuracy": 0.81, "runtime": 1.2}
    res = check(str(path), read=ReadOptions(format="hf"))
    assert res.first_stop is not None and res.first_stop.line() == "ANOMALY nonfinite_loss step=0.1: train loss is NaN"


def test_a_ckpt_group_names_a_checkpoint_at_the_latest_step(tmp_path):
    path = tmp_path / "train.log"
    path.write_text("it 10 loss 2.0\nit 20 loss 1.9\nsaved ckpt/step-20.pt\nit 30 loss 1.8\n")
    read = ReadOptions(pattern=(r"^it (?P<step>\d+) loss (?P<loss>\S+)", r"^saved (?P<ckpt>\S+)"))
    recs = list(iter_records(resolve_target(str(path), read)))
    assert [(r.kind, r.step) for r in recs] == [("train", 10), ("train", 20), ("checkpoint", 20), ("train", 30)]
    assert recs[2].raw is not None and recs[2].raw["path"] == "ckpt/step-20.pt"


def test_no_progress_within_its_own_noise_says_so():
    f = replay(series([4.0, 4.0, 3.0, 2.0] * 40), Options())
    assert [x.line() for x in f] == [
        "ANOMALY no_progress step=160: median train loss 3.5 over steps 141-160 is below the median 4 over steps "
        "1-3 by no more than 2 x its spread 0.5: the loss has not fallen (it moves within its own noise)"
    ]


def test_a_watch_judges_a_resumed_log_as_check_does(tmp_path):
    from runwatch.judging.watchdog import Watcher

    path = tmp_path / "log.jsonl"
    rows = [{"step": s, "loss": 2.0 - 1.5 * min(s, 300) / 300} for s in range(1, 401)]
    rows += [{"step": s, "loss": 0.5} for s in range(350, 950)]  # resumed from the checkpoint at 350
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert check(str(path)).findings == []
    w = Watcher(str(path), Options(stall=10**6, startup_grace=10**6), log=lambda m: None, poll_checks=[])
    assert w.poll_once() is None and w.last_step == 949
    # the same log from a fresh start at 1 is a new run: its flat loss never fell
    rows[400:] = [{"step": s, "loss": 0.5} for s in range(1, 601)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [(f.kind, f.step) for f in check(str(path)).findings] == [("no_progress", 500)]


def test_rules_learn_from_the_sessions_a_watch_skips():
    # a watch of a schema-v1 run judges its latest session; the records of the sessions before it
    # are learned from (findings dropped), so a resume is judged on the run's path
    from runwatch.judging.rules import Rules

    first = series([2.0 - 1.5 * min(i, 300) / 300 for i in range(400)], start=1, session="a")
    second = series([0.5] * 600, start=350, session="b")
    rules = Rules(Options(), 350, live=True)
    for rec in first:
        rules.learn(rec, 0, None)
    assert [f for rec in second for f in rules.observe(rec)] == []
    fresh = Rules(Options(), 350, live=True)  # without the history: a flat session that never fell
    assert [(f.kind, f.step) for rec in second for f in fresh.observe(rec)] == [("no_progress", 849)]
