"""Throughput and peak memory of the acceptance summary on a large generated log, beside its peers.

    .venv/bin/python benchmarks/bench_summary.py [--size-mb 1024] [--repeats 1] [--pandas-mb 100]

Generates a schema-v1 run directory in a temporary folder (deleted at the end): `run.json` and the
first records written by the real `RunLogger` (QK-Clip on), then train windows templated on its
train record up to `--size-mb` (step continuity and the token identity kept, a skipped update every
50 windows, a val every 100 windows, a checkpoint every 1000, a normal `session_end`). Each peer
runs in its own process over the same file, warm in the page cache; its wall time and peak RSS
(`ru_maxrss` of that child, from `os.wait4`) are measured:

- `python -S scripts/summarize_training_run.py RUN` — the summary, standard library only;
- `python -m runwatch summarize RUN` — the summary with orjson importable (its fast path);
- a bare loop `json.loads` over the lines under `python -S` (and one with `orjson.loads`), which
  parse and count and nothing else: no validation, no aggregation;
- pandas `read_json(lines=True)` in chunks of 100k lines over the whole file, and unchunked over
  the first `--pandas-mb` MB (unchunked it holds the whole frame: at 1 GB it needs many GB);
- DuckDB `read_json` with the columns given, one SQL query (DuckDB's default threads).

pandas and DuckDB compute the same aggregates as the summary (sums, first/last loss, maxima,
steady throughput, memory peaks, last val) but validate nothing; the table says whether their
figures agree with the summary's. The two summary paths must print identical JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
HERE = os.path.abspath(__file__)

RECIPE = {
    "batch_size": 32,
    "seq_len": 2048,
    "gradient_accumulation_steps": 4,
    "qk_clip_threshold": 100.0,
    "max_steps": 10**9,
}
OPTIMIZERS = [{"name": "matrices", "algorithm": "muon"}, {"name": "embeddings", "algorithm": "adamw"}]
HARDWARE = {"device": "NVIDIA H200", "device_count": 8, "world_size": 8, "host": "bench"}
WINDOW = 10


# --- generating the log --------------------------------------------------------------------------


def _template(record: dict, fields: dict[str, str]) -> str:
    """`record` as one JSON line with `{name}` placeholders at the dotted paths in `fields`."""
    rec = json.loads(json.dumps(record))
    for path, name in fields.items():
        obj = rec
        *parents, last = path.split(".")
        for key in parents:
            obj = obj[key]
        obj[last] = f"@@{name}@@"
    text = json.dumps(rec, separators=(",", ":"), ensure_ascii=False)
    text = text.replace("{", "{{").replace("}", "}}")
    for name in fields.values():
        text = text.replace(f'"@@{name}@@"', "{" + name + "}")
    return text + "\n"


def generate(run_dir: str, size_mb: float) -> dict:
    """Write a valid run of about `size_mb` MB into `run_dir`; return what it holds."""
    sys.path.insert(0, SRC)
    from runwatch import RunLogger

    with RunLogger(run_dir, recipe=RECIPE, optimizers=OPTIMIZERS, hardware=HARDWARE, window=WINDOW) as log:
        for i in range(WINDOW):
            log.step(
                loss=3.0,
                lr=3e-4,
                grad_norm=1.0,
                clipped=i % 3 == 0,
                qk_observed=64,
                qk_clipped=i % 2,
                qk_max_logit=80.0 + i,
            )
        log.val(loss=2.9, metrics={"auroc": 0.61, "accuracy": 0.57})
        log.checkpoint("ckpt/step-10.pt", seconds=1.5, bytes=123456789, verified=True)
    path = os.path.join(run_dir, "metrics.jsonl")
    with open(path, encoding="utf-8") as f:
        real = {rec["event"]: rec for rec in map(json.loads, f)}
    session = {
        "elapsed_seconds": "elapsed",
        "tokens": "session_tokens",
        "tokens_per_second": "tps",
        "profiling_seconds": "profiling",
    }
    common = {
        "step": "step",
        "time": "time",
        "memory.host_rss_peak_bytes": "rss",
        **{f"session.{k}": v for k, v in session.items()},
    }
    train = _template(
        real["train"],
        {
            **common,
            "updates": "updates",
            "skipped": "skipped",
            "attempted": "attempted",
            "tokens": "tokens",
            "train_seconds": "train_seconds",
            "loss": "loss",
            "lr": "lr",
            "grad_norm.mean": "gmean",
            "grad_norm.max": "gmax",
            "nonfinite_grad_norms": "nonfinite",
            "grad_clipped_fraction": "clipfrac",
            "qk_clip.observed_head_updates": "observed",
            "qk_clip.clipped_head_updates": "clipped",
            "qk_clip.max_logit": "max_logit",
        },
    )
    val = _template(real["val"], {**common, "loss": "loss", "metrics.auroc": "auroc"})
    checkpoint = _template(real["checkpoint"], {**common, "path": "path"})
    end = _template(real["session_end"], {**common, "totals.tokens": "total_tokens", "totals.skipped": "total_skipped"})

    per_attempt = RECIPE["batch_size"] * RECIPE["seq_len"] * RECIPE["gradient_accumulation_steps"]
    target = int(size_mb * 1024 * 1024)
    step = tokens = skipped_total = windows = records = 0
    t0 = 1_800_000_000.0
    size = 0
    chunk: list[str] = []
    with open(path, "w", encoding="utf-8") as f:
        while size < target:
            windows += 1
            skipped = 1 if windows % 50 == 0 else 0
            updates = WINDOW - skipped
            step += updates
            tokens += per_attempt * WINDOW
            skipped_total += skipped
            elapsed = windows * 2.5
            loss = 3.0 / (1.0 + windows * 1e-4) + (windows % 7) * 1e-3
            values = {
                "step": step,
                "time": t0 + elapsed,
                "rss": 2_000_000_000 + windows,
                "elapsed": elapsed,
                "session_tokens": tokens,
                "tps": tokens / elapsed,
                "profiling": 0.0,
            }
            line = train.format(
                **values,
                updates=updates,
                skipped=skipped,
                attempted=WINDOW,
                tokens=per_attempt * WINDOW,
                train_seconds=2.4 + (windows % 5) * 0.01,
                loss=loss,
                lr=3e-4 * (1.0 - windows * 1e-8),
                gmean=0.9 + (windows % 11) * 0.01,
                gmax=1.2 + (windows % 13) * 0.1,
                nonfinite=skipped,
                clipfrac=(windows % 4) / updates,
                observed=640,
                clipped=windows % 64,
                max_logit=90.0 + (windows % 17) * 0.5,
            )
            chunk.append(line)
            size += len(line)
            if windows % 100 == 0:
                chunk.append(val.format(**values, loss=loss + 0.05, auroc=0.5 + min(windows * 1e-6, 0.45)))
                size += len(chunk[-1])
            if windows % 1000 == 0:
                chunk.append(checkpoint.format(**values, path=json.dumps(f"ckpt/step-{step}.pt")))
                size += len(chunk[-1])
            if len(chunk) >= 10_000:
                records += len(chunk)
                f.write("".join(chunk))
                chunk.clear()
        values["time"] += 1.0
        chunk.append(end.format(**values, total_tokens=tokens, total_skipped=skipped_total))
        records += len(chunk)
        f.write("".join(chunk))
    return {"bytes": os.path.getsize(path), "records": records, "windows": windows, "last_step": step}


# --- the peers, each run as a child process of this script -------------------------------------


def child_bare(path: str) -> dict:
    """Parse every line with the standard library's json.loads; count them."""
    loads = json.loads
    n = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            loads(line)
            n += 1
    return {"records": n}


