"""One run, every format, the same findings; and the logs of real producers (Lightning, HF Trainer)."""

from __future__ import annotations

import csv
import glob
import json
import os
import shutil

import pytest

from runwatch.cli import main
from runwatch.judging.watchdog import Options, Watcher, check
from runwatch.reading.readers import ReadOptions
from runwatch.reading.records import iter_records, resolve_target

pytest.importorskip("torch.utils.tensorboard", reason="the [torch] extra is not installed")
pytest.importorskip("tensorboard", reason="the [tensorboard] extra is not installed")

from torch.utils.tensorboard import SummaryWriter  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "readers")
TRAJECTORY = os.path.join(DATA, "trajectory.jsonl")
TEXT_PATTERNS = (
    r"^step=(?P<step>\d+) t=(?P<t>\S+) loss=(?P<loss>\S+) lr=(?P<lr>\S+) gnorm=(?P<grad_norm>\S+) sps=(?P<sps>\S+)",
    r"^eval step=(?P<step>\d+) loss=(?P<eval_loss>\S+) auroc=(?P<eval_auroc>\S+)",
)

# What `check` finds in the trajectory (tests/data/make_mlflow_stores.py made it to hold these), with
# throughput judged over spans of 10 s (each of its records is 10 s of training).
OPTIONS = Options(throughput_span=10.0)
EXPECTED = [
    ("loss_spike", 320, "loss 8.515 > 3 x median 1.855 of the previous 14 train records for 2 consecutive records"),
    ("stuck_metric", 500, "auroc 0.625 < metric-min 0.7: the model looks stuck near chance (0.5)"),
    (
        "grad_explosion",
        540,
        "gradient norm 80 > 10 x median 1 of the previous 20 train records (and above their largest) "
        "for 3 consecutive train records; the loss stayed in its band",
    ),
    (
        "throughput_drop",
        660,
        "throughput 40 < 75 ((1 - 0.25) x baseline 100) for 3 consecutive spans of >= 10 s",
    ),
    ("nonfinite_loss", 800, "train loss is NaN"),
    # judged at the end of the log (its length is unknown): the auroc fell from its first eval
    (
        "metric_stuck",
        800,
        "eval_auroc's best 0.9 is not better than its first eval 0.9 by 0.02 over 8 evals: the task metric never improved",
    ),
]


def trajectory() -> list[dict]:
    with open(TRAJECTORY) as f:
        return [json.loads(line) for line in f]


# Each producer's names for the canonical keys.
TB_TAGS = {
    "loss": "train/loss",
    "lr": "lr-AdamW",
    "grad_norm": "train/grad_norm",
    "sps": "train/samples_per_sec",
    "eval_loss": "val/loss",
    "eval_auroc": "val/auroc",
}
CSV_COLUMNS = {
    "step": "step",
    "t": "time",
    "loss": "train_loss",
    "lr": "lr-AdamW",
    "grad_norm": "grad_norm",
    "sps": "throughput",
    "eval_loss": "val_loss",
    "eval_auroc": "val_auroc",
}


class TensorBoardWriter:
    def __init__(self, root) -> None:
        self.root = str(root)
        self.w = SummaryWriter(self.root, max_queue=1000)

    def write(self, rec: dict) -> None:
        for key, value in rec.items():
            if key in TB_TAGS:
                self.w.add_scalar(TB_TAGS[key], value, rec["step"], walltime=rec["t"])
        self.w.flush()

    def close(self) -> str:
        self.w.close()
        return self.root


class CsvWriter:
    def __init__(self, root) -> None:
        self.path = os.path.join(str(root), "metrics.csv")
        with open(self.path, "w", newline="") as f:
            csv.writer(f).writerow(CSV_COLUMNS.values())

    def write(self, rec: dict) -> None:
        with open(self.path, "a", newline="") as f:
            csv.writer(f).writerow([rec.get(k, "") for k in CSV_COLUMNS])

    def close(self) -> str:
        return self.path


class TextWriter:
    def __init__(self, root) -> None:
        self.path = os.path.join(str(root), "train.log")
        with open(self.path, "w") as f:
            f.write("starting\n")

    def write(self, rec: dict) -> None:
        with open(self.path, "a") as f:
            if "loss" in rec:
                f.write(
                    f"step={rec['step']} t={rec['t']} loss={rec['loss']!r} lr={rec['lr']} gnorm={rec['grad_norm']} "
                    f"sps={rec['sps']}\n"
                )
            else:
                f.write(f"eval step={rec['step']} loss={rec['eval_loss']!r} auroc={rec['eval_auroc']}\n")

    def close(self) -> str:
        return self.path


