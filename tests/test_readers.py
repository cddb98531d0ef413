"""The reader interface, key names, CSV and text logs, detection, and the options of every command."""

from __future__ import annotations

import json
import math
import os

import pytest

from runwatch.cli import main
from runwatch.errors import UsageError
from runwatch.judging.watchdog import check
from runwatch.reading.readers import ReadOptions, detect
from runwatch.reading.readers.csvlog import CsvReader
from runwatch.reading.readers.keys import KeyMap, StepGrouper
from runwatch.reading.readers.textlog import TextReader
from runwatch.reading.records import iter_records, parse_maps, resolve_target
from runwatch.views.status import status

# --- key names ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, expected",
    [
        ({"train/loss": 1.5}, {"loss": 1.5}),
        ({"train_loss": 1.5}, {"loss": 1.5}),
        ({"train_loss_step": 1.5, "train_loss_epoch": 2.0}, {"loss": 1.5}),
        ({"loss": 1.0, "train/loss": 2.0}, {"loss": 1.0}),  # the canonical key itself wins
        ({"eval/loss": 0.5}, {"eval_loss": 0.5}),
        ({"val_loss": 0.5}, {"eval_loss": 0.5}),
        ({"val/loss": 0.5}, {"eval_loss": 0.5}),
        ({"eval_loss": 0.4, "val_loss": 0.5}, {"eval_loss": 0.4}),
        ({"learning_rate": 0.1}, {"lr": 0.1}),
        ({"train/learning_rate": 0.1}, {"lr": 0.1}),
        ({"lr-AdamW": 0.1}, {"lr": 0.1}),
        ({"lr-SGD/pg1": 0.1}, {"lr": 0.1}),
        ({"train/grad_norm": 3.0}, {"grad_norm": 3.0}),
        ({"eval/auroc": 0.9}, {"eval_auroc": 0.9}),
        ({"val_auroc": 0.9}, {"eval_auroc": 0.9}),
        ({"val/acc/top1": 0.9}, {"eval_acc_top1": 0.9}),
        ({"train_samples_per_second": 40.0}, {"sps": 40.0}),
        ({"samples_per_second": 40.0}, {"sps": 40.0}),
        ({"train/samples_per_sec": 40.0}, {"sps": 40.0}),
        ({"global_step": 7}, {"step": 7}),
        ({"epoch": 1}, {}),
    ],
)
def test_default_names(raw, expected):
    out = KeyMap().canonical(raw)
    assert {k: v for k, v in out.items() if k not in raw or k in expected} == {
        **expected,
        **{k: raw[k] for k in expected if k in raw},
    }


@pytest.mark.parametrize(
    "maps, raw, expected",
    [
        ({"loss": "train/total"}, {"train/loss": 1.0, "train/total": 3.0}, 3.0),  # mapped: only from SOURCE
        ({"loss": "train/total"}, {"train/loss": 1.0}, None),
        ({"eval_auroc": "my_auc"}, {"val_auroc": 0.5, "my_auc": 0.9}, 0.9),
    ],
)
def test_map_overrides_the_names(maps, raw, expected):
    out = KeyMap(maps).canonical(raw)
    canon = next(iter(maps))
    assert out.get(canon) == expected


def test_grouper_groups_a_step_and_splits_train_from_eval():
    g = StepGrouper(KeyMap())
    out = []
    for step, key, value in [(1, "train/loss", 2.0), (1, "val/auroc", 0.8), (1, "lr", 0.1), (2, "train/loss", 1.0)]:
        out += g.add(step, 100.0 + step, key, value, f"w{step}")
    assert [r for _w, r in out] == [
        {"step": 1, "t": 101.0, "train/loss": 2.0, "lr": 0.1, "loss": 2.0},
        {"step": 1, "t": 101.0, "val/auroc": 0.8, "eval_auroc": 0.8},
    ]
    assert [r["step"] for _w, r in g.flush()] == [2]


