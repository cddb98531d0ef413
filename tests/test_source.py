"""RecordSource: one way to read a run, whatever its format, for every command that reads one.

The logs are written by the real producers where they are cheap: torch.utils.tensorboard's
SummaryWriter for event files, the csv module in Lightning's CSVLogger layout (`epoch,step,...`,
eval rows with empty train cells), a Hugging Face style trainer_state.json, nanoGPT's own lines.
"""

from __future__ import annotations

import csv
import json
import os

import pytest

from runwatch.errors import UsageError
from runwatch.judging.replay import check
from runwatch.judging.watchdog import Options, Watcher
from runwatch.reading.readers import READERS, ReadOptions, open_reader
from runwatch.reading.records import iter_records, resolve_target
from runwatch.reading.source import RecordSource
from runwatch.views.agent.tools import Tools
from runwatch.views.serve.runs import RunView, find_runs
from runwatch.views.status import status

# --- the logs ------------------------------------------------------------------------------------


def write_lightning_csv(path, last=3899, every=50, eval_every=1000) -> None:
    """Lightning's CSVLogger layout: `epoch,step,train_loss,val_loss`, a val row of its own."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["epoch", "step", "train_loss", "val_loss"])
        for s in range(every - 1, last + 1, every):
            w.writerow([s // 1000, s, 2.0 - s / 5000, ""])
            if (s + 1) % eval_every == 0:
                w.writerow([s // 1000, s, "", 1.5])


def write_tensorboard(folder, last=3899, test_file=False) -> None:
    """A TensorBoard log as Lightning's TensorBoardLogger leaves it: scalars every 50 steps to
    `last`; with `test_file`, a second file (a later `Trainer.test`) holding a test metric at step 0."""
    tb = pytest.importorskip("torch.utils.tensorboard")
    w = tb.SummaryWriter(str(folder), filename_suffix=".0")
    w.add_scalar("hp_metric", -1.0, 0)
    for s in range(49, last + 1, 50):
        w.add_scalar("train_loss", 2.0 - s / 5000, s)
        w.add_scalar("epoch", float(s // 1000), s)
    w.close()
    if test_file:
        w = tb.SummaryWriter(str(folder), filename_suffix=".1")
        w.add_scalar("test_loss", 0.9, 0)
        w.add_scalar("epoch", 0.0, 0)
        w.close()


def write_trainer_state(path, last=500) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    hist = [
        {"epoch": s / 100, "grad_norm": 1.0, "learning_rate": 1e-4, "loss": 2.0 - s / 1000, "step": s}
        for s in range(10, last + 1, 10)
    ]
    hist.append({"epoch": last / 100, "step": last, "eval_loss": 1.6})
    with open(path, "w") as f:
        json.dump({"global_step": last, "max_steps": last, "log_history": hist}, f)


def write_nanogpt(path, last=1990) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        for it in range(0, last + 1, 10):
            if it % 250 == 0:
                f.write(f"step {it}: train loss {3 - it / 1000:.4f}, val loss {3.1 - it / 1000:.4f}\n")
            f.write(f"iter {it}: loss {3 - it / 1000:.4f}, time 12.34ms, mfu 1.23%\n")


def write_yolo(path, epochs=20) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["epoch", "time", "train/box_loss", "train/cls_loss", "metrics/mAP50(B)", "val/box_loss", "lr/pg0"])
        for e in range(1, epochs + 1):
            w.writerow([e, e * 10.0, 1.5 - e / 100, 2.0 - e / 50, 0.1 + e / 100, 1.4, 0.01])


def surfaces(root, rel) -> dict[str, tuple]:
    """(last step, loss) as check, status, the page's API and the MCP tools see `root/rel`."""
    path = os.path.join(root, rel)
    out: dict[str, tuple] = {"check": (check(path).last_step,)}
    st = status(path, gpus=False)
    out["status"] = (st["step"], st["loss"])
    view = RunView(rel, resolve_target(path))
    while view.refresh():  # (a refresh that leaves a step held back asks for the idle poll that releases it)
        pass
    page = view.summary()
    out["page"] = (page["step"], page["loss"])
    _, doc = Tools(str(root)).run_status(rel)
    out["mcp"] = (doc["step"], doc["loss"])
    return out


# --- every command, the same answer --------------------------------------------------------------


