"""Benchmarks of the watchdog's reading path (see benchmarks/README.md, section "Watchdog").

    python benchmarks/bench_watchdog.py poll      # per-poll cost: follower vs naive re-read, 10 MB/100 MB/1 GB
    python benchmarks/bench_watchdog.py catchup [MB]  # catch-up on a 1 GB (or MB) log vs a bare json.loads loop
    python benchmarks/bench_watchdog.py rules     # the record rules alone: microseconds a record, in a watch
    python benchmarks/bench_watchdog.py versus OTHER/src [MB]  # this tree against another, in one process
    python benchmarks/bench_watchdog.py status    # runwatch status on a 1 GB log
    python benchmarks/bench_watchdog.py latency   # bad record written -> watchdog exit, --poll 5 and 0.2
    python benchmarks/bench_watchdog.py idle      # CPU of an idle watchdog over 60 s, per hour

Logs are generated under /tmp (a valid schema-v1 session) and deleted afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))

from runwatch.reading.follow import LogFollower, tail_lines  # noqa: E402

RECIPE = {
    "batch_size": 8,
    "seq_len": 512,
    "gradient_accumulation_steps": 1,
    "qk_clip_threshold": None,
    "max_steps": 10**9,
}
RUN_ID, SID = "r-bench", "s-bench"


def make_run(size_bytes: int) -> str:
    d = tempfile.mkdtemp(prefix="rw-bench-", dir="/tmp")
    manifest = {
        "schema_version": 1,
        "run_id": RUN_ID,
        "created_at": "2026-01-01T00:00:00Z",
        "sessions": [
            {
                "session_id": SID,
                "started_at": "2026-01-01T00:00:00Z",
                "start": {"step": 0, "tokens": 0, "skipped": 0},
                "recipe": RECIPE,
                "optimizers": [{"name": "all", "algorithm": "adamw"}],
                "hardware": {},
            }
        ],
    }
    with open(os.path.join(d, "run.json"), "w") as f:
        json.dump(manifest, f)
    written, step, tokens, t0 = 0, 0, 0, time.time() - 10**6
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    with open(os.path.join(d, "metrics.jsonl"), "w") as f:
        buf = []
        while written < size_bytes:
            step += 10
            tokens += 40960
            rec = {
                "run_id": RUN_ID,
                "session_id": SID,
                "event": "train",
                "step": step,
                "time": t0 + step / 10,
                "session": {
                    "elapsed_seconds": step / 10,
                    "tokens": tokens,
                    "tokens_per_second": 40960.0,
                    "profiling_seconds": 0,
                },
                "memory": {"host_rss_peak_bytes": 123456789},
                "updates": 10,
                "skipped": 0,
                "attempted": 10,
                "tokens": 40960,
                "train_seconds": 1.0,
                "loss": 2.0 * (1 + step / 20000) ** -0.5 + (step % 97) / 1000,  # a falling loss (no_progress)
                "lr": 3e-4,
                "grad_norm": {"mean": 0.8, "max": 1.3},
                "nonfinite_grad_norms": 0,
                "grad_clipped_fraction": 0.1,
            }
            line = dumps(rec) + "\n"
            buf.append(line)
            written += len(line)
            if len(buf) >= 10000:
                f.write("".join(buf))
                buf = []
        f.write("".join(buf))
    return d


def _append_record(path: str, step: int) -> None:
    with open(path, "a") as f:
        f.write('{"note": %d}\n' % step)


def bench_poll() -> None:
    print(
        "| log | naive re-read + split: time / peak memory | follower: idle poll | follower: poll with one new record | seek back from the end (last line) |"
    )
    print("| --- | --- | --- | --- | --- |")
    for label, size in (("10 MB", 10 * 2**20), ("100 MB", 100 * 2**20), ("1 GB", 2**30)):
        d = make_run(size)
        path = os.path.join(d, "metrics.jsonl")
        try:
            naive, peaks = [], []
            for _ in range(3 if size < 2**30 else 2):
                tracemalloc.start()
                t = time.perf_counter()
                with open(path, "rb") as f:
                    lines = f.read().split(b"\n")
                naive.append(time.perf_counter() - t)
                peaks.append(tracemalloc.get_traced_memory()[1])
                tracemalloc.stop()
                del lines
            fol = LogFollower.from_state(
                {"path": path, "offset": os.path.getsize(path), "lineno": 0, "inode": None, "skipping": False}
            )
            fol.poll()
            idle = []
            tracemalloc.start()
            for _ in range(2000):
                t = time.perf_counter()
                fol.poll()
                idle.append(time.perf_counter() - t)
            idle_peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            new = []
            for i in range(300):
                _append_record(path, i)
                t = time.perf_counter()
                b = fol.poll()
                new.append(time.perf_counter() - t)
                assert len(b.lines) == 1
            tails = []
            for _ in range(300):
                t = time.perf_counter()
                tail_lines(path, 1)
                tails.append(time.perf_counter() - t)
            fol.close()
            print(
                f"| {label} | {statistics.median(naive) * 1e3:.0f} ms / {max(peaks) / 2**20:.0f} MiB "
                f"| {statistics.median(idle) * 1e6:.1f} µs (peak {idle_peak / 1024:.1f} KiB over 2000 polls) "
                f"| {statistics.median(new) * 1e6:.1f} µs | {statistics.median(tails) * 1e6:.1f} µs |",
                flush=True,
            )
        finally:
            shutil.rmtree(d)


def bench_catchup() -> None:
    from runwatch.judging.watchdog import Options, Watcher, check

    mb = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
    d = make_run(mb * 2**20)
    path = os.path.join(d, "metrics.jsonl")
    try:
        n = 0
        t = time.perf_counter()
        with open(path, "rb") as f:
            for line in f:
                json.loads(line)
                n += 1
        bare = time.perf_counter() - t
        w = Watcher(d, Options(stall=10**6), log=lambda m: None)
        t = time.perf_counter()
        v = w.poll_once()
        watch_s = time.perf_counter() - t
        assert v is None and w.last_step == n * 10, (v, w.last_step)
        t = time.perf_counter()
        res = check(d)
        check_s = time.perf_counter() - t
        assert not res.findings
        print(
            f"| {mb} MB, {n} records | bare json.loads loop {bare:.1f} s ({n / bare / 1e3:.0f} k rec/s) "
            f"| watch catch-up {watch_s:.1f} s ({n / watch_s / 1e3:.0f} k rec/s, {bare / watch_s:.2f}x, "
            f"{watch_s / n * 1e6:.2f} us/record) | check {check_s:.1f} s ({bare / check_s:.2f}x) |"
        )
    finally:
        shutil.rmtree(d)


def bench_rules(records: int = 200_000, rounds: int = 5) -> None:
    """The record rules alone, as a watch applies them: a schema-v1-like session (a train record a
    window with loss, lr, gradient norms, throughput and its seconds, an eval record every 100),
    observed record by record; the median of `rounds` passes, in microseconds a record."""
    import inspect
    import random

    from runwatch.judging.rules import Rules
    from runwatch.judging.watchdog import Options
    from runwatch.reading.records import Record

    rng = random.Random(0)
    has_seconds = "seconds" in inspect.signature(Record).parameters
    recs = []
    for i in range(1, records + 1):
        loss = 2.0 * (1 + i / 5000) ** -0.5 * (1 + rng.uniform(-0.05, 0.05))
        g = 1.0 + rng.uniform(-0.2, 0.2)
        extra = {"seconds": 1.0} if has_seconds else {}
        recs.append(
            Record(
                "train",
                "s",
                i * 10,
                time=1e9 + i,
                loss=loss,
                lr=1e-4,
                grad_mean=g,
                grad_max=g * 1.5,
                throughput=4096.0 * (1 + rng.uniform(-0.02, 0.02)),
                tokens=4096,
                **extra,
            )
        )
        if i % 100 == 0:
            recs.append(Record("eval", "s", i * 10, eval_loss=loss * 1.1, metrics={"auroc": 0.9}))
    opts = Options()
    live = "live" in inspect.signature(Rules).parameters
    times = []
    for _ in range(rounds):
        rules = Rules(opts, 0, live=True) if live else Rules(opts, 0)
        observe = rules.observe
        t = time.perf_counter()
        for rec in recs:
            observe(rec)
        times.append(time.perf_counter() - t)
    med = statistics.median(times)
    print(
        f"| rules, {len(recs)} records | median of {rounds}: {med:.2f} s, {med / len(recs) * 1e6:.2f} us/record "
        f"(min {min(times) / len(recs) * 1e6:.2f}, max {max(times) / len(recs) * 1e6:.2f}) |"
    )


def bench_versus() -> None:
    """This tree's watch against another tree's (OTHER/src: e.g. a checkout of the main branch), side
    by side in one process: the other package is loaded under another name (runwatch imports itself
    relatively), and both read the same generated schema-v1 log, in turn, 10 rounds: the catch-up
    (follower, parser, rules) and the record rules alone, in microseconds a record."""
    import gc
    import importlib

    other = sys.argv[2]
    mb = int(sys.argv[3]) if len(sys.argv) > 3 else 32
    tmp = tempfile.mkdtemp(prefix="rw-peer-", dir="/tmp")
    shutil.copytree(os.path.join(other, "runwatch"), os.path.join(tmp, "runwatch_peer"))
    sys.path.insert(0, tmp)
    trees = {}
    for name, pkg in (("this tree", "runwatch"), ("other tree", "runwatch_peer")):
        modules = ("watchdog", "judging.rules", "records", "files.schema")  # (where they live now)
        trees[name] = tuple(importlib.import_module(f"{pkg}.{m}") for m in modules)
    d = make_run(mb * 2**20)
    try:
        with open(os.path.join(d, "metrics.jsonl"), "rb") as f:
            lines = f.read().split(b"\n")[:-1]
        recs = {}
        for name, (_w, _r, records, schema) in trees.items():
            parser = records.RecordParser("v1", manifest=schema.read_manifest(d))
            recs[name] = [parser.parse_line(i, raw) for i, raw in enumerate(lines)]
        out: dict[str, dict[str, list[float]]] = {name: {"catch-up": [], "rules": []} for name in trees}
        for _ in range(10):
            for name, (watchdog, rules, _records, _schema) in trees.items():
                gc.collect()
                w = watchdog.Watcher(d, watchdog.Options(stall=10**6), log=lambda m: None)
                t = time.perf_counter()
                assert w.poll_once() is None and w.last_step == len(lines) * 10
                out[name]["catch-up"].append((time.perf_counter() - t) / len(lines) * 1e6)
                engine = rules.Rules(watchdog.Options(), 0)
                observe = engine.observe
                t = time.perf_counter()
                for rec in recs[name]:
                    observe(rec)
                out[name]["rules"].append((time.perf_counter() - t) / len(lines) * 1e6)
        for name, figures in out.items():
            cells = [
                f"{what}: min {min(v):.2f}, median {statistics.median(v):.2f} us/record" for what, v in figures.items()
            ]
            print(f"| {name} | {len(lines)} records ({mb} MB) | " + " | ".join(cells) + " |")
    finally:
        shutil.rmtree(d)
        shutil.rmtree(tmp)


def bench_status() -> None:
    from runwatch.views.status import status

    d = make_run(2**30)
    try:
        times = []
        for _ in range(50):
            t = time.perf_counter()
            st = status(d, gpus=False)
            times.append(time.perf_counter() - t)
        assert st["step"] is not None
        t = time.perf_counter()
        status(d, gpus=True)
        with_gpu = time.perf_counter() - t
        env = dict(
            os.environ, PYTHONPATH=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
        )
        cli = []
        for _ in range(5):
            t = time.perf_counter()
            subprocess.run([sys.executable, "-m", "runwatch", "status", d], env=env, check=True, capture_output=True)
            cli.append(time.perf_counter() - t)
        print(
            f"| status, 1 GB log | in-process median {statistics.median(times) * 1e3:.1f} ms (GPU query once: {with_gpu * 1e3:.1f} ms) "
            f"| whole command incl. interpreter start median {statistics.median(cli) * 1e3:.0f} ms |"
        )
    finally:
        shutil.rmtree(d)


WRITER = r"""
import sys, time
path, interval = sys.argv[1], float(sys.argv[2])
with open(path, "a") as f:
    for i in range(1, 6):
        f.write('{"step": %d, "loss": 1.0}\n' % i); f.flush(); time.sleep(interval)
    time.sleep(float(sys.argv[3]))
    f.write('{"step": 6, "loss": NaN}\n'); f.flush()
    print(time.time(), flush=True)
    time.sleep(60)
