"""Host cost of one `RunLogger.step()` against the usual ways of logging the same five values.

    .venv/bin/python benchmarks/bench_logger.py [--repeats 15] [--scale 1.0]
    .venv/bin/python benchmarks/bench_logger.py --construction     # what a session pays once

Peers, measured side by side in one run (repeats interleaved, so a busy machine slows them alike):
- `RunLogger.step()` with Python floats, and with 0-dim CPU tensors (loss, lr, grad_norm,
  clipped, skipped), default window of 10 (one JSON line per 10 steps, amortised into the figure);
- TensorBoard: five `SummaryWriter.add_scalar` calls a step (torch.utils.tensorboard), floats and
  0-dim tensors;
- W&B: `wandb.log` of the five values, offline (WANDB_MODE=offline, a temporary directory);
- a naive per-step writer: `json.dumps` + `write` + `flush` of one line a step (fed tensors, it
  calls float() on each value: a host-device sync each on a GPU);
- the train line's share: `RunLogger.step()` with each train record encoded by `dumps()` of its
  dict instead of `window.TrainLine`;
- the heartbeat's share: `RunLogger.step()` with its heartbeat as shipped (a window's numbers
  posted for a writer thread that looks for posts once a second) and without heartbeats; then, apart
  (a write per window floods the file system's journal and would slow the peers measured after
  it), the training thread's µs for a window's heartbeat posted or written in place, and for a
  phase change (two atomic replaces).

Then, what a session pays once and never on the step path: `RunLogger(...)` + `close()` (with
the provenance it records: two git calls), `provenance.capture()` alone and with a data file.

Reports the median host microseconds per step over the repeats and the ratios to TensorBoard and to
the naive writer (floats), then
counts the host-device conversions (`.item()`, `.tolist()`, `__float__`, `__bool__`, `__int__` on
torch.Tensor) that `step()` makes with tensors: per step between windows, and per window.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))
os.environ.setdefault("OMP_NUM_THREADS", "1")

VALUE_NAMES = ("loss", "lr", "grad_norm", "clipped", "skipped")
RECIPE = {"batch_size": 32, "seq_len": 512, "gradient_accumulation_steps": 1, "qk_clip_threshold": None}


def float_values(n: int) -> list[tuple]:
    """`n` steps of (loss, lr, grad_norm, clipped, skipped) as Python values."""
    return [(2.0 - i * 1e-5, 3e-4, 1.0 + (i % 7) * 0.01, i % 5 == 0, False) for i in range(n)]


def tensor_values(n: int) -> list[tuple]:
    """The same values as 0-dim CPU tensors, made before the clock starts."""
    import torch

    return [
        (torch.tensor(a), torch.tensor(b), torch.tensor(c), torch.tensor(d), torch.tensor(e))
        for a, b, c, d, e in float_values(n)
    ]


# --- peers: each returns (run(values) -> None, close() -> None) ------------------------------------


def peer_runlogger(tmp: str):
    from runwatch import RunLogger

    log = RunLogger(
        os.path.join(tmp, "runwatch"),
        recipe=RECIPE,
        optimizers=[{"name": "all", "algorithm": "adamw"}],
        hardware={"device": "cpu"},
    )
    step = log.step

    def run(values):
        for loss, lr, grad_norm, clipped, skipped in values:
            step(loss=loss, lr=lr, grad_norm=grad_norm, clipped=clipped, skipped=skipped)

    return run, log.close


class _NoBeat:
    """A heartbeat writer that writes nothing: the logger without heartbeats, for comparison."""

    def window(self, step, train_seconds):
        pass

    def phase(self, name, since):
        pass

    def end(self):
        pass


def peer_runlogger_no_heartbeat(tmp: str):
    """RunLogger with its heartbeat writer replaced by one that writes nothing."""
    run, close = peer_runlogger(tmp)
    log = close.__self__
    log._beat.end()
    log._beat = _NoBeat()
    return run, close


def peer_runlogger_dumps(tmp: str):
    """RunLogger with every train record encoded by dumps() of its dict (no TrainLine)."""
    run, close = peer_runlogger(tmp)
    close.__self__._train_line = lambda *args: None  # TrainLine's "another shape": dumps() it
    return run, close


def synchronous_heartbeat(log) -> None:
    """Make a single process's heartbeat writer write each window in step() itself (no writer thread)."""
    beat = log._beat
    beat._stop.set()
    beat._thread.join()
    beat._stop.clear()
    beat._write_windows = True


