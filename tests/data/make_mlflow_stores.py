"""Write the reader tests' trajectory and the MLflow stores that the real MLflow client makes of it.

    python tests/data/make_mlflow_stores.py        # needs mlflow (or mlflow-skinny + sqlalchemy + alembic)

Writes, under tests/data/readers/:
- trajectory.jsonl: one run in minimal telemetry (a loss spike, a gradient explosion, a throughput
  drop, a stuck metric, a NaN loss at the end), the source of every format in the tests;
- mlflow.db: an MLflow SQLite store holding that run (and an earlier, unrelated run), written by
  `mlflow.log_metrics`, then VACUUMed;
- mlruns-run/: the same run as an MLflow file-store run directory (meta.yaml, metrics/<key>).

The stores are committed, so the tests need no MLflow; tests/test_readers_mlflow.py also writes
fresh ones with the real client when it is installed.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sqlite3
import sys
import tempfile

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "readers")

# The names each format's producer would use for the canonical keys.
MLFLOW_NAMES = {
    "loss": "train_loss",
    "lr": "learning_rate",
    "grad_norm": "grad_norm",
    "sps": "samples_per_second",
    "eval_loss": "val_loss",
    "eval_auroc": "val_auroc",
}


def trajectory() -> list[dict]:
    """40 train records (steps 20..800) and 8 eval records, in log order."""
    out = []
    for i in range(1, 41):
        step = 20 * i
        loss = 2.0 * 0.99**i
        if i in (15, 16):
            loss *= 5  # loss_spike
        if i == 40:
            loss = math.nan  # nonfinite_loss
        grad = 80.0 if i in (25, 26, 27) else 1.0  # grad_explosion
        sps = 40.0 if i in (31, 32, 33) else 100.0  # throughput_drop
        out.append(
            {"step": step, "t": 1_700_000_000.0 + 10 * i, "loss": loss, "lr": 0.001, "grad_norm": grad, "sps": sps}
        )
        if i % 5 == 0:
            auroc = 0.9 if step < 500 else 0.625  # stuck_metric from step 500
            out.append(
                {"step": step, "t": 1_700_000_000.0 + 10 * i + 5, "eval_loss": 1.5 - 0.01 * i, "eval_auroc": auroc}
            )
    return out


def write_trajectory(path: str) -> None:
    with open(path, "w") as f:
        for rec in trajectory():
            f.write(json.dumps(rec) + "\n")  # NaN as the bare token: minimal telemetry allows it


def log_run(mlflow, records: list[dict]) -> str:
    with mlflow.start_run() as run:
        for rec in records:
            values = {MLFLOW_NAMES[k]: v for k, v in rec.items() if k in MLFLOW_NAMES}
            mlflow.log_metrics(values, step=rec["step"], timestamp=int(rec["t"] * 1000))
    return run.info.run_id


def main() -> int:
    try:
        import mlflow
    except ImportError:
        print("needs mlflow: pip install mlflow-skinny sqlalchemy alembic", file=sys.stderr)
        return 1
    os.makedirs(HERE, exist_ok=True)
    write_trajectory(os.path.join(HERE, "trajectory.jsonl"))
    recs = trajectory()
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "mlflow.db")
        mlflow.set_tracking_uri(f"sqlite:///{db}")
        mlflow.set_experiment("other")
        log_run(mlflow, [{"step": 1, "t": 1_600_000_000.0, "loss": 9.0}])  # an earlier, unrelated run
        mlflow.set_experiment("readers")
        log_run(mlflow, recs)
        con = sqlite3.connect(db)
        # keep the store free of this machine's details (user, paths, git)
        con.execute("DELETE FROM tags WHERE key != 'mlflow.runName'")
        con.execute("UPDATE runs SET user_id = 'test', source_name = '', artifact_uri = ''")
        con.commit()
        con.execute("PRAGMA page_size = 512")  # ~100 tables and indexes, nearly all empty: small pages
        con.execute("VACUUM")
        con.close()
        shutil.copyfile(db, os.path.join(HERE, "mlflow.db"))
        store = os.path.join(tmp, "mlruns")
        os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"  # the file store is in maintenance mode
        mlflow.set_tracking_uri(f"file:{store}")
        mlflow.set_experiment("readers")
        run_id = log_run(mlflow, recs)
        run_dir = next(os.path.join(r, d) for r, ds, _ in os.walk(store) for d in ds if d == run_id)
        dest = os.path.join(HERE, "mlruns-run")
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(
            run_dir, dest, ignore=shutil.ignore_patterns("tags", "artifacts", "params", "inputs", "outputs")
        )
        meta = os.path.join(dest, "meta.yaml")
        with open(meta) as f:
            lines = [ln for ln in f if not ln.startswith(("artifact_uri:", "user_id:"))]
        with open(meta, "w") as f:
            f.writelines(lines)
    print(f"wrote {HERE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
