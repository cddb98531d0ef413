"""The Hugging Face Trainer callback against a real `Trainer.train()` of a tiny random BERT (CPU, offline)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

pytest.importorskip("transformers", reason="the [hf] extra (transformers) is not installed")
pytest.importorskip("accelerate", reason="the [hf] extra (accelerate) is not installed")

import torch  # noqa: E402
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments  # noqa: E402

import runwatch  # noqa: E402
from runwatch.errors import ConfigError, InvalidRunError, NonFiniteLossError  # noqa: E402
from runwatch.integrations.hf import RunwatchCallback, auroc_metrics  # noqa: E402
from runwatch.integrations.session import STATE_FILE, CallbackOptions  # noqa: E402

VOCAB, SEQ, BATCH = 16, 16, 16
CONFIG = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=SEQ,
    num_labels=2,
)


class Sequences(torch.utils.data.Dataset):
    """Generated token sequences; the label says whether token 1 is more frequent than token 2."""

    def __init__(self, n: int, seed: int, inverted: bool = False) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randint(0, VOCAB, (n, SEQ), generator=g)
        y = ((self.x == 1).sum(1) > (self.x == 2).sum(1)).long()
        self.y = 1 - y if inverted else y

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.x[i], "labels": self.y[i]}


class NaNFrom(BertForSequenceClassification):
    """A model whose training loss turns NaN from its `nan_from`-th training forward on."""

    nan_from = 10**9

    def forward(self, input_ids=None, labels=None, **kwargs):
        out = super().forward(input_ids=input_ids, labels=labels, **kwargs)
        if self.training:
            self.calls = getattr(self, "calls", 0) + 1
            if self.calls >= self.nan_from:
                out.loss = out.loss * float("nan")
        return out


def make_trainer(out, steps, callbacks, *, model_cls=BertForSequenceClassification, inverted=False, **overrides):
    torch.manual_seed(0)
    kwargs = dict(
        output_dir=str(out),
        max_steps=steps,
        per_device_train_batch_size=BATCH,
        logging_steps=10,
        eval_strategy="steps",
        eval_steps=50,
        save_steps=50,
        learning_rate=3e-3,
        use_cpu=True,
        disable_tqdm=True,
        report_to="none",
        seed=0,
        dataloader_num_workers=0,
    )
    kwargs.update(overrides)
    return Trainer(
        model=model_cls(BertConfig(**CONFIG)),
        args=TrainingArguments(**kwargs),
        train_dataset=Sequences(4000, 0),
        eval_dataset=Sequences(256, 1, inverted),
        callbacks=callbacks,
        compute_metrics=auroc_metrics,
    )


def records(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def run200(tmp_path_factory):
    """One real 200-step training with evaluation and saves every 50 steps."""
    out = tmp_path_factory.mktemp("hf")
    trainer = make_trainer(out, 200, [RunwatchCallback(seq_len=SEQ)])
    trainer.train()
    return out, trainer


def test_run_passes_the_summary(run200):
    out, _ = run200
    summary = runwatch.summarize(str(out / "runwatch"), expect_step=200)
    assert summary["completed"] and summary["end_reason"] == "normal"
    assert summary["updates"] == 200 and summary["train_windows"] == 20
    assert summary["tokens"] == 200 * BATCH * SEQ
    assert summary["recipe"]["batch_size"] == BATCH and summary["recipe"]["seq_len"] == SEQ
    assert summary["optimizer_algorithms"] == ["adamw"]


def test_windows_match_the_trainer_logs(run200):
    """Each window ends on a Trainer log: same step, same mean loss, its grad norm and learning rate."""
    out, trainer = run200
    logged = {h["step"]: h for h in trainer.state.log_history if "loss" in h and "eval_loss" not in h}
    train = [r for r in records(out / "runwatch") if r["event"] == "train"]
    assert [r["step"] for r in train] == sorted(logged)
    for rec in train:
        h = logged[rec["step"]]
        assert rec["loss"] == pytest.approx(h["loss"], rel=1e-5)
        assert rec["grad_norm"]["max"] == pytest.approx(h["grad_norm"])
        assert rec["lr"] == pytest.approx(h["learning_rate"])
        assert rec["updates"] == 10 and rec["train_seconds"] > 0


def test_val_events_carry_auroc_once_per_evaluation(run200):
    out, trainer = run200
    vals = [r for r in records(out / "runwatch") if r["event"] == "val"]
    evals = [h for h in trainer.state.log_history if "eval_loss" in h]
    assert [v["step"] for v in vals] == [h["step"] for h in evals] == [50, 100, 150, 200]
    for v, h in zip(vals, evals):
        assert v["loss"] == pytest.approx(h["eval_loss"])
        assert set(v["metrics"]) == {"auroc", "accuracy"}
        assert v["metrics"]["auroc"] == pytest.approx(h["eval_auroc"])
    assert vals[-1]["metrics"]["auroc"] > 0.9  # the tiny model learns the task


def test_checkpoints_hold_the_runwatch_state(run200):
    out, _ = run200
    ckpts = [r for r in records(out / "runwatch") if r["event"] == "checkpoint"]
    assert [c["step"] for c in ckpts] == [50, 100, 150, 200]
    for c in ckpts:
        assert c["path"] == str(out / f"checkpoint-{c['step']}")
        assert c["bytes"] > 10_000 and c["seconds"] >= 0
        with open(os.path.join(c["path"], STATE_FILE), encoding="utf-8") as f:
            state = json.load(f)
        assert (state["step"], state["tokens"], state["skipped"]) == (c["step"], c["step"] * BATCH * SEQ, 0)
        assert state["seq_len"] == SEQ


def test_resume_from_a_checkpoint_is_a_new_session(run200, tmp_path):
    out, _ = run200
    run_dir = str(tmp_path / "run")
    import shutil

    shutil.copytree(out / "runwatch", run_dir)
    data = tmp_path / "train.bin"
    data.write_bytes(b"tokens")
    trainer = make_trainer(out, 250, [RunwatchCallback(run_dir, data=[data])], eval_steps=25, save_steps=1000)
    trainer.train(resume_from_checkpoint=str(out / "checkpoint-150"))
    summary = runwatch.summarize(run_dir, expect_step=250)
    assert summary["sessions"] == 2 and summary["start_step"] == 150
    assert summary["updates"] == 100 and summary["completed"]
    with open(os.path.join(run_dir, "run.json"), encoding="utf-8") as f:
        sessions = json.load(f)["sessions"]
    assert sessions[1]["start"] == {"step": 150, "tokens": 150 * BATCH * SEQ, "skipped": 0}
    assert sessions[1]["recipe"]["seq_len"] == SEQ  # from the checkpoint's state
    # each session's provenance: the data named to the callback, torch (imported by the Trainer)
    assert sessions[0]["provenance"]["data"] == []
    fingerprint = sessions[1]["provenance"]["data"]
    assert [(f["path"], f["size"]) for f in fingerprint] == [(str(data), 6)]
    assert sessions[1]["provenance"]["torch"] == torch.__version__
    assert summary["last_val"]["step"] == 250


def test_resume_without_a_state_warns_and_estimates(run200, tmp_path):
    out, _ = run200
    import shutil

    ckpt = tmp_path / "checkpoint-100"
    shutil.copytree(out / "checkpoint-100", ckpt)
    os.remove(ckpt / STATE_FILE)
    trainer = make_trainer(tmp_path, 110, [RunwatchCallback(seq_len=SEQ)], eval_strategy="no", save_strategy="no")
    with pytest.warns(
        RuntimeWarning,
        match=r"no runwatch state in .*checkpoint-100; the new session starts at step 100 with 25600 tokens",
    ):
        trainer.train(resume_from_checkpoint=str(ckpt))
    assert runwatch.summarize(str(tmp_path / "runwatch"), expect_step=110)["start_step"] == 100


def test_a_stale_state_is_an_error(run200, tmp_path):
    out, _ = run200
    import shutil

    ckpt = tmp_path / "checkpoint-100"
    shutil.copytree(out / "checkpoint-100", ckpt)
    (ckpt / STATE_FILE).write_text('{"step": 90, "tokens": 0, "skipped": 0}\n')
    trainer = make_trainer(tmp_path, 110, [RunwatchCallback(seq_len=SEQ)], eval_strategy="no", save_strategy="no")
    with pytest.raises(
        InvalidRunError,
        match=r"runwatch_state.json: runwatch state is at step 90, but the training resumes at step 100",
    ):
        trainer.train(resume_from_checkpoint=str(ckpt))


@pytest.fixture(scope="module")
def nan_run(tmp_path_factory):
    """A real NaN from the 63rd update on."""
    out = tmp_path_factory.mktemp("hf-nan")
    NaNFrom.nan_from = 63
    trainer = make_trainer(out, 200, [RunwatchCallback(seq_len=SEQ)], model_cls=NaNFrom)
    with pytest.raises(NonFiniteLossError) as info:
        trainer.train()
    return out, trainer, info.value


def test_nan_loss_stops_before_the_next_save(nan_run):
    """The Trainer's filter logs a finite loss; the callback ends the session and stops the run."""
    out, trainer, error = nan_run
    assert str(error) == (
        "runwatch: non-finite loss nan at the attempted update after step 62; session ended (reason nonfinite_loss)"
    )
    assert trainer.state.global_step == 70  # stopped at the first log after the NaN
    assert os.path.isdir(out / "checkpoint-50") and not os.path.exists(out / "checkpoint-100")
    hidden = [h for h in trainer.state.log_history if h.get("step") == 70 and "loss" in h]
    assert math.isfinite(hidden[0]["loss"])  # what logging_nan_inf_filter shows
    assert not math.isfinite(hidden[0]["grad_norm"])
    recs = records(out / "runwatch")
    assert recs[-1]["event"] == "session_end" and recs[-1]["reason"] == "nonfinite_loss" and recs[-1]["step"] == 62
    assert [r["step"] for r in recs if r["event"] == "train"][-2:] == [60, 62]
    summary = runwatch.summarize(str(out / "runwatch"))
    assert summary["end_reason"] == "nonfinite_loss" and not summary["completed"]


