"""Real programs under `runwatch supervise`, read afterwards by every surface (benchmarks/README.md,
section "One run, one story").

    python benchmarks/bench_story.py [--json OUT] [--only NAME ...]

Each scenario runs a program that knows nothing of runwatch the way its users run it: a Hugging
Face `Trainer` logging to TensorBoard (`tests/hf_tb_train.py`, supervised through its `runs/`
folder with `--log runs`) and a program that prints nanoGPT's lines (`tests/printing_train.py`,
`--format nanogpt`), and the demo's tiny training under `torchrun` (two gloo workers, one killed).
Per scenario: the supervisor's exit status and last line, the verdicts and
how long after the fault each came (the fault's marker file's time to the journal's verdict), and
the goodput as each surface gives it: the line `supervise` prints, the journal's end record,
`runwatch goodput --json`, `runwatch status --json`, the page (`serve`'s run detail) and the MCP
tool `run_status`, with whether `check RUN_DIR` (no option) reads the run.

`BENCH_SRC=/path/to/src` runs another checkout's runwatch (the figures "before" a change).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.environ.get("BENCH_SRC") or os.path.join(ROOT, "src")
sys.path.insert(0, SRC)
TESTS = os.path.join(ROOT, "tests")
HF = os.path.join(TESTS, "hf_tb_train.py")
PRINTING = os.path.join(TESTS, "printing_train.py")
FAST = ["--poll", "0.5", "--backoff", "0.5", "--restarts", "3"]

# name: (supervise options, the program and its arguments, with RUN for the run directory)
SCENARIOS: dict[str, tuple[list[str], list[str]]] = {
    "hf_done": (["--log", "runs", "--resume-args", "--resume"], [HF, "--output_dir", "RUN", "--max_steps", "60"]),
    "hf_killed_resumed": (
        ["--log", "runs", "--resume-args", "--resume"],
        [HF, "--output_dir", "RUN", "--max_steps", "60", "--kill_at", "32", "--step_sleep", "0.05"],
    ),
    "nanogpt_crash_resumed": (
        ["--format", "nanogpt", "--resume-args", "--init_from=resume"],
        [PRINTING, "RUN/out", "--max_iters", "300", "--eval_interval", "50", "--crash_at", "170"],
    ),
    "nanogpt_hang_resumed": (
        ["--format", "nanogpt", "--stall", "10", "--resume-args", "--init_from=resume"],
        [PRINTING, "RUN/out", "--max_iters", "300", "--eval_interval", "50", "--stop_at", "170"],
    ),
    "wrong_format": (["--format", "tensorboard", "--log", "out"], [PRINTING, "RUN/out", "--max_iters", "100"]),
    # DDP on gloo, two workers; the last rank SIGKILLed at step 130 (it writes no log: the agent's exit
    # or the rank rules find it), the whole job relaunched and resumed from its checkpoint
    "torchrun_killed_resumed": (
        ["--rank-stall", "3", "--exit-grace", "10", "--stall", "30"],
        ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "--monitor_interval=0.2"]
        + ["-m", "runwatch.demo.tinytrain", "RUN", "--steps", "300", "--ckpt-every", "50", "--window", "5"]
        + ["--step-sleep", "0.01", "--fault", "kill@130"],
    ),
}


def _cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=SRC)
    return subprocess.run(
        [sys.executable, "-m", "runwatch", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def _ratio(g: Any) -> Any:
    return g.get("ratio") if isinstance(g, dict) else None


def surfaces(root: str, name: str, stderr: str) -> dict[str, Any]:
    """The goodput ratio as each surface gives it (None: the surface shows none)."""
    from runwatch.views.agent.tools import Tools
    from runwatch.views.serve.server import Catalog, to_json

    run = os.path.join(root, name)
    printed = re.findall(r"runwatch supervise: goodput (\S+?):", stderr)
    journal = [json.loads(x) for x in open(os.path.join(run, "supervise.jsonl"))]
    out: dict[str, Any] = {"supervise": float(printed[-1]) if printed and printed[-1] != "n/a" else None}
    out["journal"] = _ratio(journal[-1].get("goodput"))
    res = _cli("goodput", run, "--json")
    out["goodput"] = json.loads(res.stdout).get("ratio") if res.returncode == 0 else f"exit {res.returncode}"
    res = _cli("status", run, "--json")
    out["status"] = _ratio(json.loads(res.stdout).get("goodput")) if res.returncode == 0 else f"exit {res.returncode}"
    catalog = Catalog(root)
    try:
        while catalog.refresh():
            pass
        view = catalog.get(name)
        if view is None:
            out["page"] = "not listed (" + ", ".join(sorted(v.rel for v in catalog.views()))[:80] + ")"
        else:
            with view.lock:
                detail = json.loads(to_json(view.detail()))
            sup = detail.get("supervise") or {}
            out["page"] = _ratio(sup.get("goodput"))
    finally:
        catalog.stop()
    _text, doc = Tools(root).run_status(name)
    out["mcp"] = _ratio(doc.get("goodput") or (doc.get("supervision") or {}).get("goodput"))
    return out


def _recovered(out: str) -> str:
    """` (recovered: <kind> step=N, ...)`: the faults `check` lists as recovered by a later session."""
    found = [" ".join(line.split()[1:3]).rstrip(":") for line in out.splitlines() if line.startswith("RECOVERED ")]
    return f" (recovered: {', '.join(found)})" if found else ""


def scenario(root: str, name: str) -> dict[str, Any]:
    opts, program = SCENARIOS[name]
    run = os.path.join(root, name)
    argv = [a.replace("RUN", run) for a in program]
    t0 = time.time()
    res = _cli("supervise", run, *FAST, *opts, "--", sys.executable, *argv)
    wall = time.time() - t0
    journal = [json.loads(x) for x in open(os.path.join(run, "supervise.jsonl"))]
    markers = sorted(
        (os.stat(os.path.join(d, f)).st_mtime, f)
        for d in (run, os.path.join(run, "out"))
        if os.path.isdir(d)
        for f in os.listdir(d)
        if f.startswith(".fault")
    )
    verdicts = [r for r in journal if r["event"] == "verdict"]
    latency = [round(v["time"] - markers[0][0], 1) for v in verdicts if markers and v["time"] >= markers[0][0]][:1]
    check = _cli("check", run)
    st = _cli("status", run, "--json")
    ranks = json.loads(st.stdout).get("ranks") if st.returncode == 0 else None
    return {
        "name": name,
        "exit": res.returncode,
        "last_line": (res.stdout.strip().splitlines() or [""])[-1][:160],
        "events": [r["event"] for r in journal],
        "verdicts": [r.get("kind") or "done" for r in verdicts],
        "detect_seconds": latency[0] if latency else None,
        "wall_seconds": round(wall, 1),
        "check": f"exit {check.returncode}: "
        + (check.stdout.strip().splitlines() or [check.stderr.strip()])[-1][:100]
        + _recovered(check.stdout),
        "goodput": surfaces(root, name, res.stderr),
        "status_ranks": ranks,
    }


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--json", default=None)
    p.add_argument("--only", nargs="*", default=None, choices=sorted(SCENARIOS))
    args = p.parse_args()
    root = tempfile.mkdtemp(prefix="runwatch-story-")
    rows = []
    try:
        for name in args.only or SCENARIOS:
            rows.append(scenario(root, name))
            r = rows[-1]
            print(f"{name}: exit {r['exit']} ({r['last_line']}); detect {r['detect_seconds']} s", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("\n| scenario | exit | outcome | verdicts | detect s | check RUN_DIR |")
    print("| --- | ---: | --- | --- | ---: | --- |")
    for r in rows:
        print(
            f"| {r['name']} | {r['exit']} | `{r['last_line']}` | {', '.join(r['verdicts'])} | "
            f"{r['detect_seconds'] if r['detect_seconds'] is not None else '-'} | `{r['check']}` |"
        )
    keys = ("supervise", "journal", "goodput", "status", "page", "mcp")
    print("\n| scenario | " + " | ".join(keys) + " |")
    print("| --- | " + " | ".join("---:" for _ in keys) + " |")
    for r in rows:
        print(f"| {r['name']} | " + " | ".join(str(r["goodput"].get(k)) for k in keys) + " |")
    for r in rows:
        if r["status_ranks"]:
            print(f"\n{r['name']}: status's ranks lines after the run: {r['status_ranks']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
