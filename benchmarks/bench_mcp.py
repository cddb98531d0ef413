"""Benchmark of `runwatch mcp` (see benchmarks/README.md, section "MCP server").

    python benchmarks/bench_mcp.py                 # 1 GB log, 10 starts, 20 calls, 20 verdicts
    python benchmarks/bench_mcp.py --gb 0.2 --starts 5
    python benchmarks/bench_mcp.py --evidence --only list_runs --repeat 4   # one tool, 4 calls

Driven by the MCP Python SDK's own client over stdio, as an agent's client drives it:
- start: from spawning `runwatch mcp ROOT` to `initialize()` answered, then one `list_tools`;
  beside it a process that only imports the SDK's server (the floor), and the peer an agent has
  without the server: one `runwatch status --json` process;
- latency of `run_status` and `tail_records` (n=20 and n=200) on a schema-v1 log of GB gigabytes
  and on one of 1 MB (same records, same tail): the ratio shows whether the cost follows what is
  read from the end or the log's size; beside them `runwatch status --json` as a process;
- delay from a final verdict being written to `wait_for_verdict` returning: a run whose
  `watchdog.json` holds a live `watching` record (its pid a `sleep` process), a verdict written
  atomically (`verdict.write_verdict`) a random 0.3-1.5 s into the wait; and the same for a
  supervised run whose journal gets its `done` record.
- (`--evidence`, section "MCP evidence tools") the bytes of the tool definitions (`list_tools`,
  with and without `--act`); every read tool's latency on the GB-gigabyte log; `get_series`'s
  result size and time on a minimal-telemetry log of 1M records; and the delay from a journal
  record being appended to `wait_for_event` returning it.
Logs are written under /tmp and deleted afterwards.
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
from typing import Any

BENCH = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(BENCH), "src")
sys.path.insert(0, SRC)

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from bench_serve import make_run
from runwatch.judging.liveness import watching_record
from runwatch.judging.verdict import Verdict, write_verdict

ENV = {"PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"}


def params(root: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "runwatch", "mcp", root], env=ENV)


def _ms(xs: list[float]) -> str:
    return f"{1000 * statistics.median(xs):.1f}"


def _p90(xs: list[float]) -> float:
    return sorted(xs)[max(0, int(round(0.9 * len(xs))) - 1)]


async def bench_start(root: str, starts: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"initialized": [], "list_tools": []}
    with open(os.devnull, "w") as devnull:
        for _ in range(starts):
            t = time.perf_counter()
            async with stdio_client(params(root), errlog=devnull) as (r, w), ClientSession(r, w) as s:
                await s.initialize()
                out["initialized"].append(time.perf_counter() - t)
                await s.list_tools()
                out["list_tools"].append(time.perf_counter() - t)
    return out


def import_process() -> float:
    """A process that only imports the SDK's server: the floor under the server's start."""
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import mcp.server.mcpserver"], check=True, env={**os.environ, **ENV})
    return time.perf_counter() - t


def status_process(run: str) -> float:
    t = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "runwatch", "status", run, "--json"],
        env={**os.environ, **ENV},
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - t


async def bench_calls(root: str, runs: list[str], calls: int) -> dict[tuple[str, str], list[float]]:
    out: dict[tuple[str, str], list[float]] = {}
    with open(os.devnull, "w") as devnull:
        async with stdio_client(params(root), errlog=devnull) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            for _ in range(calls):
                for run in runs:  # the peers in turn
                    for name, args in (
                        ("run_status", {"run": run}),
                        ("tail_records", {"run": run, "n": 20}),
                        ("tail_records", {"run": run, "n": 200}),
                    ):
                        t = time.perf_counter()
                        res = await s.call_tool(name, args)
                        out.setdefault((f"{name} n={args.get('n', '-')}", run), []).append(time.perf_counter() - t)
                        if res.is_error:
                            raise RuntimeError(res.content[0].text)
    return out


def _watching(run_dir: str, pid: int) -> None:
    now = time.time()
    rec = watching_record(pid, now - 60, now, 100, 5.0)
    with open(os.path.join(run_dir, "watchdog.json"), "w") as f:
        json.dump(rec, f)


def _journal(run_dir: str, event: str, sup: int) -> None:
    rec = {"time": time.time(), "event": event, "attempt": 1, "pid": 1, "kind": None, "class": None, "step": 100}
    rec.update(supervisor=sup, line="OK done step=100" if event == "done" else None)
    with open(os.path.join(run_dir, "supervise.jsonl"), "a") as f:
        f.write(json.dumps(rec) + "\n")


async def bench_wake(root: str, rounds: int) -> dict[str, list[float]]:
    sleeper = subprocess.Popen(["sleep", "3600"])
    out: dict[str, list[float]] = {"watch": [], "supervise": []}
    try:
        with open(os.devnull, "w") as devnull:
            async with stdio_client(params(root), errlog=devnull) as (r, w), ClientSession(r, w) as s:
                await s.initialize()
                for i in range(rounds):
                    for how in ("watch", "supervise"):
                        run_dir = os.path.join(root, f"wake-{how}-{i}")
                        os.makedirs(run_dir)
                        _watching(run_dir, sleeper.pid)
                        if how == "supervise":
                            with open(os.path.join(run_dir, "supervise.lock"), "w") as f:
                                f.write(f"{sleeper.pid}\n")
                            _journal(run_dir, "launch", sleeper.pid)
                        written: list[float] = []

                        async def finish(
                            run_dir: str = run_dir, how: str = how, written: list[float] = written
                        ) -> None:
                            await anyio.sleep(random.uniform(0.3, 1.5))
                            if how == "watch":
                                write_verdict(
                                    run_dir, Verdict("done", None, 100, "session ended normally", time.time())
                                )
                            else:
                                _journal(run_dir, "done", sleeper.pid)
                            written.append(time.perf_counter())

                        async with anyio.create_task_group() as tg:
                            tg.start_soon(finish)
                            res = await s.call_tool(
                                "wait_for_verdict", {"run": os.path.basename(run_dir), "timeout_s": 60}
                            )
                            got = time.perf_counter()
                        state = json.loads(res.content[0].text)["state"]
                        if state != "final":
                            raise RuntimeError(f"{how}: {state}")
                        out[how].append(got - written[0])
    finally:
        sleeper.kill()
        sleeper.wait()
    return out


async def tool_bytes(root: str) -> dict[str, Any]:
    """The tool definitions as `list_tools` returns them: bytes in all and per tool, with and
    without --act."""
    out: dict[str, Any] = {}
    with open(os.devnull, "w") as devnull:
        for act in (False, True):
            args = ["-m", "runwatch", "mcp", root] + (["--act"] if act else [])
            prm = StdioServerParameters(command=sys.executable, args=args, env=ENV)
            async with stdio_client(prm, errlog=devnull) as (r, w), ClientSession(r, w) as s:
                await s.initialize()
                res = await s.list_tools()
                tools = [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in res.tools]
                key = "act" if act else "read"
                out[key] = len(json.dumps(tools, separators=(",", ":")).encode())
                out[key + "_tools"] = {t["name"]: len(json.dumps(t, separators=(",", ":")).encode()) for t in tools}
    return out


async def evidence_calls(root: str, calls: list[tuple[str, dict[str, Any]]], repeat: int) -> dict[str, list[Any]]:
    """Each call `repeat` times over one session: its seconds and its answer's bytes."""
    out: dict[str, list[Any]] = {}
    with open(os.devnull, "w") as devnull:
        async with stdio_client(params(root), errlog=devnull) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            for _ in range(repeat):
                for name, args in calls:
                    label = name + (f" {args['label']}" if "label" in args else "")
                    args = {k: v for k, v in args.items() if k != "label"}
                    t = time.perf_counter()
                    res = await s.call_tool(name, args, read_timeout_seconds=None)
                    took = time.perf_counter() - t
                    if res.is_error:
                        raise RuntimeError(f"{name}: {res.content[0].text}")
                    size = len(res.model_dump_json(by_alias=True, exclude_none=True).encode())
                    out.setdefault(label, []).append((took, size))
    return out


