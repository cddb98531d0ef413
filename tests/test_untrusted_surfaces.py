"""Nothing in a run directory is trusted, at the surfaces: `runwatch mcp --act` driven by the MCP
SDK's own client (forged pids refused by name, side files leading out of ROOT refused, FIFOs never
hanging a tool or the event loop, results within 8192 bytes as the client measures them, bounded
check_run, one-line errors for huge arguments) and `runwatch serve` over real HTTP (runs whose
side files lead out are named, never read; CSV exports bounded per client and timed out)."""

from __future__ import annotations

import http.client
import json
import os
import socket
import time
from typing import Any

import pytest

pytest.importorskip("mcp", reason="runwatch[mcp] is not installed")

import anyio  # noqa: E402

from runwatch.files.rundir import JOURNAL, LOCK  # noqa: E402
from runwatch.procs.process import alive  # noqa: E402
from test_mcp import Client, minimal_log, serve  # noqa: E402
from test_untrusted import forge, victim  # noqa: E402

pytestmark = pytest.mark.xdist_group("untrusted")


def _watching(run: Any) -> None:
    """A `watching` record of a live watch (this process): wait_for_verdict waits on it."""
    from runwatch.judging.liveness import watching_record
    from runwatch.judging.verdict import write_verdict

    write_verdict(str(run), watching_record(os.getpid(), time.time(), time.time(), 3, 1.0, {}, []))


