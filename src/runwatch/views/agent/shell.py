"""Every MCP tool as a shell command, for an agent without MCP: `runwatch wait`, `tail`, `explain`,
`runs`, and `runwatch rules` (every rule with its options).

    runwatch wait RUN [--timeout S]                   # the final verdict: exit 0 done, 7 stop or gave
                                                      # up, 75 preempted, 3 timed out, 1 nothing watches
    runwatch wait RUN --events [--since CURSOR]       # the events after the cursor and a new cursor:
                                                      # exit 0 with events, 3 none before the timeout
    runwatch tail RUN [-n N]                          # the last records (tail_records)
    runwatch explain KIND                             # the runbook entry (explain)
    runwatch runs [DIR]                               # every run under DIR (list_runs)
    runwatch series RUN [--key K] [--points N]        # a series in buckets (get_series)
    runwatch incident RUN [--compare RUN]             # the evidence of a stop in one call (incident)
    runwatch compare RUN RUN ...                      # what differs: code, config, data (compare_runs)
    runwatch rules                                    # every rule: options, defaults, severity, class

Each takes `--json` (the MCP tool's structured result). They call the same `Tools` methods and
the same `events.events_since` / `verdicts.watch_state` as the server, with ROOT the file system's
root: a shell agent names any path. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
from typing import Any

from ...errors import UsageError
from ...options import option_fields
from ...reading import ReadOptions, resolve_target
from ...reading.readers import add_arguments as add_read_arguments
from .events import KINDS, Batch, CheckpointTail, events_since, parse_kinds
from .tools import MAX_WAIT_SECONDS, Tools
from .verdicts import watch_state

# `runwatch wait`'s exit statuses (without --events): by how the run ended.
WAIT_EXIT = {"done": 0, "stop": 7, "gave_up": 7, "preempted": 75, "timed_out": 3, "unwatched": 1}
# How often `runwatch wait` looks at the run's files.
WAIT_POLL_SECONDS = 0.25
# How long `runwatch wait` gives a supervisor or a watch started just before it to begin (a Python
# process and runwatch's imports, on a loaded machine) before it says that nothing watches the run.
UNWATCHED_GRACE_SECONDS = 15.0


class EventTails:
    """The events of runs, for `wait_for_event` and `runwatch wait --events`: one follower of each
    run's log checkpoints per process (a worker thread reads it; one at a time per run)."""

    def __init__(self, tools: Tools) -> None:
        self.tools = tools
        self._tails: dict[str, tuple[threading.Lock, CheckpointTail]] = {}
        self._lock = threading.Lock()

    def batch(self, run: str, since: str | None, kinds: list[str] | None, tool: str = "wait_for_event") -> Batch:
        path = self.tools.path(tool, "run", run)
        try:
            wanted = parse_kinds(kinds, tool)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        t = resolve_target(path)
        with self._lock:
            entry = self._tails.get(t.run_dir)
            if entry is None:
                entry = self._tails[t.run_dir] = (threading.Lock(), CheckpointTail(t))
        lock, tail = entry
        with lock:
            try:
                return events_since(t.run_dir, since, wanted, tail if os.path.exists(t.log_path) else None)
            except ValueError as exc:
                raise UsageError(f"{tool}: {exc}") from None

    def events(self, run: str, since: str | None, kinds: list[str] | None) -> dict[str, Any]:
        """`{"run", "events", "cursor"}` (and `notes`) after `since`."""
        b = self.batch(run, since, kinds)
        doc: dict[str, Any] = {"run": self.tools.rel(self.tools.path("wait_for_event", "run", run))}
        doc["events"] = b.events
        doc["cursor"] = b.cursor
        if b.notes:
            doc["notes"] = b.notes
        return doc


def _timeout(args: argparse.Namespace) -> float:
    t = float(args.timeout)
    if not t == t or t < 0:  # NaN or negative
        raise UsageError(f"wait: --timeout must be a number of seconds >= 0, got {t!r}")
    return min(t, MAX_WAIT_SECONDS)