def child_bare_bytes(path: str) -> dict:
    """The same over binary lines (json.loads then detects the encoding and decodes each line)."""
    loads = json.loads
    n = 0
    with open(path, "rb") as f:
        for line in f:
            loads(line)
            n += 1
    return {"records": n}


def child_bare_orjson(path: str) -> dict:
    import orjson

    loads = orjson.loads
    n = 0
    with open(path, "rb") as f:
        for line in f:
            loads(line)
            n += 1
    return {"records": n}


def _pandas_partial(df, acc: dict) -> None:
    """Fold one DataFrame of records into `acc` (the summary's aggregates, nothing validated)."""
    import pandas as pd

    if "memory" in df:
        rss = df["memory"].str.get("host_rss_peak_bytes").max()
        if not pd.isna(rss):
            acc["rss"] = max(acc.get("rss", 0), int(rss))
    acc["last_step"] = int(df["step"].iloc[-1])
    train = df[df["event"] == "train"]
    if len(train):
        acc["updates"] = acc.get("updates", 0) + int(train["updates"].sum())
        acc["tokens"] = acc.get("tokens", 0) + int(train["tokens"].sum())
        acc["skipped"] = acc.get("skipped", 0) + int(train["skipped"].sum())
        acc["nonfinite"] = acc.get("nonfinite", 0) + int(train["nonfinite_grad_norms"].sum())
        acc["windows"] = acc.get("windows", 0) + len(train)
        acc.setdefault("first_loss", float(train["loss"].iloc[0]))
        acc["last_loss"] = float(train["loss"].iloc[-1])
        acc["grad_max"] = max(acc.get("grad_max", -math.inf), float(train["grad_norm"].str.get("max").max()))
        acc["clipped_weighted"] = acc.get("clipped_weighted", 0.0) + float(
            (train["grad_clipped_fraction"] * train["updates"]).sum()
        )
        qk = train["qk_clip"]
        acc["qk_observed"] = acc.get("qk_observed", 0) + int(qk.str.get("observed_head_updates").sum())
        acc["qk_clipped"] = acc.get("qk_clipped", 0) + int(qk.str.get("clipped_head_updates").sum())
        acc["qk_max_logit"] = max(acc.get("qk_max_logit", -math.inf), float(qk.str.get("max_logit").max()))
        acc["steady_seconds"] = acc.get("steady_seconds", 0.0) + float(train["train_seconds"].sum())
    val = df[df["event"] == "val"]
    if len(val):
        acc["last_val_step"] = int(val["step"].iloc[-1])
        acc["last_val_loss"] = float(val["loss"].iloc[-1])
    end = df[df["event"] == "session_end"]
    if len(end):
        acc["end_reason"] = str(end["reason"].iloc[-1])