def written(writer_cls, root) -> str:
    os.makedirs(root, exist_ok=True)
    w = writer_cls(root)
    for rec in trajectory():
        w.write(rec)
    return w.close()


def findings(target: str, read: ReadOptions | None = None) -> list[tuple]:
    return [(f.kind, f.step, f.message) for f in check(target, OPTIONS, read).findings]


def test_the_jsonl_trajectory_holds_the_expected_findings():
    assert findings(TRAJECTORY) == EXPECTED


@pytest.mark.parametrize(
    "make",
    [
        lambda tmp: (written(TensorBoardWriter, tmp / "tb"), None),
        lambda tmp: (written(CsvWriter, tmp / "csv"), None),
        lambda tmp: (written(TextWriter, tmp / "text"), ReadOptions(pattern=TEXT_PATTERNS)),
        lambda tmp: (os.path.join(DATA, "mlflow.db"), None),
        lambda tmp: (os.path.join(DATA, "mlruns-run"), None),
    ],
    ids=["tensorboard", "csv", "text", "mlflow-sqlite", "mlflow-file-store"],
)
def test_every_format_gives_the_same_findings(tmp_path, make):
    target, read = make(tmp_path)
    assert findings(target, read) == EXPECTED


@pytest.mark.parametrize(
    "writer_cls, read",
    [
        (TensorBoardWriter, None),
        (CsvWriter, None),
        (TextWriter, ReadOptions(pattern=TEXT_PATTERNS)),
    ],
    ids=["tensorboard", "csv", "text"],
)
def test_watch_of_a_growing_log_stops_where_jsonl_does(tmp_path, writer_cls, read):
    """Written a record at a time with a poll after each (and an idle one): the first anomaly, at its step."""
    clock = [1000.0]
    w = writer_cls(tmp_path)
    watcher = Watcher(
        str(w.root if isinstance(w, TensorBoardWriter) else w.path),
        Options(stall=1e6, startup_grace=1e6),
        clock=lambda: clock[0],
        log=lambda m: None,
        poll_checks=[],
        read=read,
    )
    jsonl = tmp_path / "same.jsonl"
    jsonl.write_text("")
    jwatch = Watcher(
        str(jsonl), Options(stall=1e6, startup_grace=1e6), clock=lambda: clock[0], log=lambda m: None, poll_checks=[]
    )
    verdicts: dict[str, object] = {}
    for rec in trajectory():
        w.write(rec)
        with open(jsonl, "a") as f:
            f.write(json.dumps(rec) + "\n")
        for _ in range(2):
            clock[0] += 5
            for name, wt in (("format", watcher), ("jsonl", jwatch)):
                if name not in verdicts:
                    v = wt.poll_once()
                    if v is not None:
                        verdicts[name] = v
        if len(verdicts) == 2:
            break
    w.close()
    got = {k: (v.kind, v.step, v.message) for k, v in verdicts.items()}
    assert got["format"] == got["jsonl"] == EXPECTED[0]