def make_minimal(path: str, records: int) -> None:
    """A minimal-telemetry JSONL of `records` train records (every 100th with eval values; a
    spike at a third, NaNs at two thirds)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        for s in range(1, records + 1):
            loss = 50.0 if s == records // 3 else "NaN" if s == 2 * records // 3 else 2.0 / (1 + s / 1000)
            line = f'{{"step":{s},"t":{1000.0 + s * 0.1:.1f},"loss":{loss},"lr":0.001,"grad_norm":1.0,"sps":512.0'
            if s % 100 == 0:
                line += f',"eval_loss":{loss},"eval_auroc":0.9'
            f.write(line + "}\n")


async def bench_event_wake(root: str, rounds: int) -> list[float]:
    """A journal `warning` record appended a random 0.3-1.5 s into a wait_for_event → its return."""
    out: list[float] = []
    with open(os.devnull, "w") as devnull:
        async with stdio_client(params(root), errlog=devnull) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            for i in range(rounds):
                run_dir = os.path.join(root, f"events-{i}")
                os.makedirs(run_dir)
                _journal(run_dir, "launch", 1)
                first = await s.call_tool("wait_for_event", {"run": os.path.basename(run_dir), "timeout_s": 0})
                cursor = json.loads(first.content[0].text)["cursor"]
                written: list[float] = []

                async def warn(run_dir: str = run_dir, written: list[float] = written) -> None:
                    await anyio.sleep(random.uniform(0.3, 1.5))
                    rec = {"time": time.time(), "event": "warning", "attempt": 1, "kind": "overfitting", "step": 7}
                    with open(os.path.join(run_dir, "supervise.jsonl"), "a") as f:
                        f.write(json.dumps(rec) + "\n")
                    written.append(time.perf_counter())

                async with anyio.create_task_group() as tg:
                    tg.start_soon(warn)
                    res = await s.call_tool(
                        "wait_for_event", {"run": os.path.basename(run_dir), "since": cursor, "timeout_s": 60}
                    )
                    got = time.perf_counter()
                events = json.loads(res.content[0].text)["events"]
                if [e["kind"] for e in events] != ["warning"]:
                    raise RuntimeError(f"wait_for_event: {events}")
                out.append(got - written[0])
    return out


# The read tools the evidence section calls on the big log, in turn.
EVIDENCE_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("list_runs", {}),
    ("run_status", {"run": "big"}),
    ("tail_records", {"run": "big", "n": 20}),
    ("explain", {"kind": "loss_spike"}),
    ("wait_for_verdict", {"run": "big", "timeout_s": 0}),
    ("wait_for_event", {"run": "big", "timeout_s": 0}),
    ("compare_runs", {"runs": ["big", "small"]}),
    ("plan_run", {"run": "big", "samples": 100000, "window": "8h"}),
    ("get_series", {"run": "big"}),
    ("incident", {"run": "big", "compare": "small"}),
    ("check_run", {"run": "big"}),
]


def evidence(root: str, size: int, rounds: int, records: int, only: list[str], repeat: int) -> None:
    defs = anyio.run(tool_bytes, root)
    print(f"\ntool definitions (list_tools, compact JSON): {defs['read']} bytes read-only, {defs['act']} with --act")
    for name, n in sorted(defs["act_tools"].items(), key=lambda kv: -kv[1]):
        print(f"  {name:<18} {n:6d}")
    lat = anyio.run(evidence_calls, root, [c for c in EVIDENCE_CALLS if not only or c[0] in only], repeat)
    print(
        f"\nevery read tool on the {size / 2**30:.2f} GiB log ({repeat} calls each, one session), s: each call, bytes"
    )
    for name, xs in lat.items():
        print(f"  {name:<18} " + " ".join(f"{x[0]:8.3f}" for x in xs) + f"   {xs[-1][1]:6d}")
    if only:
        return
    make_minimal(os.path.join(root, "million", "metrics.jsonl"), records)
    mb = os.path.getsize(os.path.join(root, "million", "metrics.jsonl")) / 2**20
    keys = ["loss", "eval_loss", "lr", "grad_norm", "sps", "eval_auroc"]
    series_calls: list[tuple[str, dict[str, Any]]] = [
        ("get_series", {"run": "million", "label": "default (loss, eval_loss; 200)"}),
        ("get_series", {"run": "million", "keys": keys, "max_points": 500, "label": "6 keys, 500"}),
    ]
    got = anyio.run(evidence_calls, root, series_calls, 2)
    print(f"\nget_series on {records:,} records ({mb:.0f} MiB minimal JSONL), s (second call) and answer bytes")
    for name, xs in got.items():
        print(f"  {name:<36} {xs[1][0]:8.3f}   {xs[1][1]:6d} bytes")
    wake = anyio.run(bench_event_wake, root, rounds)
    print(f"\njournal record appended -> wait_for_event returned ({rounds}), ms: median / p90 / max")
    print(f"  {_ms(wake):>8} {1000 * _p90(wake):8.1f} {1000 * max(wake):8.1f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gb", type=float, default=1.0, help="size of the big log (default 1)")
    p.add_argument("--starts", type=int, default=10)
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--evidence", action="store_true", help="only the section 'MCP evidence tools'")
    p.add_argument(
        "--only", action="append", default=[], metavar="TOOL", help="with --evidence: only this read tool (repeatable)"
    )
    p.add_argument("--repeat", type=int, default=2, help="with --evidence: calls of each read tool (default 2)")
    p.add_argument("--records", type=int, default=1_000_000, help="records of get_series's log (default 1M)")
    args = p.parse_args()
    unknown = sorted(set(args.only) - {name for name, _ in EVIDENCE_CALLS})
    if unknown:
        p.error(f"--only: {', '.join(unknown)}: not a read tool of the evidence section")
    root = tempfile.mkdtemp(prefix="rw-mcp-bench-", dir="/tmp")
    try:
        t0 = time.time() - 10**6
        t = time.perf_counter()
        make_run(os.path.join(root, "big"), int(args.gb * 2**30), t0)
        make_run(os.path.join(root, "small"), 2**20, t0)
        size = os.path.getsize(os.path.join(root, "big", "metrics.jsonl"))
        print(f"logs written in {time.perf_counter() - t:.0f} s: big {size / 2**30:.2f} GiB, small 1 MiB")
        print("load average before: " + " ".join(f"{x:.1f}" for x in os.getloadavg()))
        if args.evidence:
            evidence(root, size, args.rounds, args.records, args.only, args.repeat)
            print("load average after: " + " ".join(f"{x:.1f}" for x in os.getloadavg()))
            return

        starts = anyio.run(bench_start, root, args.starts)
        proc = [status_process(os.path.join(root, "small")) for _ in range(args.starts)]
        imports = [import_process() for _ in range(args.starts)]
        print(f"\nstart ({args.starts} starts), median ms (p90):")
        for name, xs in starts.items():
            print(f"  runwatch mcp to {name:<12} {_ms(xs):>8} ({1000 * _p90(xs):.1f})")
        print(
            f"  python -c 'import mcp.server.mcpserver' {_ms(imports):>8} ({1000 * _p90(imports):.1f})   (floor: the SDK's import)"
        )
        print(f"  runwatch status --json process {_ms(proc):>8} ({1000 * _p90(proc):.1f})   (peer: one shell check-in)")

        calls = anyio.run(bench_calls, root, ["big", "small"], args.calls)
        big_status = [status_process(os.path.join(root, "big")) for _ in range(5)]
        print(
            f"\ncalls over MCP ({args.calls} each, in turn), median ms: 1 MiB log / {size / 2**30:.2f} GiB log / ratio"
        )
        for name in sorted({k[0] for k in calls}):
            small, big = calls[(name, "small")], calls[(name, "big")]
            print(
                f"  {name:<20} {_ms(small):>8} {_ms(big):>8}   x{statistics.median(big) / statistics.median(small):.2f}"
            )
        print(f"  runwatch status --json process on the big log: {_ms(big_status)} ms (median of 5)")

        wake = anyio.run(bench_wake, root, args.rounds)
        print(f"\nverdict written -> wait_for_verdict returned ({args.rounds} each), ms: median / p90 / max")
        for how, xs in wake.items():
            print(f"  {how:<10} {_ms(xs):>8} {1000 * _p90(xs):8.1f} {1000 * max(xs):8.1f}")
        print("load average after: " + " ".join(f"{x:.1f}" for x in os.getloadavg()))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
