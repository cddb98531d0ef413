"""The agent's tools as plain functions: each mirrors a command and calls what that command calls.

    tools = Tools("/work/runs")
    text, doc = tools.run_status("a")      # `runwatch status a --json`, bounded to 8 KB
    text, doc = tools.check_run("a", ["--chance-loss", "0.693"])

| tool | the command it mirrors | through |
| --- | --- | --- |
| list_runs | `serve`'s `/api/runs` | `serve.server.Catalog` (its finding, reading and summary of runs) |
| run_status | `status --json` | `status.status` (its reading options: `--format`, `--pattern`, `--run`, `--map`), plus the journal as `serve` reads it |
| tail_records | (the log itself) | `agent.tail.last_records`, read as `run_status` reads it |
| check_run | `check --json` | the `check` parser, `watchcommands.check_from_args`, `CheckResult.to_json`, `verdict.exit_status` |
| explain | docs/WATCHDOG.md's runbook | `runbook.explain` |
| plan_run | `plan` | `preflight.plan.plan` |
| get_series | (the log itself) | `agent.evidence.series`, read as `run_status` reads it |
| incident | | `agent.evidence.incident` (and `differences` against `compare`) |
| compare_runs | | `agent.evidence.provenance` and `differences` |
| (wait_for_verdict) | `wait` | `agent.verdicts.watch_state`, polled by the server |
| (wait_for_event) | `wait --events` | `agent.events.events_since`, polled by the server |

Every path argument is relative to ROOT or absolute inside it, and is refused as `serve` refuses
a path (`..`, outside ROOT, a symlink leading out: `serve.folder.inside`). Every result is
`bound.fit`ted: strict JSON of at most 8192 bytes. Errors are `RunwatchError`s with a one-line
message; the server turns them into MCP error results. Nothing here starts, stops or writes
anything (the acting tools are `agent.act`'s). Standard library only.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from ...errors import InsufficientRunError, InvalidRunError, RunwatchError, UsageError
from ...files import JOURNAL, SIDE_FILES, escaping
from ...judging import exit_status
from ...options import Parser
from ...reading import ReadOptions, parse_maps, read_options, resolve_target
from ..serve.folder import inside, run_target
from ..serve.server import Catalog
from ..serve.supervision import SupervisionView
from .bound import fit, strict
from .tail import MAX_METRICS, last_records, metrics_left_out, minimal_rows, seq_len_of
from .verdicts import watch_state

Result = tuple[str, dict[str, Any]]

# The contract's bounds: runs one `list_runs` lists, records one `tail_records` returns, seconds
# one `wait_for_verdict` waits (larger values are clamped to these).
MAX_LIST_RUNS = 50
MAX_TAIL_RECORDS = 200
MAX_WAIT_SECONDS = 3600.0
# get_series: buckets per key by default and at most, and the bound of its result (bytes).
SERIES_POINTS = 200
MAX_SERIES_POINTS = 500
MAX_SERIES_BYTES = 24576
# compare_runs: how many runs one call compares.
COMPARE_RUNS = (2, 8)
# One `list_runs` is one pass of the page's reader over its catalog: each run reads at most the
# pass's bound (serve.runs.REFRESH_BYTES, 32 MiB) of what its log gained. A 1 GB log takes ~30
# calls; its row says `catching_up` meanwhile, and the next call continues where this one stopped.
# How long a call waits for another one still reading:
LIST_WAIT_SECONDS = 10.0
# Attempts of the supervision shown by `run_status` (the latest ones).
STATUS_ATTEMPTS = 5
# What an option list may not hold: these print to stdout (the protocol's channel) and exit.
_NOT_OPTIONS = ("-h", "--help", "--version")


def _parser() -> Parser:
    """The parser of the commands the tools run (`check`, `status`, `supervise`), made of the
    arguments those commands add to `runwatch`'s own parser: one definition of every option."""
    from ...judging import watchcommands
    from ...supervising import supervisecommand
    from .. import status

    parser = Parser(prog="runwatch")
    sub = parser.add_subparsers(dest="command", parser_class=Parser)
    watchcommands.add_arguments(sub.add_parser("check"), "check")
    status.add_arguments(sub.add_parser("status"))
    supervisecommand.add_arguments(sub.add_parser("supervise"))
    return parser