def test_plot_draws_a_tensorboard_directory(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="the [plot] extra is not installed")
    root = written(TensorBoardWriter, tmp_path / "tb")
    out = tmp_path / "snap.png"
    assert main(["plot", root, "-o", str(out), "--json", "--throughput-span", "10"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert os.path.getsize(out) > 0 and "loss" in info["panels"]
    # (the plot draws the findings of the records; metric_stuck of a log of unknown length is judged at its end)
    assert [(f["kind"], f["step"]) for f in info["findings"]] == [
        (k, s) for k, s, _m in EXPECTED if k != "metric_stuck"
    ]


def test_status_of_a_tensorboard_directory(tmp_path, capsys):
    root = written(TensorBoardWriter, tmp_path / "tb")
    assert main(["status", root, "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert (st["step"], st["loss"], st["last_eval"]["step"]) == (800, "nan", 800)
    assert st["last_eval"]["metrics"] == {"auroc": 0.625}


# --- real producers ----------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_lightning_tensorboard_and_csv_loggers_read_alike(tmp_path):
    """A real Lightning fit logging to TensorBoardLogger and CSVLogger: the same records from both."""
    L = pytest.importorskip("lightning", reason="the [lightning] extra is not installed")
    import torch
    from lightning.pytorch.callbacks import LearningRateMonitor
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    class Model(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(8, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x).squeeze(-1), y)
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.net(x).squeeze(-1), y))

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-2)

    torch.manual_seed(0)
    x = torch.randn(640, 8)
    y = x.sum(1)
    data = torch.utils.data.TensorDataset(x, y)
    trainer = L.Trainer(
        max_steps=60,
        accelerator="cpu",
        devices=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=10,
        val_check_interval=30,
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
        default_root_dir=str(tmp_path),
        callbacks=[LearningRateMonitor()],
        logger=[TensorBoardLogger(str(tmp_path), name="tb"), CSVLogger(str(tmp_path), name="csv")],
    )
    trainer.fit(
        Model(), torch.utils.data.DataLoader(data, batch_size=16), torch.utils.data.DataLoader(data, batch_size=64)
    )
    tb = list(iter_records(str(tmp_path / "tb")))
    (csv_path,) = glob.glob(str(tmp_path / "csv" / "version_*" / "metrics.csv"))
    cs = list(iter_records(csv_path))

    def train(recs):
        return [(r.step, r.loss) for r in recs if r.kind == "train"]

    def evals(recs):
        return [(r.step, r.eval_loss) for r in recs if r.has_eval and r.eval_loss is not None]

    assert len(train(tb)) == 6 and train(tb) == train(cs)
    # LearningRateMonitor's value joins the step's record in TensorBoard; in the CSV it is a row of its own
    assert [r.lr for r in tb if r.kind == "train"] == [pytest.approx(1e-2)] * 6
    assert [r.raw["lr-AdamW"] for r in cs if r.kind == "other" and "lr-AdamW" in r.raw][:1] == [pytest.approx(1e-2)]
    assert len(evals(tb)) == 2 and evals(tb) == evals(cs)
    assert check(str(tmp_path / "tb")).findings == [] and check(csv_path).findings == []


def _tiny_bert():
    """A dataset class (token sequences; the label: is token 1 more frequent than token 2, or the
    reverse with `inverted`) and a one-layer BERT config, for a real Trainer on the CPU in seconds."""
    pytest.importorskip("transformers", reason="the [hf] extra is not installed")
    pytest.importorskip("accelerate", reason="the [hf] extra is not installed")
    import torch
    from transformers import BertConfig

    class Sequences(torch.utils.data.Dataset):
        def __init__(self, n: int, seed: int, inverted: bool = False) -> None:
            g = torch.Generator().manual_seed(seed)
            self.x = torch.randint(0, 16, (n, 16), generator=g)
            y = ((self.x == 1).sum(1) > (self.x == 2).sum(1)).long()
            self.y = 1 - y if inverted else y

        def __len__(self) -> int:
            return len(self.x)

        def __getitem__(self, i: int) -> dict:
            return {"input_ids": self.x[i], "labels": self.y[i]}

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=16,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=16,
        num_labels=2,
    )
    return Sequences, config


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_hf_trainer_report_to_tensorboard(tmp_path):
    """A real Trainer.train() with report_to="tensorboard": its event files read as its log_history."""
    Sequences, config = _tiny_bert()
    from transformers import BertForSequenceClassification, Trainer, TrainingArguments

    from runwatch.integrations.hf import auroc_metrics

    args = TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=20,
        per_device_train_batch_size=16,
        logging_steps=5,
        eval_strategy="steps",
        eval_steps=10,
        save_strategy="no",
        learning_rate=3e-3,
        use_cpu=True,
        disable_tqdm=True,
        report_to="tensorboard",
        seed=0,
        dataloader_num_workers=0,
    )
    trainer = Trainer(
        model=BertForSequenceClassification(config),
        args=args,
        train_dataset=Sequences(640, 0),
        eval_dataset=Sequences(64, 1),
        compute_metrics=auroc_metrics,
    )
    trainer.train()
    history = trainer.state.log_history
    recs = list(iter_records(resolve_target(str(tmp_path / "runs"))))
    train = [(r.step, r.loss, r.lr, r.grad_mean) for r in recs if r.kind == "train"]
    want = [(h["step"], h["loss"], h["learning_rate"], h["grad_norm"]) for h in history if "loss" in h]
    assert [t[0] for t in train] == [w[0] for w in want] == [5, 10, 15, 20]
    for got, exp in zip(train, want, strict=True):
        assert got[1:] == pytest.approx(exp[1:], rel=1e-6)  # event files hold float32
    evals = [
        (r.step, r.eval_loss, r.metrics.get("auroc")) for r in recs if r.kind == "eval" and r.eval_loss is not None
    ]
    want_eval = [(h["step"], h["eval_loss"], h["eval_auroc"]) for h in history if "eval_loss" in h]
    assert [e[0] for e in evals] == [10, 20]
    for got, exp in zip(evals, want_eval, strict=True):
        assert got == pytest.approx(exp, rel=1e-6)
    assert check(str(tmp_path / "runs"), Options(metric_after_step=10**6)).findings == []
    shutil.rmtree(tmp_path / "runs")


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_hf_trainer_with_several_eval_sets_has_one_eval_loss_series_each(tmp_path, capsys):
    """A real Trainer.train() with `eval_dataset={"g0": ..., "g1": ...}` logs `eval_g0_loss` and
    `eval_g1_loss` (no `eval_loss`): each series is judged, and the one that rises (its labels are the
    train labels inverted) is named in the overfitting warning."""
    Sequences, config = _tiny_bert()
    from transformers import BertForSequenceClassification, Trainer, TrainingArguments

    args = TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=120,
        per_device_train_batch_size=16,
        logging_steps=10,
        eval_strategy="steps",
        eval_steps=20,
        save_strategy="steps",
        save_steps=120,
        learning_rate=3e-3,
        use_cpu=True,
        disable_tqdm=True,
        report_to="none",
        seed=0,
        dataloader_num_workers=0,
    )
    trainer = Trainer(
        model=BertForSequenceClassification(config),
        args=args,
        train_dataset=Sequences(2000, 0),
        eval_dataset={"g0": Sequences(128, 1, inverted=True), "g1": Sequences(128, 2)},
    )
    trainer.train()
    keys = {k for h in trainer.state.log_history for k in h}
    assert {"eval_g0_loss", "eval_g1_loss"} <= keys and "eval_loss" not in keys
    capsys.readouterr()  # the Trainer's own printed logs
    assert main(["check", str(tmp_path), "--json"]) == 0  # a warning only: exit 0
    out = json.loads(capsys.readouterr().out)
    warnings = [f for f in out["findings"] if f["kind"] == "overfitting"]
    assert warnings and warnings[0]["severity"] == "warn"
    assert warnings[0]["message"].startswith("eval_g0_loss ")
    assert out["verdict"].startswith("OK clean step=120")