def peer_tensorboard(tmp: str):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(os.path.join(tmp, "tb"))
    add = writer.add_scalar
    counter = [0]

    def run(values):
        i = counter[0]
        for loss, lr, grad_norm, clipped, skipped in values:
            add("train/loss", loss, i)
            add("train/lr", lr, i)
            add("train/grad_norm", grad_norm, i)
            add("train/clipped", clipped, i)
            add("train/skipped", skipped, i)
            i += 1
        counter[0] = i

    return run, writer.close


def peer_wandb(tmp: str):
    os.environ["WANDB_MODE"] = "offline"
    os.environ["WANDB_SILENT"] = "true"
    os.environ["WANDB_DIR"] = tmp
    os.environ["WANDB_CACHE_DIR"] = os.path.join(tmp, "wandb-cache")
    os.environ["WANDB_CONFIG_DIR"] = os.path.join(tmp, "wandb-config")
    os.environ["WANDB_DATA_DIR"] = os.path.join(tmp, "wandb-data")
    import wandb

    run_ = wandb.init(
        project="runwatch-bench",
        mode="offline",
        dir=tmp,
        settings=wandb.Settings(silent=True, console="off", x_disable_stats=True),
    )
    log = run_.log
    counter = [0]

    def run(values):
        i = counter[0]
        for loss, lr, grad_norm, clipped, skipped in values:
            log({"loss": loss, "lr": lr, "grad_norm": grad_norm, "clipped": clipped, "skipped": skipped}, step=i)
            i += 1
        counter[0] = i

    return run, run_.finish


def peer_naive(tmp: str):
    f = open(os.path.join(tmp, "naive.jsonl"), "w", encoding="utf-8")
    dumps = json.dumps
    counter = [0]

    def run(values):
        i = counter[0]
        for loss, lr, grad_norm, clipped, skipped in values:
            f.write(
                dumps(
                    {"step": i, "loss": loss, "lr": lr, "grad_norm": grad_norm, "clipped": clipped, "skipped": skipped}
                )
                + "\n"
            )
            f.flush()
            i += 1
        counter[0] = i

    return run, f.close


def peer_naive_tensors(tmp: str):
    """The naive writer fed tensors: float() of each value every step (on a GPU, a sync each)."""
    f = open(os.path.join(tmp, "naive.jsonl"), "w", encoding="utf-8")
    dumps = json.dumps
    counter = [0]

    def run(values):
        i = counter[0]
        for loss, lr, grad_norm, clipped, skipped in values:
            f.write(
                dumps(
                    {
                        "step": i,
                        "loss": float(loss),
                        "lr": float(lr),
                        "grad_norm": float(grad_norm),
                        "clipped": bool(clipped),
                        "skipped": bool(skipped),
                    }
                )
                + "\n"
            )
            f.flush()
            i += 1
        counter[0] = i

    return run, f.close


def peer_empty(tmp: str):
    def run(values):
        for loss, lr, grad_norm, clipped, skipped in values:
            pass

    return run, lambda: None


# name, factory, values kind, steps a slice (at --scale 1): ~10-60 ms a slice, so that the slices of
# all peers, taken in turn, see the same load on a shared machine
PEERS = [
    ("empty loop (floor)", peer_empty, "float", 20_000),
    ("RunLogger.step, floats", peer_runlogger, "float", 5_000),
    ("RunLogger.step, floats, no heartbeat", peer_runlogger_no_heartbeat, "float", 5_000),
    ("RunLogger.step, floats, record by dumps()", peer_runlogger_dumps, "float", 5_000),
    ("RunLogger.step, 0-dim tensors", peer_runlogger, "tensor", 2_000),
    ("naive json.dumps+write+flush, floats", peer_naive, "float", 2_000),
    ("naive json.dumps+write+flush, tensors", peer_naive_tensors, "tensor", 2_000),
    ("TensorBoard add_scalar x5, floats", peer_tensorboard, "float", 100),
    ("TensorBoard add_scalar x5, tensors", peer_tensorboard, "tensor", 100),
    ("W&B wandb.log offline, floats", peer_wandb, "float", 100),
]
BASELINE = "TensorBoard add_scalar x5, floats"