def test_nan_without_a_model_loss_is_read_from_the_filter_signature(tmp_path):
    """With `compute_loss_func` the model returns no loss; the filter's `loss 0.0 + NaN grad norm` is read."""
    NaNFrom.nan_from = 10**9

    def loss_func(outputs, labels, num_items_in_batch=None):
        logits = outputs["logits"]
        loss = torch.nn.functional.cross_entropy(logits, labels)
        return loss * float("nan") if loss_func.calls >= 31 else loss

    def counted(outputs, labels, num_items_in_batch=None):
        loss_func.calls += 1
        return loss_func(outputs, labels, num_items_in_batch)

    loss_func.calls = 0
    trainer = make_trainer(tmp_path, 200, [RunwatchCallback(seq_len=SEQ)], eval_strategy="no", save_steps=50)
    trainer.compute_loss_func = counted
    with pytest.raises(NonFiniteLossError):
        trainer.train()
    recs = records(tmp_path / "runwatch")
    assert recs[-1]["reason"] == "nonfinite_loss"
    assert not os.path.exists(tmp_path / "checkpoint-50")


@pytest.fixture(scope="module")
def inverted_run(tmp_path_factory):
    """Evaluation labels inverted against the training labels (a label-mapping bug)."""
    out = tmp_path_factory.mktemp("hf-inverted")
    make_trainer(out, 120, [RunwatchCallback(seq_len=SEQ)], inverted=True, eval_steps=60, save_strategy="no").train()
    return out


