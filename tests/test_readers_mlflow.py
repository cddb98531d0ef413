"""MLflow stores: the SQLite store read-only and by row id, the file store by byte offset."""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import sqlite3

import pytest

from runwatch.cli import main
from runwatch.judging.watchdog import Options, Watcher, check
from runwatch.reading.readers import ReadOptions, mlflowstore
from runwatch.reading.readers.keys import KeyMap
from runwatch.reading.records import iter_records, resolve_target

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "readers")
DB = os.path.join(DATA, "mlflow.db")
FILE_RUN = os.path.join(DATA, "mlruns-run")


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "mlflow.db"
    shutil.copyfile(DB, path)
    return str(path)


def run_ids(path):
    with sqlite3.connect(path) as con:
        return [r[0] for r in con.execute("SELECT run_uuid FROM runs ORDER BY start_time")]


def test_every_metrics_row_of_the_latest_run_is_read_once(db):
    """The records hold exactly the rows sqlite3 finds for the run (value, step, time)."""
    latest = run_ids(db)[-1]
    with sqlite3.connect(db) as con:
        rows = con.execute(
            "SELECT key, value, step, timestamp, is_nan FROM metrics WHERE run_uuid = ?", (latest,)
        ).fetchall()
    want = sorted((k, s, "nan" if nan else v) for k, v, s, _ts, nan in rows)
    got = []
    for rec in iter_records(db):
        for key, value in rec.raw.items():
            if key in ("train_loss", "learning_rate", "grad_norm", "samples_per_second", "val_loss", "val_auroc"):
                got.append((key, rec.step, "nan" if math.isnan(value) else value))
    assert sorted(got) == want and len(want) == 40 * 4 + 8 * 2


def test_run_picks_a_run(db, capsys):
    first = run_ids(db)[0]
    recs = list(iter_records(resolve_target(db, ReadOptions(run=first))))
    assert [(r.kind, r.step, r.loss) for r in recs] == [("train", 1, 9.0)]
    assert main(["check", db, "--run", "nope"]) == 7
    assert (
        capsys.readouterr().out.splitlines()[-1] == "ANOMALY invalid_log step=0: mlflow.db: no run 'nope' in the store"
    )


def test_the_store_is_opened_read_only_and_left_as_it_was(db):
    before = _digest(db)
    reader = mlflowstore.SqliteReader(db, KeyMap())
    reader.poll()
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        reader._db.execute("DELETE FROM metrics")
    reader.close()
    assert _digest(db) == before


def _digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_only_new_rows_are_asked_for_and_an_idle_poll_asks_nothing(db):
    latest = run_ids(db)[-1]
    reader = mlflowstore.SqliteReader(db, KeyMap())
    assert len(reader.poll().items) + len(reader.finish()) == 48
    statements: list[str] = []
    reader._db.set_trace_callback(statements.append)
    assert reader.poll().items == []
    assert statements == []  # nothing changed: one stat, no query
    with sqlite3.connect(db) as con:
        con.executemany(
            "INSERT INTO metrics VALUES (?, ?, ?, ?, ?, 0)",
            [("train_loss", 0.5, 1_700_000_500_000, latest, 820), ("train_loss", 0.4, 1_700_000_510_000, latest, 840)],
        )
    items = reader.poll().items
    assert [(r["step"], r["loss"]) for _w, r in items + reader.finish()] == [(820, 0.5), (840, 0.4)]
    assert any("rowid > " in s for s in statements)


def test_a_run_started_later_is_a_new_session(db):
    with sqlite3.connect(db) as con:
        exp = con.execute("SELECT experiment_id FROM runs ORDER BY start_time DESC").fetchone()[0]
        con.execute(
            "INSERT INTO runs (run_uuid, name, status, start_time, lifecycle_stage, experiment_id) "
            "VALUES ('relaunch', 'r', 'RUNNING', 9999999999999, 'active', ?)",
            (exp,),
        )
        con.execute("INSERT INTO metrics VALUES ('train_loss', 0.3, 1, 'relaunch', 500, 0)")
    assert [(r.session, r.step, r.loss) for r in iter_records(db)] == [("session-1", 500, 0.3)]  # the latest run


def test_a_reader_follows_into_a_run_started_later(db):
    reader = mlflowstore.SqliteReader(db, KeyMap(), fetch_rows=10)
    while reader.poll().more:
        pass
    with sqlite3.connect(db) as con:
        exp = con.execute("SELECT experiment_id FROM runs ORDER BY start_time DESC").fetchone()[0]
        con.execute(
            "INSERT INTO runs (run_uuid, name, status, start_time, lifecycle_stage, experiment_id) "
            "VALUES ('relaunch', 'r', 'RUNNING', 9999999999999, 'active', ?)",
            (exp,),
        )
        con.execute("INSERT INTO metrics VALUES ('train_loss', 0.3, 1, 'relaunch', 500, 0)")
    items = reader.poll().items + reader.finish()
    assert [(w, r if r is None else r["step"]) for w, r in items] == [
        ("mlflow.db:metrics row 172", 800),
        ("mlflow.db:metrics row 176", 800),
        ("mlflow.db:run relaunch", None),
        ("mlflow.db:metrics row 178", 500),
    ]


