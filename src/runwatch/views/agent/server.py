"""`runwatch mcp`: the agent's tools served over stdio with the official MCP Python SDK (v2).

    server = build_server(Tools("/work/runs"), act_tools=False)
    server.run("stdio")                 # or: serve_stdio("/work/runs")

Each tool is a thin binding: it validates nothing itself beyond what the SDK does from the type
hints, calls `Tools` (or `act`), and answers a `CallToolResult` whose text block is the result's
JSON and whose structured content is the same object (both within the 8 KB bound). A refusal or a
run error (any `RunwatchError`) is an error result (`isError`) of one line; anything unexpected is
one line too, never a traceback, and the server keeps serving. The synchronous tools run in the
SDK's worker threads. `wait_for_verdict` is asynchronous: it polls two small files four times a
second (their stat; a re-read only when they change, and a liveness re-check every few seconds),
each look in a worker thread, so that nothing a run directory holds can stop the event loop.
`check_run` replays in a child process, killed at its `timeout_s` or when the call is cancelled.
Needs `runwatch[mcp]`; imported only when `runwatch mcp` runs. Longer than 500 lines on purpose:
one binding a tool, each with its arguments' descriptions (what the client shows the model), beside
the three asynchronous tools' loops that keep files off the event loop.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from ...errors import RunwatchError, UsageError
from ...version import __version__
from . import act, schemas
from .bound import fit
from .shell import EventTails
from .tools import MAX_WAIT_SECONDS, Result, Tools
from .verdicts import files_signature, watch_state

__all__ = ["build_server", "serve_stdio", "INSTRUCTIONS"]

# How often `wait_for_verdict` looks at watchdog.json and supervise.jsonl (a stat each): a final
# verdict is answered within this plus the read, well inside the contract's second.
WAIT_POLL_SECONDS = 0.25
# How often it judges the watcher's liveness again when neither file changed (a killed watch).
WAIT_RECHECK_SECONDS = 2.0
# How often it reports progress to a client that asked for it (some clients time out a silent call).
WAIT_PROGRESS_SECONDS = 15.0
# An error result is one line; a message that would flood the context (a huge path) is cut.
MAX_ERROR_CHARS = 1000
# check_run's time bound (`timeout_s`): its default, and the most it may be set to.
CHECK_SECONDS = 60.0
MAX_CHECK_SECONDS = 600.0
# An option list (or a command) holds at most this many strings of at most this many characters:
# a real command line has a few dozen; 40,000 took the parser seconds.
MAX_OPTIONS = 256
MAX_OPTION_CHARS = 4096
# plan_run's numbers: beyond these no projection means anything (and a float would overflow).
MAX_PLAN_SAMPLES = 10**15
MAX_PLAN_EPOCHS = 1e6
MAX_PLAN_WINDOW_SECONDS = 1e9

INSTRUCTIONS = (
    "runwatch supervises long training runs. Check in with run_status (short), never read a whole log: "
    "tail_records gives the last records. After launching a run under `runwatch supervise`, call "
    "wait_for_verdict: it returns as soon as the run has a final verdict (or at its timeout), so you "
    "are woken instead of polling. explain says what a verdict kind means and what to do."
)

_log = logging.getLogger("runwatch.mcp")

Run = Annotated[str, Field(description="a run directory or log, relative to the server's ROOT (or absolute inside it)")]
Options = Annotated[
    list[str] | None,
    Field(description='command-line options as separate strings, e.g. ["--chance-loss", "0.693"]'),
]


ReadingOptions = Annotated[
    list[str] | None,
    Field(
        description="how to read a log runwatch did not write, as separate strings, "
        'e.g. ["--format", "nanogpt"], ["--pattern", "^step (?P<step>\\d+) loss (?P<loss>\\S+)"], '
        '["--map", "loss=train/loss"]'
    ),
]


def _answer(tool: str, call: Callable[[], Result]) -> CallToolResult:
    """Run a tool; its result, or an error result of one line."""
    try:
        text, doc = call()
    except RunwatchError as exc:
        return _error(str(exc))
    except SystemExit:  # argparse asked to exit (a help flag slipped through): not the server's end
        return _error(f"{tool}: the options asked for help or a version; give options only")
    except (OverflowError, RecursionError) as exc:  # a number too large for a float, a nested bomb
        return _error(f"{tool}: an argument is out of range: {exc}")
    except Exception as exc:  # noqa: BLE001 - the server must keep serving; the client gets one line
        _log.error("runwatch mcp: %s failed: %s: %s", tool, type(exc).__name__, exc)
        return _error(f"{tool}: internal error: {type(exc).__name__}: {exc}")
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=doc)


def _error(message: str) -> CallToolResult:
    line = " ".join(message.split())  # one line, whatever the message held
    if len(line) > MAX_ERROR_CHARS:
        line = line[: MAX_ERROR_CHARS - 3] + "..."
    return CallToolResult(content=[TextContent(type="text", text=line)], is_error=True)


def _tool(server: MCPServer[Any], annotations: ToolAnnotations) -> Callable[[Any], Any]:
    """Register a tool: its description is its docstring on one line (no source indentation);
    its outputSchema comes from the `Annotated[CallToolResult, schema]` it returns."""

    def register(fn: Any) -> Any:
        out = server.tool(annotations=annotations, description=" ".join((inspect.getdoc(fn) or "").split()))(fn)
        registered = server._tool_manager.get_tool(fn.__name__)  # (the SDK has no public way to trim them)
        if registered is not None:
            _untitled(registered.parameters)
            _untitled(registered.fn_metadata.output_schema)
        return out

    return register


def _untitled(schema: Any) -> None:
    """Say the same in fewer bytes, in place: drop the `title` pydantic gives every schema and
    property (the property's name again) and `additionalProperties: true` (the default), and write
    `anyOf: [{"type": T, ...}, {"type": "null"}]` as `type: [T, "null"]`: a third of the tool
    definitions' bytes, which an agent reads at the start of every session."""
    if isinstance(schema, dict):
        if isinstance(schema.get("title"), str):
            del schema["title"]
        if schema.get("additionalProperties") is True:
            del schema["additionalProperties"]
        options = schema.get("anyOf")
        if isinstance(options, list) and len(options) == 2 and {"type": "null"} in options:
            other = options[0] if options[1] == {"type": "null"} else options[1]
            if isinstance(other, dict) and isinstance(other.get("type"), str):
                del schema["anyOf"]
                schema.update({**other, "type": [other["type"], "null"]})
        for key, value in schema.items():
            if key == "properties" and isinstance(value, dict):
                for prop in value.values():
                    _untitled(prop)
            else:
                _untitled(value)
    elif isinstance(schema, list):
        for item in schema:
            _untitled(item)


def build_server(tools: Tools, *, act_tools: bool = False) -> MCPServer[Any]:
    """The MCP server over `tools`; `act_tools` adds `launch_supervised` and `stop_run`."""
    server: MCPServer[Any] = MCPServer("runwatch", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    tails = EventTails(tools)

    @_tool(server, read_only)
    def list_runs(
        under: Annotated[str | None, Field(description="a folder inside ROOT (default: ROOT)")] = None,
    ) -> Annotated[CallToolResult, schemas.ListRuns]:
        """Every run under a folder as the runwatch page lists it: verdict, step of max, loss, tokens/s,
        age of the last record, warnings; anomalies first; at most 50, `total` says how many exist."""
        return _answer("list_runs", lambda: tools.list_runs(under))

    @_tool(server, read_only)
    def run_status(run: Run, options: ReadingOptions = None) -> Annotated[CallToolResult, schemas.RunStatus]:
        """A short check-in on one run (`runwatch status --json`): step, loss, rate, ETA, process, the
        watchdog's verdict with its class and onset (or whether a watch runs), warnings, supervision.
        `options` say how to read a log runwatch did not write (--format, --pattern, --run, --map)."""
        return _answer("run_status", lambda: tools.run_status(run, _bounded("run_status", options)))

    @_tool(server, read_only)
    def tail_records(
        run: Run,
        n: Annotated[int, Field(description="how many records (at most 200; larger is clamped)")] = 20,
        options: ReadingOptions = None,
    ) -> Annotated[CallToolResult, schemas.TailRecords]:
        """The last n records of a run's log in minimal-telemetry keys (step, t, loss, lr, grad_norm,
        sps, eval_loss, eval_<metric>), whatever its format; read from the end, not the whole log.
        `options` as run_status takes them (--format, --pattern, --run, --map)."""
        return _answer("tail_records", lambda: tools.tail_records(run, n, _bounded("tail_records", options)))

    @_tool(server, read_only)
    async def check_run(
        run: Run,
        options: Options = None,
        timeout_s: Annotated[
            float, Field(description=f"seconds the replay may take at most (default 60, at most {MAX_CHECK_SECONDS:g})")
        ] = CHECK_SECONDS,
    ) -> Annotated[CallToolResult, schemas.CheckRun]:
        """Replay the watchdog's rules over a run's log as it stands (`runwatch check --json`): every
        finding with kind, class, step, onset and message, the verdict line, and `exit`, check's exit
        status (0 clean, 7 findings, or what --exit-code CLASS=N sets). `options` are the watch's rule
        options (e.g. --chance-loss 0.693, --map loss=train/loss). Stops at `timeout_s` and when the
        call is cancelled."""
        return await _check(tools, run, options, timeout_s)

    @_tool(server, read_only)
    async def wait_for_verdict(
        run: Run,
        ctx: Context,
        timeout_s: Annotated[
            float, Field(description="seconds to wait at most (at most 3600; larger is clamped)")
        ] = 600.0,
    ) -> Annotated[CallToolResult, schemas.WaitForVerdict]:
        """Wait until the run's watch or supervisor reaches a final verdict and return it (a verdict
        that `supervise` acts on by relaunching is not final: its done, gave_up or preempted is, with
        `exit`, the supervisor's exit status: 0 done, 75 preempted, 130 Ctrl-C, 7 otherwise). Returns
        at once when nothing watches the run, and at the timeout with the watching record and the step reached."""
        return await _wait(tools, run, timeout_s, ctx)

    @_tool(server, read_only)
    def explain(
        kind: Annotated[str, Field(description="a verdict kind, e.g. loss_spike, stall, done")],
    ) -> Annotated[CallToolResult, schemas.Explain]:
        """What a verdict kind means, its class (transient, divergence, fatal) and what to do about it."""
        return _answer("explain", lambda: tools.explain(kind))

    @_tool(server, read_only)
    def plan_run(
        samples: Annotated[int, Field(description="samples per epoch of the long run")],
        window: Annotated[str | float, Field(description="the time window: 8h, 90m, 1h30m or seconds")],
        run: Annotated[str | None, Field(description="a run with timing (or give bench)")] = None,
        bench: Annotated[str | None, Field(description="a `runwatch bench` directory (or give run)")] = None,
        epochs: Annotated[float, Field(description="epochs (default 1)")] = 1.0,
        options: ReadingOptions = None,
    ) -> Annotated[CallToolResult, schemas.PlanRun]:
        """Project a long run's time from a bench or a short run (`runwatch plan`): fits (exit 0), does
        not fit (1, with the `runwatch subsample` command that fits) or cannot project (2, and why).
        `options` read a run's log as run_status reads it."""

        def planned() -> Result:
            _plan_numbers(samples, epochs, window)
            return tools.plan_run(samples, window, run, bench, epochs, _bounded("plan_run", options))

        return _answer("plan_run", planned)

    @_tool(server, read_only)
    def get_series(
        run: Run,
        keys: Annotated[
            list[str] | None,
            Field(description='keys to read (default ["loss", "eval_loss"]; also lr, grad_norm, sps, eval_<metric>)'),
        ] = None,
        max_points: Annotated[int, Field(description="buckets per key (default 200, at most 500)")] = 200,
        min_step: Annotated[float | None, Field(description="the first step to cover")] = None,
        max_step: Annotated[float | None, Field(description="the last step to cover")] = None,
        options: ReadingOptions = None,
    ) -> Annotated[CallToolResult, schemas.GetSeries]:
        """A run's series over a step range in at most max_points buckets per key, each [step_first,
        step_last, min, max, last], so a spike is never sampled away; non-finite values counted apart
        (nonfinite: count and first steps). Use it to see a curve around an onset."""
        return _answer(
            "get_series",
            lambda: tools.get_series(
                run,
                _bounded("get_series", keys, "keys"),
                max_points,
                min_step,
                max_step,
                _bounded("get_series", options),
            ),
        )

    @_tool(server, read_only)
    def incident(
        run: Run,
        compare: Annotated[str | None, Field(description="another run to tell this one apart from")] = None,
        options: ReadingOptions = None,
    ) -> Annotated[CallToolResult, schemas.Incident]:
        """Everything to act on a stopped run in one call: the verdict (kind, class, severity, onset,
        message), the 10 records before and after the onset, the last 30 lines of its output, the
        checkpoints at or before the onset, its recipe and argv, and with compare what differs."""
        return _answer("incident", lambda: tools.incident(run, compare, _bounded("incident", options)))

    @_tool(server, read_only)
    async def wait_for_event(
        run: Run,
        ctx: Context,
        since: Annotated[
            str | None, Field(description="the cursor of an earlier result (omit: from the run's start)")
        ] = None,
        kinds: Annotated[
            list[str] | None,
            Field(
                description="event kinds (default all: warning, stop, relaunch, rollback, checkpoint, done, gave_up, preempted)"
            ),
        ] = None,
        timeout_s: Annotated[
            float, Field(description="seconds to wait at most when none came yet (at most 3600)")
        ] = 600.0,
    ) -> Annotated[CallToolResult, schemas.WaitForEvent]:
        """The run's events after a cursor (warnings, stops, relaunches, rollbacks, checkpoints, the
        end), each once, and a new cursor; waits up to timeout_s when none came yet. The cursor
        survives a restart of the server or of the agent: keep it and pass it as since."""
        return await _wait_events(tools, tails, run, since, kinds, timeout_s, ctx)

    @_tool(server, read_only)
    def compare_runs(
        runs: Annotated[list[str], Field(description="2 to 8 runs, each relative to ROOT")],
    ) -> Annotated[CallToolResult, schemas.CompareRuns]:
        """Runs side by side: recipe, argv, git commit and whether the tree was dirty, package versions,
        data fingerprint; and the keys whose values differ."""
        return _answer("compare_runs", lambda: tools.compare_runs(_bounded("compare_runs", runs, "runs") or []))

    if act_tools:
        acting = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)

        @_tool(server, acting)
        def launch_supervised(
            run_dir: Annotated[str, Field(description="the run directory, inside ROOT (created if missing)")],
            command: Annotated[
                list[str], Field(description='the training command as an argv list, e.g. ["python", "train.py"]')
            ],
            options: Annotated[
                list[str] | None, Field(description='`runwatch supervise` options, e.g. ["--restarts", "3"]')
            ] = None,
        ) -> Annotated[CallToolResult, schemas.LaunchSupervised]:
            """Start `runwatch supervise RUN_DIR [options] -- command` in its own session (it outlives
            this server): it relaunches on transient faults, rolls back on divergence, stops on fatal
            ones. Returns its pid and the run directory; then call wait_for_verdict."""
            return _answer(
                "launch_supervised",
                lambda: act.launch_supervised(
                    tools,
                    run_dir,
                    _bounded("launch_supervised", command, "command") or [],
                    _bounded("launch_supervised", options),
                ),
            )

        @_tool(server, ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False))
        def stop_run(run: Run) -> Annotated[CallToolResult, schemas.StopRun]:
            """Stop a run: its supervisor and the training's whole process tree (SIGTERM, SIGKILL after
            30 s), and once they have exited, the run's final status."""
            return _answer("stop_run", lambda: act.stop_run(tools, run))

    return server