def _write_csv(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return str(path)


# Ultralytics' results.csv: one row an epoch, no step column; three train losses, no `loss`.
YOLO_HEADER = [
    "epoch",
    "time",
    "train/box_loss",
    "train/cls_loss",
    "train/dfl_loss",
    "metrics/mAP50(B)",
    "val/box_loss",
    "val/cls_loss",
    "val/dfl_loss",
    "lr/pg0",
]


def test_a_csv_with_an_epoch_column_and_no_step_steps_by_epoch(tmp_path, capsys):
    rows = [[e, 10.0 * e, 1.2 - e / 100, 1.1, 1.0, 0.5 + e / 100, 1.3, 1.2, 1.1, 1e-3] for e in range(1, 11)]
    path = _write_csv(tmp_path / "results.csv", YOLO_HEADER, rows)
    assert main(["check", path]) == 0
    out, err = capsys.readouterr()
    assert err == "runwatch check: results.csv has no step column or field: stepping by its epoch column\n"
    assert out.splitlines() == [
        "WARNING no_signal step=10: no train loss in results.csv; keys seen: epoch, time, train/box_loss, "
        "train/cls_loss, train/dfl_loss, metrics/mAP50(B), val/box_loss, val/cls_loss, val/dfl_loss, lr/pg0; "
        "use --map loss=KEY",
        "OK clean step=10",
    ]
    # --map names the loss: then it is judged (and the eval losses, val/<name>_loss, each too)
    assert main(["check", path, "--map", "loss=train/box_loss", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["findings"], doc["verdict"]) == ([], "OK clean step=10")


def test_a_csv_without_steps_or_epochs_steps_by_row(tmp_path, capsys):
    path = _write_csv(tmp_path / "log.csv", ["loss", "acc"], [[1.0 / i, 0.5] for i in range(1, 6)])
    assert main(["check", path]) == 0
    out, err = capsys.readouterr()
    assert "log.csv has no step column or field: stepping by record number" in err
    assert out.splitlines() == ["OK clean step=5"]


def test_a_catboost_like_logloss_csv_is_read_and_named(tmp_path, capsys):
    rows = [[i, 0.69 - i / 100 if i < 40 else 0.29 + (i - 40) / 10] for i in range(60)]
    path = _write_csv(tmp_path / "learn_error.csv", ["iter", "Logloss"], rows)
    assert main(["check", path, "--json"]) == 7
    doc = json.loads(capsys.readouterr().out)
    first = doc["findings"][0]
    assert first["kind"] == "loss_spike"
    assert first["message"].endswith("(train loss read from 'Logloss')")
    assert main(["status", path]) == 0
    assert "(from Logloss)" in capsys.readouterr().out