def add_wait_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help="a run directory (or its log)")
    p.add_argument("--events", action="store_true", help="return the events after --since, not only the final verdict")
    p.add_argument("--since", default=None, metavar="CURSOR", help="with --events: the cursor of an earlier call")
    p.add_argument(
        "--kind",
        action="append",
        default=None,
        choices=KINDS,
        metavar="KIND",
        help=f"with --events: only these kinds (repeatable; default all: {', '.join(KINDS)})",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=MAX_WAIT_SECONDS,
        metavar="S",
        help=f"seconds to wait at most (default and most {MAX_WAIT_SECONDS:g})",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON (as the MCP tool gives it)")


def _event_line(e: dict[str, Any]) -> str:
    what = f" {e['what']}" if e.get("what") else ""
    step = f" step={e['step']}" if e.get("step") is not None else ""
    msg = f": {e['message']}" if e.get("message") else ""
    return f"EVENT {e['kind']}{what}{step}{msg}"


def run_wait(args: argparse.Namespace) -> int:
    """`runwatch wait`: see the module's docstring for the exit statuses."""
    timeout = _timeout(args)
    tools = Tools(os.sep)
    run = os.path.abspath(args.run)
    start = time.monotonic()
    if args.events:
        tails = EventTails(tools)
        while True:
            doc = tails.events(run, args.since, args.kind)
            if doc["events"] or time.monotonic() - start >= timeout:
                break
            time.sleep(WAIT_POLL_SECONDS)
        doc["run"] = args.run
        if not doc["events"]:
            doc["timed_out"] = True
        if args.json:
            print(json.dumps(doc, allow_nan=False))
        else:
            for e in doc["events"]:
                print(_event_line(e))
            if not doc["events"]:
                print(f"no event in {timeout:g}s")
            print(f"cursor {doc['cursor']}")
        return 0 if doc["events"] else WAIT_EXIT["timed_out"]
    if args.since is not None or args.kind is not None:
        raise UsageError("wait: --since and --kind go with --events")
    path = tools.path("wait", "run", run)
    run_dir = resolve_target(path).run_dir
    state = watch_state(run_dir)

    def waiting() -> bool:
        waited = time.monotonic() - start
        if waited >= timeout:
            return False
        # a supervisor started just before (`nohup runwatch supervise ... &`) takes a moment to
        # hold its run directory: nothing watching is the answer only once that moment has passed
        return state["state"] == "watching" or (state["state"] == "unwatched" and waited < UNWATCHED_GRACE_SECONDS)

    while waiting():
        time.sleep(min(WAIT_POLL_SECONDS, max(0.0, timeout - (time.monotonic() - start))))
        state = watch_state(run_dir)
    doc = {"run": args.run, **state, "waited_seconds": round(time.monotonic() - start, 2)}
    if state["state"] == "watching":
        doc["timed_out"] = True
        code = WAIT_EXIT["timed_out"]
        line = f"timed out after {timeout:g}s: {state['message']}"
    elif state["state"] == "unwatched":
        code, line = WAIT_EXIT["unwatched"], state["message"]
    else:
        code = _final_exit(state)
        line = state.get("line") or state["message"]
    doc["exit"] = code
    print(json.dumps(doc, allow_nan=False, default=str) if args.json else line)
    return code


def _final_exit(state: dict[str, Any]) -> int:
    """0 done, 75 preempted, 7 a stop or a spent budget."""
    event = state.get("event")
    if event == "preempted":
        return WAIT_EXIT["preempted"]
    verdict = state.get("verdict") or {}
    done = event == "done" if state.get("by") == "supervise" else verdict.get("verdict") == "done"
    return WAIT_EXIT["done"] if done else WAIT_EXIT["stop"]


# --- tail, explain, runs --------------------------------------------------------------------------


def add_tail_arguments(p: argparse.ArgumentParser) -> None:
    from ...judging import RuleOptions
    from ...options import add_flags

    p.add_argument("run", metavar="RUN", help="a run directory or a log")
    p.add_argument("-n", type=int, default=20, metavar="N", help="how many records (default 20, at most 200)")
    p.add_argument("--json", action="store_true", help="print the records as JSON (as tail_records gives them)")
    add_flags(p, RuleOptions, "status")  # --map
    add_read_arguments(p)  # --format, --pattern, --run


def _options_of(args: argparse.Namespace) -> list[str]:
    """The reading options given, as the MCP tools take them (a list of strings)."""
    out: list[str] = []
    for f in option_fields(ReadOptions):
        value = getattr(args, f.name, None)
        for v in value if isinstance(value, list) else [value] if value is not None else []:
            out += [f"--{f.name.replace('_', '-')}", str(v)]
    for m in getattr(args, "map", None) or []:
        out += ["--map", m]
    return out


def _row(r: dict[str, Any]) -> str:
    return "  ".join(f"{k}={v}" for k, v in r.items())


def run_tail(args: argparse.Namespace) -> int:
    tools = Tools(os.sep)
    _, doc = tools.tail_records(os.path.abspath(args.run), args.n, _options_of(args))
    doc["run"] = args.run
    doc["log"] = os.path.relpath(os.path.join(os.sep, doc.get("log", "")))
    if args.json:
        print(json.dumps(doc, allow_nan=False))
        return 0
    print(f"{args.run}: the last {len(doc.get('records', []))} records of {doc.get('log')} ({doc.get('format')})")
    for r in doc.get("records", []):
        print(_row(r))
    for key in ("clamped", "metrics_left_out", "truncated"):
        if key in doc:
            print(f"({doc[key]})")
    return 0


def add_explain_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("kind", metavar="KIND", help="a verdict kind: loss_spike, stall, done, ... (runwatch rules)")
    p.add_argument("--json", action="store_true", help="print the entry as JSON")


def run_explain(args: argparse.Namespace) -> int:
    from ...judging import explain

    doc = explain(args.kind)
    if args.json:
        print(json.dumps(doc, allow_nan=False))
        return 0
    head = doc["kind"] + (f" ({doc['class']}, {doc['severity']} by default)" if doc["class"] else "")
    print(f"{head}\n  means:  {doc['meaning']}\n  do:     {doc['action']}")
    return 0


def add_runs_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", metavar="DIR", nargs="?", default=".", help="the folder to list (default: here)")
    p.add_argument("--json", action="store_true", help="print the list as JSON (as list_runs gives it)")


def run_runs(args: argparse.Namespace) -> int:
    if not os.path.isdir(args.dir):
        raise UsageError(f"runs: {args.dir}: no such folder")
    tools = Tools(args.dir)
    _, doc = tools.list_runs()
    if args.json:
        print(json.dumps(doc, allow_nan=False))
        return 0
    runs = doc.get("runs", [])
    print(f"{doc.get('total', 0)} runs under {args.dir}" + (f" ({doc['truncated']})" if "truncated" in doc else ""))
    for r in runs:
        loss = r.get("loss")
        loss_text = f"{loss:.4g}" if isinstance(loss, (int, float)) else "-"
        step = f"{r.get('step')}" + (f"/{r['max_steps']}" if r.get("max_steps") else "")
        extra = f"  warnings {r['warnings']}" if r.get("warnings") else ""
        extra += "  catching up (the log read in part)" if r.get("catching_up") else ""
        print(f"{r['path']:<32} {r['verdict']:<12} step {step:<12} loss {loss_text}{extra}")
    return 0


def add_series_arguments(p: argparse.ArgumentParser) -> None:
    from ...judging import RuleOptions
    from ...options import add_flags

    p.add_argument("run", metavar="RUN", help="a run directory or a log")
    p.add_argument(
        "--key",
        action="append",
        default=None,
        metavar="KEY",
        help="a key to read (repeatable; default loss and eval_loss; also lr, grad_norm, sps, eval_<metric>)",
    )
    p.add_argument("--points", type=int, default=200, metavar="N", help="buckets a key (default 200, at most 500)")
    p.add_argument("--min-step", type=float, default=None, metavar="STEP", help="the first step to cover")
    p.add_argument("--max-step", type=float, default=None, metavar="STEP", help="the last step to cover")
    p.add_argument("--json", action="store_true", help="print the series as JSON (as get_series gives it)")
    add_flags(p, RuleOptions, "status")  # --map
    add_read_arguments(p)  # --format, --pattern, --run


def run_series(args: argparse.Namespace) -> int:
    tools = Tools(os.sep)
    _, doc = tools.get_series(
        os.path.abspath(args.run), args.key, args.points, args.min_step, args.max_step, _options_of(args)
    )
    doc["run"], doc["log"] = args.run, os.path.relpath(os.path.join(os.sep, doc.get("log", "")))
    if args.json:
        print(json.dumps(doc, allow_nan=False))
        return 0
    print(f"{args.run}: steps {doc['steps'][0]}..{doc['steps'][1]}, {doc['records']} records of {doc['log']}")
    for key, buckets in doc["series"].items():
        bad = doc["nonfinite"].get(key)
        extra = f"; non-finite {bad['count']} (first at steps {bad['first_steps']})" if bad else ""
        print(f"{key}: {len(buckets)} buckets [step_first, step_last, min, max, last]{extra}")
        for b in buckets:
            print(f"  {b[0]}-{b[1]}  min {b[2]:.6g}  max {b[3]:.6g}  last {b[4]:.6g}")
    if "truncated" in doc:
        print(f"({doc['truncated']})")
    return 0


def add_incident_arguments(p: argparse.ArgumentParser) -> None:
    from ...judging import RuleOptions
    from ...options import add_flags

    p.add_argument("run", metavar="RUN", help="a run directory")
    p.add_argument("--compare", default=None, metavar="RUN", help="another run: what differs from it")
    p.add_argument("--json", action="store_true", help="print the incident as JSON (as the MCP tool gives it)")
    add_flags(p, RuleOptions, "status")  # --map
    add_read_arguments(p)  # --format, --pattern, --run


def run_incident(args: argparse.Namespace) -> int:
    tools = Tools(os.sep)
    compare = os.path.abspath(args.compare) if args.compare is not None else None
    _, doc = tools.incident(os.path.abspath(args.run), compare, _options_of(args))
    doc["run"] = args.run
    if args.json:
        print(json.dumps(doc, allow_nan=False))
        return 0
    v = doc.get("verdict")
    if v:
        print(f"{v.get('kind')} ({v.get('class')}) step={v.get('step')} onset={v.get('onset')}: {v.get('message')}")
    else:
        print(f"no verdict: {doc.get('note', 'nothing stopped this run')}")
    for name in ("before", "after"):
        print(f"{name} the onset:" if v else f"{name}:")
        for r in doc.get(name, []):
            print("  " + _row(r))
    for c in doc.get("checkpoints", []):
        print(f"checkpoint step={c.get('step')} {c.get('path')}")
    print(f"argv: {' '.join(doc['argv']) if doc.get('argv') else None}")
    if doc.get("output"):
        print("output (last lines):")
        for line in doc["output"]:
            print("  " + line)
    for key, values in (doc.get("compare") or {}).get("differs", {}).items():
        print(f"differs {key}: {values[0]!r} here, {values[1]!r} in {args.compare}")
    return 0


def add_compare_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", metavar="RUN", nargs="+", help="2 to 8 run directories")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON (as compare_runs gives it)")


