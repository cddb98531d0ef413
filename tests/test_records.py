"""One parser for schema v1, minimal telemetry, trainer_state.json and --map."""

from __future__ import annotations

import json
import math

import pytest

from runwatch import RunLogger
from runwatch.errors import UsageError
from runwatch.reading.records import RecordParser, load_sessions, parse_maps, resolve_target

RECIPE = {"batch_size": 2, "seq_len": 4, "gradient_accumulation_steps": 1, "qk_clip_threshold": None}


def _minimal(line: str, maps=None):
    return RecordParser("minimal", maps=parse_maps(maps)).parse_line(7, line.encode())


MINIMAL = [
    (
        '{"step": 10, "t": 12.3, "loss": 0.52, "lr": 1e-4, "grad_norm": 1.1, "sps": 40.2}',
        dict(kind="train", step=10, time=12.3, loss=0.52, lr=1e-4, grad_mean=1.1, throughput=40.2, nonfinite_grads=0),
    ),
    (
        '{"step": 250, "eval_auroc": 0.91, "eval_acc": 0.88}',
        dict(kind="eval", step=250, metrics={"auroc": 0.91, "acc": 0.88}),
    ),
    ('{"step": 30, "FATAL": "non-finite loss"}', dict(kind="fatal", step=30, error="non-finite loss")),
    ('{"step": 5, "loss": 1.0, "learning_rate": 0.5}', dict(kind="train", lr=0.5)),
    # NaN in every train record of the session so far: a norm that was not logged (absent)
    ('{"step": 5, "loss": 1.0, "grad_norm": NaN}', dict(kind="train", grad_mean=None, nonfinite_grads=0)),
    # ... except beside a loss of exactly 0: how the HF Trainer logs a NaN loss
    ('{"step": 5, "loss": 0.0, "grad_norm": NaN}', dict(kind="train", grad_mean=None, nonfinite_grads=1)),
    ('{"step": 5, "loss": 1.0, "grad_norm": null}', dict(kind="train", grad_mean=None, nonfinite_grads=0)),
    ('{"step": 5, "eval_loss": 0.3}', dict(kind="eval", eval_loss=0.3)),
    ('{"step": 5.0, "loss": 1}', dict(kind="train", step=5)),
    ('{"step": 5, "note": "x"}', dict(kind="other")),
    ('{"step": 5, "loss": 1.0, "eval_auroc": 0.5}', dict(kind="train", metrics={"auroc": 0.5})),
    ('{"step": 5, "loss": "abc"}', dict(kind="invalid", error="metrics.jsonl:7: loss must be a number, got 'abc'")),
    (
        '{"step": 5, "eval_loss": true}',
        dict(kind="invalid", error="metrics.jsonl:7: eval_loss must be a number, got true"),
    ),
    ('{"step": "x", "loss": 1}', dict(kind="invalid", error="metrics.jsonl:7: step must be a number >= 0, got 'x'")),
    # the first record of a log without steps: stepped by its record number (or its epoch)
    ('{"loss": 1}', dict(kind="train", step=1)),
    ('{"loss": 1, "epoch": 3}', dict(kind="train", step=3)),
    ("[1, 2]", dict(kind="invalid", error="metrics.jsonl:7: a record must be a JSON object, got array")),
    (
        '{"step": 1,',
        dict(
            kind="invalid",
            error="metrics.jsonl:7: malformed JSON: Expecting property name enclosed in double quotes at column 12",
        ),
    ),
]


@pytest.mark.parametrize("line, expected", MINIMAL)
def test_minimal_telemetry(line, expected):
    rec = _minimal(line)
    for key, value in expected.items():
        assert getattr(rec, key) == value, key


def test_nan_grad_norm_counts_once_a_finite_one_was_seen_in_the_session():
    parser = RecordParser("minimal")
    lines = [
        '{"step": 1, "loss": 1.0, "grad_norm": NaN}',
        '{"step": 2, "loss": 1.0, "grad_norm": 0.5}',
        '{"step": 3, "loss": 1.0, "grad_norm": NaN}',
        '{"step": 1, "loss": 1.0, "grad_norm": NaN}',
    ]
    recs = [parser.parse_line(i + 1, line.encode()) for i, line in enumerate(lines)]
    # the last line is a relaunch (step 1 again): a new session, absent again until a finite norm
    assert [(r.session, r.nonfinite_grads) for r in recs] == [
        ("session-1", 0),
        ("session-1", 0),
        ("session-1", 1),
        ("session-2", 0),
    ]


