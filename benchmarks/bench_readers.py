"""Benchmarks of the readers of other tools' logs (see benchmarks/README.md, section "Readers").

    python benchmarks/bench_readers.py tensorboard [--mb 200]   # catch-up: runwatch vs EventAccumulator vs tbparse
    python benchmarks/bench_readers.py poll [--mb 200]          # idle poll and one-record poll on that file
    python benchmarks/bench_readers.py mlflow [--rows 1000000]  # catch-up on an MLflow SQLite store

The event file is written once under /tmp with TensorBoard's own `event_pb2` and CRC (four scalar
tags a step, an eval pair every 100 steps) and deleted afterwards; the MLflow store is the test
store's schema (tests/data/readers/mlflow.db) with one run of N rows added through sqlite3.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import struct
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

from runwatch.reading.readers import tfevents, tfrecord  # noqa: E402
from runwatch.reading.readers.keys import KeyMap  # noqa: E402
from runwatch.reading.readers.mlflowstore import SqliteReader  # noqa: E402
from runwatch.reading.records import iter_records, resolve_target  # noqa: E402

TAGS = ("train/loss", "train/learning_rate", "train/grad_norm", "train/samples_per_second")


def _record(data: bytes) -> bytes:
    header = struct.pack("<Q", len(data))
    return (
        header
        + struct.pack("<I", tfrecord.masked_crc32c(header))
        + data
        + struct.pack("<I", tfrecord.masked_crc32c(data))
    )


def make_event_file(mb: int) -> tuple[str, int]:
    """An event file of about `mb` MB; returns (path, scalar values written)."""
    from tensorboard.compat.proto import event_pb2, summary_pb2

    d = tempfile.mkdtemp(prefix="rw-bench-tb-", dir="/tmp")
    path = os.path.join(d, "events.out.tfevents.1700000000.bench.1.0")
    target = mb * 1_000_000
    values = 0
    with open(path, "wb") as f:
        f.write(_record(event_pb2.Event(wall_time=1.7e9, file_version="brain.Event:2").SerializeToString()))
        written, step = 0, 0
        while written < target:
            step += 1
            out = []
            for i, tag in enumerate(TAGS):
                v = summary_pb2.Summary.Value(tag=tag, simple_value=1.0 / step + i)
                e = event_pb2.Event(wall_time=1.7e9 + step * 0.1, step=step, summary=summary_pb2.Summary(value=[v]))
                out.append(_record(e.SerializeToString()))
            if step % 100 == 0:
                for tag in ("eval/loss", "eval/auroc"):
                    v = summary_pb2.Summary.Value(tag=tag, simple_value=0.5)
                    e = event_pb2.Event(wall_time=1.7e9 + step * 0.1, step=step, summary=summary_pb2.Summary(value=[v]))
                    out.append(_record(e.SerializeToString()))
            blob = b"".join(out)
            f.write(blob)
            written += len(blob)
            values += len(out)
    return path, values


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def _timed(fn) -> tuple[float, float, object]:
    w0, c0 = time.perf_counter(), _cpu()
    out = fn()
    return time.perf_counter() - w0, _cpu() - c0, out


def runwatch_reader(path: str, decoder: str) -> int:
    reader = tfevents.TensorBoardReader(path, KeyMap(), decoder=decoder)
    n = 0
    while True:
        chunk = reader.poll()
        n += len(chunk.items)
        if not chunk.more:
            break
    return n + len(reader.finish())


def runwatch_records(path: str) -> int:
    return sum(1 for _ in iter_records(resolve_target(path)))


def event_accumulator(path: str) -> int:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(path, size_guidance={"scalars": 0})
    acc.Reload()
    return sum(len(acc.Scalars(t)) for t in acc.Tags()["scalars"])


def tbparse_reader(path: str) -> int:
    from tbparse import SummaryReader

    return len(SummaryReader(path).scalars)


def bench_tensorboard(mb: int, repeat: int) -> None:
    path, values = make_event_file(mb)
    size = os.path.getsize(path)
    print(f"event file: {size / 1e6:.1f} MB, {values} scalar values, {values // 4 if values else 0} steps")
    peers = [
        ("runwatch reader, crc32c + event_pb2 (auto)", lambda: runwatch_reader(path, "auto")),
        ("runwatch reader, crc32c + stdlib decoder", lambda: runwatch_reader(path, "none")),
        ("runwatch reader, stdlib only (CRC and decoder)", None),
        ("runwatch iter_records (reader + RecordParser)", lambda: runwatch_records(path)),
        ("TensorBoard EventAccumulator", lambda: event_accumulator(path)),
        ("tbparse SummaryReader(...).scalars", lambda: tbparse_reader(path)),
    ]
    try:
        rows = []
        for name, fn in peers:
            if fn is None:

                def fn(path=path):
                    saved = tfrecord.crc32c
                    tfrecord.crc32c = tfrecord._crc32c_py
                    try:
                        return runwatch_reader(path, "none")
                    finally:
                        tfrecord.crc32c = saved

            times = []
            for _ in range(repeat):
                try:
                    wall, cpu, n = _timed(fn)
                except ImportError as exc:
                    print(f"{name}: skipped ({exc})")
                    break
                times.append((wall, cpu, n))
            if not times:
                continue
            wall = statistics.median(t[0] for t in times)
            cpu = statistics.median(t[1] for t in times)
            rows.append((name, wall, cpu, times[0][2]))
            print(
                f"{name}: {wall:.1f} s wall, {cpu:.1f} s CPU, {size / 1e6 / wall:.1f} MB/s, "
                f"{values / wall / 1000:.0f}k values/s, out={times[0][2]}",
                flush=True,
            )
        base = next((r for r in rows if r[0].startswith("TensorBoard")), None)
        print("\n| reader | wall s | CPU s | MB/s | values/s | x EventAccumulator |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for name, wall, cpu, _n in rows:
            ratio = f"{base[1] / wall:.1f}x" if base else "-"
            print(
                f"| {name} | {wall:.1f} | {cpu:.1f} | {size / 1e6 / wall:.1f} | {values / wall / 1000:.0f}k | {ratio} |"
            )
    finally:
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)


def bench_poll(mb: int) -> None:
    path, _values = make_event_file(mb)
    small = os.path.join(os.path.dirname(path), "small", os.path.basename(path))
    os.makedirs(os.path.dirname(small))
    with open(path, "rb") as src, open(small, "wb") as dst:
        dst.write(src.read(2_000_000))
    one = _record(b"\x09" + struct.pack("<d", 1.8e9) + b"\x10\x01")  # an Event with wall_time and step 1
    try:
        print("| file | catch-up s | idle poll µs (median of 1000) | poll after one new record µs (median of 200) |")
        print("| --- | ---: | ---: | ---: |")
        for p in (small, path):
            reader = tfevents.TensorBoardReader(p, KeyMap())
            wall, _cpu_s, _ = _timed(lambda reader=reader: [None for _ in iter(lambda: reader.poll().more, False)])
            idle = []
            for _ in range(1000):
                t = time.perf_counter()
                reader.poll()
                idle.append(time.perf_counter() - t)
            grow = []
            for _ in range(200):
                with open(p, "ab") as f:
                    f.write(one)
                t = time.perf_counter()
                reader.poll()
                grow.append(time.perf_counter() - t)
            print(
                f"| {os.path.getsize(p) / 1e6:.0f} MB | {wall:.1f} | {statistics.median(idle) * 1e6:.0f} | "
                f"{statistics.median(grow) * 1e6:.0f} |",
                flush=True,
            )
    finally:
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)


def make_store(rows: int) -> tuple[str, str]:
    d = tempfile.mkdtemp(prefix="rw-bench-mlflow-", dir="/tmp")
    db = os.path.join(d, "mlflow.db")
    shutil.copyfile(os.path.join(ROOT, "tests", "data", "readers", "mlflow.db"), db)
    con = sqlite3.connect(db)
    con.execute("PRAGMA page_size = 4096")  # the test store is packed in 512-byte pages; MLflow's default is 4096
    con.execute("VACUUM")
    exp = con.execute("SELECT experiment_id FROM runs LIMIT 1").fetchone()[0]
    run = "bench" + "0" * 27
    con.execute(
        "INSERT INTO runs (run_uuid, name, status, start_time, lifecycle_stage, experiment_id) "
        "VALUES (?, 'bench', 'RUNNING', 9999999999999, 'active', ?)",
        (run, exp),
    )
    keys = ("train_loss", "learning_rate", "grad_norm", "samples_per_second")
    con.executemany(
        "INSERT INTO metrics VALUES (?, ?, ?, ?, ?, 0)",
        ((keys[i % 4], 1.0 / (i // 4 + 1), 1_700_000_000_000 + i, run, i // 4) for i in range(rows)),
    )
    con.commit()
    con.close()
    return db, run


def mlflow_client(db: str, run: str) -> int:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    return sum(
        len(client.get_metric_history(run, k))
        for k in ("train_loss", "learning_rate", "grad_norm", "samples_per_second")
    )


def bench_mlflow(rows: int) -> None:
    db, run = make_store(rows)
    try:
        print(f"store: {os.path.getsize(db) / 1e6:.0f} MB, {rows} metric rows in the run")

        def catch_up():
            r = SqliteReader(db, KeyMap())
            n = 0
            while True:
                c = r.poll()
                n += len(c.items)
                if not c.more:
                    break
            return r, n + len(r.finish())

        wall, cpu, (reader, n) = _timed(catch_up)
        print(
            f"runwatch SqliteReader catch-up: {wall:.1f} s wall, {cpu:.1f} s CPU, {rows / wall / 1000:.0f}k rows/s, {n} records"
        )
        idle = []
        for _ in range(1000):
            t = time.perf_counter()
            reader.poll()
            idle.append(time.perf_counter() - t)
        con = sqlite3.connect(db)
        grow = []
        for i in range(100):
            con.execute(
                "INSERT INTO metrics VALUES ('train_loss', 0.1, ?, ?, ?, 0)", (1_800_000_000_000 + i, run, 10**7 + i)
            )
            con.commit()
            t = time.perf_counter()
            reader.poll()
            grow.append(time.perf_counter() - t)
        con.close()
        print(
            f"idle poll: {statistics.median(idle) * 1e6:.0f} µs (median of 1000); poll after one new row: "
            f"{statistics.median(grow) * 1e6:.0f} µs (median of 100)"
        )
        wall, cpu, _ = _timed(lambda: sum(1 for _ in iter_records(db)))
        print(f"runwatch iter_records (reader + RecordParser): {wall:.1f} s wall, {rows / wall / 1000:.0f}k rows/s")
        try:
            wall, cpu, n = _timed(lambda: mlflow_client(db, run))
            print(
                f"MLflow client get_metric_history x4 keys: {wall:.1f} s wall, {cpu:.1f} s CPU, "
                f"{rows / wall / 1000:.0f}k rows/s, {n} rows"
            )
        except ImportError as exc:
            print(f"MLflow client: skipped ({exc})")
    finally:
        shutil.rmtree(os.path.dirname(db), ignore_errors=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("tensorboard", "poll", "mlflow"))
    p.add_argument("--mb", type=int, default=200)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--repeat", type=int, default=1)
    a = p.parse_args()
    if a.what == "tensorboard":
        bench_tensorboard(a.mb, a.repeat)
    elif a.what == "poll":
        bench_poll(a.mb)
    else:
        bench_mlflow(a.rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