def _finish(acc: dict) -> dict:
    return {
        "last_step": acc["last_step"],
        "updates": acc["updates"],
        "tokens": acc["tokens"],
        "skipped_updates": acc["skipped"],
        "nonfinite_grad_norms": acc["nonfinite"],
        "train_windows": acc["windows"],
        "loss": {"first": acc["first_loss"], "last": acc["last_loss"]},
        "gradient_norm_max": acc["grad_max"],
        "gradient_clipped_fraction": acc["clipped_weighted"] / acc["updates"],
        "qk_observed": acc["qk_observed"],
        "qk_clipped": acc["qk_clipped"],
        "qk_max_logit": acc["qk_max_logit"],
        "steady_train_tokens": acc["tokens"],
        "steady_train_seconds": acc["steady_seconds"],
        "host_rss_peak_bytes": acc.get("rss"),
        "last_val": [acc.get("last_val_step"), acc.get("last_val_loss")],
        "end_reason": acc.get("end_reason"),
    }


def child_pandas_chunked(path: str) -> dict:
    import pandas as pd

    acc: dict = {}
    with pd.read_json(path, lines=True, chunksize=100_000, convert_dates=False, dtype=False) as reader:
        for df in reader:
            _pandas_partial(df, acc)
    return _finish(acc)


def child_pandas_whole(path: str, nrows: str) -> dict:
    import pandas as pd

    df = pd.read_json(path, lines=True, nrows=int(nrows), convert_dates=False, dtype=False)
    acc: dict = {}
    _pandas_partial(df, acc)
    return {"records": len(df), "updates": acc["updates"]}


DUCKDB_COLUMNS = {
    "event": "VARCHAR",
    "step": "BIGINT",
    "updates": "BIGINT",
    "skipped": "BIGINT",
    "tokens": "BIGINT",
    "nonfinite_grad_norms": "BIGINT",
    "loss": "DOUBLE",
    "train_seconds": "DOUBLE",
    "grad_norm": "STRUCT(mean DOUBLE, max DOUBLE)",
    "grad_clipped_fraction": "DOUBLE",
    "qk_clip": "STRUCT(threshold DOUBLE, observed_head_updates BIGINT, clipped_head_updates BIGINT, max_logit DOUBLE)",
    "memory": "STRUCT(host_rss_peak_bytes BIGINT)",
    "reason": "VARCHAR",
}