@pytest.mark.parametrize(
    "line", ['{"step": 1, "loss": NaN}', '{"step": 1, "loss": null}', '{"step": 1, "loss": Infinity}']
)
def test_minimal_nonfinite_loss_is_kept(line):
    rec = _minimal(line)
    assert rec.kind == "train" and not math.isfinite(rec.loss)


def test_blank_lines_are_ignored():
    assert _minimal("   ") is None


MAPS = [
    (
        ["step=iter", "loss=train/loss", "eval_loss=val/loss"],
        '{"iter": 3, "train/loss": 0.5, "val/loss": 0.7, "loss": 99}',
        dict(kind="train", step=3, loss=0.5, eval_loss=0.7),
    ),
    (
        ["loss=step", "step=loss"],
        '{"step": 1.5, "loss": 4}',
        dict(kind="train", step=4, loss=1.5),
    ),  # maps read the original
    (["eval_auroc=val/auc"], '{"step": 9, "val/auc": 0.8}', dict(kind="eval", metrics={"auroc": 0.8})),
    (["loss=l"], '{"step": 9, "loss": 1.0}', dict(kind="other")),  # a mapped key is read only from its source
]


@pytest.mark.parametrize("maps, line, expected", MAPS)
def test_maps(maps, line, expected):
    rec = _minimal(line, maps)
    for key, value in expected.items():
        assert getattr(rec, key) == value, key


@pytest.mark.parametrize(
    "items, message",
    [
        (["loss"], "watch.map must be CANONICAL=SOURCE, got 'loss'"),
        (["los=x"], "watch.map: 'los' is not a minimal telemetry key"),
        (["loss="], "watch.map: empty SOURCE in 'loss='"),
        (["loss=a", "loss=b"], "watch.map: 'loss' mapped twice"),
    ],
)
def test_bad_maps(items, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_maps(items)


def test_relaunch_starts_a_new_session(tmp_path):
    p = tmp_path / "log.jsonl"
    p.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"step": 10, "loss": 1.0},
                {"step": 20, "loss": 0.9},
                {"step": 20, "eval_auroc": 0.8},
                {"step": 10, "loss": 1.0},
                {"step": 30, "loss": 0.8},
            ]
        )
        + "\n"
    )
    sessions = load_sessions(str(p))
    assert [(s.key, [r.step for r in s.records]) for s in sessions] == [
        ("session-1", [10, 20, 20]),
        ("session-2", [10, 30]),
    ]
    assert sessions[1].start_step == 10


def test_schema_v1_sessions_and_validation(tmp_path):
    with RunLogger(tmp_path, recipe=RECIPE, hardware={}, window=2) as log:
        for i in range(4):
            log.step(1.0 - i * 0.1, 0.1, 1.0)
        log.val(0.8, {"auroc": 0.9})
        saved = log.state_dict()
    with RunLogger(tmp_path, recipe=RECIPE, hardware={}, window=2, resume_from=saved) as log:
        log.step(0.5, 0.1, 2.0)
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"bad": 1}\n')
    sessions = load_sessions(str(tmp_path))
    assert [s.start_step for s in sessions] == [0, 4]
    kinds = [[r.kind for r in s.records] for s in sessions]
    assert kinds == [["train", "train", "eval", "end"], ["train", "end", "invalid"]]
    first = sessions[0].records[0]
    assert (first.step, first.throughput > 0, first.tokens) == (2, True, 16)
    assert sessions[1].records[-1].error == "metrics.jsonl:7: session_id must be a string, got null"


def test_schema_v1_nan_is_invalid(tmp_path):
    with RunLogger(tmp_path, recipe=RECIPE, hardware={}, window=1) as log:
        log.step(1.0, 0.1, 1.0)
        sid = log.session_id
        rid = log.run_id
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write(
            json.dumps(
                {
                    "run_id": rid,
                    "session_id": sid,
                    "event": "val",
                    "step": 1,
                    "time": 1.0,
                    "session": {"elapsed_seconds": 1, "tokens": 8, "tokens_per_second": None, "profiling_seconds": 0},
                    "loss": math.nan,
                }
            )
            + "\n"
        )
    recs = load_sessions(str(tmp_path))[0].records
    assert recs[-1].kind == "invalid"
    assert "NaN is not a valid JSON number" in recs[-1].error


