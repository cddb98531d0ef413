"""The Lightning callback against a real `Trainer.fit()` of a tiny classifier (CPU, generated data)."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys

import pytest

pytest.importorskip("lightning", reason="the [lightning] extra (lightning) is not installed")

import lightning as L  # noqa: E402
import torch  # noqa: E402
from lightning.pytorch.callbacks import Callback, ModelCheckpoint  # noqa: E402

import runwatch  # noqa: E402
from runwatch.errors import ConfigError, NonFiniteLossError  # noqa: E402
from runwatch.integrations.lightning import RunwatchCallback  # noqa: E402
from runwatch.logger.auroc import auroc  # noqa: E402

pytestmark = [
    # Lightning 2.6's own pytree helper warns under torch 2.13; it is not ours to fix.
    pytest.mark.filterwarnings("ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated"),
]

VOCAB, SEQ, BATCH = 16, 16, 32


def dataset(n: int, seed: int, inverted: bool = False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, VOCAB, (n, SEQ), generator=g)
    y = ((x == 1).sum(1) > (x == 2).sum(1)).float()
    return torch.utils.data.TensorDataset(x, 1 - y if inverted else y)


class Classifier(L.LightningModule):
    """Is token 1 more frequent than token 2? Optionally a NaN loss from global step `nan_from` on."""

    def __init__(self, nan_from: int | None = None) -> None:
        super().__init__()
        self.nan_from = nan_from
        self.embed = torch.nn.Embedding(VOCAB, 32)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU(), torch.nn.Linear(32, 1))
        self.outputs: list = []

    def forward(self, x):
        return self.mlp(self.embed(x).mean(1)).squeeze(-1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.binary_cross_entropy_with_logits(self(x), y)
        if self.nan_from is not None and self.global_step >= self.nan_from:
            loss = loss * float("nan")
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", torch.nn.functional.binary_cross_entropy_with_logits(logits, y))
        self.outputs.append((logits, y))

    def on_validation_epoch_end(self):
        logits = torch.cat([o[0] for o in self.outputs])
        y = torch.cat([o[1] for o in self.outputs])
        self.outputs.clear()
        area = auroc(logits.tolist(), y.tolist())
        if area is not None:
            self.log("val_auroc", area)
        self.log("val_accuracy", ((logits > 0).float() == y).float().mean())

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=3e-3)


def fit(root, steps, callbacks, model=None, ckpt_path=None, inverted=False, **overrides):
    torch.manual_seed(0)
    kwargs = dict(
        max_steps=steps,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        val_check_interval=50,
        check_val_every_n_epoch=None,
        default_root_dir=str(root),
        num_sanity_val_steps=2,
    )
    kwargs.update(overrides)
    trainer = L.Trainer(callbacks=callbacks, **kwargs)
    train = torch.utils.data.DataLoader(
        dataset(8000, 0), batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(0)
    )
    val = torch.utils.data.DataLoader(dataset(512, 1, inverted), batch_size=256)
    trainer.fit(model or Classifier(), train, val, ckpt_path=ckpt_path)
    return trainer


def saver(root):
    return ModelCheckpoint(dirpath=str(root / "ckpt"), every_n_train_steps=50, save_top_k=-1)


def records(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def run200(tmp_path_factory):
    root = tmp_path_factory.mktemp("lightning")
    fit(root, 200, [RunwatchCallback(), saver(root)])
    return root


def test_run_passes_the_summary(run200):
    summary = runwatch.summarize(str(run200 / "runwatch"), expect_step=200)
    assert summary["completed"] and summary["updates"] == 200 and summary["train_windows"] == 20
    assert summary["recipe"]["batch_size"] == BATCH and summary["tokens"] == 200 * BATCH
    assert summary["optimizer_algorithms"] == ["adamw"]
    assert 0 < summary["gradient_norm_max"] < 10


def test_val_events_skip_the_sanity_check_and_carry_auroc(run200):
    vals = [r for r in records(run200 / "runwatch") if r["event"] == "val"]
    assert [v["step"] for v in vals] == [50, 100, 150, 200]  # none at step 0 from the sanity check
    assert set(vals[0]["metrics"]) == {"auroc", "accuracy"}
    assert vals[-1]["metrics"]["auroc"] > 0.95


def test_checkpoints_are_logged_with_the_state_inside(run200):
    ckpts = [r for r in records(run200 / "runwatch") if r["event"] == "checkpoint"]
    assert [c["step"] for c in ckpts] == [50, 100, 150, 200]
    for c in ckpts:
        assert c["path"] == str(run200 / "ckpt" / f"epoch=0-step={c['step']}.ckpt")
        assert c["bytes"] == os.path.getsize(c["path"]) and c["seconds"] > 0
        state = torch.load(c["path"], weights_only=True)["runwatch"]
        assert (state["step"], state["tokens"], state["skipped"]) == (c["step"], c["step"] * BATCH, 0)


@pytest.mark.filterwarnings("ignore:The dirpath has changed")  # a copy of the run: ModelCheckpoint notices
@pytest.mark.filterwarnings("ignore:You're resuming from a checkpoint that ended before the epoch ended")
def test_resume_via_ckpt_path_is_a_new_session(run200, tmp_path):
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(run200 / "runwatch", run_dir)
    fit(
        tmp_path,
        260,
        [RunwatchCallback(run_dir), saver(tmp_path)],
        ckpt_path=str(run200 / "ckpt" / "epoch=0-step=150.ckpt"),
    )
    summary = runwatch.summarize(str(run_dir), expect_step=260)
    assert summary["sessions"] == 2 and summary["start_step"] == 150 and summary["updates"] == 110
    with open(run_dir / "run.json", encoding="utf-8") as f:
        assert json.load(f)["sessions"][1]["start"] == {"step": 150, "tokens": 150 * BATCH, "skipped": 0}


@pytest.fixture(scope="module")
def nan_run(tmp_path_factory):
    """A real NaN loss from global step 73 on."""
    root = tmp_path_factory.mktemp("lightning-nan")
    model = Classifier(nan_from=73)
    with pytest.raises(NonFiniteLossError) as info:
        fit(root, 200, [RunwatchCallback(), saver(root)], model=model)
    return root, model, info.value


def test_nan_loss_raises_before_the_next_checkpoint(nan_run):
    """Lightning logs the NaN and trains on; the callback ends the session and fit raises."""
    root, model, error = nan_run
    assert str(error) == (
        "runwatch: non-finite loss nan at the attempted update after step 73; session ended (reason nonfinite_loss)"
    )
    assert sorted(os.listdir(root / "ckpt")) == ["epoch=0-step=50.ckpt"]
    recs = records(root / "runwatch")
    assert recs[-1]["event"] == "session_end" and recs[-1]["reason"] == "nonfinite_loss" and recs[-1]["step"] == 73
    assert model.trainer.global_step == 80  # stopped when the window closed
    assert math.isnan(model.trainer.callback_metrics["train_loss"])  # what Lightning itself shows
    assert runwatch.summarize(str(root / "runwatch"))["end_reason"] == "nonfinite_loss"


def test_nan_is_caught_when_a_checkpoint_is_about_to_be_written(tmp_path):
    """The window is still open at the save: closing it for the state finds the NaN; no file is written."""
    model = Classifier(nan_from=46)
    with pytest.raises(NonFiniteLossError):
        fit(tmp_path, 200, [RunwatchCallback(window=1000), saver(tmp_path)], model=model)
    assert not os.path.exists(tmp_path / "ckpt") or os.listdir(tmp_path / "ckpt") == []
    assert records(tmp_path / "runwatch")[-1]["step"] == 46


def test_an_exception_ends_the_session_as_an_error(tmp_path):
    class Boom(Callback):
        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step == 30:
                raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fit(tmp_path, 200, [RunwatchCallback(), Boom()])
    end = records(tmp_path / "runwatch")[-1]
    assert (end["event"], end["reason"], end["error"], end["step"]) == (
        "session_end",
        "error",
        "RuntimeError: boom",
        30,
    )


def test_a_real_sigterm_ends_the_session_as_interrupted(tmp_path):
    """Lightning turns SIGTERM into its SIGTERMException at the next batch: a preemption, `transient`."""

    class Preempt(Callback):
        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step == 30:
                os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(SystemExit):
        fit(tmp_path, 200, [RunwatchCallback(), Preempt()])
    end = records(tmp_path / "runwatch")[-1]
    assert (end["event"], end["reason"], end["error"]) == ("session_end", "interrupted", "SIGTERM")
    assert 30 <= end["step"] <= 31


@pytest.fixture(scope="module")
def inverted_run(tmp_path_factory):
    """Validation labels inverted against the training labels (a label-mapping bug)."""
    root = tmp_path_factory.mktemp("lightning-inverted")
    fit(root, 100, [RunwatchCallback()], inverted=True)
    return root


def test_inverted_labels_give_auroc_below_half(inverted_run):
    vals = [r for r in records(inverted_run / "runwatch") if r["event"] == "val"]
    assert vals[-1]["step"] == 100 and vals[-1]["metrics"]["auroc"] < 0.3


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
    assert proc.returncode == 7 and proc.stdout.splitlines()[-1].startswith("ANOMALY nonfinite_loss step=73: ")


def test_check_flags_the_inverted_run(inverted_run):
    proc = check(inverted_run / "runwatch", "--metric-after-step", "0")
    assert proc.returncode == 7 and proc.stdout.splitlines()[-1].startswith("ANOMALY inverted_metric step=")


def test_gradient_accumulation_counts_optimizer_updates(tmp_path):
    fit(
        tmp_path,
        20,
        [RunwatchCallback(window=5)],
        accumulate_grad_batches=4,
        val_check_interval=None,
        check_val_every_n_epoch=1,
        limit_val_batches=0,
    )
    summary = runwatch.summarize(str(tmp_path / "runwatch"), expect_step=20)
    assert summary["recipe"]["gradient_accumulation_steps"] == 4 and summary["tokens"] == 20 * 4 * BATCH
    train = [r for r in records(tmp_path / "runwatch") if r["event"] == "train"]
    assert [r["updates"] for r in train] == [5, 5, 5, 5] and 0.3 < train[0]["loss"] < 1.0  # mean, not sum


def test_fp16_skipped_updates_are_not_divergence(tmp_path):
    """A real GradScaler (fp16 autocast on the CPU): two overflowing updates are skipped, the run goes on."""
    from lightning.pytorch.plugins import MixedPrecision

    model = Classifier()
    overflow_at = {5, 17}
    model.mlp[2].weight.register_hook(lambda g: g + math.inf if model.trainer.global_step in overflow_at else g)
    fit(
        tmp_path,
        40,
        [RunwatchCallback()],
        model=model,
        limit_val_batches=0,
        enable_checkpointing=False,
        plugins=[MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))],
    )
    summary = runwatch.summarize(str(tmp_path / "runwatch"))
    assert summary["completed"] and summary["skipped_updates"] == 2 and summary["nonfinite_grad_norms"] == 2
    assert summary["updates"] == 38 and summary["tokens"] == 40 * BATCH  # skipped attempts consumed tokens too
    train = [r for r in records(tmp_path / "runwatch") if r["event"] == "train"]
    assert [r["skipped"] for r in train] == [1, 1, 0, 0]


class Recorder(Callback):
    """Records the hooks the callback uses, in the order the real Trainer calls them."""

    HOOKS = (
        "on_train_start",
        "on_before_optimizer_step",
        "on_train_batch_end",
        "on_validation_end",
        "on_save_checkpoint",
        "on_fit_end",
    )

    def __init__(self) -> None:
        self.events: list[str] = []
        for name in self.HOOKS:
            setattr(self, name, self._record(name))

    def _record(self, name):
        def hook(trainer, *args):
            self.events.append(f"{name}{'(sanity)' if trainer.sanity_checking else ''}")

        return hook


def test_hook_order_seen_from_the_trainer(tmp_path):
    rec = Recorder()
    fit(
        tmp_path,
        4,
        [rec, ModelCheckpoint(dirpath=str(tmp_path / "ckpt"), every_n_train_steps=2, save_top_k=-1)],
        val_check_interval=2,
        accumulate_grad_batches=2,
    )
    accumulate = ["on_train_batch_end"]
    update = ["on_before_optimizer_step", "on_train_batch_end"]
    step = accumulate + update
    # val_check_interval counts batches: with 2 accumulated batches a validation follows each update
    expected = (
        ["on_validation_end(sanity)", "on_train_start"]
        + step
        + ["on_validation_end"]
        + step
        + ["on_save_checkpoint", "on_validation_end"]
        + step
        + ["on_validation_end"]
        + step
        + ["on_save_checkpoint", "on_validation_end", "on_fit_end"]
    )
    assert rec.events == expected


# --- phases: the heartbeat shows a validation and a save while they run ------------------------------


def _heartbeat(run_dir) -> dict:
    with open(os.path.join(run_dir, "heartbeats", "rank-0.json"), encoding="utf-8") as f:
        return json.load(f)


class SlowValidation(Classifier):
    """Its first validation batch sleeps; it notes the heartbeat then, and while a checkpoint is dumped."""

    def __init__(self, run_dir: str) -> None:
        super().__init__()
        self.run_dir = run_dir
        self.seen: list = []

    def validation_step(self, batch, batch_idx):
        if batch_idx == 0 and not self.trainer.sanity_checking:
            import time

            entered = time.time()
            time.sleep(0.3)
            self.seen.append(("eval", entered, _heartbeat(self.run_dir)))
        return super().validation_step(batch, batch_idx)

    def on_save_checkpoint(self, checkpoint):
        import time

        self.seen.append(("save", time.time(), _heartbeat(self.run_dir)))


def test_the_heartbeat_shows_eval_during_a_slow_validation_and_checkpoint_during_a_save(tmp_path):
    run_dir = str(tmp_path / "rw")
    model = SlowValidation(run_dir)
    fit(
        tmp_path,
        40,
        [
            RunwatchCallback(run_dir=run_dir),
            ModelCheckpoint(dirpath=str(tmp_path / "ckpt"), every_n_train_steps=40, save_top_k=-1),
        ],
        model=model,
        val_check_interval=20,
    )
    assert [kind for kind, _, _ in model.seen] == ["eval", "save", "eval"], model.seen  # step 40 saves, then validates
    for kind, at, beat in model.seen:
        assert beat["phase"] == ("eval" if kind == "eval" else "checkpoint"), (kind, beat)
        assert beat["phase_since"] <= at and beat["state"] == "running"
    end = _heartbeat(run_dir)
    assert (end["phase"], end["phase_since"], end["state"], end["step"]) == (None, None, "ended", 40)
    assert [r["event"] for r in records(run_dir)].count("val") == 2
    assert runwatch.summarize(run_dir, expect_step=40)["completed"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"batch_size": 0}, "RunwatchCallback.batch_size must be an int >= 1 or None, got 0"),
        ({"val_prefix": ""}, "RunwatchCallback.val_prefix must be a non-empty string, got ''"),
        ({"window": 0}, "RunwatchCallback.window must be an int >= 1 or None, got 0"),
    ],
)
def test_options_are_checked(kwargs, message):
    with pytest.raises(ConfigError) as info:
        RunwatchCallback(**kwargs)
    assert str(info.value) == message