def parse_command_line(tool: str, argv: list[str]) -> Any:
    """`runwatch ARGV` (check, status or supervise) parsed as `runwatch` parses it (a bad option
    is a UsageError)."""
    for a in argv:
        if not isinstance(a, str):
            raise UsageError(f"{tool}: options must be strings, got {a!r}")
        if a in _NOT_OPTIONS:
            raise UsageError(f"{tool}: {a} is not available here")
    try:
        return _parser().parse_args(argv)
    except UsageError as exc:
        raise UsageError(f"{tool}: {exc}") from None


class Tools:
    """The read-only tools over ROOT (the folder every path is confined to)."""

    def __init__(self, root: str) -> None:
        if not os.path.isdir(root):
            raise UsageError(f"mcp: {root}: no such folder")
        self.root = os.path.realpath(root)
        self._catalogs: dict[str, Catalog] = {}
        self._list_lock = threading.Lock()  # one list_runs at a time reads the catalogs

    # --- paths ----------------------------------------------------------------------------------

    def path(self, tool: str, arg: str, value: object, *, must_exist: bool = True) -> str:
        """`value` as an absolute path inside ROOT; a UsageError of one line when it is not one."""
        if not isinstance(value, str) or not value or "\x00" in value:
            raise UsageError(f"{tool}: {arg} must be a path inside {self.root}, got {value!r}")
        if ".." in value.replace(os.sep, "/").split("/"):
            raise UsageError(f"{tool}: {value}: '..' is not allowed; give a path inside {self.root}")
        full = os.path.normpath(value if os.path.isabs(value) else os.path.join(self.root, value))
        if not inside(self.root, full):
            raise UsageError(f"{tool}: {value}: outside {self.root}")
        if must_exist and not os.path.lexists(full):
            raise UsageError(f"{tool}: {value}: no such run under {self.root}")
        self.confined(tool, full)
        return full

    def confined(self, tool: str, path: str) -> None:
        """Refuse a run whose side files (watchdog.json, supervise.jsonl, stdout.log, heartbeats, ...)
        or log lead outside ROOT through a symlink: every file a tool opens stays inside ROOT."""
        run_dir = path if os.path.isdir(path) else os.path.dirname(path)
        out = escaping(self.root, run_dir, SIDE_FILES)
        if out is None and os.path.isdir(path):
            try:
                log = resolve_target(path).log_path
            except (RunwatchError, OSError):
                log = None
            out = os.path.relpath(log, run_dir) if log is not None and not inside(self.root, log) else None
        if out is not None:
            raise UsageError(f"{tool}: {self.rel(run_dir)}/{out} leads outside {self.root}: refused")

    def rel(self, path: str) -> str:
        """`path` as the tools name it: relative to ROOT, "/" separated ("." for ROOT itself)."""
        return os.path.relpath(os.path.realpath(path), self.root).replace(os.sep, "/")

    # --- the tools ------------------------------------------------------------------------------

    def list_runs(self, under: str | None = None) -> Result:
        """Every run under `under` (default ROOT) as `serve`'s /api/runs lists it, trouble first."""
        base = self.path("list_runs", "under", "." if under is None else under)
        if not os.path.isdir(base):
            raise UsageError(f"list_runs: {under}: not a folder")
        real = os.path.realpath(base)
        if not self._list_lock.acquire(timeout=LIST_WAIT_SECONDS):  # never queued behind a stuck call for good
            raise UsageError("list_runs: another list_runs is still reading the runs; try again")
        try:
            catalog = self._catalogs.get(real)
            if catalog is None:
                catalog = self._catalogs[real] = Catalog(real)
            else:
                catalog.scan()
            catalog.refresh()  # one pass, bounded per run: a log not caught up says so (`catching_up`)
            summaries = catalog.summaries()
        finally:
            self._list_lock.release()
        alone = run_target(real) is not None  # the folder is itself a run: listed alone, under its own name
        rows = [self._row(real if alone else os.path.join(real, s["path"]), s) for s in summaries]
        doc: dict[str, Any] = {"under": self.rel(real), "total": len(rows), "runs": rows[:MAX_LIST_RUNS]}
        if catalog.refused:  # runs whose side files lead outside ROOT: named, never read
            doc["refused"] = catalog.refused[:MAX_LIST_RUNS]
        return fit(doc, cut="runs", total=len(rows))

    def _row(self, path: str, s: Any) -> dict[str, Any]:
        """One run of the list (at `path`): what /api/runs says of it, the few facts a list needs."""
        watchdog = s.get("watchdog") or {}
        warnings = s.get("warnings", watchdog.get("warnings"))
        row = {
            "path": self.rel(path),
            "verdict": s["verdict"]["label"],
            "class": s["verdict"].get("class"),
            "step": s["step"],
            "max_steps": s["max_steps"],
            "loss": s["loss"],
            "tokens_per_second": s["tokens_per_second"],  # the rate status names: tokens/s, else samples/s
            "samples_per_second": s.get("samples_per_second"),
            "age_seconds": s["age_seconds"],
            "warnings": warnings if type(warnings) is int else len(warnings) if isinstance(warnings, list) else 0,
            "findings": s["findings"],
            "error": s["error"],
            "catching_up": s["catching_up"] or None,
        }
        return {k: v for k, v in row.items() if v is not None}

    def reading(self, tool: str, path: str, options: list[str] | None) -> tuple[ReadOptions, dict[str, str] | None]:
        """How to read `path`: `status`'s reading options among `options` (`--format`, `--pattern`,
        `--run`, `--map`), parsed as `runwatch status` parses them."""
        args = parse_command_line(tool, ["status", path, *(options or [])])
        try:
            return read_options(args), parse_maps(getattr(args, "map", None))
        except UsageError as exc:  # (a ConfigError too: --format text without --pattern, ...)
            raise UsageError(f"{tool}: {exc}") from None

    def run_status(self, run: str, options: list[str] | None = None) -> Result:
        """`runwatch status RUN [OPTIONS] --json`, with the supervision so far."""
        from ..status import status

        path = self.path("run_status", "run", run)
        read, maps = self.reading("run_status", path, options)
        doc: dict[str, Any] = {"run": self.rel(path), **status(path, gpus=True, read=read, maps=maps)}
        view = SupervisionView(os.path.join(doc["run_dir"], JOURNAL))
        try:
            view.refresh()
        except InvalidRunError:  # a FIFO, a device, a directory: skipped, with a note
            doc["supervision"] = {"error": f"{JOURNAL} is not a regular file"}
        facts = view.facts() if "supervision" not in doc else None
        if facts is not None:
            shown = dict(facts)
            shown["attempts"] = facts["attempts"][-STATUS_ATTEMPTS:]
            shown.pop("last_event", None)  # `supervise` above has its event; the record itself is long
            doc["supervision"] = shown
        return fit(doc)

    def tail_records(self, run: str, n: int = 20, options: list[str] | None = None) -> Result:
        """The last `n` records (at most 200) in minimal-telemetry keys; `options`: how to read the
        log, as `run_status` takes them."""
        if type(n) is not int or n < 1:
            raise UsageError(f"tail_records: n must be an int >= 1, got {n!r}")
        path = self.path("tail_records", "run", run)
        read, maps = self.reading("tail_records", path, options)
        used = min(n, MAX_TAIL_RECORDS)
        t = resolve_target(path, read)
        recs, parser = last_records(t, used, maps)
        rows: list[dict[str, Any]] = []
        left_out = 0  # eval metrics past MAX_METRICS in the rows shown
        for rec in reversed(recs):  # the last `used` rows (a record may give two)
            if len(rows) >= used:
                break
            rows[:0] = minimal_rows(rec, seq_len_of(parser, rec))
            left_out += metrics_left_out(rec)
        doc: dict[str, Any] = {"run": self.rel(path), "log": self.rel(t.log_path), "format": t.format, "n": used}
        if used != n:
            doc["clamped"] = f"n {n} clamped to {MAX_TAIL_RECORDS}"
        if left_out:
            doc["metrics_left_out"] = f"{left_out} eval metrics left out (at most {MAX_METRICS} a row)"
        doc["records"] = rows[-used:]
        return fit(doc, cut="records", keep="tail")

    def check_run(self, run: str, options: list[str] | None = None) -> Result:
        """`runwatch check RUN [OPTIONS] --json`: every finding and the verdict line."""
        from ...judging import check_from_args

        path = self.path("check_run", "run", run)
        args = parse_command_line("check_run", ["check", path, *(options or [])])
        result, opts = check_from_args(args)
        doc: dict[str, Any] = {
            "run": self.rel(path),
            "exit": exit_status(result.outcome, opts.exit_codes),
            "findings_total": len(result.findings),
            **result.to_json(),
        }
        return fit(doc, cut="findings")

    def wait_state(self, run: str) -> tuple[str, dict[str, Any]]:
        """(run directory, `verdicts.watch_state`) for `wait_for_verdict`."""
        path = self.path("wait_for_verdict", "run", run)
        run_dir = resolve_target(path).run_dir
        return run_dir, watch_state(run_dir)

    def explain(self, kind: str) -> Result:
        """The runbook entry of a verdict kind."""
        from ...judging import explain

        return fit(explain(kind))

    def plan_run(
        self,
        samples: int,
        window: str | float,
        run: str | None = None,
        bench: str | None = None,
        epochs: float = 1.0,
        options: list[str] | None = None,
    ) -> Result:
        """`runwatch plan RUN --samples N --epochs E --window W [OPTIONS]`: the projection and its
        exit meaning; `options` read the run's log (as `run_status` takes them)."""
        from ...preflight import PlanOptions, Reading, exit_code, parse_duration, verdict_line
        from ...preflight.plan import plan

        if (run is None) == (bench is None):
            raise UsageError("plan_run: give either run (a run or a log) or bench (a runwatch bench directory)")
        path = self.path("plan_run", "run" if run is not None else "bench", run if run is not None else bench)
        opts = PlanOptions(samples=samples, window_seconds=parse_duration(str(window), "window"), epochs=epochs)
        read, maps = self.reading("plan_run", path, options)
        try:
            report = plan(path, opts, Reading(read, maps or {}))
        except InsufficientRunError as exc:
            return fit({"run": self.rel(path), "exit": 2, "meaning": "cannot project", "reason": str(exc)})
        code = exit_code(report)
        doc: dict[str, Any] = {
            "run": self.rel(path),
            "exit": code,
            "meaning": "fits" if code == 0 else "does not fit",
            "verdict": verdict_line(report),
            "subsample": report["next_command"],
            "report": {**report, "run": self.rel(path)},
        }
        return fit(doc)

    # --- the evidence tools ---------------------------------------------------------------------

    def get_series(
        self,
        run: str,
        keys: list[str] | None = None,
        max_points: int = SERIES_POINTS,
        min_step: float | None = None,
        max_step: float | None = None,
        options: list[str] | None = None,
    ) -> Result:
        """Per key, at most `max_points` buckets `[step_first, step_last, min, max, last]` over the
        step range; fewer buckets and `truncated` when the result would pass MAX_SERIES_BYTES."""
        from .evidence import read_points, series

        keys = ["loss", "eval_loss"] if keys is None else keys
        if not isinstance(keys, list) or not keys or not all(isinstance(k, str) and k for k in keys):
            raise UsageError(f"get_series: keys must be a non-empty list of key names, got {keys!r}")
        if type(max_points) is not int or max_points < 1:
            raise UsageError(f"get_series: max_points must be an int >= 1, got {max_points!r}")
        path = self.path("get_series", "run", run)
        read, maps = self.reading("get_series", path, options)
        t = resolve_target(path, read)
        used = min(max_points, MAX_SERIES_POINTS)
        points = read_points(t, list(dict.fromkeys(keys)), min_step, max_step, maps)  # one read of the log
        head: dict[str, Any] = {"run": self.rel(path), "log": self.rel(t.log_path), "format": t.format}
        notes = [f"max_points {max_points} clamped to {MAX_SERIES_POINTS}"] if used != max_points else []
        while True:
            doc = {**head, **series(points, used, min_step, max_step)}
            if notes:
                doc["truncated"] = "; ".join(notes)
            text, out = fit(doc, limit=MAX_SERIES_BYTES)
            if out.get("truncated") == doc.get("truncated") or used <= 1:
                return text, out
            used //= 2  # fewer, wider buckets: each still keeps its min and max
            notes = [n for n in notes if "buckets" not in n] + [
                f"{used} buckets a key to stay within {MAX_SERIES_BYTES} bytes"
            ]

    def incident(self, run: str, compare: str | None = None, options: list[str] | None = None) -> Result:
        """The verdict, the records around its onset, the output's tail, the checkpoints, the recipe
        and argv, and (with `compare`) what differs from another run."""
        from .evidence import differences, incident, provenance

        path = self.path("incident", "run", run)
        read, maps = self.reading("incident", path, options)
        t = resolve_target(path, read)
        doc: dict[str, Any] = {"run": self.rel(path), **incident(t.run_dir, t, maps)}
        if compare is not None:
            other = self.path("incident", "compare", compare)
            other_dir = resolve_target(other).run_dir
            mine = {k: doc.get(k) for k in ("recipe", "argv", "git", "versions", "data")}
            doc["compare"] = {"run": self.rel(other), "differs": differences([mine, provenance(other_dir)])}
        return fit(_trim_incident(doc))

    def compare_runs(self, runs: list[str]) -> Result:
        """Per run its recipe, argv, git commit and dirtiness, versions and data; and what differs."""
        from .evidence import differences, provenance

        lo, hi = COMPARE_RUNS
        if not isinstance(runs, list) or not lo <= len(runs) <= hi:
            raise UsageError(f"compare_runs: runs must be a list of {lo} to {hi} runs, got {runs!r}")
        paths = [self.path("compare_runs", "runs", r) for r in runs]
        docs = [provenance(resolve_target(p).run_dir) for p in paths]
        doc = {
            "runs": [{"run": self.rel(p), **d} for p, d in zip(paths, docs)],
            "differs": differences(docs),
        }
        return fit(doc)


def _trim_incident(doc: dict[str, Any]) -> dict[str, Any]:
    """An incident that would pass the bound loses output lines first (the oldest), then records
    far from the onset, so the verdict and what is nearest to it stay."""
    import json

    from .bound import MAX_RESULT_BYTES, result_bytes

    def size() -> int:
        return result_bytes(json.dumps(strict(doc), allow_nan=False, ensure_ascii=False, separators=(",", ":")))

    cut: list[str] = []
    while size() > MAX_RESULT_BYTES and (doc.get("output") or doc.get("before") or doc.get("after")):
        if doc.get("output"):
            doc["output"] = doc["output"][1:]
            if "output lines" not in cut:
                cut.append("output lines")
        elif len(doc.get("before") or []) >= len(doc.get("after") or []):
            doc["before"] = doc["before"][1:]
            if "records before the onset" not in cut:
                cut.append("records before the onset")
        else:
            doc["after"] = doc["after"][:-1]
            if "records after the onset" not in cut:
                cut.append("records after the onset")
    if cut:
        doc["truncated"] = "left out to stay within the bound: the oldest " + ", ".join(cut)
    return doc