def run_compare(args: argparse.Namespace) -> int:
    tools = Tools(os.sep)
    _, doc = tools.compare_runs([os.path.abspath(r) for r in args.runs])
    for row, given in zip(doc.get("runs", []), args.runs):
        row["run"] = given
    if args.json:
        print(json.dumps(doc, allow_nan=False))
        return 0
    differs = doc.get("differs", {})
    print(f"{len(args.runs)} runs; {len(differs)} keys differ" + ("" if differs else " (code, config and data alike)"))
    for key, values in differs.items():
        print(f"  {key}: " + " | ".join(json.dumps(v, default=str) for v in values))
    return 0


# --- rules ----------------------------------------------------------------------------------------

# The options that are not one rule's (they apply to all, or to the watch itself).
_GENERAL = ("severity", "map", "poll", "pid", "done", "stop_on_anomaly", "exit_transient", "exit_code", "max_steps")


def _options_of_kind(kinds: list[str]) -> dict[str, list[Any]]:
    """Each kind's options: an option belongs to the rules its help text names (`loss_spike: ...`);
    one that names none goes with the options that share its first word (`throughput_span` with
    `throughput_drop`'s)."""
    from ...judging import Options

    fields = [f for f in option_fields(Options) if f.name not in _GENERAL]
    named: dict[str, list[str]] = {}
    for f in fields:
        help_text = f.metadata["help"]
        named[f.name] = [k for k in kinds if re.search(rf"(?<![\w-]){k}(?![\w-])", help_text)]
    out: dict[str, list[Any]] = {k: [] for k in kinds}
    for f in fields:
        owners = named[f.name]
        if not owners:
            family = f.name.split("_")[0]
            owners = next((named[g.name] for g in fields if g.name.split("_")[0] == family and named[g.name]), [])
        for k in owners:
            out[k].append(f)
    out["no_progress"] = out.get("no_progress", []) + [f for f in option_fields(Options) if f.name == "max_steps"]
    return out


