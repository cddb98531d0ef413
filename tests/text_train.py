"""A text classifier that only prints its progress: the program of tests/test_workflow.py.

    python tests/text_train.py --data rows.jsonl [--steps 120] [--batch 8] [--eval-every 20]
        [--step-seconds 0.01] [--invert] [--crash-at N] [--resume] [--out DIR]

Logistic regression over hashed words of `{"text", "label"}` rows (pure Python, no torch), trained
by SGD on batches drawn in order. Prints, one line each, flushed:

    step 12 loss 0.6812 sps 790.1
    eval step 20 eval_loss 0.5123 auroc 0.9012
    saved checkpoint DIR/ckpt.json at step 20

Rows it cannot use (not JSON, no label, empty text) are skipped, as a tolerant loader does.
`--invert` computes the AUROC with the scores the wrong way round (a sign error). `--crash-at N`
raises before step N, once across relaunches (a marker file in DIR). `--resume` continues from
DIR/ckpt.json when it exists. DIR defaults to RUNWATCH_RUN_DIR (set by `runwatch launch` and
`supervise`), else the working directory.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
import zlib

DIM = 256


def features(text: str) -> list[int]:
    return sorted({zlib.crc32(w.encode()) % DIM for w in text.lower().split()})


def load(path: str) -> list[tuple[list[int], int]]:
    rows = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if not isinstance(row, dict) or not row.get("text") or row.get("label") not in (0, 1):
                continue
            rows.append((features(row["text"]), int(row["label"])))
    return rows


def score(w: list[float], x: list[int]) -> float:
    return w[DIM] + sum(w[i] for i in x)


def auroc(scores: list[float], labels: list[int]) -> float:
    pos = [s for s, y in zip(scores, labels) if y == 1]
    neg = [s for s, y in zip(scores, labels) if y == 0]
    if not pos or not neg:
        return 0.5
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--eval-every", type=int, default=20)
    p.add_argument("--step-seconds", type=float, default=0.01)
    p.add_argument("--lr", type=float, default=0.5)
    p.add_argument("--invert", action="store_true")
    p.add_argument("--crash-at", type=int, default=-1)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--out", default=os.environ.get("RUNWATCH_RUN_DIR", "."))
    a = p.parse_args()
    rows = load(a.data)
    held = max(1, len(rows) // 5)
    train, val = rows[held:], rows[:held]
    ckpt = os.path.join(a.out, "ckpt.json")
    w = [0.0] * (DIM + 1)
    start = 0
    if a.resume and os.path.exists(ckpt):
        with open(ckpt) as f:
            state = json.load(f)
        w, start = state["w"], state["step"]
        print(f"resumed from {ckpt} at step {start}", flush=True)
    for step in range(start + 1, a.steps + 1):
        marker = os.path.join(a.out, ".crashed")
        if step == a.crash_at and not os.path.exists(marker):
            open(marker, "w").close()
            raise RuntimeError(f"lost the node at step {step}")
        t0 = time.perf_counter()
        i0 = (step - 1) * a.batch % len(train)
        batch = [train[(i0 + k) % len(train)] for k in range(a.batch)]
        grad = [0.0] * (DIM + 1)
        loss = 0.0
        for x, y in batch:
            z = max(-30.0, min(30.0, score(w, x)))
            prob = 1.0 / (1.0 + math.exp(-z))
            loss -= math.log(prob if y else 1.0 - prob)
            for i in x:
                grad[i] += prob - y
            grad[DIM] += prob - y
        for i in range(DIM + 1):
            w[i] -= a.lr * grad[i] / a.batch
        time.sleep(a.step_seconds)
        sps = a.batch / (time.perf_counter() - t0)
        print(f"step {step} loss {loss / a.batch:.4f} sps {sps:.1f}", flush=True)
        if step % a.eval_every == 0 or step == a.steps:
            scores = [score(w, x) for x, _ in val]
            labels = [y for _, y in val]
            probs = [1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, s)))) for s in scores]
            eval_loss = -sum(math.log(q if y else 1.0 - q) for q, y in zip(probs, labels)) / len(val)
            value = auroc([-s for s in scores] if a.invert else scores, labels)  # --invert: the sign error
            print(f"eval step {step} eval_loss {eval_loss:.4f} auroc {value:.4f}", flush=True)
            with open(ckpt + ".tmp", "w") as f:
                json.dump({"w": w, "step": step}, f)
            os.replace(ckpt + ".tmp", ckpt)
            print(f"saved checkpoint {ckpt} at step {step}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