def test_trainer_state(tmp_path):
    state = {
        "max_steps": 100,
        "log_history": [
            {"loss": 2.0, "grad_norm": 1.5, "learning_rate": 1e-4, "epoch": 0.1, "step": 10},
            {"eval_loss": 1.9, "eval_auroc": 0.7, "eval_runtime": 1.0, "epoch": 0.1, "step": 10},
            {"loss": 0.0, "grad_norm": math.nan, "learning_rate": 1e-4, "epoch": 0.2, "step": 20},
            {"train_runtime": 9.0, "train_loss": 1.0, "step": 20},
        ],
    }
    (tmp_path / "trainer_state.json").write_text(json.dumps(state))
    t = resolve_target(str(tmp_path))
    assert t.format == "trainer_state"
    (s,) = load_sessions(str(tmp_path))
    assert [r.kind for r in s.records] == ["train", "eval", "train", "other"]
    assert s.records[2].nonfinite_grads == 1 and s.records[1].metrics["auroc"] == 0.7
    assert s.records[0].where == "trainer_state.json:log_history[0]"


def test_trainer_state_in_latest_checkpoint(tmp_path):
    for n in (5, 40, 10):
        d = tmp_path / f"checkpoint-{n}"
        d.mkdir()
        (d / "trainer_state.json").write_text(json.dumps({"log_history": [{"step": n, "loss": 1.0}]}))
    t = resolve_target(str(tmp_path))
    assert t.log_path.endswith("checkpoint-40/trainer_state.json")


def test_map_rejected_for_schema_v1():
    with pytest.raises(UsageError, match="not to a schema-v1 run"):
        RecordParser("v1", maps={"loss": "x"})


def _parse(lines, **kw):
    parser = RecordParser("minimal", name="m.jsonl", **kw)
    return parser, [parser.parse_object(obj, f"m.jsonl:{i + 1}") for i, obj in enumerate(lines)]


def test_a_log_without_steps_steps_by_epoch_and_says_so_once():
    parser, recs = _parse(
        [{"epoch": 1, "loss": 3.0}, {"epoch": 1, "val_x": 1}, {"epoch": 2, "loss": 2.0}, {"loss": 1.0}]
    )
    assert [(r.kind, r.step, r.session) for r in recs] == [
        ("train", 1, "session-1"),
        ("other", 1, "session-1"),
        ("train", 2, "session-1"),
        ("train", 2, "session-1"),  # a record without its epoch takes the last one; one epoch, one session
    ]
    assert parser.notes == ["m.jsonl has no step column or field: stepping by its epoch column"]


def test_a_log_without_steps_or_epochs_steps_by_record_number():
    parser, recs = _parse([{"loss": 3.0}, {"acc": 0.5}, {"loss": 2.0}])
    assert [(r.kind, r.step) for r in recs] == [("train", 1), ("other", 2), ("train", 3)]
    assert parser.notes == ["m.jsonl has no step column or field: stepping by record number"]


def test_once_a_log_has_steps_a_record_without_one_is_invalid():
    _parser, recs = _parse([{"step": 1, "loss": 3.0}, {"loss": 2.0}])
    assert (recs[1].kind, recs[1].error) == ("invalid", "m.jsonl:2: missing step")


@pytest.mark.parametrize(
    "objs, key, losses",
    [
        ([{"step": 1, "Logloss": 0.6}, {"step": 2, "Logloss": 0.5}], "Logloss", [0.6, 0.5]),  # CatBoost
        ([{"step": 1, "train/box_loss": 2.1, "val/box_loss": 2.0}], "train/box_loss", [2.1]),  # eval keys never count
        ([{"step": 1, "train/box_loss": 2.1, "train/cls_loss": 5.6}], None, [None]),  # several: none is the loss
        ([{"step": 1, "loss": 1.0, "aux_loss": 0.1}, {"step": 2, "aux_loss": 0.1}], None, [1.0, None]),  # `loss` exists
        ([{"step": 1, "lr": 0.1}, {"step": 2, "total_loss": 0.9}], "total_loss", [None, 0.9]),  # decided when one shows
    ],
)
def test_one_loss_key_is_read_as_the_loss(objs, key, losses):
    parser, recs = _parse(objs)
    assert (parser.loss_key or None) == key
    assert [r.loss for r in recs] == losses
    if key:
        assert parser.notes == [f"m.jsonl has no loss key: reading the train loss from {key!r}"]


def test_a_mapped_loss_is_never_guessed():
    parser, recs = _parse([{"step": 1, "Logloss": 0.6, "other": 2.0}], maps={"loss": "other"})
    assert (parser.loss_key, recs[0].loss) == ("", 2.0)


def test_reading_state_round_trips():
    parser, _ = _parse([{"epoch": 1, "Logloss": 0.6}])
    state = json.loads(json.dumps(parser.state_dict()))
    other = RecordParser("minimal")
    other.load_state_dict(state)
    assert other.state_dict() == parser.state_dict()
    assert other.parse_object({"epoch": 2, "Logloss": 0.4}, "m.jsonl:2").loss == 0.4
