"""Every surface that reads a run gives the same last step, latest train loss and findings.

The logs are written here by their real producers (RunLogger, a Hugging Face Trainer, Lightning's
CSVLogger and TensorBoardLogger, torch's SummaryWriter, the MLflow client) or in their producer's
own layout (minimal JSONL, a nanoGPT text log), one folder a log with its `source.json`, and read
by benchmarks/bench_surfaces.py: `check --json`, `status --json`, `serve`'s list and run page (as
`/api/...` sends them), and the MCP tools (`run_status`, `check_run`, `tail_records`, `list_runs`).
Each case compares what those surfaces print; a case marked xfail is a disagreement of the code
as it stands, named in its reason (strict: it fails once the surfaces agree, and the mark goes).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import time
import warnings

import pytest

from runwatch import RunLogger
from runwatch.errors import NonFiniteLossError
from runwatch.views.serve.runs import SETTLED_SECONDS

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "bench_surfaces.py")


def _bench():
    spec = importlib.util.spec_from_file_location("bench_surfaces", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _bench()

RECIPE = {"batch_size": 4, "seq_len": 8, "gradient_accumulation_steps": 1, "qk_clip_threshold": None, "max_steps": 100}
STEPS = 100
NAN_FROM = 60  # the NaN logs' loss is NaN from this step on


def _loss(step: int) -> float:
    return 2.0 * 0.98**step + 0.1


# --- the producers ----------------------------------------------------------------------------


def _source(folder, file: str, check_args: list[str] | None = None) -> None:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "source.json"), "w", encoding="utf-8") as f:
        json.dump({"file": file, "check_args": check_args or []}, f)


def make_runlogger(folder, nan: bool = False) -> dict:
    log = RunLogger(folder, recipe=RECIPE, hardware={}, window=10)
    try:
        for step in range(1, STEPS + 1):
            log.step(math.nan if nan and step >= NAN_FROM else _loss(step), 1e-3, 0.5)
            if step % 50 == 0:
                log.val(_loss(step) + 0.1, {"auroc": 0.8})
        log.close("normal", None)
    except NonFiniteLossError:
        pass  # the logger writes the finite updates of the window, then ends the session at its last step
    _source(folder, "metrics.jsonl")
    with open(os.path.join(folder, "metrics.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    trains = [r for r in records if r["event"] == "train"]
    return {"step": records[-1]["step"], "loss": trains[-1]["loss"]}  # the window's mean loss


def make_jsonl(folder, name: str, nan: bool = False) -> dict:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
        for step in range(1, STEPS + 1):
            loss = math.nan if nan and step >= NAN_FROM else _loss(step)
            f.write(json.dumps({"step": step, "t": 1.7e9 + step, "loss": loss, "lr": 1e-3, "grad_norm": 0.5}) + "\n")
            if step % 50 == 0:
                f.write(json.dumps({"step": step, "t": 1.7e9 + step, "eval_loss": _loss(step) + 0.1}) + "\n")
    _source(folder, name)
    return {"step": STEPS, "loss": math.nan if nan else _loss(STEPS)}


def make_flat_jsonl(folder) -> dict:
    """A loss that never falls (600 records): `check` stops it at the end of the log (no_progress)."""
    os.makedirs(folder, exist_ok=True)
    steps = 600
    with open(os.path.join(folder, "metrics.jsonl"), "w", encoding="utf-8") as f:
        for step in range(1, steps + 1):
            f.write(json.dumps({"step": step, "t": 1.7e9 + step, "loss": 0.693 + (step * 7 % 5) / 1000}) + "\n")
    _source(folder, "metrics.jsonl")
    return {"step": steps, "loss": 0.693 + (steps * 7 % 5) / 1000}


def make_many_metrics_jsonl(folder) -> dict:
    """An eval row of 2000 metrics at the last step: larger alone than an MCP answer (8 KB)."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "train.jsonl"), "w", encoding="utf-8") as f:
        for step in range(1, STEPS + 1):
            f.write(json.dumps({"step": step, "t": 1.7e9 + step, "loss": _loss(step)}) + "\n")
        metrics = {f"eval_class_{i:04d}_f1": 0.5 + i / 10000 for i in range(2000)}
        f.write(json.dumps({"step": STEPS, "t": 1.7e9 + STEPS, "eval_loss": _loss(STEPS) + 0.1, **metrics}) + "\n")
    _source(folder, "train.jsonl")
    return {"step": STEPS, "loss": _loss(STEPS)}


