"""The MCP tools that wait: `wait_for_verdict`, `wait_for_event` and `check_run`.

Their loops keep the run's files off the event loop: every look at a file runs in a worker thread
(`wait_for_verdict` stats two small files four times a second, re-reads them only when they change
and re-checks the watcher's liveness every few seconds), and `check_run` replays in a child process,
killed at its `timeout_s` or when the call is cancelled (a thread could not be stopped). Imported
by `server` alone (it needs the MCP SDK).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import anyio
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, TextContent

from ...errors import RunwatchError
from .answers import answer, bounded, error, log
from .bound import fit
from .shell import EventTails
from .tools import MAX_WAIT_SECONDS, Tools
from .verdicts import files_signature, watch_state

# How often `wait_for_verdict` looks at watchdog.json and supervise.jsonl (a stat each): a final
# verdict is answered within this plus the read, well inside the contract's second.
WAIT_POLL_SECONDS = 0.25
# How often it judges the watcher's liveness again when neither file changed (a killed watch).
WAIT_RECHECK_SECONDS = 2.0
# How often it reports progress to a client that asked for it (some clients time out a silent call).
WAIT_PROGRESS_SECONDS = 15.0
# check_run's time bound (`timeout_s`): its default, and the most it may be set to.
CHECK_SECONDS = 60.0
MAX_CHECK_SECONDS = 600.0


async def wait_for_verdict(tools: Tools, run: str, timeout_s: float, ctx: Context) -> CallToolResult:
    """wait_for_verdict: poll `verdicts.watch_state` until it is not `watching`, or the timeout."""
    try:
        doc = await _waited(tools, run, timeout_s, ctx)
    except RunwatchError as exc:
        return error(str(exc))
    except Exception as exc:  # noqa: BLE001 - as in `_answer`: one line, and the server keeps serving
        log.error("runwatch mcp: wait_for_verdict failed: %s: %s", type(exc).__name__, exc)
        return error(f"wait_for_verdict: internal error: {type(exc).__name__}: {exc}")
    return answer("wait_for_verdict", lambda: fit(doc))


async def _waited(tools: Tools, run: str, timeout_s: float, ctx: Context) -> dict[str, Any]:
    # every look at the run's files runs in a worker thread: the event loop serves other calls meanwhile
    run_dir, state = await anyio.to_thread.run_sync(tools.wait_state, run)
    timeout = min(max(0.0, timeout_s), MAX_WAIT_SECONDS) if timeout_s == timeout_s else 0.0  # NaN: 0
    start = time.monotonic()
    seen = await anyio.to_thread.run_sync(files_signature, run_dir)
    judged = reported = start
    while state["state"] == "watching" and time.monotonic() - start < timeout:
        await anyio.sleep(min(WAIT_POLL_SECONDS, max(0.0, timeout - (time.monotonic() - start))))
        now = time.monotonic()
        sig = await anyio.to_thread.run_sync(files_signature, run_dir)
        if sig != seen or now - judged >= WAIT_RECHECK_SECONDS:
            seen, judged = sig, now
            state = await anyio.to_thread.run_sync(watch_state, run_dir)
        if now - reported >= WAIT_PROGRESS_SECONDS:
            reported = now
            await ctx.report_progress(now - start, timeout, "waiting for a verdict")
    doc: dict[str, Any] = {"run": tools.rel(run_dir), **state, "waited_seconds": round(time.monotonic() - start, 2)}
    if state["state"] == "watching":
        doc["timed_out"] = True
        watchdog = state.get("watchdog") or {}
        doc["step"] = watchdog.get("step")
    if timeout != timeout_s:
        doc["clamped"] = f"timeout_s {timeout_s!r} clamped to {timeout:g}"
    return doc


# check_run replays in a child process, which a timeout or a cancelled call kills: a thread could not be stopped.
_CHECK_CHILD = """
import json, sys
from runwatch.errors import RunwatchError
from runwatch.views.agent.tools import Tools
root, run, options = json.loads(sys.stdin.read())
try:
    text, _ = Tools(root).check_run(run, options)