def child_duckdb(path: str) -> dict:
    import duckdb

    columns = "{" + ", ".join(f"'{k}': '{v}'" for k, v in DUCKDB_COLUMNS.items()) + "}"
    con = duckdb.connect()
    # In a valid log steps never decrease and train windows' steps increase: order by step.
    con.execute(f"CREATE VIEW log AS SELECT * FROM read_json('{path}', format='newline_delimited', columns={columns})")
    row = con.execute("""
        SELECT
          sum(updates) FILTER (event = 'train'), sum(tokens) FILTER (event = 'train'),
          sum(skipped) FILTER (event = 'train'), sum(nonfinite_grad_norms) FILTER (event = 'train'),
          count(*) FILTER (event = 'train'),
          arg_min(loss, step) FILTER (event = 'train'), arg_max(loss, step) FILTER (event = 'train'),
          max(grad_norm.max) FILTER (event = 'train'),
          sum(grad_clipped_fraction * updates) FILTER (event = 'train'),
          sum(qk_clip.observed_head_updates), sum(qk_clip.clipped_head_updates), max(qk_clip.max_logit),
          sum(train_seconds) FILTER (event = 'train'),
          max(memory.host_rss_peak_bytes),
          max(step) FILTER (event = 'val'), arg_max(loss, step) FILTER (event = 'val'),
          max(reason) FILTER (event = 'session_end'),
          max(step)
        FROM log""").fetchone()
    (
        updates,
        tokens,
        skipped,
        nonfinite,
        windows,
        first_loss,
        last_loss,
        grad_max,
        clipped_weighted,
        observed,
        clipped,
        max_logit,
        seconds,
        rss,
        val_step,
        val_loss,
        reason,
        last_step,
    ) = row
    return _finish(
        {
            "last_step": last_step,
            "updates": updates,
            "tokens": tokens,
            "skipped": skipped,
            "nonfinite": nonfinite,
            "windows": windows,
            "first_loss": first_loss,
            "last_loss": last_loss,
            "grad_max": grad_max,
            "clipped_weighted": clipped_weighted,
            "qk_observed": observed,
            "qk_clipped": clipped,
            "qk_max_logit": max_logit,
            "steady_seconds": seconds,
            "rss": rss,
            "last_val_step": val_step,
            "last_val_loss": val_loss,
            "end_reason": reason,
        }
    )


CHILDREN = {
    "bare": child_bare,
    "bare-bytes": child_bare_bytes,
    "bare-orjson": child_bare_orjson,
    "pandas-chunked": child_pandas_chunked,
    "pandas-whole": child_pandas_whole,
    "duckdb": child_duckdb,
}


# --- measuring ---------------------------------------------------------------------------------


# A child's ru_maxrss counts the memory of the process it was forked from (until its exec), so the
# peers are forked from this small `python -S` launcher (~9 MB) rather than from this script.
LAUNCHER = """
import os, sys, time
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
wall = time.perf_counter() - t0
with open(sys.argv[1], "w") as f:
    f.write(repr((wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024, os.waitstatus_to_exitcode(status))))
"""