@pytest.mark.parametrize("kind", ["lightning_csv", "tensorboard", "tensorboard_then_test", "trainer_state", "nanogpt"])
def test_check_status_page_and_mcp_agree_on_the_last_step_and_loss(tmp_path, kind):
    if kind == "lightning_csv":
        write_lightning_csv(tmp_path / "run" / "metrics.csv")
        rel, step, loss = "run/metrics.csv", 3899, 2.0 - 3899 / 5000
    elif kind.startswith("tensorboard"):
        write_tensorboard(tmp_path / "run", test_file=kind == "tensorboard_then_test")
        rel, step, loss = "run", 3899, pytest.approx(2.0 - 3899 / 5000)
    elif kind == "trainer_state":
        write_trainer_state(tmp_path / "run" / "trainer_state.json")
        rel, step, loss = "run", 500, 1.5
    else:
        write_nanogpt(tmp_path / "run" / "train.log")
        rel, step, loss = "run/train.log", 1990, pytest.approx(1.01)
    found = surfaces(tmp_path, rel)
    assert found["check"] == (step,)
    for surface in ("status", "page", "mcp"):
        assert found[surface] == (step, loss), (surface, found)


def test_a_held_step_is_released_by_the_idle_poll_or_once_the_log_settled(tmp_path):
    """TensorBoard groups values by step: the last step waits for a later value. `holding()` says
    so; the next idle poll releases it, and so does a quiet log (`settle`) without a later value of
    that step being applied twice."""
    write_tensorboard(tmp_path / "tb", last=199)
    source = RecordSource(str(tmp_path / "tb"))
    first = source.poll()
    assert first.grew and not first.more and source.holding()
    assert [r.step for r in first.records if r.kind == "train"][-1] == 149
    idle = source.poll()
    assert not idle.grew and [r.step for r in idle.records] == [199] and not source.holding()
    assert source.poll().records == [] and not source.holding()

    settled = RecordSource(str(tmp_path / "tb"), settle=0.0)  # quiet for long enough: released at once
    steps = [r.step for r in settled.poll().records if r.kind == "train"]
    assert steps[-1] == 199 and not settled.holding()
    reader = settled.reader
    assert reader is not None and reader.grouper.released == 199
    assert reader.grouper.add(199, None, "train_loss", 1.0, "again") == []
    assert reader.finish() == []  # the value applied stands


def test_a_folder_holding_one_log_is_read_through_it(tmp_path):
    write_lightning_csv(tmp_path / "lit" / "metrics.csv", last=999)
    (tmp_path / "lit" / "hparams.yaml").write_text("lr: 0.01\n")
    t = resolve_target(str(tmp_path / "lit"))
    assert (t.format, os.path.basename(t.log_path)) == ("csv", "metrics.csv")
    assert check(str(tmp_path / "lit")).last_step == 999
    assert status(str(tmp_path / "lit"), gpus=False)["step"] == 999


