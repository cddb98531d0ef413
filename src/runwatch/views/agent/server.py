"""`runwatch mcp`: the agent's tools served over stdio with the official MCP Python SDK (v2).

    server = build_server(Tools("/work/runs"), act_tools=False)
    server.run("stdio")                 # or: serve_stdio("/work/runs")

Each tool is a thin binding: it validates nothing itself beyond what the SDK does from the type
hints (and the bounds on its strings, `answers.bounded`), calls `Tools` (or `act`), and answers
through `answers.answer`: a `CallToolResult` whose text block is the result's JSON and whose
structured content is the same object (both within the 8 KB bound), or an error result of one
line. The synchronous tools run in the SDK's worker threads; the tools that wait
(`wait_for_verdict`, `wait_for_event`, `check_run`) are `waits`'. Needs `runwatch[mcp]`; imported
only when `runwatch mcp` runs (with `answers` and `waits`, the only modules that import the SDK).
"""

from __future__ import annotations

import inspect
import logging
import sys
from collections.abc import Callable
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import Field

from ...errors import UsageError
from ...version import __version__
from . import act, schemas, waits
from .answers import MAX_OPTION_CHARS, answer, bounded
from .shell import EventTails
from .tools import Result, Tools
from .waits import CHECK_SECONDS, MAX_CHECK_SECONDS

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
        return answer("list_runs", lambda: tools.list_runs(under))

    @_tool(server, read_only)
    def run_status(run: Run, options: ReadingOptions = None) -> Annotated[CallToolResult, schemas.RunStatus]:
        """A short check-in on one run (`runwatch status --json`): step, loss, rate, ETA, process, the
        watchdog's verdict with its class and onset (or whether a watch runs), warnings, supervision.
        `options` say how to read a log runwatch did not write (--format, --pattern, --run, --map)."""
        return answer("run_status", lambda: tools.run_status(run, bounded("run_status", options)))

    @_tool(server, read_only)
    def tail_records(
        run: Run,
        n: Annotated[int, Field(description="how many records (at most 200; larger is clamped)")] = 20,
        options: ReadingOptions = None,
    ) -> Annotated[CallToolResult, schemas.TailRecords]:
        """The last n records of a run's log in minimal-telemetry keys (step, t, loss, lr, grad_norm,
        sps, eval_loss, eval_<metric>), whatever its format; read from the end, not the whole log.
        `options` as run_status takes them (--format, --pattern, --run, --map)."""
        return answer("tail_records", lambda: tools.tail_records(run, n, bounded("tail_records", options)))

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
        return await waits.check_run(tools, run, options, timeout_s)

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
        return await waits.wait_for_verdict(tools, run, timeout_s, ctx)

    @_tool(server, read_only)
    def explain(
        kind: Annotated[str, Field(description="a verdict kind, e.g. loss_spike, stall, done")],
    ) -> Annotated[CallToolResult, schemas.Explain]:
        """What a verdict kind means, its class (transient, divergence, fatal) and what to do about it."""
        return answer("explain", lambda: tools.explain(kind))

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
            return tools.plan_run(samples, window, run, bench, epochs, bounded("plan_run", options))

        return answer("plan_run", planned)

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
        return answer(
            "get_series",
            lambda: tools.get_series(
                run,
                bounded("get_series", keys, "keys"),
                max_points,
                min_step,
                max_step,
                bounded("get_series", options),
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
        return answer("incident", lambda: tools.incident(run, compare, bounded("incident", options)))

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
        return await waits.wait_for_event(tools, tails, run, since, kinds, timeout_s, ctx)

    @_tool(server, read_only)
    def compare_runs(
        runs: Annotated[list[str], Field(description="2 to 8 runs, each relative to ROOT")],
    ) -> Annotated[CallToolResult, schemas.CompareRuns]:
        """Runs side by side: recipe, argv, git commit and whether the tree was dirty, package versions,
        data fingerprint; and the keys whose values differ."""
        return answer("compare_runs", lambda: tools.compare_runs(bounded("compare_runs", runs, "runs") or []))

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
            return answer(
                "launch_supervised",
                lambda: act.launch_supervised(
                    tools,
                    run_dir,
                    bounded("launch_supervised", command, "command") or [],
                    bounded("launch_supervised", options),
                ),
            )

        @_tool(server, ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False))
        def stop_run(run: Run) -> Annotated[CallToolResult, schemas.StopRun]:
            """Stop a run: its supervisor and the training's whole process tree (SIGTERM, SIGKILL after
            30 s), and once they have exited, the run's final status."""
            return answer("stop_run", lambda: act.stop_run(tools, run))

    return server


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


def serve_stdio(root: str, *, act_tools: bool = False) -> None:
    """Serve the tools over stdio until the client closes the connection."""
    tools = Tools(root)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(message)s")
    build_server(tools, act_tools=act_tools).run("stdio")