def test_grouper_a_repeated_key_at_one_step_keeps_its_last_value():
    """A logger that writes per batch under the epoch number: one record a step, the last value."""
    g = StepGrouper(KeyMap())
    out = g.add(5, 1.0, "loss", 1.0, "a") + g.add(5, 2.0, "loss", 2.0, "b") + g.flush()
    assert [(w, r["loss"], r["t"]) for w, r in out] == [("a", 2.0, 2.0)]


def test_grouper_never_takes_a_tag_for_the_step_or_the_time():
    g = StepGrouper(KeyMap())
    out = g.add(3899, 9.0, "step", 0.0, "a") + g.add(3899, 9.0, "train/loss", 1.0, "a") + g.flush()
    assert [(r["step"], r["t"]) for _w, r in out] == [(3899, 9.0)]


def test_grouper_releases_a_step_when_the_source_is_idle():
    g = StepGrouper(KeyMap())
    g.add(1, None, "loss", 1.0, "")
    assert [r["step"] for _w, r in g.idle()] == [1]
    assert not g.pending() and g.idle() == []
    # values of the released step that come later: a record of their own without the keys applied,
    # except a non-finite value, which is never dropped
    assert g.add(1, None, "loss", 1.5, "") == []
    g.add(1, None, "val/auroc", 0.8, "")
    assert [r for _w, r in g.flush()] == [{"step": 1, "val/auroc": 0.8, "eval_auroc": 0.8}]
    g.add(1, None, "loss", float("nan"), "")
    assert math.isnan(g.flush()[0][1]["loss"])
    # another step ends that: its values are its own
    g.add(2, None, "loss", 0.5, "")
    assert [r["loss"] for _w, r in g.flush()] == [0.5]


def test_grouper_state_round_trips():
    g = StepGrouper(KeyMap())
    g.add(1, 5.0, "loss", 1.0, "")
    g.add(2, 6.0, "loss", math.nan, "x")
    state = json.loads(json.dumps(g.state_dict(), allow_nan=False))
    h = StepGrouper(KeyMap())
    h.load_state_dict(state)
    assert h.state_dict() == g.state_dict()
    assert math.isnan(h.flush()[0][1]["loss"])


# --- CSV ---------------------------------------------------------------------------------------------

LIGHTNING_CSV = (
    "epoch,lr-AdamW,step,train_loss,val_auroc,val_loss\n"
    "0,0.001,9,0.69,,\n"
    "0,0.001,19,0.61,,\n"
    "0,,19,,0.8,0.55\n"
    "0,0.001,29,nan,,\n"
)