async def _wait(tools: Tools, run: str, timeout_s: float, ctx: Context) -> CallToolResult:
    """wait_for_verdict: poll `verdicts.watch_state` until it is not `watching`, or the timeout."""
    try:
        doc = await _waited(tools, run, timeout_s, ctx)
    except RunwatchError as exc:
        return _error(str(exc))
    except Exception as exc:  # noqa: BLE001 - as in `_answer`: one line, and the server keeps serving
        _log.error("runwatch mcp: wait_for_verdict failed: %s: %s", type(exc).__name__, exc)
        return _error(f"wait_for_verdict: internal error: {type(exc).__name__}: {exc}")
    return _answer("wait_for_verdict", lambda: fit(doc))


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


def _bounded(tool: str, values: list[str] | None, what: str = "options") -> list[str] | None:
    """`values` (an option list, a command) when within `MAX_OPTIONS` strings of `MAX_OPTION_CHARS`
    each; else a UsageError of one line naming the tool."""
    if values is None:
        return None
    if len(values) > MAX_OPTIONS:
        raise UsageError(f"{tool}: {what}: at most {MAX_OPTIONS} strings, got {len(values)}")
    for v in values:
        if isinstance(v, str) and len(v) > MAX_OPTION_CHARS:
            raise UsageError(f"{tool}: {what}: a string of at most {MAX_OPTION_CHARS} characters, got {len(v)}")
    return values


