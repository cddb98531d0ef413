"""`runwatch subsample` against pandas and DuckDB on one generated JSONL file; `runwatch bench`'s own CPU.

    .venv/bin/python benchmarks/bench_subsample.py [--mb 1024] [--n 10000] [--repeats 1] [--dir DIR] [--peers PEER...]
    .venv/bin/python benchmarks/bench_subsample.py --bench-overhead [--steps 60] [--step-sleep 0.05]

Subsample: generates a JSONL file of about `--mb` MB (rows `{"id", "label", "source", "text"}`,
~240 bytes, 5 labels with shares 50/25/15/9/1 %) and draws `--n` rows from it with each peer, each
in a fresh subprocess so that its peak RSS (ru_maxrss) is its own:

- `runwatch subsample --stratify label` (two streaming passes) and without `--stratify` (one pass);
- pandas: `read_json(lines=True)`, `groupby("label").sample(frac=n/rows)`, `to_json` (all rows in memory;
  `frac` gives about n rows, not exactly n);
- DuckDB: `USING SAMPLE reservoir(n ROWS) REPEATABLE` (not stratified), and per label a window
  `row_number() OVER (PARTITION BY label ORDER BY hash(id, seed))` kept where it is within the label's
  proportional share (stratified), both `COPY ... TO` a JSONL file.

Rows/s and MB/s are of the input; wall seconds include writing the output. Peers run in turn within
each repeat; the table shows medians. The generated data is deleted at the end.

Bench overhead: `runwatch bench --steps N` over `python -m runwatch.demo.tinytrain --step-sleep S`,
run in a subprocess that reports its own CPU time (user + sys, the job excluded) and the job's.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
LABELS = [("spam", 50), ("ham", 25), ("promo", 15), ("social", 9), ("fraud", 1)]

# Each peer runs as `python -c CODE PATH OUT N`; it prints one JSON line {"rows_out", "maxrss_kb"}.
_RUSAGE = "import resource, json; print(json.dumps({'rows_out': rows_out, 'maxrss_kb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))"
PEERS = {
    "runwatch subsample --stratify label": (
        "import sys; sys.path.insert(0, %r)\n"
        "from runwatch.preflight.subsample import SubsampleOptions, subsample\n"
        "r = subsample(sys.argv[1], SubsampleOptions(n=int(sys.argv[3]), out=sys.argv[2], stratify='label'), warn=print)\n"
        "rows_out = r['written']\n" % SRC
    )
    + _RUSAGE,
    "runwatch subsample (no --stratify)": (
        "import sys; sys.path.insert(0, %r)\n"
        "from runwatch.preflight.subsample import SubsampleOptions, subsample\n"
        "r = subsample(sys.argv[1], SubsampleOptions(n=int(sys.argv[3]), out=sys.argv[2]), warn=print)\n"
        "rows_out = r['written']\n" % SRC
    )
    + _RUSAGE,
    "pandas groupby().sample(frac)": (
        "import sys, pandas as pd\n"
        "df = pd.read_json(sys.argv[1], lines=True)\n"
        "out = df.groupby('label', group_keys=False).sample(frac=int(sys.argv[3]) / len(df), random_state=0)\n"
        "out.to_json(sys.argv[2], orient='records', lines=True)\n"
        "rows_out = len(out)\n"
    )
    + _RUSAGE,
    "DuckDB USING SAMPLE reservoir": (
        "import sys, duckdb\n"
        "con = duckdb.connect()\n"
        "con.execute(f\"COPY (SELECT * FROM read_json_auto('{sys.argv[1]}') USING SAMPLE reservoir({int(sys.argv[3])} ROWS)"
        " REPEATABLE (0)) TO '{sys.argv[2]}' (FORMAT json)\")\n"
        "rows_out = con.execute(f\"SELECT count(*) FROM read_json_auto('{sys.argv[2]}')\").fetchone()[0]\n"
    )
    + _RUSAGE,
    "DuckDB per-label window": (
        "import sys, duckdb\n"
        "con = duckdb.connect()\n"
        "n = int(sys.argv[3])\n"
        'con.execute(f"""COPY (SELECT id, label, source, text FROM (\n'
        "  SELECT *, row_number() OVER (PARTITION BY label ORDER BY hash(id, 0)) AS rn,\n"
        "         count(*) OVER (PARTITION BY label) AS c, count(*) OVER () AS total\n"
        "  FROM read_json_auto('{sys.argv[1]}')) WHERE rn <= round({n} * c / total)\n"
        ') TO \'{sys.argv[2]}\' (FORMAT json)""")\n'
        "rows_out = con.execute(f\"SELECT count(*) FROM read_json_auto('{sys.argv[2]}')\").fetchone()[0]\n"
    )
    + _RUSAGE,
}