def test_inverted_labels_give_auroc_below_half(inverted_run):
    vals = [r for r in records(inverted_run / "runwatch") if r["event"] == "val"]
    assert vals[-1]["step"] == 120 and vals[-1]["metrics"]["auroc"] < 0.3


def check(run_dir, *options):
    """`runwatch check` in a subprocess, where the watchdog's command exists."""
    proc = subprocess.run(
        [sys.executable, "-m", "runwatch", "check", str(run_dir), *options], capture_output=True, text=True, timeout=120
    )
    if proc.returncode == 2 and "invalid choice: 'check'" in proc.stderr:
        pytest.skip("runwatch check is not on this branch yet (the watchdog's part)")
    return proc


def test_check_flags_the_nan_run(nan_run):
    proc = check(nan_run[0] / "runwatch")
    assert proc.returncode == 7 and proc.stdout.splitlines()[-1].startswith("ANOMALY nonfinite_loss step=62: ")


def test_check_flags_the_inverted_run(inverted_run):
    proc = check(inverted_run / "runwatch", "--metric-after-step", "0")
    assert proc.returncode == 7 and proc.stdout.splitlines()[-1].startswith("ANOMALY inverted_metric step=")


@pytest.mark.parametrize("accumulation", [1, 2])
def test_losses_and_tokens_follow_the_trainer_with_accumulation(tmp_path, accumulation):
    """The per-update losses the hook reads average like the Trainer's own; seq_len comes from its token count."""
    trainer = make_trainer(
        tmp_path,
        20,
        [RunwatchCallback()],
        gradient_accumulation_steps=accumulation,
        logging_steps=5,
        eval_strategy="no",
        save_strategy="no",
        include_num_input_tokens_seen=True,
    )
    trainer.train()
    summary = runwatch.summarize(str(tmp_path / "runwatch"), expect_step=20)
    assert summary["recipe"]["seq_len"] == SEQ and summary["recipe"]["tokens"] == "num_input_tokens_seen"
    assert summary["tokens"] == trainer.state.num_input_tokens_seen == 20 * accumulation * BATCH * SEQ
    logged = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert [r["loss"] for r in records(tmp_path / "runwatch") if r["event"] == "train"] == pytest.approx(
        logged, rel=1e-5
    )