def rule_option_names(command: str) -> list[str]:
    """The flags of the record rules' options that `command` takes, in declaration order
    (`runwatch rules` lists each; the watch's own options, such as `--stall`, are not among them)."""
    from ...judging import RuleOptions

    return [
        "--" + f.name.replace("_", "-")
        for f in option_fields(RuleOptions, command)
        if f.name not in ("severity", "map")
    ]


def rules_table() -> list[dict[str, Any]]:
    """Every kind the watchdog reports: its class, default severity, what it means, and its options
    with their defaults (from the options' declarations and the runbook)."""
    from ...judging import explain, kinds
    from ...options import default_text

    ks = kinds()
    by_kind = _options_of_kind(ks)
    out = []
    for k in ks:
        entry = explain(k)
        out.append(
            {
                "kind": k,
                "class": entry["class"],
                "severity": entry["severity"],
                "meaning": entry["meaning"],
                "options": [
                    {
                        "flag": "--" + f.name.replace("_", "-"),
                        "default": default_text(f),
                        "help": f.metadata["help"],
                    }
                    for f in by_kind[k]
                ],
            }
        )
    return out


def add_rules_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print every rule as JSON")


def run_rules(args: argparse.Namespace) -> int:
    from ...judging import RECORD_KINDS

    table = rules_table()
    if args.json:
        print(json.dumps(table, allow_nan=False))
        return 0
    w = sys.stdout.write
    w("Every rule of watch, check and supervise: its class, default severity, and options (default).\n")
    w("Change a record rule's severity with --severity KIND=stop|warn|off; `runwatch explain KIND` says what to do.\n")
    for r in table:
        where = "record rule" if r["kind"] in RECORD_KINDS else "watch"
        w(f"\n{r['kind']}  [{r['class']}, {r['severity']}; {where}]  {r['meaning']}\n")
        for o in r["options"]:
            w(f"  {o['flag']} ({o['default']}): {o['help']}\n")
    w("\nEvery rule: --severity KIND=SEVERITY, --map CANONICAL=SOURCE; the watch's own: see `runwatch watch --help`.\n")
    return 0