def make_lossless_jsonl(folder) -> dict:
    """Records without a train loss: `check` warns at the end of the log (no_signal)."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "train.jsonl"), "w", encoding="utf-8") as f:
        for step in range(1, STEPS + 1):
            f.write(json.dumps({"step": step, "t": 1.7e9 + step, "accuracy": 0.5 + step / 1000}) + "\n")
    _source(folder, "train.jsonl")
    return {"step": STEPS, "loss": None}


def make_nanogpt(folder, nan: bool = False) -> dict:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "train.log"), "w", encoding="utf-8") as f:
        f.write("tokens per iteration will be: 8,192\nnumber of parameters: 0.80M\n")
        for it in range(0, STEPS + 1):
            if it % 50 == 0:
                f.write(f"step {it}: train loss {_loss(it):.4f}, val loss {_loss(it) + 0.1:.4f}\n")
            loss = "nan" if nan and it >= NAN_FROM else f"{_loss(it):.4f}"
            f.write(f"iter {it}: loss {loss}, time 12.50ms, mfu 1.23%\n")
    _source(folder, "train.log", ["--format", "nanogpt"])
    return {"step": STEPS, "loss": math.nan if nan else float(f"{_loss(STEPS):.4f}")}


def make_summarywriter(folder) -> dict:
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(folder))
    for step in range(1, STEPS + 1):
        w.add_scalar("train/loss", _loss(step), step, walltime=1.7e9 + step)
        w.add_scalar("train/lr", 1e-3, step, walltime=1.7e9 + step)
        if step % 50 == 0:
            w.add_scalar("val/loss", _loss(step) + 0.1, step, walltime=1.7e9 + step)
    w.close()
    (name,) = [n for n in os.listdir(folder) if "tfevents" in n]
    _source(folder, name)
    return {"step": STEPS, "loss": _loss(STEPS)}


def make_mlflow(folder) -> dict:
    import mlflow

    os.makedirs(folder, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # SQLAlchemy's, inside MLflow
        warnings.simplefilter("ignore", FutureWarning)
        mlflow.set_tracking_uri(f"sqlite:///{os.path.join(folder, 'mlflow.db')}")
        with mlflow.start_run():
            for step in range(1, STEPS + 1):
                mlflow.log_metrics({"train/loss": _loss(step), "lr": 1e-3}, step=step)
            mlflow.log_metric("val/loss", _loss(STEPS) + 0.1, step=STEPS)
    _source(folder, "mlflow.db")
    return {"step": STEPS, "loss": _loss(STEPS)}


def make_hf_trainer(folder) -> dict:
    """A real Trainer.train() of a tiny BERT (tests/test_integrations_hf.py's set-up), no callback
    of ours: its output folder as the Trainer leaves it (checkpoint-N/trainer_state.json)."""
    hf = pytest.importorskip("test_integrations_hf", reason="the [hf] extra is not installed")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        trainer = hf.make_trainer(folder, 30, [], logging_steps=5, eval_steps=15, save_steps=30)
        trainer.train()
    _source(folder, "checkpoint-30/trainer_state.json")
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return {"step": 30, "loss": losses[-1]}


def make_hf_trainer_odd(folder) -> dict:
    """A Trainer whose last step (32) is not a multiple of logging_steps (5), no eval, its state
    saved at the end (`save_state`): its last loss is at step 30, and the final summary entry of
    log_history (train_runtime, ...) at step 32."""
    hf = pytest.importorskip("test_integrations_hf", reason="the [hf] extra is not installed")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        trainer = hf.make_trainer(folder, 32, [], logging_steps=5, eval_strategy="no", save_strategy="no")
        trainer.train()
        trainer.save_state()
    _source(folder, "trainer_state.json")
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert trainer.state.log_history[-1]["step"] == 32 and "loss" not in trainer.state.log_history[-1]
    return {"step": 32, "loss": losses[-1]}


def make_lightning(root, nan: bool = False) -> dict[str, dict]:
    """A real Lightning fit() (tests/test_integrations_lightning.py's tiny classifier) logging to
    CSVLogger and TensorBoardLogger; each logger's version folder becomes a run of the corpus."""
    li = pytest.importorskip("test_integrations_lightning", reason="the [lightning] extra is not installed")
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    work = root / ("lightning-nan-work" if nan else "lightning-work")
    model = li.Classifier(nan_from=NAN_FROM) if nan else li.Classifier()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's own notes (no workers in the loader, ...)
        trainer = li.fit(
            work,
            STEPS,
            [],
            model=model,
            logger=[CSVLogger(str(work), name="csv"), TensorBoardLogger(str(work), name="tb")],
            log_every_n_steps=10,
        )
    loss = float(trainer.callback_metrics["train_loss"])
    prefix = "lightning-nan" if nan else "lightning"
    csv_dir, tb_dir = root / f"{prefix}-csv", root / f"{prefix}-tb"
    shutil.move(str(work / "csv" / "version_0"), csv_dir)
    shutil.move(str(work / "tb" / "version_0"), tb_dir)
    shutil.rmtree(work)
    _source(csv_dir, "metrics.csv")
    (event,) = [n for n in os.listdir(tb_dir) if "tfevents" in n]
    _source(tb_dir, event)
    want = {"step": STEPS - 1, "loss": loss}  # Lightning logs the 100th update at step 99
    return {f"{prefix}-csv": want, f"{prefix}-tb": want}


# id -> (kinds `check` must find, a finding every surface must have found)
LOGS = {
    "runlogger": (),
    "runlogger-nan": ("nonfinite_loss",),
    "jsonl": (),
    "jsonl-nan": ("nonfinite_loss",),
    "jsonl-flat": ("no_progress",),
    "jsonl-no-loss": ("no_signal",),
    "jsonl-many-metrics": (),
    "nanogpt-nan": ("nonfinite_loss",),
    "summarywriter": (),
    "mlflow": (),
    "hf-trainer": (),
    "hf-trainer-odd": (),
    "lightning-csv": (),
    "lightning-tb": (),
    "lightning-nan-csv": ("nonfinite_loss",),
    "lightning-nan-tb": ("nonfinite_loss",),
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The folder of logs, and what each producer wrote last (its last step and train loss); a
    producer whose extra is not installed is left out, with why."""
    root = tmp_path_factory.mktemp("surfaces")
    written: dict[str, dict] = {}
    skipped: dict[str, str] = {}
    makers = {
        "runlogger": lambda: {"runlogger": make_runlogger(root / "runlogger")},
        "runlogger-nan": lambda: {"runlogger-nan": make_runlogger(root / "runlogger-nan", nan=True)},
        "jsonl": lambda: {"jsonl": make_jsonl(root / "jsonl", "train.jsonl")},
        "jsonl-nan": lambda: {"jsonl-nan": make_jsonl(root / "jsonl-nan", "metrics.jsonl", nan=True)},
        "jsonl-flat": lambda: {"jsonl-flat": make_flat_jsonl(root / "jsonl-flat")},
        "jsonl-no-loss": lambda: {"jsonl-no-loss": make_lossless_jsonl(root / "jsonl-no-loss")},
        "jsonl-many-metrics": lambda: {"jsonl-many-metrics": make_many_metrics_jsonl(root / "jsonl-many-metrics")},
        "nanogpt-nan": lambda: {"nanogpt-nan": make_nanogpt(root / "nanogpt-nan", nan=True)},
        "summarywriter": lambda: {"summarywriter": make_summarywriter(root / "summarywriter")},
        "mlflow": lambda: {"mlflow": make_mlflow(root / "mlflow")},
        "hf-trainer": lambda: {"hf-trainer": make_hf_trainer(root / "hf-trainer")},
        "hf-trainer-odd": lambda: {"hf-trainer-odd": make_hf_trainer_odd(root / "hf-trainer-odd")},
        "lightning": lambda: make_lightning(root),
        "lightning-nan": lambda: make_lightning(root, nan=True),
    }
    for name, make in makers.items():
        try:
            written.update(make())
        except pytest.skip.Exception as exc:
            skipped[name] = str(exc)
        except ImportError as exc:
            skipped[name] = f"not installed: {exc}"
    # finished runs: not written for two minutes, so the page judges each log as a whole (settled)
    then = time.time() - 2 * SETTLED_SECONDS
    for folder, _dirs, files in os.walk(root):
        for name in files:
            os.utime(os.path.join(folder, name), (then, then))
    return root, written, skipped


@pytest.fixture(scope="module")
def measured(corpus):
    """The bench's comparison, with `check`, `status` and the MCP tools given each log ("log"),
    then each log's folder ("folder"); the page reads the folder of logs as `serve` does."""
    root, written, skipped = corpus
    docs = {target: bench.measure(str(root), target) for target in TARGETS}
    return {t: {r["id"]: r for r in doc["runs"]} for t, doc in docs.items()}, docs, written, skipped


TARGETS = ("log", "folder")


def _run(measured, target, log_id):
    runs, _docs, written, skipped = measured
    if log_id not in runs[target]:
        group = next((g for g in skipped if log_id.startswith(g)), None)
        pytest.skip(skipped.get(group or "", f"{log_id} was not written"))
    return runs[target][log_id], written[log_id]


# The disagreements of the code as it stands, by case (quantity, target, log id) -> the surfaces
# that differ and why; none at present.
XFAIL: dict[tuple[str, str, str], str] = {}


def _cases(quantity: str, targets: tuple[str, ...] = TARGETS) -> list:
    out = []
    for target in targets:
        for log_id in LOGS:
            reason = XFAIL.get((quantity, target, log_id))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            out.append(pytest.param(target, log_id, marks=marks, id=f"{target}-{log_id}"))
    return out


@pytest.mark.parametrize(("target", "log_id"), _cases("step"))
def test_every_surface_gives_the_same_last_step(measured, target, log_id):
    run, written = _run(measured, target, log_id)
    step = run["compare"]["step"]
    assert step["agree"], f"{log_id}: last step {step['line']}"
    assert step["groups"][0]["value"] == written["step"], f"{log_id}: every surface says {step['line']}"


@pytest.mark.parametrize(("target", "log_id"), _cases("loss"))
def test_every_surface_gives_the_same_latest_train_loss(measured, target, log_id):
    run, written = _run(measured, target, log_id)
    loss = run["compare"]["loss"]
    assert loss["agree"], f"{log_id}: latest train loss {loss['line']}"
    got = loss["groups"][0]["value"]
    if written["loss"] is None:
        assert got is None, f"{log_id}: every surface says {loss['line']}"
    elif math.isnan(written["loss"]):
        assert got == "nan", f"{log_id}: every surface says {loss['line']}"
    else:  # event files hold float32
        assert got == pytest.approx(written["loss"], rel=1e-6), f"{log_id}: every surface says {loss['line']}"


@pytest.mark.parametrize(("target", "log_id"), _cases("findings"))
def test_every_surface_gives_the_same_findings(measured, target, log_id):
    run, _written = _run(measured, target, log_id)
    findings = run["compare"]["findings"]
    assert findings["agree"], f"{log_id}: findings {findings['line']}"
    kinds = {f[0] for f in findings["items"]}
    assert set(LOGS[log_id]) <= kinds, f"{log_id}: check found {findings['items']}"
    if not LOGS[log_id]:
        assert findings["items"] == [], f"{log_id}: a healthy log has {findings['items']}"


@pytest.mark.parametrize(("target", "log_id"), _cases("listed", ("log",)))
def test_serve_lists_each_log_once(measured, target, log_id):
    run, _written = _run(measured, target, log_id)
    assert len(run["listed"]) == 1, f"{log_id}: serve lists {run['listed']}"


def test_serve_lists_nothing_but_the_logs(measured):
    _runs, docs, _written, _skipped = measured
    assert docs["log"]["serve"]["outside_runs"] == [] and docs["log"]["serve"]["several"] == {}


def test_a_surface_that_differs_is_a_disagreement():
    """The comparison itself: one surface off by a step, a loss, a finding is named as such."""
    same = {
        "check": {"step": 10, "findings": {"total": 1, "items": [("nonfinite_loss", 10, "stop")]}},
        "status": {"step": 10, "loss": "nan"},
        "page.list": {"step": 10, "loss": "nan", "findings": {"total": 1}},
        "page.run": {"step": 10, "loss": "nan", "findings": {"total": 1, "items": [("nonfinite_loss", 10, "stop")]}},
        "mcp.run_status": {"step": 10, "loss": "nan"},
        "mcp.check_run": {"step": 10, "findings": {"total": 1, "items": [("nonfinite_loss", 10, "stop")]}},
        "mcp.tail_records": {"step": 10.0, "loss": math.nan},
        "mcp.list_runs": {"step": 10, "loss": "nan", "findings": {"total": 1}},
    }
    same["page.list"]["findings"]["first"] = ("nonfinite_loss", 10, "stop")
    assert bench.compare(same)["agree"]
    off = json.loads(json.dumps(same))
    off["page.run"]["step"] = 9
    off["mcp.list_runs"]["loss"] = 0.5
    off["mcp.check_run"]["findings"] = {"total": 0, "items": []}
    c = bench.compare(off)
    assert not c["step"]["agree"] and c["step"]["groups"][1] == {"value": 9.0, "surfaces": ["page.run"]}
    assert not c["loss"]["agree"] and c["loss"]["groups"][1]["surfaces"] == ["mcp.list_runs"]
    assert (
        not c["findings"]["agree"] and "mcp.check_run vs check: lacks nonfinite_loss@10 stop" in c["findings"]["line"]
    )
    first = json.loads(json.dumps(same))
    first["page.list"]["findings"]["first"] = None
    c = bench.compare(first)
    assert c["step"]["agree"] and c["loss"]["agree"] and not c["findings"]["agree"]
    assert "page.list first_finding none vs check's nonfinite_loss@10 stop" in c["findings"]["line"]
    cut = json.loads(json.dumps(same))
    cut["mcp.check_run"]["findings"]["items"] = []  # cut to fit its 8 KB: its total still counts every one
    assert bench.compare(cut)["agree"]