def test_a_locked_store_is_waited_for_then_one_line(db, capsys, monkeypatch):
    monkeypatch.setattr(mlflowstore, "LOCK_WAIT_SECONDS", 0.5)
    monkeypatch.setattr(mlflowstore, "BUSY_TIMEOUT_SECONDS", 0.05)
    writer = sqlite3.connect(db, isolation_level=None)
    writer.execute("BEGIN EXCLUSIVE")
    try:
        assert main(["check", db]) == 1
        err = capsys.readouterr().err.strip()
        assert err == (
            "runwatch: mlflow.db: the store is locked by a writer (database is locked; waited 0.5 s); try again"
        )
        watcher = Watcher(db, Options(stall=1e6, startup_grace=1e6), log=lambda m: None, poll_checks=[])
        assert watcher.poll_once() is None  # a watch waits (the stall rule still applies)
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    v = watcher.poll_once()
    assert v is not None and v.kind == "loss_spike"


def test_a_file_that_is_not_sqlite(tmp_path):
    path = tmp_path / "mlflow.db"
    path.write_text("not a database at all, just text that is long enough to have a header")
    result = check(str(path))
    assert [(f.kind, f.message) for f in result.findings] == [
        ("invalid_log", "mlflow.db: not an SQLite database (file is not a database)")
    ]


def test_file_store_lines_grouped_by_step(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(FILE_RUN, run)
    t = resolve_target(str(run))
    assert (t.format, t.run_dir) == ("mlflow", str(run))
    recs = list(iter_records(t))
    assert len([r for r in recs if r.kind == "train"]) == 40 and len([r for r in recs if r.kind == "eval"]) == 8
    assert recs[0].where == "metrics/grad_norm:1"  # a step's values at one time: in the order of the keys
    reader = mlflowstore.FileStoreReader(str(run), KeyMap())
    reader.poll()
    state = json.loads(json.dumps(reader.state_dict(), allow_nan=False))
    again = mlflowstore.FileStoreReader(str(run), KeyMap())
    again.load_state_dict(state)
    with open(run / "metrics" / "train_loss", "a") as f:
        f.write("1700000500000 0.25 820\n")
    items = again.poll().items + again.finish()
    # step 800 (a NaN loss and an eval) was held back: it comes before the new step
    assert [(r["step"], "loss" in r, "eval_loss" in r) for _w, r in items] == [
        (800, True, False),
        (800, False, True),
        (820, True, False),
    ]
    assert items[-1][1]["loss"] == 0.25


def test_run_with_a_file_store_is_a_usage_error(capsys):
    assert main(["check", FILE_RUN, "--run", "abc"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"read.run applies to an SQLite store; {FILE_RUN} is a file-store run directory (one run)"
    )


def test_file_store_bad_line_names_file_and_line(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(FILE_RUN, run)
    with open(run / "metrics" / "val_loss", "a") as f:
        f.write("garbage\n")
    msgs = [f.message for f in check(str(run)).findings if f.kind == "invalid_log"]
    assert msgs == ["metrics/val_loss:9: expected 'timestamp value step', got 'garbage'"]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # SQLAlchemy's, inside MLflow
def test_a_store_written_now_by_the_real_client(tmp_path):
    """The real MLflow client (the version installed) writes a run with a NaN and an infinity."""
    mlflow = pytest.importorskip("mlflow", reason="the [dev] extra (mlflow-skinny) is not installed")
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    with mlflow.start_run():
        for s in range(1, 11):
            mlflow.log_metrics({"train/loss": 1.0 / s, "lr": 0.1}, step=s)
        mlflow.log_metric("train/loss", float("nan"), step=11)
        mlflow.log_metric("val/loss", float("inf"), step=11)
    recs = list(iter_records(str(tmp_path / "mlflow.db")))
    assert [r.step for r in recs if r.kind == "train"] == list(range(1, 12))
    assert math.isnan(recs[-2].loss) and recs[-1].eval_loss == math.inf
    assert [(f.kind, f.step, f.message) for f in check(str(tmp_path)).findings] == [
        ("nonfinite_loss", 11, "train loss is NaN"),
        ("nonfinite_loss", 11, "eval loss is Infinity"),
    ]
