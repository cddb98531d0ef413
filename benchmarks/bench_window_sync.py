"""The cost of runwatch's one sync point under torch.distributed (gloo on the CPU here).

    OMP_NUM_THREADS=1 .venv/bin/python -m torch.distributed.run --nproc_per_node=2 \
        benchmarks/bench_window_sync.py [--steps 2000] [--repeat 5]

Side by side in one run, interleaved, medians over --repeat rounds, per training step, on rank 0:
  - empty loop: `loss = tensor(...)` only (the floor);
  - RunLogger(window=10): step() appends; every 10th step one all_gather of 14 float64 a rank,
    the heartbeat write before it, and rank 0's record;
  - naive per-step sync: all_reduce the loss every step and rank 0 writes a JSON line (what
    "log the global mean loss each step" costs without windows);
  - the same three around a tiny DDP model's forward/backward/step (a realistic floor);
and the median time of one window all_gather itself, and of the heartbeat sampler (10 Hz) on/off;
and the per-step price of windows that close on time (`max_window_seconds`) once steps are slow:
one `RankGroup.agree` (a one-byte broadcast of rank 0's decision over the CPU group) a step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from runwatch import RunLogger  # noqa: E402
from runwatch.files.heartbeats import HeartbeatConfig  # noqa: E402

RECIPE = {"batch_size": 32, "seq_len": 1, "gradient_accumulation_steps": 1}


def make_model():
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(32, 1))
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def run(kind: str, steps: int, ddp: bool, root: str, gathers: list[float], sample: float = 0.1) -> float:
    rank = dist.get_rank()
    model, opt = make_model() if ddp else (None, None)
    x = torch.randn(16, 32)
    log = None
    if kind == "runwatch":
        run_dir = os.path.join(root, f"r{len(os.listdir(root)) if rank == 0 else 0}-{time.monotonic_ns()}")
        run_dir = [run_dir]
        dist.broadcast_object_list(run_dir, src=0)
        log = RunLogger(run_dir[0], recipe=RECIPE, window=10, heartbeat=HeartbeatConfig(sample_seconds=sample))
        inner = log._group.gather

        def timed_gather(row):
            t0 = time.perf_counter()
            out = inner(row)
            gathers.append(time.perf_counter() - t0)
            return out

        log._group.gather = timed_gather
    out = open(os.path.join(root, f"naive-{rank}.jsonl"), "w") if kind == "naive" else None
    buf = torch.zeros(1)
    dist.barrier()
    t0 = time.perf_counter()
    for i in range(steps):
        if ddp:
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss = loss.detach()
        else:
            loss = torch.tensor(float(i % 7))
        if log is not None:
            log.step(loss=loss, lr=0.01, grad_norm=1.0)
        elif out is not None:
            buf.copy_(loss.reshape(1))
            dist.all_reduce(buf)  # note: a sync every step
            if rank == 0:
                out.write(json.dumps({"step": i, "loss": buf.item() / dist.get_world_size()}) + "\n")
                out.flush()
    if log is not None:
        log.close()
    elapsed = time.perf_counter() - t0
    if out is not None:
        out.close()
    dist.barrier()
    return elapsed / steps


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    root = tempfile.mkdtemp() if rank == 0 else None
    root_l = [root]
    dist.broadcast_object_list(root_l, src=0)
    root = root_l[0]
    os.makedirs(root, exist_ok=True)
    results: dict[str, list[float]] = {}
    gathers: list[float] = []
    cases = [
        ("empty loop", "none", False, 0.1),
        ("RunLogger(window=10)", "runwatch", False, 0.1),
        ("RunLogger, sampler off", "runwatch", False, 1e6),
        ("naive per-step all_reduce", "naive", False, 0.1),
        ("DDP step", "none", True, 0.1),
        ("DDP step + RunLogger", "runwatch", True, 0.1),
        ("DDP step + naive per-step", "naive", True, 0.1),
    ]
    for _ in range(args.repeat):
        for name, kind, ddp, sample in cases:
            g: list[float] = []
            results.setdefault(name, []).append(run(kind, args.steps, ddp, root, g, sample))
            if name == "RunLogger(window=10)":
                gathers.extend(g)
    from runwatch.logger.distributed import process_group

    group = process_group()
    agrees: list[float] = []
    for i in range(args.steps):
        t0 = time.perf_counter()
        group.agree(i % 2 == 0)
        agrees.append(time.perf_counter() - t0)
    if rank == 0:
        world = dist.get_world_size()
        print(f"world_size={world} backend=gloo steps={args.steps} repeat={args.repeat}")
        base = statistics.median(results["empty loop"])
        ddp_base = statistics.median(results["DDP step"])
        print(f"{'case':<28} {'us/step':>9} {'added us/step':>14}")
        for name, _, ddp, _ in cases:
            m = statistics.median(results[name])
            ref = ddp_base if ddp else base
            print(f"{name:<28} {m * 1e6:>9.1f} {(m - ref) * 1e6:>14.1f}")
        print(
            f"window all_gather: median {statistics.median(gathers) * 1e6:.0f} us, "
            f"p90 {sorted(gathers)[int(len(gathers) * 0.9)] * 1e6:.0f} us over {len(gathers)} windows"
        )
        print(
            f"agree (windows closing on time, slow steps): median {statistics.median(agrees) * 1e6:.0f} us, "
            f"p90 {sorted(agrees)[int(len(agrees) * 0.9)] * 1e6:.0f} us a step over {len(agrees)} steps"
        )
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