def test_csv_rows_are_records_with_empty_cells_absent(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text(LIGHTNING_CSV)
    recs = list(iter_records(str(path)))
    assert [(r.kind, r.step, r.where) for r in recs] == [
        ("train", 9, "metrics.csv:2"),
        ("train", 19, "metrics.csv:3"),
        ("eval", 19, "metrics.csv:4"),
        ("train", 29, "metrics.csv:5"),
    ]
    assert recs[0].loss == 0.69 and recs[0].lr == 0.001
    assert recs[2].eval_loss == 0.55 and recs[2].metrics == {"auroc": 0.8}
    assert math.isnan(recs[3].loss)
    assert [(f.kind, f.step) for f in check(str(path)).findings] == [("nonfinite_loss", 29)]


def test_csv_rewritten_with_a_new_column_is_read_on_without_repeats(tmp_path):
    """Lightning's CSVLogger rewrites the whole file when a column appears."""
    path = tmp_path / "metrics.csv"
    path.write_text("step,train_loss\n1,0.9\n2,0.8\n")
    r = CsvReader(str(path), KeyMap())
    assert [x["step"] for _w, x in r.poll().items] == [1, 2]
    path.write_text("step,train_loss,val_loss\n1,0.9,\n2,0.8,\n2,,0.7\n3,0.6,\n")
    assert [(x["step"], x.get("loss"), x.get("eval_loss")) for _w, x in r.poll().items] == [
        (2, None, 0.7),
        (3, 0.6, None),
    ]


def test_csv_that_is_binary_is_invalid_log_with_its_line(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_bytes(b"step,loss\n1,0.5\n\x89PNG\r\n\x1a\n\x00\x00\xff\xfe\n")
    result = check(str(path))
    assert [(f.kind, f.step, f.message) for f in result.findings] == [
        ("invalid_log", 1, "metrics.csv:3: not text (invalid UTF-8 at byte 0)")
    ]
    path.write_bytes(b"step,loss\n1,0.5\n2,\x00\n")
    assert [f.message for f in check(str(path)).findings] == ["metrics.csv:3: loss must be a number, got '\\x00'"]


def test_csv_row_with_more_cells_than_the_header(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("step,loss\n1,0.5,7\n")
    assert [f.message for f in check(str(path)).findings] == ["m.csv:2: 3 cells, the header has 2"]


def test_csv_state_round_trips(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text(LIGHTNING_CSV)
    r = CsvReader(str(path), KeyMap())
    r.poll()
    state = json.loads(json.dumps(r.state_dict()))
    r2 = CsvReader(str(path), KeyMap())
    r2.load_state_dict(state)
    assert r2.state_dict() == r.state_dict()
    with open(path, "a") as f:
        f.write("0,0.001,39,0.5,,\n")
    assert [x["step"] for _w, x in r2.poll().items] == [39]


# --- text logs ---------------------------------------------------------------------------------------

NANOGPT = """step 0: train loss 10.9876, val loss 10.9912
iter 0: loss 10.9863, time 2113.80ms, mfu -100.00%
iter 10: loss 9.8765, time 50.00ms, mfu 31.21%
saving checkpoint to out
iter 20: loss nan, time 100.00ms, mfu 31.10%
"""

MEGATRON = (
    " [2026-12-01 10:00:00] iteration      100/    1000 | consumed samples:        25600 | elapsed time per iteration (ms): "
    "500.0 | learning rate: 1.000000E-04 | global batch size:   256 | lm loss: 2.345678E+00 | loss scale: 1.0 | "
    "grad norm: 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |\n"
    "-------------------------------------------------------------------------------------------\n"
    " validation loss at iteration 100 on validation set | lm loss value: 2.400000E+00 | lm loss PPL: 1.102318E+01 | \n"
)


def test_nanogpt_preset(tmp_path):
    path = tmp_path / "train.log"
    path.write_text(NANOGPT)
    t = resolve_target(str(path), ReadOptions(format="nanogpt"))
    assert t.format == "text"
    recs = list(iter_records(t))
    assert [(r.kind, r.step, r.where) for r in recs] == [
        ("eval", 0, "train.log:1"),
        ("train", 0, "train.log:2"),
        ("train", 10, "train.log:3"),
        ("checkpoint", 10, "train.log:4"),  # `saving checkpoint to out`: at the last step seen
        ("train", 20, "train.log:5"),
    ]
    assert recs[3].raw is not None and recs[3].raw["path"] == "out"
    assert recs[0].eval_loss == 10.9912
    assert recs[2].loss == 9.8765 and recs[2].throughput == pytest.approx(20.0)  # iterations a second
    assert math.isnan(recs[4].loss)


def _nanogpt_iterations(ms_per_iter) -> str:
    return "".join(
        f"iter {i}: loss {3.0 - i / 1e5:.4f}, time {ms:.2f}ms, mfu 1.00%\n" for i, ms in enumerate(ms_per_iter)
    )


@pytest.mark.parametrize(
    "ms, expected",
    [
        # three one-iteration lines at 14-22 ms among lines at 10 ms: a few ms inside a 30 s span
        ([10.0] * 6000 + [22.0, 14.0, 18.0] + [10.0] * 6000, "OK clean step=12002"),
        # a sustained slowdown to 20 ms: spans of 30 s at half the baseline
        (
            [10.0] * 6000 + [20.0] * 6000,
            "ANOMALY throughput_drop step=10603: throughput 50 < 75 ((1 - 0.25) x baseline 100) "
            "for 3 consecutive spans of >= 30 s",
        ),
    ],
    ids=["a few slow iterations", "a sustained slowdown"],
)
def test_a_per_iteration_text_log_is_judged_over_spans(tmp_path, capsys, ms, expected):
    path = tmp_path / "train.log"
    path.write_text(_nanogpt_iterations(ms))
    assert main(["check", str(path), "--format", "nanogpt", "--severity", "no_progress=off"]) in (0, 7)
    assert capsys.readouterr().out.splitlines()[-1] == expected


def test_megatron_preset(tmp_path):
    path = tmp_path / "megatron.log"
    path.write_text(MEGATRON)
    recs = list(iter_records(resolve_target(str(path), ReadOptions(format="megatron"))))
    assert [(r.kind, r.step) for r in recs] == [("train", 100), ("eval", 100)]
    tr = recs[0]
    assert (tr.loss, tr.lr, tr.grad_mean, tr.throughput) == (2.345678, 1e-4, 1.234, pytest.approx(512.0))
    assert recs[1].eval_loss == 2.4


def test_a_custom_pattern(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("epoch 1 batch 7 step=70 loss=0.25 acc=0.9\nnoise\r step=80 loss=0.5 acc=0.8\rstep=90 loss=0.2\n")
    t = resolve_target(str(path), ReadOptions(pattern=(r"step=(?P<step>\d+) loss=(?P<loss>\S+)",)))
    assert [(r.step, r.loss) for r in iter_records(t)] == [(70, 0.25), (80, 0.5)]


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--pattern", r"loss=\S+"],
            r"read.pattern must have a named group (?P<NAME>...), got 'loss=\\S+'",
        ),
        (
            ["--pattern", "("],
            "read.pattern: '(' is not a regular expression: missing ), unterminated subpattern at position 0",
        ),
        (
            ["--format", "text"],
            "read.format text needs --pattern REGEX (named groups are keys, (?P<step>...) the step)",
        ),
        (["--format", "csv", "--pattern", "(?P<step>x)"], "read.pattern applies to text logs, not to --format csv"),
        (["--format", "csv", "--run", "abc"], "read.run applies to MLflow stores, got 'abc' with --format csv"),
    ],
)
@pytest.mark.parametrize("command", ["check", "watch", "status", "plot"])
def test_bad_read_options_are_usage_errors(tmp_path, capsys, command, argv, message):
    path = tmp_path / "train.log"
    path.write_text(NANOGPT)
    assert main([command, str(path), *argv]) == 2
    assert capsys.readouterr().err.strip() == message


def test_text_state_round_trips(tmp_path):
    path = tmp_path / "train.log"
    path.write_text(NANOGPT)
    r = TextReader(str(path), KeyMap(), ReadOptions(format="nanogpt").patterns())
    r.poll()
    r2 = TextReader(str(path), KeyMap(), ReadOptions(format="nanogpt").patterns())
    r2.load_state_dict(json.loads(json.dumps(r.state_dict())))
    with open(path, "a") as f:
        f.write("iter 30: loss 1.5, time 10.00ms, mfu 1%\n")
    assert [(x["step"], x["loss"]) for _w, x in r2.poll().items] == [(30, 1.5)]


# --- detection ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, read, expected",
    [
        (lambda d: (d / "events.out.tfevents.1.h").write_bytes(b""), None, "tensorboard"),
        (lambda d: (d / "metrics.csv").write_text("step,loss\n"), None, "csv"),
        (lambda d: (d / "mlflow.db").write_bytes(b"SQLite format 3\x00"), None, "mlflow"),
        (lambda d: (d / "store.sqlite").write_bytes(b"SQLite format 3\x00"), None, "mlflow"),
        (lambda d: (d / "train.jsonl").write_text(""), None, "jsonl"),
        (lambda d: (d / "train.log").write_text(""), None, "jsonl"),
        (lambda d: (d / "train.log").write_text(""), ReadOptions(format="nanogpt"), "text"),
        (lambda d: (d / "train.log").write_text(""), ReadOptions(pattern=("(?P<step>x)",)), "text"),
        (lambda d: (d / "metrics.csv").write_text(""), ReadOptions(format="jsonl"), "jsonl"),
    ],
)
def test_detection_of_files(tmp_path, make, read, expected):
    make(tmp_path)
    (name,) = os.listdir(tmp_path)
    t = resolve_target(str(tmp_path / name), read)
    assert (t.format, t.run_dir) == (expected, str(tmp_path))


def test_detection_of_directories(tmp_path):
    (tmp_path / "tb" / "version_0").mkdir(parents=True)
    (tmp_path / "tb" / "version_0" / "events.out.tfevents.1.h").write_bytes(b"")
    assert resolve_target(str(tmp_path / "tb")).format == "tensorboard"
    (tmp_path / "ml").mkdir()
    (tmp_path / "ml" / "mlflow.db").write_bytes(b"")
    assert resolve_target(str(tmp_path / "ml")).log_path == str(tmp_path / "ml" / "mlflow.db")
    run = tmp_path / "mlruns" / "0" / "abc"
    (run / "metrics").mkdir(parents=True)
    (run / "meta.yaml").write_text("run_id: abc\n")
    assert resolve_target(str(run)).format == "mlflow"
    assert resolve_target(str(tmp_path / "nothing-yet")).format == "jsonl"  # a run directory to come
    hf = tmp_path / "hf"
    (hf / "runs" / "x").mkdir(parents=True)
    (hf / "runs" / "events.out.tfevents.1.h").write_bytes(b"")
    (hf / "trainer_state.json").write_text('{"log_history": []}')
    assert resolve_target(str(hf)).format == "trainer_state"  # as before: the Trainer's own record
    assert detect(str(hf), ReadOptions(format="tensorboard"))[0] == "tensorboard"


# --- the commands ------------------------------------------------------------------------------------


def test_status_takes_map_and_format(tmp_path, capsys):
    log = tmp_path / "train.jsonl"
    log.write_text("".join(json.dumps({"iter": i, "train/loss": 1.0 / i}) + "\n" for i in range(1, 6)))
    assert main(["status", str(log), "--map", "step=iter", "--map", "loss=train/loss", "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert (st["step"], st["loss"]) == (5, 0.2)
    path = tmp_path / "train.log"
    path.write_text(NANOGPT)
    assert main(["status", str(path), "--format", "nanogpt", "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["step"] == 20 and st["loss"] == "nan" and st["last_eval"]["loss"] == 10.9912


def test_status_of_a_csv_log(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text(LIGHTNING_CSV)
    st = status(str(path), gpus=False, maps=parse_maps(None))
    assert (st["step"], st["lr"], st["last_eval"]["metrics"]) == (29, 0.001, {"auroc": 0.8})


def test_check_of_a_missing_log_is_a_usage_error(tmp_path, capsys):
    assert main(["check", str(tmp_path / "nope.csv")]) == 2
    assert "no such run directory or log" in capsys.readouterr().err


def test_check_with_map_on_a_csv(tmp_path, capsys):
    path = tmp_path / "metrics.csv"
    path.write_text("it,objective\n1,0.5\n2,nan\n")
    assert main(["check", str(path), "--map", "step=it", "--map", "loss=objective"]) == 7
    assert capsys.readouterr().out.splitlines()[-1] == "ANOMALY nonfinite_loss step=2: train loss is NaN"


def test_read_options_refuse_an_unknown_format():
    with pytest.raises(
        UsageError,
        match="read.format must be one of jsonl, tensorboard, mlflow, csv, text, nanogpt, megatron, paddlenlp, hf, got 'wandb'",
    ):
        ReadOptions(format="wandb")