def generate(path: str, mb: int, seed: int = 0) -> int:
    """Write ~mb MB of JSONL rows; return the row count."""
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "offer", "meeting", "invoice", "lunch", "free", "win", "update"]
    labels = [name for name, share in LABELS for _ in range(share)]
    target = mb * 1024 * 1024
    rows = 0
    with open(path, "w", buffering=1 << 22) as f:
        size = 0
        while size < target:
            block = []
            for _ in range(10000):
                text = " ".join(rng.choice(words) for _ in range(rng.randint(18, 34)))
                block.append(
                    json.dumps(
                        {
                            "id": rows,
                            "label": labels[rng.randrange(100)],
                            "source": f"mailbox-{rng.randrange(500)}",
                            "text": text,
                        }
                    )
                )
                rows += 1
            chunk = "\n".join(block) + "\n"
            f.write(chunk)
            size += len(chunk)
    return rows


def run_peer(name: str, path: str, out: str, n: int) -> dict:
    t0 = time.perf_counter()
    before = os.times()
    proc = subprocess.run([sys.executable, "-c", PEERS[name], path, out, str(n)], capture_output=True, text=True)
    after = os.times()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"}
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return {"wall": wall, "cpu": cpu, "rss_mb": info["maxrss_kb"] / 1024, "rows_out": info["rows_out"]}


def bench_subsample(args: argparse.Namespace) -> None:
    work = tempfile.mkdtemp(prefix="bench-subsample-", dir=args.dir)
    try:
        path = os.path.join(work, "data.jsonl")
        t0 = time.perf_counter()
        rows = generate(path, args.mb)
        size_mb = os.path.getsize(path) / 1e6
        print(
            f"generated {rows:,} rows, {size_mb:,.0f} MB in {time.perf_counter() - t0:.0f}s; n = {args.n:,}", flush=True
        )
        results: dict[str, list[dict]] = {name: [] for name in args.peers}
        for r in range(args.repeats):
            for name in args.peers:
                out = os.path.join(work, "out.jsonl")
                res = run_peer(name, path, out, args.n)
                if os.path.exists(out):
                    os.unlink(out)
                for extra in (out + ".json",):
                    if os.path.exists(extra):
                        os.unlink(extra)
                results[name].append(res)
                print(f"  repeat {r + 1}: {name}: {res}", flush=True)
        print()
        print("| peer | wall s | CPU s | rows/s | MB/s | peak RSS MB | rows out |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for name, runs in results.items():
            ok = [x for x in runs if "error" in x] == [] and runs
            if not ok:
                print(f"| {name} | failed: {runs[0].get('error')} | | | | | |")
                continue
            wall = statistics.median(x["wall"] for x in runs)
            cpu = statistics.median(x["cpu"] for x in runs)
            rss = statistics.median(x["rss_mb"] for x in runs)
            print(
                f"| {name} | {wall:.1f} | {cpu:.1f} | {rows / wall:,.0f} | {size_mb / wall:.1f} | {rss:,.0f} |"
                f" {runs[0]['rows_out']:,} |"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


BENCH_CODE = (
    """
import json, resource, sys, time
sys.path.insert(0, %r)
from runwatch.cli import main
t0 = time.perf_counter()
code = main(sys.argv[1:])
wall = time.perf_counter() - t0
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"code": code, "wall": wall, "bench_cpu": me.ru_utime + me.ru_stime,
                  "job_cpu": kids.ru_utime + kids.ru_stime}))
"""
    % SRC
)


def bench_overhead(args: argparse.Namespace) -> None:
    work = tempfile.mkdtemp(prefix="bench-overhead-", dir=args.dir)
    try:
        runs = []
        for r in range(args.repeats):
            run_dir = os.path.join(work, f"run{r}")
            argv = [
                "bench",
                run_dir,
                "--steps",
                str(args.steps),
                "--json",
                "--",
                sys.executable,
                "-m",
                "runwatch.demo.tinytrain",
                run_dir,
                "--steps",
                "100000",
                "--step-sleep",
                str(args.step_sleep),
            ]
            proc = subprocess.run(
                [sys.executable, "-c", BENCH_CODE, *argv],
                capture_output=True,
                text=True,
                env=dict(os.environ, PYTHONPATH=SRC, OMP_NUM_THREADS="1"),
            )
            info = json.loads(proc.stdout.strip().splitlines()[-1])
            runs.append(info)
            print(f"  repeat {r + 1}: {info}", flush=True)
        wall = statistics.median(x["wall"] for x in runs)
        mine = statistics.median(x["bench_cpu"] for x in runs)
        job = statistics.median(x["job_cpu"] for x in runs)
        print(
            f"\nbench over {args.steps} steps of {args.step_sleep}s sleep + a tiny step: wall {wall:.1f}s,"
            f" bench's own CPU {mine:.2f}s ({100 * mine / wall:.1f}% of one core while it ran; the python"
            f" start-up and imports included), the job's CPU {job:.2f}s"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=int, default=1024)
    p.add_argument("--n", type=int, default=10000)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--dir", default=None, help="where to generate the data (default: the temp dir)")
    p.add_argument(
        "--peers",
        nargs="+",
        choices=list(PEERS),
        default=list(PEERS),
        metavar="PEER",
        help="the peers to run (default: all); at 10 GB pandas needs ~80 GB of memory",
    )
    p.add_argument("--bench-overhead", action="store_true")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--step-sleep", type=float, default=0.05)
    args = p.parse_args()
    if args.bench_overhead:
        bench_overhead(args)
    else:
        bench_subsample(args)


if __name__ == "__main__":
    main()