def _check_children() -> list[int]:
    """The check_run replays running now (the server's child processes that import the tools)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if b"runwatch.views.agent.tools import Tools" in f.read():
                        out.append(int(name))
            except OSError:
                continue
    return [p for p in out if alive(p)]


def test_the_mcp_tools_trust_nothing_in_a_run_directory(tmp_path):
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.log").write_text("secret\n")
    minimal_log(str(outside / "metrics.jsonl"), range(1, 4))
    runs = root / "runs"
    minimal_log(str(runs / "ok" / "metrics.jsonl"), range(1, 30))
    leak = runs / "leak"
    minimal_log(str(leak / "metrics.jsonl"), range(1, 5))
    os.symlink(outside / "secret.log", leak / "stdout.log")
    leaklog = runs / "leaklog"
    leaklog.mkdir(parents=True)
    os.symlink(outside / "metrics.jsonl", leaklog / "metrics.jsonl")
    fifo = runs / "fifo"
    minimal_log(str(fifo / "metrics.jsonl"), range(1, 5))
    for name in (JOURNAL, "stdout.log", "watchdog.json"):
        os.mkfifo(fifo / name)
    fifolog = runs / "fifolog"
    fifolog.mkdir()
    os.mkfifo(fifolog / "metrics.jsonl")
    tiny = runs / "tiny"  # 200 records of tiny numbers: 6e-05 as the SDK writes it is 0.00006
    tiny.mkdir()
    with open(tiny / "metrics.jsonl", "w") as f:
        for s in range(1, 401):
            f.write(json.dumps({"step": s, "t": 1000.0 + s, "loss": 6e-05, "lr": 6e-05, "grad_norm": 6e-05}) + "\n")
    long = root / "long"  # (outside the folder list_runs reads)
    long.mkdir()
    with open(long / "metrics.jsonl", "w") as f:
        f.writelines(f'{{"step": {s}, "t": {s}.0, "loss": 0.5}}\n' for s in range(1, 300_001))
    watched = runs / "watched"
    minimal_log(str(watched / "metrics.jsonl"), range(1, 4))
    _watching(watched)

    with victim() as v:
        forge(runs / "forged", v.pid)

        async def body(c: Client) -> dict[str, Any]:
            out: dict[str, Any] = {}
            out["stop"] = await c.error("stop_run", run="runs/forged")
            for tool, args in (
                ("run_status", {"run": "runs/leak"}),
                ("tail_records", {"run": "runs/leak"}),
                ("check_run", {"run": "runs/leak"}),
                ("run_status", {"run": "runs/leaklog"}),
                ("stop_run", {"run": "runs/leak"}),
            ):
                out.setdefault("leak", []).append(await c.error(tool, **args))
            out["list"] = await c.call("list_runs", under="runs")
            with anyio.fail_after(60):  # a FIFO never hangs a tool
                out["fifo_status"] = await c.call("run_status", run="runs/fifo")
                out["fifo_wait"] = await c.call("wait_for_verdict", run="runs/fifo", timeout_s=1)
                out["fifolog"] = await c.raw("run_status", run="runs/fifolog")
            out["tiny"] = await c.call("tail_records", run="runs/tiny", n=200)
            # a wait that blocks for its whole timeout never stops the others
            order: list[str] = []

            async def wait() -> None:
                await c.call("wait_for_verdict", run="runs/watched", timeout_s=4)
                order.append("wait")

            async def explain() -> None:
                await anyio.sleep(0.5)
                await c.call("explain", kind="stall")
                order.append("explain")

            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                tg.start_soon(explain)
            out["order"] = order
            out["check_timeout"] = await c.error("check_run", run="runs/ok", timeout_s=0.01)
            seen = []
            with anyio.move_on_after(1.5):  # the client gives up: the server kills the replay
                async with anyio.create_task_group() as tg:
                    tg.start_soon(c.session.call_tool, "check_run", {"run": "long", "timeout_s": 600})
                    while True:
                        await anyio.sleep(0.05)
                        seen += _check_children()
            end = time.monotonic() + 30
            while _check_children() and time.monotonic() < end:
                await anyio.sleep(0.1)
            out["cancelled"] = (bool(seen), _check_children())
            out["check"] = await c.call("check_run", run="runs/ok")
            out["huge"] = [
                await c.error("plan_run", run="runs/ok", samples=10**30, window="1h"),
                await c.error("plan_run", run="runs/ok", samples=100, window=1e300),
                await c.error("run_status", run="runs/ok", options=["--format", "jsonl"] * 20_000),
                await c.error(
                    "launch_supervised", run_dir="runs/new", command=["true"], options=["--log", str(outside / "x")]
                ),
            ]
            return out

        out = serve(root, "--act", body=body)
        assert v.poll() is None and alive(v.pid)  # never signalled
    real = os.path.realpath(root)
    assert out["stop"] == (
        f"stop_run: pid {v.pid} in runs/forged/supervise.jsonl was not started by runwatch for this run: not stopped "
        "(it does not hold the run's supervise.lock); "
        f"pid {v.pid} in runs/forged/pid was not started by runwatch for this run: not stopped "
        "(its environment has no RUNWATCH_ATTEMPT_ID of the launch that launch.json records)"
    )
    assert out["leak"][:3] == [
        f"{tool}: runs/leak/stdout.log leads outside {real}: refused"
        for tool in ("run_status", "tail_records", "check_run")
    ]
    assert out["leak"][3] == f"run_status: runs/leaklog/metrics.jsonl leads outside {real}: refused"
    assert out["leak"][4] == f"stop_run: runs/leak/stdout.log leads outside {real}: refused"
    assert f"leak: stdout.log leads outside {real}/runs: not read" in out["list"]["refused"]
    assert "secret" not in json.dumps({k: v for k, v in out.items() if k != "fifolog"})
    assert out["fifo_status"]["run"] == "runs/fifo"
    assert out["fifo_wait"]["state"] in ("unwatched", "watching")
    assert out["fifolog"].is_error and "not a regular file" in out["fifolog"].content[0].text
    assert len(out["tiny"]["records"]) < 200 and "truncated" in out["tiny"]
    assert out["order"] == ["explain", "wait"]
    assert out["check_timeout"] == "check_run: runs/ok: the replay took longer than 0.01 s (timeout_s); stopped"
    assert out["check"]["exit"] == 0
    assert out["cancelled"][1] == []  # no replay left running after the cancelled call
    assert out["huge"][0] == "plan_run: samples must be an int from 1 to 1e+15, got " + str(10**30)
    assert out["huge"][1] == "plan_run: window must be > 0 and at most 1e+09 seconds, got 1e+300"
    assert out["huge"][2] == "run_status: options: at most 256 strings, got 40000"
    assert out["huge"][3].startswith("launch_supervised: ") and "outside" in out["huge"][3]
    assert not (outside / "x").exists()


# --- serve, over real HTTP ------------------------------------------------------------------------


def _big_log(path: Any, steps: int) -> None:
    with open(path, "w") as f:
        for s in range(1, steps + 1):
            f.write(json.dumps({"step": s, "t": 1000.0 + s, "loss": 1.0 / s, "lr": 1e-3, "sps": 40.0}) + "\n")


def _stalled_export(port: int, rel: str) -> socket.socket:
    """A client that asks for a CSV and never reads it (a tiny receive buffer fills at once)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    s.connect(("127.0.0.1", port))
    s.sendall(f"GET /api/run/{rel}.csv HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    return s


def test_serve_names_runs_leading_out_and_bounds_exports_per_client(tmp_path, monkeypatch):
    from runwatch.views.serve import server
    from serve_runs import Served

    monkeypatch.setattr(server, "EXPORT_SEND_SECONDS", 1.0)
    monkeypatch.setattr(server, "EXPORT_WAIT_SECONDS", 0.5)
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "watchdog.json").write_text(json.dumps({"verdict": "anomaly", "kind": "secret"}))
    _big_log(outside / "metrics.jsonl", 3)
    (root / "big").mkdir(parents=True)
    _big_log(root / "big" / "metrics.jsonl", 60_000)
    (root / "leak").mkdir()
    _big_log(root / "leak" / "metrics.jsonl", 3)
    os.symlink(outside / "watchdog.json", root / "leak" / "watchdog.json")
    (root / "fifo").mkdir()
    _big_log(root / "fifo" / "metrics.jsonl", 3)
    os.mkfifo(root / "fifo" / JOURNAL)
    os.mkfifo(root / "fifo" / LOCK)
    with Served(root) as srv:
        doc = srv.json("/api/runs")
        assert doc["refused"] == [f"leak: watchdog.json leads outside {os.path.realpath(root)}: not read"]
        assert "secret" not in json.dumps(doc)
        assert {r["path"] for r in doc["runs"]} == {"big", "fifo"}
        assert srv.get("/run/leak")[0] == 404
        stalled = _stalled_export(srv.port, "big")
        try:
            deadline = time.monotonic() + 60
            while not srv.srv._exporting and time.monotonic() < deadline:  # the stalled export has its slot
                time.sleep(0.01)
            assert srv.get("/api/run/big.csv")[0] == 429  # one export a client at a time
            deadline = time.monotonic() + 60  # the stalled client is cut off after EXPORT_SEND_SECONDS
            while (got := srv.get("/api/run/big.csv"))[0] == 429 and time.monotonic() < deadline:
                pass
            code, _, body = got
            assert code == 200 and body.count(b"\n") == 60_001
        finally:
            stalled.close()
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
        conn.request("GET", "/api/run/fifo")
        assert conn.getresponse().status == 200  # a FIFO journal never holds a page
        conn.close()