def run_child(cmd: list[str], env: dict) -> dict:
    """Run `cmd`; its wall seconds, CPU seconds, peak RSS (bytes), exit status and output."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.NamedTemporaryFile("r") as stats:
        subprocess.run(
            [sys.executable, "-S", "-c", LAUNCHER, stats.name, *cmd],
            stdout=out,
            stderr=err,
            env=env,
            cwd=tempfile.gettempdir(),
            check=True,
        )
        wall, cpu, rss, rc = eval(stats.read())  # the launcher's repr of four numbers
        out.seek(0)
        err.seek(0)
        return {
            "wall": wall,
            "cpu": cpu,
            "rss": rss,
            "rc": rc,
            "stdout": out.read().decode(),
            "stderr": err.read().decode(),
        }


def prefix_lines(path: str, limit: float) -> tuple[int, int]:
    """The number of whole lines within the first `limit` bytes of `path`, and their bytes."""
    lines = size = 0
    with open(path, "rb") as f:
        for line in f:
            if size + len(line) > limit:
                break
            lines += 1
            size += len(line)
    return lines, size


def warm(path: str) -> None:
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def close_enough(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9)
    return a == b


def agrees(summary: dict, other: dict) -> bool:
    """Do the aggregates of pandas/DuckDB match the summary's?"""
    expected = {
        "last_step": summary["last_step"],
        "updates": summary["updates"],
        "tokens": summary["tokens"],
        "skipped_updates": summary["skipped_updates"],
        "nonfinite_grad_norms": summary["nonfinite_grad_norms"],
        "train_windows": summary["train_windows"],
        "gradient_norm_max": summary["gradient_norm_max"],
        "gradient_clipped_fraction": summary["gradient_clipped_fraction"],
        "qk_observed": summary["qk_clip"]["observed_head_updates"],
        "qk_clipped": summary["qk_clip"]["clipped_head_updates"],
        "qk_max_logit": summary["qk_clip"]["max_logit"],
        "steady_train_tokens": summary["steady_train_tokens"],
        "steady_train_seconds": summary["steady_train_seconds"],
        "host_rss_peak_bytes": summary["memory_peaks"]["host_rss_peak_bytes"],
        "last_val": [summary["last_val"]["step"], summary["last_val"]["loss"]],
        "end_reason": summary["end_reason"],
    }
    ok = close_enough(other["loss"]["first"], summary["loss"]["first"]) and close_enough(
        other["loss"]["last"], summary["loss"]["last"]
    )
    for key, value in expected.items():
        if isinstance(value, list):
            ok = ok and all(close_enough(a, b) for a, b in zip(other[key], value))
        else:
            ok = ok and close_enough(other[key], value)
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=1024, help="size of the generated log (default 1024)")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each peer, taken in turn (median)")
    parser.add_argument(
        "--pandas-mb", type=float, default=100, help="unchunked pandas reads only the first N MB (default 100)"
    )
    parser.add_argument("--keep", metavar="DIR", help="generate into DIR and keep it (default: a temporary folder)")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        name, *rest = args.child
        print(json.dumps(CHILDREN[name](*rest)))
        return 0

    tmp = args.keep or tempfile.mkdtemp(prefix="runwatch-bench-summary-")
    run_dir = os.path.join(tmp, "run")
    try:
        t0 = time.perf_counter()
        info = generate(run_dir, args.size_mb)
        path = os.path.join(run_dir, "metrics.jsonl")
        mb = info["bytes"] / 1e6
        print(
            f"generated {mb:.0f} MB, {info['records']} records ({info['windows']} train windows) "
            f"in {time.perf_counter() - t0:.1f} s; python {sys.version.split()[0]}, {os.cpu_count()} cores"
        )

        py = sys.executable
        env = dict(os.environ, PYTHONPATH=SRC, OMP_NUM_THREADS="1")
        env.pop("PYTHONSTARTUP", None)
        pandas_rows, pandas_bytes = prefix_lines(path, args.pandas_mb * 1e6)
        pandas_mb = pandas_bytes / 1e6
        peers = [
            (
                "summary, python -S (stdlib)",
                [py, "-S", os.path.join(ROOT, "scripts", "summarize_training_run.py"), run_dir],
                mb,
                info["records"],
            ),
            ("summary, orjson fast path", [py, "-m", "runwatch", "summarize", run_dir], mb, info["records"]),
            ("bare json.loads loop, python -S", [py, "-S", HERE, "--child", "bare", path], mb, info["records"]),
            (
                "bare json.loads loop, bytes lines, -S",
                [py, "-S", HERE, "--child", "bare-bytes", path],
                mb,
                info["records"],
            ),
            ("bare orjson.loads loop", [py, HERE, "--child", "bare-orjson", path], mb, info["records"]),
            ("pandas read_json, chunks of 100k", [py, HERE, "--child", "pandas-chunked", path], mb, info["records"]),
            (
                f"pandas read_json, whole (first {pandas_mb:.0f} MB)",
                [py, HERE, "--child", "pandas-whole", path, str(pandas_rows)],
                pandas_mb,
                pandas_rows,
            ),
            ("DuckDB read_json + SQL", [py, HERE, "--child", "duckdb", path], mb, info["records"]),
        ]
        warm(path)
        runs: dict[str, list[dict]] = {name: [] for name, *_ in peers}
        for _ in range(args.repeats):
            for name, cmd, _mb, _records in peers:
                r = run_child(cmd, env)
                if r["rc"] != 0:
                    print(f"{name}: exit {r['rc']}: {r['stderr'].strip()[-500:]}")
                runs[name].append(r)

        stdlib = runs[peers[0][0]][0]
        fast = runs[peers[1][0]][0]
        summary = json.loads(stdlib["stdout"])
        identical = stdlib["stdout"] == fast["stdout"] and all(
            r["stdout"] == stdlib["stdout"] for n in runs for r in runs[n] if n.startswith("summary")
        )
        print()
        print("MB/s: MB of the log / wall seconds; per CPU s: / CPU seconds (user + sys, all threads), which a")
        print("shared machine disturbs less. x bare: throughput / that of the bare json.loads loop (text lines).")
        print(
            f"{'peer':<40} {'MB':>5} {'wall s':>7} {'CPU s':>7} {'MB/s':>6} {'per CPU s':>9} {'records/s':>9} "
            f"{'peak RSS MB':>11} {'x bare':>6} {'x bare CPU':>10}  result"
        )
        table = {}
        for name, _cmd, size, records in peers:
            rs = runs[name]
            wall = statistics.median(r["wall"] for r in rs)
            cpu = statistics.median(r["cpu"] for r in rs)
            rss = max(r["rss"] for r in rs)
            ok = all(r["rc"] == 0 for r in rs)
            if not ok:
                result = "FAILED"
            elif name.startswith("summary"):
                result = "identical JSON" if identical else "JSON DIFFERS"
            elif name.startswith(("pandas read_json, chunks", "DuckDB")):
                result = "agrees" if agrees(summary, json.loads(rs[0]["stdout"])) else "DISAGREES"
            else:
                result = "-"
            # per byte, so that the unchunked pandas run over a prefix compares too
            table[name] = {"speed": size / wall, "cpu_speed": size / cpu, "rss": rss, "ok": ok, "result": result}
        bare = table[peers[2][0]]
        for name, _cmd, size, records in peers:
            t = table[name]
            x, x_cpu = t["speed"] / bare["speed"], t["cpu_speed"] / bare["cpu_speed"]
            t.update(x=x, x_cpu=x_cpu)
            wall, cpu = size / t["speed"], size / t["cpu_speed"]
            print(
                f"{name:<40} {size:>5.0f} {wall:>7.2f} {cpu:>7.2f} {t['speed']:>6.1f} {t['cpu_speed']:>9.1f} "
                f"{records / wall:>9.0f} {t['rss'] / 2**20:>11.1f} {x:>6.2f} {x_cpu:>10.2f}  {t['result']}"
            )

        s_std, s_fast = table[peers[0][0]], table[peers[1][0]]
        checks = [
            ("peak RSS of the stdlib summary < 30 MB", s_std["ok"] and s_std["rss"] < 30 * 2**20),
            ("peak RSS of the fast summary < 30 MB", s_fast["ok"] and s_fast["rss"] < 30 * 2**20),
            ("stdlib summary >= 0.5x the bare json.loads loop (wall)", s_std["x"] >= 0.5),
            ("stdlib summary >= 0.5x the bare json.loads loop (CPU)", s_std["x_cpu"] >= 0.5),
            ("fast summary >= 2x the bare json.loads loop (wall)", s_fast["x"] >= 2),
            ("fast summary >= 2x the bare json.loads loop (CPU)", s_fast["x_cpu"] >= 2),
            ("both summary paths print identical JSON", s_std["ok"] and s_fast["ok"] and identical),
        ]
        print()
        for what, ok in checks:
            print(f"{'PASS' if ok else 'FAIL'}  {what}")
        return 0 if all(ok for _, ok in checks) else 1
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