def _plan_numbers(samples: int, epochs: float, window: str | float) -> None:
    """plan_run's numbers, within what a projection can use; a UsageError of one line otherwise."""
    if not 1 <= samples <= MAX_PLAN_SAMPLES:
        raise UsageError(f"plan_run: samples must be an int from 1 to {MAX_PLAN_SAMPLES:.0e}, got {samples}")
    if not 0 < epochs <= MAX_PLAN_EPOCHS:  # (NaN fails too)
        raise UsageError(f"plan_run: epochs must be > 0 and at most {MAX_PLAN_EPOCHS:g}, got {epochs}")
    if isinstance(window, str) and len(window) > MAX_OPTION_CHARS:
        raise UsageError(f"plan_run: window: at most {MAX_OPTION_CHARS} characters, got {len(window)}")
    if isinstance(window, float) and not 0 < window <= MAX_PLAN_WINDOW_SECONDS:
        raise UsageError(f"plan_run: window must be > 0 and at most {MAX_PLAN_WINDOW_SECONDS:g} seconds, got {window}")


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


async def _check(tools: Tools, run: str, options: list[str] | None, timeout_s: float) -> CallToolResult:
    """check_run: `Tools.check_run` in a child process, killed at `timeout_s` or when the call is cancelled."""
    try:
        opts = _bounded("check_run", options)
        await anyio.to_thread.run_sync(tools.path, "check_run", "run", run)  # refused at once when outside ROOT
    except RunwatchError as exc:
        return _error(str(exc))
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
        return _error(f"check_run: {run}: the replay took longer than {timeout:g} s (timeout_s); stopped")
    try:
        doc = json.loads(out)
    except ValueError:
        return _error(f"check_run: {run}: the replay ended without a result (exit status {proc.returncode})")
    if not isinstance(doc, dict):
        return _error(f"check_run: {run}: the replay ended without a result")
    if set(doc) == {"error"}:
        return _error(str(doc["error"]))
    return CallToolResult(content=[TextContent(type="text", text=out.decode())], structured_content=doc)


async def _wait_events(
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
        return _error(str(exc))
    except Exception as exc:  # noqa: BLE001 - as in `_answer`: one line, and the server keeps serving
        _log.error("runwatch mcp: wait_for_event failed: %s: %s", type(exc).__name__, exc)
        return _error(f"wait_for_event: internal error: {type(exc).__name__}: {exc}")
    doc["waited_seconds"] = round(time.monotonic() - start, 2)
    if not doc["events"]:
        doc["timed_out"] = True
    if timeout != timeout_s:
        doc["clamped"] = f"timeout_s {timeout_s!r} clamped to {timeout:g}"
    return _answer("wait_for_event", lambda: fit(doc, cut="events", keep="tail"))


def serve_stdio(root: str, *, act_tools: bool = False) -> None:
    """Serve the tools over stdio until the client closes the connection."""
    tools = Tools(root)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(message)s")
    build_server(tools, act_tools=act_tools).run("stdio")
