"""Do runwatch's surfaces agree on one log? (see benchmarks/README.md, section "Surfaces").

    python benchmarks/bench_surfaces.py CORPUS               # one row per run, then the totals
    python benchmarks/bench_surfaces.py CORPUS --json out.json
    python benchmarks/bench_surfaces.py CORPUS --target folder  # give the run's folder, not its log

CORPUS is a folder of runs: each sub-folder `<id>/` holds one log and `source.json` beside it,
with at least `file` (the log's name in the folder) and, optionally, `check_args` (options that
say how to read the log, e.g. `["--pattern", "..."]` or `["--format", "nanogpt"]`). `file` may
name a path inside the folder (`checkpoint-30/trainer_state.json`).

Every log is read through each surface a user or an agent has, as that surface reads it:

| surface | what is called | last step | latest train loss | findings |
| --- | --- | --- | --- | --- |
| `check` | `runwatch check LOG ARGS --json` (in-process, `cli.main`) | `last_step` | | `findings` |
| `status` | `runwatch status LOG ARGS --json` | `step` | `loss` | |
| `page.list` | `serve CORPUS`: `/api/runs`, the run's summary (`serve.server.Catalog`) | `step` | `loss` | `findings` (a count), `first_finding` |
| `page.run` | `serve CORPUS`: `/api/run/<path>`, the run's detail | `step` | `loss` | `findings_list` |
| `mcp.run_status` | the MCP tool `run_status(run, ARGS)` (`agent.tools.Tools(CORPUS)`) | `step` | `loss` | |
| `mcp.check_run` | `check_run(run, ARGS)` | `last_step` | | `findings` (`findings_total`) |
| `mcp.tail_records` | `tail_records(run, options=ARGS)` (its default: 20 records) | the last record's `step` | the last `loss` | |
| `mcp.list_runs` | `list_runs(under=<id>)` | `step` | `loss` | `findings` (a count) |

The page and `list_runs` are given the log's path and nothing else (they read what `serve` finds,
and `serve` takes no per-log reading options): a log that needs `check_args` to be read at all
(a text log in no preset's format) shows what those surfaces make of it.
The page's answers are passed through the server's own JSON encoder (`serve.server.to_json`), so
they are what `/api/...` sends. Findings are compared as (kind, step, severity) in order; a list
cut to fit (the MCP tool's 8 KB bound) is compared as the start of the full one, its total apart.

A run agrees when every surface gives the same value of each quantity (losses to 9 significant
digits; NaN equals NaN). A row says `agree`, or `DISAGREE` and each quantity's values with the
surfaces that gave them. Then the totals, and whether `serve CORPUS` lists one run per log.
Standard library only (the logs' own readers may use their optional extras).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
if SRC not in sys.path:
    sys.path.insert(0, SRC)

from runwatch.cli import main as cli_main
from runwatch.errors import RunwatchError
from runwatch.views.agent.tools import Tools
from runwatch.views.serve.server import Catalog, to_json

SURFACES = (
    "check",
    "status",
    "page.list",
    "page.run",
    "mcp.run_status",
    "mcp.check_run",
    "mcp.tail_records",
    "mcp.list_runs",
)
QUANTITIES = ("step", "loss", "findings")
# The surfaces that give each quantity (an error of another is not counted against it).
GIVES = {
    "step": SURFACES,
    "loss": ("status", "page.list", "page.run", "mcp.run_status", "mcp.tail_records", "mcp.list_runs"),
    "findings": ("check", "page.list", "page.run", "mcp.check_run", "mcp.list_runs"),
}
NOT_LISTED = "not listed"

Finding = tuple[str, Any, str]  # (kind, step, severity)


# --- reading one surface ----------------------------------------------------------------------


def _cli(argv: list[str]) -> dict[str, Any]:
    """`runwatch ARGV` in this process; its JSON output, or {"error": its stderr's last line}."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(argv)
    try:
        doc = json.loads(out.getvalue())
    except ValueError:
        lines = err.getvalue().strip().splitlines() or [f"exit {code}, no JSON"]
        return {"error": lines[-1]}
    return doc if isinstance(doc, dict) else {"error": f"not a JSON object: {doc!r}"[:200]}


def _finding(f: Any) -> Finding:
    return (str(f.get("kind")), f.get("step"), str(f.get("severity") or "stop"))


def _findings(items: list[Any] | None, total: int | None) -> dict[str, Any]:
    """A surface's findings: `total`, and the list (or its start) when it has one."""
    doc: dict[str, Any] = {"total": total}
    if items is not None:
        doc["items"] = [_finding(f) for f in items]
    return doc


def _guard(read: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return read()
    except RunwatchError as exc:  # a surface that fails is a value of its own (its one line)
        return {"error": str(exc)[:300]}
    except Exception as exc:  # not a one-line error of runwatch's own: name its type
        return {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}


def read_cli(log: str, args: list[str]) -> dict[str, dict[str, Any]]:
    """`check` and `status` as their command lines print them."""
    c = _cli(["check", log, *args, "--json"])
    s = _cli(["status", log, *args, "--json"])
    check = (
        c
        if "error" in c
        else {"step": c["last_step"], "findings": _findings(c["findings"], len(c["findings"])), "raw": c}
    )
    status = s if "error" in s else {"step": s["step"], "loss": s["loss"], "raw": _short_status(s)}
    return {"check": check, "status": status}


def _short_status(s: dict[str, Any]) -> dict[str, Any]:
    return {k: s.get(k) for k in ("log", "step", "loss", "max_steps", "torn_tail", "loss_key")}


def _page(catalog: Catalog, rels: list[str]) -> dict[str, dict[str, Any]]:
    """The run's summary in `/api/runs` and its `/api/run/<path>` detail, as the API sends them."""
    if not rels:
        return {"page.list": {"error": NOT_LISTED}, "page.run": {"error": NOT_LISTED}}
    if len(rels) > 1:
        several = f"listed {len(rels)} times: {', '.join(rels[:4])}"
        return {"page.list": {"error": several}, "page.run": {"error": several}}
    rel = rels[0]
    summaries = json.loads(to_json(catalog.summaries()))
    summary = next(s for s in summaries if s["path"] == rel)
    view = catalog.get(rel)
    assert view is not None  # listed just now
    with view.lock:
        detail = json.loads(to_json(view.detail()))
    listed = {
        "step": summary["step"],
        "loss": summary["loss"],
        "findings": _findings(None, summary["findings"]),
        "raw": {"path": rel, "records": summary["records"], "error": summary["error"]},
    }
    listed["findings"]["first"] = _finding(summary["first_finding"]) if summary["first_finding"] else None
    run = {
        "step": detail["step"],
        "loss": detail["loss"],
        # the list keeps MAX_FINDINGS of them; the count is every one
        "findings": _findings(detail["findings_list"], detail["findings"]),
        "raw": {"path": rel, "error": detail["error"]},
    }
    return {"page.list": listed, "page.run": run}


def read_mcp(tools: Tools, rel: str, folder: str, args: list[str]) -> dict[str, dict[str, Any]]:
    """The MCP tools over the corpus, given the log's path (relative to the corpus)."""

    def run_status() -> dict[str, Any]:
        _text, doc = tools.run_status(rel, list(args))
        return {"step": doc.get("step"), "loss": doc.get("loss")}

    def check_run() -> dict[str, Any]:
        _text, doc = tools.check_run(rel, list(args))
        return {"step": doc.get("last_step"), "findings": _findings(doc.get("findings") or [], doc["findings_total"])}

    def tail() -> dict[str, Any]:
        _text, doc = tools.tail_records(rel, options=list(args))  # the tool's default n (20)
        rows = doc.get("records") or []
        losses = [r["loss"] for r in rows if "loss" in r]
        return {
            "step": rows[-1].get("step") if rows else None,
            "loss": losses[-1] if losses else None,
            "raw": {"format": doc.get("format"), "records": len(rows)},
        }

    def listed() -> dict[str, Any]:
        _text, doc = tools.list_runs(folder)
        rows = doc.get("runs") or []
        if not rows:
            return {"error": NOT_LISTED}
        if len(rows) > 1:
            return {"error": f"listed {len(rows)} times: {', '.join(r['path'] for r in rows[:4])}"}
        row = rows[0]
        return {
            "step": row.get("step"),
            "loss": row.get("loss"),
            "findings": _findings(None, row.get("findings")),
            "raw": {"path": row["path"], "error": row.get("error")},
        }

    return {
        "mcp.run_status": _guard(run_status),
        "mcp.check_run": _guard(check_run),
        "mcp.tail_records": _guard(tail),
        "mcp.list_runs": _guard(listed),
    }


# --- comparing --------------------------------------------------------------------------------


def _number_key(v: Any) -> Any:
    """A step or a loss as compared: None, an int, a float to 9 significant digits, "nan", "inf", "-inf"."""
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            return f"text {v!r}"
    if isinstance(v, (bool, int)) or v is None:
        return v  # an int exactly (10 and 10.0 are one key)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return float(f"{float(v):.9g}")
    return f"{type(v).__name__} {v!r}"


def _show(v: Any) -> str:
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return "null" if v is None else str(v)


def _groups(values: dict[str, Any]) -> list[tuple[Any, list[str]]]:
    """(value, surfaces) groups, largest first (a tie: the group holding `check`'s or `status`'s first)."""
    groups: dict[Any, list[str]] = {}
    for surface, value in values.items():
        groups.setdefault(value, []).append(surface)
    order = {s: i for i, s in enumerate(SURFACES)}
    return sorted(groups.items(), key=lambda g: (-len(g[1]), min(order[s] for s in g[1])))


def compare(surfaces: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per quantity: agree or not, the groups of surfaces by value, and a line saying what differs."""
    out: dict[str, Any] = {}
    for q in ("step", "loss"):
        values = {}
        for name in GIVES[q]:
            got = surfaces.get(name, {})
            if "error" in got:
                values[name] = f"error: {got['error']}"
            elif q in got:
                values[name] = _number_key(got[q])
        groups = _groups(values)
        out[q] = {
            "agree": len(groups) <= 1,
            "groups": [{"value": v, "surfaces": s} for v, s in groups],
            "line": " | ".join(f"{_show(v)} ({', '.join(s)})" for v, s in groups),
        }
    out["findings"] = _compare_findings(surfaces)
    out["agree"] = all(out[q]["agree"] for q in QUANTITIES)
    return out


def _compare_findings(surfaces: dict[str, dict[str, Any]]) -> dict[str, Any]:
    have = {
        n: s["findings"] if "findings" in s else {"error": s["error"]}
        for n, s in surfaces.items()
        if "findings" in s or ("error" in s and n in GIVES["findings"])
    }
    ref_name = next((n for n in ("check", "page.run", "mcp.check_run") if "items" in have.get(n, {})), None)
    ref: list[Finding] = [tuple(x) for x in have[ref_name]["items"]] if ref_name else []
    totals = {n: (f"error: {f['error']}" if "error" in f else f["total"]) for n, f in have.items()}
    problems: list[str] = []
    for n, f in have.items():
        items = f.get("items")
        if items is None or n == ref_name:
            continue
        items = [tuple(x) for x in items]
        full = len(items) == f["total"]
        want = ref if full else ref[: len(items)]
        if items != want:
            problems.append(f"{n} vs {ref_name}: {_list_diff(want, items)}")
    if "first" in have.get("page.list", {}) and ref_name:
        first = next((x for x in ref if x[2] == "stop"), ref[0] if ref else None)
        got = have["page.list"]["first"]
        if (tuple(got) if got else None) != first:
            problems.append(f"page.list first_finding {_fmt(got)} vs {ref_name}'s {_fmt(first)}")
    groups = _groups(totals)
    agree = len(groups) <= 1 and not problems
    line = "count " + " | ".join(f"{_show(v)} ({', '.join(s)})" for v, s in groups)
    return {
        "agree": agree,
        "reference": ref_name,
        "items": [list(x) for x in ref],
        "totals": totals,
        "problems": problems,
        "line": line + ("; " + "; ".join(problems) if problems else ""),
    }


def _fmt(f: Any) -> str:
    return "none" if not f else f"{f[0]}@{_show(f[1])} {f[2]}"


def _list_diff(want: list[Finding], got: list[Finding]) -> str:
    missing = [x for x in want if x not in got]
    extra = [x for x in got if x not in want]
    parts = []
    if missing:
        parts.append("lacks " + ", ".join(_fmt(x) for x in missing[:5]) + (" ..." if len(missing) > 5 else ""))
    if extra:
        parts.append("has " + ", ".join(_fmt(x) for x in extra[:5]) + (" ..." if len(extra) > 5 else ""))
    return "; ".join(parts) or "same findings, another order"


# --- the corpus -------------------------------------------------------------------------------


def corpus_runs(corpus: str) -> list[dict[str, Any]]:
    """The corpus's runs: id, the log's path, its check_args (sorted by id)."""
    runs = []
    for name in sorted(os.listdir(corpus)):
        src = os.path.join(corpus, name, "source.json")
        if not os.path.isfile(src):
            continue
        with open(src, encoding="utf-8") as f:
            meta = json.load(f)
        args = meta.get("check_args") or []
        if not isinstance(meta.get("file"), str) or not all(isinstance(a, str) for a in args):
            raise SystemExit(f"bench_surfaces: {src}: `file` must be a name and `check_args` a list of strings")
        runs.append(
            {
                "id": name,
                "log": os.path.join(corpus, name, meta["file"]),
                "args": list(args),
                "format": meta.get("format"),
            }
        )
    return runs


def catch_up(catalog: Catalog) -> None:
    """Read every run to its end (the server's reader thread does this a slice at a time)."""
    while catalog.refresh():
        pass


def listed_per_run(catalog: Catalog, ids: list[str]) -> dict[str, list[str]]:
    """The catalog's paths that belong to each run folder (its own, or a path inside it)."""
    rels = sorted(v.rel for v in catalog.views())
    return {i: [r for r in rels if r == i or r.startswith(i + "/")] for i in ids}


def measure(corpus: str, target: str = "log", progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Every run through every surface, compared; and serve's listing of the corpus. `target`:
    what `check`, `status` and the MCP tools are given, the log ("log") or its folder ("folder")."""
    corpus = os.path.realpath(corpus)
    runs = corpus_runs(corpus)
    started = time.monotonic()
    catalog = Catalog(corpus)
    catch_up(catalog)
    listed = listed_per_run(catalog, [r["id"] for r in runs])
    tools = Tools(corpus)
    results = []
    for r in runs:
        path = r["log"] if target == "log" else os.path.join(corpus, r["id"])
        rel = os.path.relpath(path, corpus).replace(os.sep, "/")
        surfaces: dict[str, dict[str, Any]] = {}
        surfaces.update(read_cli(path, r["args"]))
        surfaces.update(_page(catalog, listed[r["id"]]))
        surfaces.update(read_mcp(tools, rel, r["id"], r["args"]))
        verdict = compare(surfaces)
        results.append(
            {
                **r,
                "log": os.path.relpath(r["log"], corpus),
                "target": rel,
                "listed": listed[r["id"]],
                "surfaces": surfaces,
                "compare": verdict,
            }
        )
        if progress is not None:
            progress(row_line(results[-1]).replace(corpus + os.sep, "CORPUS/"))
    catalog.stop()
    others = sorted({v.rel for v in catalog.views()} - {p for ps in listed.values() for p in ps})
    serve = {
        "listed": len(catalog.views()),
        "logs": len(runs),
        "one_each": sum(len(listed[r["id"]]) == 1 for r in runs),
        "unlisted": [r["id"] for r in runs if not listed[r["id"]]],
        "several": {i: ps for i, ps in listed.items() if len(ps) > 1},
        "outside_runs": others,
    }
    return {
        "corpus_runs": len(runs),
        "target": target,
        "seconds": round(time.monotonic() - started, 1),
        "runs": results,
        "serve": serve,
        "totals": totals(results),
    }


def totals(results: list[dict[str, Any]]) -> dict[str, Any]:
    t: dict[str, Any] = {
        "runs": len(results),
        "agree": sum(r["compare"]["agree"] for r in results),
        "disagree": sum(not r["compare"]["agree"] for r in results),
    }
    for q in QUANTITIES:
        t[f"disagree_{q}"] = sum(not r["compare"][q]["agree"] for r in results)
    # per surface: runs where its value of a quantity is not the most common one
    odd: dict[str, int] = {s: 0 for s in SURFACES}
    for r in results:
        seen: set[str] = set()
        for q in ("step", "loss"):
            groups = r["compare"][q]["groups"]
            for g in groups[1:]:
                seen.update(g["surfaces"])
        f = r["compare"]["findings"]
        tg = _groups(f["totals"])
        for _v, ss in tg[1:]:
            seen.update(ss)
        for p in f["problems"]:
            seen.add(p.split(" ", 1)[0])
        for s in seen:
            odd[s] += 1
    t["odd_one_out"] = odd
    return t


def row_line(r: dict[str, Any]) -> str:
    c = r["compare"]
    head = f"{r['id']:<18} {str(r.get('format') or ''):<18} "
    if c["agree"]:
        step = c["step"]["groups"][0]["value"] if c["step"]["groups"] else None
        return head + f"agree     step {_show(step)}, findings {c['findings']['totals'].get('check')}"
    parts = [f"{q}: {c[q]['line']}" for q in QUANTITIES if not c[q]["agree"]]
    return head + "DISAGREE  " + "\n" + "\n".join("    " + p for p in parts)


def report(doc: dict[str, Any]) -> list[str]:
    t = doc["totals"]
    s = doc["serve"]
    lines = [
        f"runs {t['runs']}: agree {t['agree']}, DISAGREE {t['disagree']} "
        f"(last step {t['disagree_step']}, latest train loss {t['disagree_loss']}, findings {t['disagree_findings']})",
        "surface not in the majority (runs): " + ", ".join(f"{k} {v}" for k, v in t["odd_one_out"].items()),
        f"serve CORPUS lists {s['listed']} runs for {s['logs']} logs; one run each: {s['one_each']}"
        + (f"; not listed: {', '.join(s['unlisted'])}" if s["unlisted"] else "")
        + (f"; several: {s['several']}" if s["several"] else "")
        + (f"; not a corpus run: {', '.join(s['outside_runs'])}" if s["outside_runs"] else ""),
        f"({doc['seconds']} s)",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("corpus", metavar="CORPUS", help="a folder of <id>/ folders, each a log and its source.json")
    p.add_argument("--json", metavar="OUT", help="write every value of every surface, compared, to OUT")
    p.add_argument(
        "--target",
        choices=("log", "folder"),
        default="log",
        help="what check, status and the MCP tools are given: the log file (default) or the run's folder",
    )
    args = p.parse_args(argv)
    if not os.path.isdir(args.corpus):
        print(f"bench_surfaces: {args.corpus}: no such folder", file=sys.stderr)
        return 2
    doc = measure(args.corpus, args.target, progress=print)
    if not doc["runs"]:
        print(f"bench_surfaces: {args.corpus}: no <id>/source.json found", file=sys.stderr)
        return 2
    print("\n".join(report(doc)))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1, default=str)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
