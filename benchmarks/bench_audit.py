"""Rows/s of `runwatch audit-data` on a generated corpus: serial, 1 worker, 2 workers; normalize none and ast.

    .venv/bin/python benchmarks/bench_audit.py [--rows 150000] [--broken 0.07] [--repeats 3]

Generates a JSONL corpus of Python snippets (functions, classes, loops, comprehensions; a few
hundred bytes each) in a temporary folder, with `--broken` of them broken the ways real scraped
code is (a missing colon, an unclosed bracket, a bad indent, a stray token, a Python 2 print).
Each configuration runs `runwatch.preflight.audit.audit` in this process (its workers are real processes),
round-robin over the repeats so that drift in the machine's load hits all of them alike; the table
shows medians. Wall time is the audit's own `seconds` (read, check, write, rename). CPU is this
process's plus its children's user+system time, so the pool's own cost (pickling, pipes, the
main loop) shows even where a worker's checking overlaps the main process's reading and writing.

Targets: 2 workers >= 1.7x the rows/s of 1 worker; the pool's overhead per row under 10% of the
serial time per row, i.e. CPU(1 worker) / CPU(serial) - 1 < 0.10. Every configuration must keep
exactly the same rows (the outputs are compared byte for byte).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import random
import resource
import shutil
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

from runwatch.preflight.audit import AuditOptions, audit  # noqa: E402

TEMPLATES = [
    'def {f}({a}, {b}=None):\n    """Return the {w} of {a}."""\n    if {b} is None:\n        {b} = []\n'
    "    for i, x in enumerate({a}):\n        if x % {n} == 0:\n            {b}.append(x * i)\n    return {b}\n",
    "class {F}:\n    def __init__(self, {a}):\n        self.{a} = {a}\n        self.{w} = {{}}\n\n"
    "    def {f}(self, {b}):\n        return [self.{a} + k for k in range({b}) if k != {n}]\n",
    "import os\n\n\ndef {f}(path):\n    total = 0\n    for root, _, files in os.walk(path):\n"
    "        total += sum(len(name) for name in files if name.endswith('.{w}'))\n    return total // {n}\n",
    "{a} = {{'{w}': {n}, 'items': [1, 2, 3]}}\ntry:\n    {b} = {a}['{w}'] / len({a}['items'])\n"
    "except ZeroDivisionError as exc:\n    raise ValueError(str(exc)) from None\nprint(f'{{{b}:.3f}}')\n",
    "async def {f}(session, {a}):\n    async with session.get({a}) as resp:\n        data = await resp.json()\n"
    "    return {{k: v for k, v in data.items() if k.startswith('{w}')}}\n",
]
BREAKAGES = [
    lambda s: s.replace("):\n", ")\n", 1),  # a missing colon
    lambda s: s.replace(")", "", 1),  # an unclosed bracket
    lambda s: s.replace("\n    ", "\n  ", 1) + "  x = 1\n    y = 2\n",  # bad indentation
    lambda s: s + "print 'done'\n",  # Python 2
    lambda s: s[: len(s) // 2] + " $ " + s[len(s) // 2 :],  # a stray token
]
WORDS = ["alpha", "beta", "gamma", "delta", "total", "count", "value", "items", "size", "name"]


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except SyntaxError:
        return False
    return True


def generate(path: str, rows: int, broken: float, seed: int = 0) -> int:
    rng = random.Random(seed)
    n_broken = 0
    with open(path, "w", encoding="utf-8") as f:
        for i in range(rows):
            w = rng.choice(WORDS)
            code = rng.choice(TEMPLATES).format(
                f=f"{w}_{i}",
                F=f"{w.title()}{i}",
                a=rng.choice(WORDS) + "_a",
                b=rng.choice(WORDS) + "_b",
                w=w,
                n=rng.randint(2, 99),
            )
            if rng.random() < broken:
                code = rng.choice(BREAKAGES)(code)
                if _parses(code):  # that breakage did not apply to this template: a stray token does
                    code = BREAKAGES[-1](code)
                n_broken += 1
            f.write(json.dumps({"id": i, "repo": f"org/{w}", "code": code}) + "\n")
    return n_broken


def _cpu() -> tuple[float, float]:
    """(this process's, its waited-for children's) user+system CPU seconds."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def _digest(out: str) -> str:
    h = hashlib.sha256()
    for name in sorted(os.listdir(out)):
        if name != "audit.json":
            with open(os.path.join(out, name), "rb") as f:
                h.update(f.read())
    return h.hexdigest()[:16]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=150_000)
    p.add_argument("--broken", type=float, default=0.07)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-audit-")
    try:
        corpus = os.path.join(tmp, "corpus.jsonl")
        n_broken = generate(corpus, args.rows, args.broken)
        size_mb = os.path.getsize(corpus) / 1e6
        print(
            f"corpus: {args.rows:,} rows, {n_broken:,} broken ({100.0 * n_broken / args.rows:.1f}%), {size_mb:.1f} MB;"
            f" {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the start"
        )
        configs = [(norm, workers) for norm in ("none", "ast") for workers in (0, 1, 2)]
        wall: dict = {c: [] for c in configs}
        cpu: dict = {c: [] for c in configs}
        main_cpu: dict = {c: [] for c in configs}
        digests: dict = {}
        for _ in range(args.repeats):
            for norm, workers in configs:
                out = os.path.join(tmp, f"out-{norm}-{workers}")
                m0, k0 = _cpu()
                report = audit(
                    corpus, AuditOptions(field="code", normalize=norm, workers=workers, out=out, progress=False)
                )
                m1, k1 = _cpu()
                cpu[(norm, workers)].append(m1 - m0 + k1 - k0)
                main_cpu[(norm, workers)].append(m1 - m0)
                wall[(norm, workers)].append(report["seconds"])
                if report["rejected"] != n_broken:
                    raise SystemExit(f"{norm}/{workers}: rejected {report['rejected']}, generated {n_broken} broken")
                digests.setdefault(norm, set()).add(_digest(out))
        print(f"load average {os.getloadavg()[0]:.2f} at the end; medians of {args.repeats} runs\n")
        print("| normalize | mode | wall s | rows/s | CPU s (main) | vs 1 worker | CPU vs serial |")
        print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
        results = {}
        for norm, workers in configs:
            w, c = statistics.median(wall[(norm, workers)]), statistics.median(cpu[(norm, workers)])
            w1 = statistics.median(wall[(norm, 1)])
            c0 = statistics.median(cpu[(norm, 0)])
            mode = "serial (no pool)" if workers == 0 else f"{workers} worker" + ("s" if workers > 1 else "")
            m = statistics.median(main_cpu[(norm, workers)])
            print(
                f"| {norm} | {mode} | {w:.2f} | {args.rows / w:,.0f} | {c:.2f} ({m:.2f}) | {w1 / w:.2f}x"
                f" | {c / c0 - 1:+.1%} |"
            )
            results[(norm, workers)] = (w, c)
        print()
        for norm in ("none", "ast"):
            speedup = results[(norm, 1)][0] / results[(norm, 2)][0]
            overhead = results[(norm, 1)][1] / results[(norm, 0)][1] - 1
            # On 2 free cores: 1 worker takes its own CPU time W (the main process M overlaps it on the
            # other core); 2 workers share (W + M) over both cores. A model, printed beside the measure.
            c1, m1 = statistics.median(cpu[(norm, 1)]), statistics.median(main_cpu[(norm, 1)])
            bound = (c1 - m1) / max((c1 - m1) / 2, m1, c1 / 2)
            print(f"normalize {norm}: CPU-bound speedup of 2 workers on 2 free cores {bound:.2f}x (model)")
            print(
                f"normalize {norm}: 2 workers {speedup:.2f}x one (target >= 1.7);"
                f" pool overhead {overhead:+.1%} of the serial CPU per row (target < 10%);"
                f" outputs identical across modes: {len(digests[norm]) == 1}"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