class Recorder(TrainerCallback):
    """Records every hook call it gets, like HF's test_event_flow."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def __getattribute__(self, name):
        if name.startswith("on_"):
            events = object.__getattribute__(self, "events")
            return lambda *args, **kwargs: events.append(name)
        return object.__getattribute__(self, name)


def test_hook_order_seen_from_the_trainer(tmp_path):
    """Pins the order the callback relies on: step end, then log, evaluate, save; train end last."""
    rec = Recorder()
    trainer = make_trainer(
        tmp_path, 6, [RwSpy(), rec], logging_steps=2, eval_steps=3, save_steps=3, per_device_eval_batch_size=128
    )
    trainer.train()
    step = ["on_step_begin", "on_pre_optimizer_step", "on_optimizer_step", "on_step_end"]
    evaluate = ["on_prediction_step", "on_prediction_step", "on_log", "on_evaluate"]
    expected = (
        ["on_init_end", "on_train_begin", "on_epoch_begin"]
        + step
        + step
        + ["on_log"]
        + step
        + ["on_log"]
        + evaluate
        + ["on_save"]  # step 3: forced log, then eval and save
        + step
        + ["on_log"]
        + step
        + step
        + ["on_log"]
        + evaluate
        + ["on_save"]
        + ["on_epoch_end", "on_log", "on_train_end"]
    )
    assert rec.events == expected
    summary = runwatch.summarize(str(tmp_path / "runwatch"), expect_step=6)
    assert summary["train_windows"] == 4  # windows end at steps 2, 3, 4, 6


class RwSpy(RunwatchCallback):
    def __init__(self) -> None:
        super().__init__(seq_len=SEQ)


def test_other_ranks_write_nothing(tmp_path):
    """Only the main process writes: a callback on a non-main rank stays inert."""
    cb = RunwatchCallback(tmp_path / "run")

    class State:
        is_world_process_zero = False
        global_step = 0

    cb.on_train_begin(None, State(), None)
    cb.on_step_end(None, State(), None)
    cb.on_train_end(None, State(), None)
    assert not os.path.exists(tmp_path / "run") and cb.run_dir is None


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"window": 0}, "RunwatchCallback.window must be an int >= 1 or None, got 0"),
        ({"seq_len": 2.5}, "RunwatchCallback.seq_len must be an int >= 1 or None, got 2.5"),
        ({"fsync": 1}, "RunwatchCallback.fsync must be a bool, got 1"),
    ],
)
def test_options_are_checked(kwargs, message):
    with pytest.raises(ValueError, match="^" + message.replace(".", r"\.") + "$"):
        CallbackOptions(**kwargs)


@pytest.mark.parametrize(
    "predictions, labels, expected",
    [
        ([[0.0, 1.0], [1.0, 0.0], [0.0, 2.0], [3.0, 0.0]], [1, 0, 1, 0], {"auroc": 1.0, "accuracy": 1.0}),
        ([[0.0, 1.0], [1.0, 0.0]], [0, 1], {"auroc": 0.0, "accuracy": 0.0}),
        ([0.5, 0.5, 0.5, 0.5], [0, 1, 0, 1], {"auroc": 0.5, "accuracy": 0.5}),
        ([[1.0], [-1.0], [2.0]], [1, 1, 1], {"accuracy": 2 / 3}),
        ([float("nan"), 1.0], [0, 1], {"accuracy": 1.0}),
    ],
)
def test_auroc_metrics(predictions, labels, expected):
    import numpy as np
    from transformers import EvalPrediction

    got = auroc_metrics(EvalPrediction(predictions=np.array(predictions), label_ids=np.array(labels)))
    assert got == pytest.approx(expected)


def test_auroc_metrics_rejects_multiclass_logits():
    import numpy as np

    with pytest.raises(ConfigError) as info:
        auroc_metrics((np.zeros((2, 3)), np.zeros(2)))
    assert str(info.value) == "auroc_metrics: predictions must have shape (N,), (N, 1) or (N, 2), got (2, 3)"
    with pytest.raises(ConfigError) as info:
        auroc_metrics((np.zeros(3), np.zeros(2)))
    assert str(info.value) == "auroc_metrics: label_ids must hold one label per prediction (3), got 2"


# --- phases: the heartbeat shows an evaluation and a save while they run -----------------------------


def _heartbeat(run_dir) -> dict:
    with open(os.path.join(run_dir, "heartbeats", "rank-0.json"), encoding="utf-8") as f:
        return json.load(f)


def test_the_heartbeat_shows_eval_during_a_slow_compute_metrics_and_checkpoint_during_a_save(tmp_path):
    import time

    run_dir = str(tmp_path / "rw")
    seen: list = []

    def slow_metrics(eval_pred):
        entered = time.time()
        time.sleep(0.3)  # a slow metric: nothing but the phase says the run is alive and why
        seen.append(("eval", entered, _heartbeat(run_dir)))
        return auroc_metrics(eval_pred)

    class WatchedSaves(Trainer):
        def _save_checkpoint(self, model, trial):
            seen.append(("save", time.time(), _heartbeat(run_dir)))
            super()._save_checkpoint(model, trial)

    torch.manual_seed(0)
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=20,
        per_device_train_batch_size=BATCH,
        logging_steps=5,
        eval_strategy="steps",
        eval_steps=10,
        save_steps=20,
        learning_rate=3e-3,
        use_cpu=True,
        disable_tqdm=True,
        report_to="none",
        seed=0,
        dataloader_num_workers=0,
    )
    trainer = WatchedSaves(
        model=BertForSequenceClassification(BertConfig(**CONFIG)),
        args=args,
        train_dataset=Sequences(800, 0),
        eval_dataset=Sequences(64, 1),
        callbacks=[RunwatchCallback(run_dir=run_dir, seq_len=SEQ)],
        compute_metrics=slow_metrics,
    )
    trainer.train()
    assert [kind for kind, _, _ in seen] == ["eval", "eval", "save"]
    for kind, at, beat in seen:
        assert beat["phase"] == ("eval" if kind == "eval" else "checkpoint"), (kind, beat)
        assert beat["phase_since"] <= at and beat["state"] == "running"
    assert [seen[0][2]["step"], seen[1][2]["step"]] == [10, 20]  # entered right after the window's log
    end = _heartbeat(run_dir)
    assert (end["phase"], end["phase_since"], end["state"], end["step"]) == (None, None, "ended", 20)
    assert [r["event"] for r in records(run_dir)].count("val") == 2
    assert runwatch.summarize(run_dir, expect_step=20)["completed"]


def test_a_window_older_than_max_window_seconds_asks_the_trainer_for_a_log(tmp_path, monkeypatch):
    import runwatch.integrations.hfsession as hfsession

    monkeypatch.setattr(hfsession, "MAX_WINDOW_SECONDS", 0.0)  # every window is old: slow steps, in short
    make_trainer(
        tmp_path, 6, [RunwatchCallback(seq_len=SEQ)], logging_steps=100, eval_strategy="no", save_strategy="no"
    ).train()
    train = [r for r in records(tmp_path / "runwatch") if r["event"] == "train"]
    assert [r["attempted"] for r in train] == [1] * 6