def test_a_folder_holding_one_jsonl_log_of_steps_is_read_through_it(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    with open(run / "train.jsonl", "w") as f:
        f.write("\n")  # (blank lines before the first record)
        for step in range(1, 31):
            f.write(json.dumps({"step": step, "loss": 2.0 - step / 100}) + "\n")
    (run / "config.json").write_text('{"lr": 0.01}')
    t = resolve_target(str(run))
    assert (t.format, os.path.basename(t.log_path)) == ("jsonl", "train.jsonl")
    assert check(str(run)).last_step == 30
    assert status(str(run), gpus=False)["step"] == 30
    # a JSONL data set (no step in its first record) is no log: the folder stays a run directory
    data = tmp_path / "data"
    data.mkdir()
    (data / "rows.jsonl").write_text('{"text": "hello", "label": 1}\n')
    assert resolve_target(str(data)).log_path == str(data / "metrics.jsonl")


def test_a_folder_named_with_a_format_or_a_pattern_is_read_through_its_one_log_of_it(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    pattern = r"^epoch (?P<step>\d+) loss=(?P<loss>\S+)"
    with open(run / "train.out", "wb") as f:
        f.write(b"\0" * 64 + b"starting\n")  # NUL padding where an earlier writer was cut off
        f.write(b"".join(b"epoch %d loss=%.3f\n" % (e, 2.0 - e / 10) for e in range(1, 11)))
    (run / "notes.txt").write_text("nothing to see\n")
    read = ReadOptions(pattern=(pattern,))
    t = resolve_target(str(run), read)
    assert (t.format, os.path.basename(t.log_path)) == ("text", "train.out")
    assert check(str(run), read=read).last_step == 10
    assert status(str(run), gpus=False, read=read)["step"] == 10
    (run / "stdout.log").write_text("epoch 3 loss=1.7\n")  # what `launch` writes: the one it reads
    assert resolve_target(str(run), read).log_path == str(run / "stdout.log")
    write_lightning_csv(tmp_path / "lit" / "metrics.csv", last=999)
    (tmp_path / "lit" / "data.csv").write_text("text,label\nhello,1\n")  # a table, no log of steps
    assert resolve_target(str(tmp_path / "lit"), ReadOptions(format="csv")).log_path.endswith("metrics.csv")
    with pytest.raises(UsageError, match=r"--format nanogpt: .* holds no single such log; give the file$"):
        resolve_target(str(tmp_path / "lit"), ReadOptions(format="nanogpt"))
    write_lightning_csv(tmp_path / "lit" / "more.csv", last=99)
    with pytest.raises(UsageError, match="--format csv: .* holds no single such log"):
        resolve_target(str(tmp_path / "lit"), ReadOptions(format="csv"))


def test_serve_lists_every_run_of_a_folder_of_runs_of_mixed_formats(tmp_path):
    write_trainer_state(tmp_path / "hf" / "trainer_state.json")
    write_lightning_csv(tmp_path / "lcsv" / "metrics.csv")
    write_tensorboard(tmp_path / "tb")
    write_yolo(tmp_path / "yolo" / "results.csv")
    write_nanogpt(tmp_path / "nano" / "train.log")
    (tmp_path / "jsonl").mkdir()
    (tmp_path / "jsonl" / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "loss": 1.0}) + "\n" for s in range(1, 6))
    )
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "table.csv").write_text("text,label\nhello,1\n")  # a data table: no run
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("try a lower lr\n")  # text that no preset reads: no run
    runs = {rel: t.format for rel, t in find_runs(str(tmp_path))}
    assert runs == {
        "hf": "trainer_state",
        "lcsv/metrics.csv": "csv",
        "tb": "tensorboard",
        "yolo/results.csv": "csv",
        "nano/train.log": "text",
        "jsonl": "jsonl",
    }
    assert surfaces(tmp_path, "yolo/results.csv")["status"][0] == 20  # stepping by its epoch column


@pytest.mark.parametrize(
    "text",
    [
        "\ufeffstep,loss\r\n1,2.0\r\n2,1.9\r\n",  # Excel's byte order mark and CRLF
        "step;loss\n1;2.0\n2;1.9\n",  # semicolons
        "step\tloss\n1\t2.0\n2\t1.9\n",  # tabs
    ],
)
def test_csv_dialects_are_read_the_same(tmp_path, text):
    (tmp_path / "m.csv").write_text(text, encoding="utf-8", newline="")
    assert [(r.step, r.loss) for r in iter_records(str(tmp_path / "m.csv"))] == [(1, 2.0), (2, 1.9)]
    assert [rel for rel, _ in find_runs(str(tmp_path))] == ["m.csv"]


# --- following, tails and positions ------------------------------------------------------------


def test_poll_returns_only_what_is_new_and_a_torn_line_waits(tmp_path):
    log = tmp_path / "train.jsonl"
    log.write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "lo')
    source = RecordSource(str(log))
    assert [r.step for r in source.poll().records] == [1]
    assert source.torn() == 2
    assert source.poll().records == []
    with open(log, "a") as f:
        f.write('ss": 1.9}\n{"step": 3, "loss": 1.8}\n')
    assert [r.step for r in source.poll().records] == [2, 3]
    assert source.torn() is None