except RunwatchError as exc:
    text = json.dumps({"error": " ".join(str(exc).split())})
except (OverflowError, RecursionError, SystemExit) as exc:
    text = json.dumps({"error": f"check_run: cannot replay: {type(exc).__name__}: {exc}"})
sys.stdout.write(text)
"""


async def check_run(tools: Tools, run: str, options: list[str] | None, timeout_s: float) -> CallToolResult:
    """check_run: `Tools.check_run` in a child process, killed at `timeout_s` or when the call is cancelled."""
    try:
        opts = bounded("check_run", options)
        await anyio.to_thread.run_sync(tools.path, "check_run", "run", run)  # refused at once when outside ROOT
    except RunwatchError as exc:
        return error(str(exc))
    timeout = min(max(0.0, timeout_s), MAX_CHECK_SECONDS) if timeout_s == timeout_s else 0.0  # NaN: 0
    env = dict(os.environ)
    src = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))  # where runwatch is imported from
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    proc = await anyio.open_process(
        [sys.executable, "-c", _CHECK_CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    out = b""
    try:
        with anyio.move_on_after(timeout) as scope:
            if proc.stdin is not None:
                await proc.stdin.send(json.dumps([tools.root, run, opts]).encode())
                await proc.stdin.aclose()
            if proc.stdout is not None:
                async for chunk in proc.stdout:
                    out += chunk
            await proc.wait()
    finally:
        if proc.returncode is None:  # the timeout, or the client cancelled: the replay stops now
            proc.kill()
            with anyio.CancelScope(shield=True):
                await proc.wait()
    if scope.cancelled_caught:
        return error(f"check_run: {run}: the replay took longer than {timeout:g} s (timeout_s); stopped")
    try:
        doc = json.loads(out)
    except ValueError:
        return error(f"check_run: {run}: the replay ended without a result (exit status {proc.returncode})")
    if not isinstance(doc, dict):
        return error(f"check_run: {run}: the replay ended without a result")
    if set(doc) == {"error"}:
        return error(str(doc["error"]))
    return CallToolResult(content=[TextContent(type="text", text=out.decode())], structured_content=doc)


async def wait_for_event(
    tools: Tools,
    tails: EventTails,
    run: str,
    since: str | None,
    kinds: list[str] | None,
    timeout_s: float,
    ctx: Context,
) -> CallToolResult:
    """wait_for_event: the events after `since`, read in a worker thread (never in the event loop),
    again every WAIT_POLL_SECONDS until some come or the timeout."""
    try:
        timeout = min(max(0.0, timeout_s), MAX_WAIT_SECONDS) if timeout_s == timeout_s else 0.0
        start = time.monotonic()
        reported = start
        while True:
            doc = await anyio.to_thread.run_sync(tails.events, run, since, kinds)
            waited = time.monotonic() - start
            if doc["events"] or waited >= timeout:
                break
            await anyio.sleep(min(WAIT_POLL_SECONDS, timeout - waited))
            if time.monotonic() - reported >= WAIT_PROGRESS_SECONDS:
                reported = time.monotonic()
                await ctx.report_progress(reported - start, timeout, "waiting for an event")
    except RunwatchError as exc:
        return error(str(exc))
    except Exception as exc:  # noqa: BLE001 - as in `_answer`: one line, and the server keeps serving
        log.error("runwatch mcp: wait_for_event failed: %s: %s", type(exc).__name__, exc)
        return error(f"wait_for_event: internal error: {type(exc).__name__}: {exc}")
    doc["waited_seconds"] = round(time.monotonic() - start, 2)
    if not doc["events"]:
        doc["timed_out"] = True
    if timeout != timeout_s:
        doc["clamped"] = f"timeout_s {timeout_s!r} clamped to {timeout:g}"
    return answer("wait_for_event", lambda: fit(doc, cut="events", keep="tail"))