def measure(repeats: int, scale: float, skip_wandb: bool) -> dict[str, list[float]]:
    tmp = tempfile.mkdtemp(prefix="runwatch-bench-logger-")
    results: dict[str, list[float]] = {}
    try:
        peers = []
        for name, factory, kind, steps in PEERS:
            if skip_wandb and factory is peer_wandb:
                continue
            steps = max(10, int(steps * scale) // 10 * 10)  # whole windows of 10
            values = float_values(steps) if kind == "float" else tensor_values(steps)
            sub = os.path.join(tmp, f"p{len(peers)}")
            os.makedirs(sub)
            run, close = factory(sub)
            run(values[: min(200, steps)])  # warm up: first-call imports, file creation
            peers.append((name, run, close, values))
            results[name] = []
        for _ in range(repeats):
            for name, run, _close, values in peers:
                t0 = time.perf_counter()
                run(values)
                results[name].append((time.perf_counter() - t0) / len(values) * 1e6)
        for _name, _run, close, _values in peers:
            close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return results


def count_conversions(steps: int = 100, window: int = 10) -> dict[str, int]:
    """Conversions `step()` makes with five 0-dim tensors: between window closes and at them."""
    import torch

    from runwatch import RunLogger

    names = ("item", "tolist", "__float__", "__bool__", "__int__")
    calls: list[str] = []
    saved = {n: getattr(torch.Tensor, n) for n in names}

    def wrap(n, f):
        def counted(self, *a, **k):
            calls.append(n)
            return f(self, *a, **k)

        return counted

    tmp = tempfile.mkdtemp(prefix="runwatch-bench-sync-")
    values = tensor_values(steps)
    per_step: list[int] = []
    try:
        log = RunLogger(tmp, recipe=RECIPE, window=window, hardware={"device": "cpu"})
        for n in names:
            setattr(torch.Tensor, n, wrap(n, saved[n]))
        try:
            for i, (loss, lr, g, c, s) in enumerate(values):
                before = len(calls)
                log.step(loss=loss, lr=lr, grad_norm=g, clipped=c, skipped=s)
                per_step.append(len(calls) - before)
        finally:
            for n in names:
                setattr(torch.Tensor, n, saved[n])
        log.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    closing = [c for i, c in enumerate(per_step) if (i + 1) % window == 0]
    other = [c for i, c in enumerate(per_step) if (i + 1) % window != 0]
    kinds = {n: calls.count(n) for n in names if calls.count(n)}
    return {
        "steps": steps,
        "windows": len(closing),
        "max_per_plain_step": max(other),
        "max_per_window_close": max(closing),
        "total": len(calls),
        "by_kind": kinds,
    }


def heartbeat_costs(n: int = 400) -> dict[str, float]:
    """Median µs on the training thread: a window's heartbeat posted (the default), written in
    place of the post (temp file + os.replace), and one phase change (enter + leave: two writes)."""
    from runwatch import RunLogger

    tmp = tempfile.mkdtemp(prefix="runwatch-bench-heartbeat-")
    out: dict[str, float] = {}
    try:
        log = RunLogger(os.path.join(tmp, "posted"), recipe=RECIPE, hardware={"device": "cpu"})
        sync = RunLogger(os.path.join(tmp, "sync"), recipe=RECIPE, hardware={"device": "cpu"})
        synchronous_heartbeat(sync)
        samples: dict[str, list[float]] = {
            "window heartbeat, posted": [],
            "window heartbeat, written": [],
            "phase change (enter + leave)": [],
        }
        for _ in range(n):
            t0 = time.perf_counter()
            log._beat.window(1, 0.1)
            t1 = time.perf_counter()
            sync._beat.window(1, 0.1)
            t2 = time.perf_counter()
            with log.phase("eval"):
                pass
            t3 = time.perf_counter()
            samples["window heartbeat, posted"].append((t1 - t0) * 1e6)
            samples["window heartbeat, written"].append((t2 - t1) * 1e6)
            samples["phase change (enter + leave)"].append((t3 - t2) * 1e6)
            time.sleep(0.001)  # let the writer thread write, as between two windows
        log.close()
        sync.close()
        out = {k: statistics.median(v) for k, v in samples.items()}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def construction_costs(n: int = 20) -> dict[str, float]:
    """Median ms of what a session pays once, when it starts: `RunLogger(...)` and `close()` as
    shipped (provenance taken: git in this repository), `provenance.capture()` alone, and alone with
    a 1 GiB data file (sparse: its first and last MiB are read, whatever its size)."""
    from runwatch import RunLogger
    from runwatch.files import provenance

    tmp = tempfile.mkdtemp(prefix="runwatch-bench-construct-")
    data = os.path.join(tmp, "train.bin")
    with open(data, "wb") as f:
        f.truncate(1 << 30)
    samples: dict[str, list[float]] = {
        "RunLogger() + close(), provenance in run.json": [],
        "provenance.capture() (two git calls)": [],
        "provenance.capture(data=[1 GiB file])": [],
    }
    old = os.getcwd()
    os.chdir(ROOT)  # the program's working directory: a git repository
    try:
        for i in range(n):
            t0 = time.perf_counter()
            RunLogger(os.path.join(tmp, f"run-{i}"), recipe=RECIPE, hardware={"device": "cpu"}).close()
            t1 = time.perf_counter()
            provenance.capture()
            t2 = time.perf_counter()
            provenance.capture(data=[data])
            t3 = time.perf_counter()
            samples["RunLogger() + close(), provenance in run.json"].append((t1 - t0) * 1e3)
            samples["provenance.capture() (two git calls)"].append((t2 - t1) * 1e3)
            samples["provenance.capture(data=[1 GiB file])"].append((t3 - t2) * 1e3)
    finally:
        os.chdir(old)
        shutil.rmtree(tmp, ignore_errors=True)
    return {k: statistics.median(v) for k, v in samples.items()}


def print_construction() -> None:
    print(f"once a session (cwd {ROOT}), median ms of 20:")
    for what, ms in construction_costs().items():
        print(f"  {what:<48} {ms:>8.1f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15, help="slices per peer, taken in turn (median reported)")
    parser.add_argument("--scale", type=float, default=1.0, help="scale the steps per repeat")
    parser.add_argument("--no-wandb", action="store_true", help="leave W&B out (it starts a service process)")
    parser.add_argument(
        "--construction", action="store_true", help="only what a session pays once: construction and provenance"
    )
    args = parser.parse_args()
    if args.construction:
        print_construction()
        return 0
    warnings.simplefilter("ignore")  # TensorBoard and W&B deprecation chatter

    import platform

    import torch

    print(
        f"python {platform.python_version()}, torch {torch.__version__}, {os.cpu_count()} cores, repeats {args.repeats}"
    )
    results = measure(args.repeats, args.scale, args.no_wandb)
    base = statistics.median(results[BASELINE])
    print()
    naive = statistics.median(results["naive json.dumps+write+flush, floats"])
    print(f"{'peer':<40} {'median us/step':>15} {'min':>8} {'max':>8} {'x TensorBoard':>14} {'x naive':>8}")
    for name, samples in results.items():
        med = statistics.median(samples)
        print(
            f"{name:<40} {med:>15.2f} {min(samples):>8.2f} {max(samples):>8.2f} {med / base:>14.4f} {med / naive:>8.3f}"
        )

    conv = count_conversions()
    print()
    print(
        f"host-device conversions with 0-dim tensors, window 10, {conv['steps']} steps:"
        f" {conv['max_per_plain_step']} per step between windows (max),"
        f" {conv['max_per_window_close']} at a window close (max), {conv['total']} in all"
        f" {conv['by_kind']}"
    )

    med = {name: statistics.median(s) for name, s in results.items()}
    hb = heartbeat_costs()
    window_step = med["RunLogger.step, floats, no heartbeat"] * 10  # one window of step() calls, µs
    print()
    print(
        f"heartbeat (tmp dir {tempfile.gettempdir()}), median µs on the training thread; "
        f"a window of 10 step() calls without heartbeats: {window_step:.1f} µs"
    )
    for what, us in hb.items():
        print(f"  {what:<32} {us:>9.1f} µs  = {us / window_step:.2f}x a window of step()")
    print()
    print_construction()
    floats, tensors = med["RunLogger.step, floats"], med["RunLogger.step, 0-dim tensors"]
    checks = [
        ("step() with floats <= 1/20 of TensorBoard", floats <= base / 20),
        ("step() with tensors <= 1/20 of TensorBoard", tensors <= base / 20),
        (
            "step() with floats cheaper than the naive writer (floats)",
            floats < med["naive json.dumps+write+flush, floats"],
        ),
        (
            "step() with floats <= 0.6x the naive writer (floats)",
            floats <= 0.6 * med["naive json.dumps+write+flush, floats"],
        ),
        (
            "step() with tensors cheaper than the naive writer (floats)",
            tensors < med["naive json.dumps+write+flush, floats"],
        ),
        (
            "step() with tensors cheaper than the naive writer (tensors)",
            tensors < med["naive json.dumps+write+flush, tensors"],
        ),
        ("zero conversions per step with tensors", conv["max_per_plain_step"] == 0),
        ("one .tolist() per window with tensors", conv["by_kind"] == {"tolist": conv["windows"]}),
    ]
    print()
    for what, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {what}")
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