def test_tail_reads_a_jsonl_log_back_from_its_end_and_other_formats_by_a_pass(tmp_path):
    log = tmp_path / "train.jsonl"
    log.write_text("".join(json.dumps({"step": s, "loss": 1.0 + 1 / s}) + "\n" for s in range(1, 10001)) + '{"step"')
    recs, torn = RecordSource(str(log)).tail(3)
    assert ([r.step for r in recs], torn) == ([9998, 9999, 10000], True)
    write_lightning_csv(tmp_path / "lit" / "metrics.csv", last=999)
    source = RecordSource(str(tmp_path / "lit" / "metrics.csv"))
    recs, torn = source.tail(2)
    assert [(r.step, r.kind) for r in recs] == [(949, "train"), (999, "train"), (999, "eval")][-2:] and not torn
    assert source.last_step() == 999


def test_a_later_file_without_training_keeps_the_run_at_its_step(tmp_path):
    """Lightning's Trainer.test with the same logger writes a new event file at step 0: the run
    still reached its last training step, and no session starts for a test metric."""
    write_tensorboard(tmp_path / "tb", last=999, test_file=True)
    recs = list(iter_records(str(tmp_path / "tb")))
    assert {r.session for r in recs} == {"session-1"}
    assert (recs[-1].kind, recs[-1].step) == ("other", 0)
    assert RecordSource(str(tmp_path / "tb")).last_step() == 999


@pytest.mark.parametrize("fmt", sorted(READERS))
def test_every_format_plugs_in_through_one_table(tmp_path, fmt):
    """Each entry of `readers.READERS` opens a Reader whose position round-trips through JSON."""
    paths = {
        "jsonl": tmp_path / "train.jsonl",
        "trainer_state": tmp_path / "hf" / "trainer_state.json",
        "tensorboard": tmp_path / "tb",
        "csv": tmp_path / "lit" / "metrics.csv",
        "text": tmp_path / "nano" / "train.log",
    }
    if fmt == "mlflow":
        pytest.skip("the MLflow readers have their own tests (test_readers_mlflow.py)")
    paths["jsonl"].write_text('{"step": 1, "loss": 2.0}\n')
    write_trainer_state(paths["trainer_state"])
    write_tensorboard(paths["tensorboard"], last=199)
    write_lightning_csv(paths["csv"], last=199)
    write_nanogpt(paths["text"], last=100)
    t = resolve_target(str(paths[fmt]))
    assert t.format == fmt
    reader = open_reader(fmt, t.log_path, t.read)
    chunk = reader.poll()
    assert chunk.items or chunk.lines
    again = open_reader(fmt, t.log_path, t.read)
    again.load_state_dict(json.loads(json.dumps(reader.state_dict(), allow_nan=False)))
    assert again.state_dict() == reader.state_dict()
    reader.close()
    again.close()


def test_a_watch_state_written_before_the_source_still_loads(tmp_path):
    """watchdog.json's `state` as the watch has written it from the start (the log's position
    under `follower`, `reader` and `trainer_state_entries`, the parser's beside them) resumes."""
    log = tmp_path / "train.jsonl"
    log.write_text("".join(json.dumps({"step": s, "loss": 2.0 - s / 100}) + "\n" for s in range(1, 4)))
    st = os.stat(log)
    rules = Watcher(str(log), Options(poll=0.05), poll_checks=[], log=lambda m: None)
    assert rules.poll_once() is None
    state = {
        **rules.state_dict(),  # (the rules' own state: not the reading position)
        "log": str(log),
        "current": "session-1",
        "have_record": True,
        "last_step": 3,
        "follower": {"path": str(log), "offset": 78, "lineno": 3, "inode": [st.st_dev, st.st_ino], "skipping": False},
        "reader": None,
        "parser": {
            "mode": "minimal",
            "session": "session-1",
            "last_train_step": 3,
            "relaunches": 1,
            "last_step": 3,
            "finite_grad_session": None,
            "step_by": "step",
            "counted": 0,
            "epoch": 0,
            "loss_key": "",
            "validators": {},
        },
        "trainer_state_entries": 0,
        "checkpoints": 0,
        "warnings": [],
        "named_loss_key": False,
    }
    w = Watcher(str(log), Options(poll=0.05), poll_checks=[], log=lambda m: None)
    assert w.load_state_dict(json.loads(json.dumps(state)))
    with open(log, "a") as f:
        f.write(json.dumps({"step": 4, "loss": 1.95}) + "\n")
    assert w.poll_once() is None
    assert (w.applied, w.last_step, w.current) == (1, 4, "session-1")  # only the new line was read

    hf = tmp_path / "hf"
    write_trainer_state(hf / "trainer_state.json", last=20)
    w = Watcher(str(hf), Options(poll=0.05), poll_checks=[], log=lambda m: None)
    saved = {**state, "log": str(hf / "trainer_state.json"), "follower": None, "trainer_state_entries": 2}
    saved["parser"] = {**state["parser"], "last_train_step": 20, "last_step": 20}
    assert w.load_state_dict(saved)
    assert w.poll_once() is None
    assert w.applied == 1 and w.last_step == 20  # the eval entry after the two read before