"""


def bench_latency() -> None:
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))
    for poll, trials in (("5", 4), ("0.2", 10)):
        lat, decided = [], []
        for k in range(trials):
            d = tempfile.mkdtemp(prefix="rw-lat-", dir="/tmp")
            log = os.path.join(d, "m.jsonl")
            try:
                w = subprocess.Popen(
                    [sys.executable, "-m", "runwatch", "watch", log, "--poll", poll],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                )
                # write the bad record at a varying phase of the poll cycle
                p = subprocess.Popen(
                    [sys.executable, "-c", WRITER, log, "0.05", str(1 + k * float(poll) / trials)],
                    stdout=subprocess.PIPE,
                    text=True,
                )
                written = float(p.stdout.readline())
                w.wait(timeout=60)
                done = time.time()
                lat.append(done - written)
                with open(os.path.join(d, "watchdog.json")) as f:
                    decided.append(json.load(f)["time"] - written)
                p.kill()
                p.wait()
                p.stdout.close()
                w.stdout.close()
            finally:
                shutil.rmtree(d)
        print(
            f"| --poll {poll} | {trials} trials | to the verdict: median {statistics.median(decided):.2f} s, max {max(decided):.2f} s "
            f"| to the process exit: median {statistics.median(lat):.2f} s, max {max(lat):.2f} s "
            f"| bound poll + 0.1 s = {float(poll) + 0.1:.1f} s |",
            flush=True,
        )


def bench_idle() -> None:
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))
    # An idle poll is one stat whatever the log's size (see `poll`); a 100 MB log is used so that the
    # measurement also shows nothing grows with it. The minute starts once the catch-up is over.
    d = make_run(100 * 2**20)
    try:
        for poll in ("5", "0.2"):
            w = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "runwatch",
                    "watch",
                    d,
                    "--poll",
                    poll,
                    "--stall",
                    "100000",
                    "--pid",
                    str(os.getpid()),
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )

            def cpu_now() -> float:
                with open(f"/proc/{w.pid}/stat") as f:
                    parts = f.read().rsplit(")", 1)[1].split()
                return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")

            last = -1.0
            while True:  # wait for the catch-up to end: CPU stops rising
                time.sleep(float(poll) + 2)
                now = cpu_now()
                if now - last < 0.05:
                    break
                last = now

            def cpu() -> float:
                with open(f"/proc/{w.pid}/stat") as f:
                    parts = f.read().rsplit(")", 1)[1].split()
                return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")

            c0, t0 = cpu(), time.time()
            time.sleep(60)
            c1, t1 = cpu(), time.time()
            w.kill()
            w.wait()
            per_hour = (c1 - c0) / (t1 - t0) * 3600
            print(
                f"| --poll {poll} | {c1 - c0:.2f} CPU s over {t1 - t0:.0f} s | {per_hour:.1f} CPU s per hour |",
                flush=True,
            )
    finally:
        shutil.rmtree(d)


if __name__ == "__main__":
    {
        "poll": bench_poll,
        "catchup": bench_catchup,
        "rules": bench_rules,
        "versus": bench_versus,
        "status": bench_status,
        "latency": bench_latency,
        "idle": bench_idle,
    }[sys.argv[1]]()
