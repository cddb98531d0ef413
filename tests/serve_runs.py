"""Runs for the serve tests, written by real producers, and a served folder to ask about them.

sweep(root / "sweep", {"lr-1": 1e-3}, steps=300)     # RunLogger runs
supervised(root / "rolled", "spike@36")               # a real `runwatch supervise` (a rollback)
tensorboard_versions(root / "lightning_logs", 3)      # SummaryWriter, version_N/ folders
with Served(root) as s:
    s.json("/api/runs")
"""

from __future__ import annotations

import http.client
import json
import math
import os
import subprocess
import sys
import threading
import time
from typing import Any

from runwatch.logger.metrics import RunLogger
from runwatch.views.serve import serve

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "supervise_train.py")
# Generous: two shared cores, a browser starting beside the server.
WAIT = 90.0


def sweep(folder: os.PathLike[str] | str, lrs: dict[str, float], steps: int, window: int = 1) -> None:
    """One RunLogger run per name, a noisy loss falling at its own rate, an eval every 50 steps."""
    recipe = {
        "batch_size": 4,
        "seq_len": 8,
        "gradient_accumulation_steps": 1,
        "qk_clip_threshold": None,
        "max_steps": steps,
    }
    for k, (name, lr) in enumerate(lrs.items()):
        with RunLogger(os.path.join(folder, name), recipe=recipe, window=window) as log:
            for i in range(steps):
                noise = 0.2 * math.sin(i * 1.7 + k) * math.cos(i * 0.31)
                log.step(loss=3.0 * math.exp(-i * lr * 5) + 0.4 + noise, lr=lr * min(1.0, (i + 1) / 20), grad_norm=1.0)
                if i % 50 == 49:
                    log.val(2.0 * math.exp(-i * lr * 5) + 0.5, metrics={"auroc": 0.6 + i / (4 * steps)})


def seeded_sweep(
    folder: os.PathLike[str] | str, lrs: dict[str, float], seeds: int, steps: int, data: list[str] | None = None
) -> list[str]:
    """One RunLogger run per (recipe, seed): `<name>-s<seed>`, its recipe naming `lr` and `seed`; the
    loss falls at the recipe's rate, the seed shifts its noise; an eval (loss, accuracy) every 25
    steps. Returns the runs' names."""
    names = []
    for k, (name, lr) in enumerate(lrs.items()):
        for seed in range(seeds):
            recipe = {
                "batch_size": 4,
                "seq_len": 8,
                "gradient_accumulation_steps": 1,
                "qk_clip_threshold": None,
                "max_steps": steps,
                "lr": lr,
                "seed": seed,
            }
            run = f"{name}-s{seed}"
            names.append(run)
            with RunLogger(os.path.join(folder, run), recipe=recipe, window=5, data=data) as log:
                for i in range(steps):
                    fall = math.exp(-i * lr * 10)
                    noise = 0.02 * (seed + 1) * math.sin(i * 0.9 + seed * 2.1)
                    log.step(loss=2.0 * fall + 0.8 + 0.2 * k + noise, lr=lr, grad_norm=1.0 + noise)
                    if i % 25 == 24:
                        acc = 0.5 + 0.4 * (1 - fall) - 0.05 * k + 0.01 * seed
                        log.val(1.8 * fall + 0.9 + 0.2 * k + 0.02 * seed, metrics={"accuracy": acc})
    return names


def supervised(run_dir: os.PathLike[str] | str, fault: str, steps: int = 60) -> None:
    """A real `runwatch supervise` of tests/supervise_train.py with one injected fault (kill@12: a
    relaunch; spike@36: a rollback to the checkpoint at 30), run to completion."""
    cmd = [
        sys.executable,
        "-m",
        "runwatch",
        "supervise",
        str(run_dir),
        "--poll",
        "0.1",
        "--stall",
        "4",
        "--backoff",
        "0.1",
        "--",
        sys.executable,
        TRAIN,
        str(run_dir),
        "--steps",
        str(steps),
        "--fault",
        fault,
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0 and res.stdout.splitlines()[-1] == f"OK done step={steps}", res.stdout + res.stderr


def tensorboard_versions(folder: os.PathLike[str] | str, n: int, steps: int = 50) -> None:
    """Lightning's layout: `folder/version_N/events.out.tfevents.*`, written by SummaryWriter."""
    from torch.utils.tensorboard import SummaryWriter

    for v in range(n):
        w = SummaryWriter(os.path.join(folder, f"version_{v}"))
        for step in range(1, steps + 1):
            w.add_scalar("train_loss", 2.0 / math.sqrt(step) + 0.1 * v, step)
            w.add_scalar("lr", 1e-3, step)
            if step % 10 == 0:
                w.add_scalar("val_loss", 1.5 / math.sqrt(step) + 0.1 * v, step)
        w.close()


def minimal(path: os.PathLike[str] | str, steps: range, t0: float = 1_700_000_000.0) -> None:
    """Append minimal telemetry, as a hand-written loop writes it."""
    with open(path, "a") as f:
        for s in steps:
            rec = {"step": s, "t": t0 + s, "loss": 2.0 / math.sqrt(s), "lr": 1e-3, "grad_norm": 1.0, "sps": 40.0}
            f.write(json.dumps(rec) + "\n")


class Served:
    """`runwatch serve` over a folder, on a free port, in this process."""

    def __init__(self, root: os.PathLike[str] | str) -> None:
        self.srv = serve(str(root), port=0)
        self.thread = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.thread.start()
        self.url = self.srv.url
        self.port = self.srv.server_address[1]

    def __enter__(self) -> Served:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.srv.close()

    def get(self, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            conn.request(method, path)
            res = conn.getresponse()
            return res.status, {k.lower(): v for k, v in res.getheaders()}, res.read()
        finally:
            conn.close()

    def json(self, path: str) -> Any:
        code, _, body = self.get(path)
        assert code == 200, (path, code, body[:300])
        return json.loads(body)

    def wait_run(self, rel: str, pred: Any, what: str) -> dict[str, Any]:
        deadline = time.monotonic() + WAIT
        while True:
            runs = {r["path"]: r for r in self.json("/api/runs")["runs"]}
            if rel in runs and pred(runs[rel]):
                return runs[rel]
            if time.monotonic() > deadline:
                raise AssertionError(f"{rel}: never {what}: {runs.get(rel)}")
            time.sleep(0.2)