# --- a run directory owns its run: recorded reading options ------------------------------------


def _printed(path, steps):
    with open(path, "w") as f:
        for i in range(1, steps + 1):
            f.write(f"iter {i}: loss {2.0 - i / 100:.4f}, time 7.00ms, mfu -100.00%\n")


def _record(run, read, rules=None, by="supervise"):
    (run / "launch.json").write_text(json.dumps({"pid": 1, "read": read, "rules": rules or {}, "by": by}))


def test_a_run_directory_is_read_as_recorded_and_given_options_win_one_by_one(tmp_path):
    run = tmp_path / "a"
    (run / "logs").mkdir(parents=True)
    _printed(run / "logs" / "train.out", 30)
    _record(run, {"log": "logs/train.out", "format": "nanogpt", "pattern": [], "run": None, "map": ["lr=loss"]})
    t = resolve_target(str(run))
    assert (t.run_dir, t.log_path, t.format, t.read.format) == (
        str(run),
        str(run / "logs" / "train.out"),
        "text",
        "nanogpt",
    )
    assert (t.map, t.recorded_by) == (("lr=loss",), "supervise")
    recs = list(RecordSource(str(run)).records())
    assert recs[-1].step == 30 and recs[-1].lr == recs[-1].loss  # the recorded --map, applied
    # a given pattern replaces the recorded format; the recorded log stays
    t = resolve_target(str(run), ReadOptions(pattern=(r"^iter (?P<step>\d+)",)))
    assert (t.log_path, t.read.format, t.read.pattern) == (
        str(run / "logs" / "train.out"),
        None,
        (r"^iter (?P<step>\d+)",),
    )
    # a given log replaces the recorded one
    _printed(run / "other.log", 5)
    assert resolve_target(str(run), ReadOptions(log="other.log")).log_path == str(run / "other.log")
    # a file inside is itself, not the run directory
    assert resolve_target(str(run / "logs" / "train.out")).recorded_by is None


def test_recorded_options_of_the_wrong_kind_are_left_out(tmp_path):
    run = tmp_path / "a"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 1.0}) + "\n")
    _record(
        run, {"log": 7, "format": ["x"], "pattern": "(", "run": None, "map": [1]}, {"stall": -5, "spike_factor": "x"}
    )
    t = resolve_target(str(run))
    assert (t.log_path, t.format, t.recorded_by) == (str(run / "metrics.jsonl"), "jsonl", None)
    from runwatch.judging.watchoptions import Options
    from runwatch.reading.target import recorded_rule_options

    assert recorded_rule_options(str(run), Options) == {}
    _record(run, {"format": "nonsense"}, {"stall": 40.0, "pid": 3})
    assert resolve_target(str(run)).format == "jsonl"  # a recorded format that is not one: ignored
    assert recorded_rule_options(str(run), Options) == {"stall": 40.0}  # pid is no option a file sets


def test_a_watch_and_check_of_a_run_directory_judge_with_its_recorded_rule_options(tmp_path, capsys):
    from runwatch.cli import main

    run = tmp_path / "a"
    run.mkdir()
    _printed(run / "stdout.log", 30)
    _record(run, {"log": "stdout.log", "format": "nanogpt"}, {"max_steps": 10})
    from runwatch.cli import build_parser
    from runwatch.judging.watchoptions import options_from_args

    args = build_parser().parse_args(["check", str(run)])
    assert options_from_args(args, str(run), "check").max_steps == 10
    args = build_parser().parse_args(["check", str(run), "--max-steps", "20"])
    assert options_from_args(args, str(run), "check").max_steps == 20  # given wins
    assert main(["check", str(run), "--json"]) in (0, 7)
    assert json.loads(capsys.readouterr().out)["last_step"] == 30  # read as recorded, no option given
