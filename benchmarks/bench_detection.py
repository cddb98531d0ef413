"""How right the watchdog's default rules are on real training logs (see benchmarks/README.md,
section "Detection on real logs").

    python benchmarks/bench_detection.py CORPUS [--json OUT] [--timeout 120] [--jobs 1] [--folds K]

CORPUS is a directory of entries `<id>/source.json` + the log that its `file` names (`check_args`:
the options a text log needs, e.g. its `--pattern`), with an optional `labels.json`
(`{"<id>": {"label": "healthy" | "healthy-but-overfits" | "broken:<what>", "why": ...}}`). Every
entry is replayed by the real command line, `runwatch check <log> <check_args> --json`, in a
subprocess with default options, so what a user would see is what is counted: a crash (an exit
other than 0 or 7, a traceback, output that is not the JSON, a timeout) counts as a crash, never as
a verdict. The corpus is read where it lies; nothing of it is written anywhere.

Per entry: its label, the verdict (the first stop, else the warnings, else clean) and what that
means. Totals for the labelled entries: stops on healthy runs (false alarms; a `healthy-but-overfits`
run counts as healthy, a warning on it is right), warnings on healthy runs, broken runs found (a
stop, or a warning whose kind fits the label, `FITTING`), crashes; and the same totals for the
unlabelled entries, for a person to read.

`--folds K`: measured where the defaults were not chosen. The labelled entries are split into K
folds by repository (`source.json`'s `repo`: logs of one repository share a fold). For each fold,
the free values of the defaults (`FREE`: each option's default and the values around it, one option
varied at a time) are chosen on the other K-1 folds — the candidate with the fewest errors there (a
healthy run stopped counts two, a broken run missed one; ties keep the default) — and the held-out
fold is judged with the chosen values. These replays run the same command line in this process
(`runwatch.cli.main`), for speed; the table above is the subprocess's.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")

# The warning kinds that find a broken run, by the word after `broken:` in its label. A stop finds
# any broken run. `no_signal` never does: it says the log could not be judged, not that the run is
# bad. `overfitting` fits the runs whose label rests on their eval loss (it rises from the best).
NOT_LEARNING = {"no_progress", "loss_at_chance", "stuck_metric", "inverted_metric", "metric_stuck"}
FITTING: dict[str, set[str]] = {
    "overfitting": {"overfitting"},
    "diverged": {"overfitting", "no_progress", "loss_spike", "grad_explosion", "nonfinite_loss", "nonfinite_grad"},
    "not-learning": NOT_LEARNING | {"overfitting"},
    "stuck-at-chance": NOT_LEARNING,
    "near-chance": NOT_LEARNING,
    "stuck": NOT_LEARNING,
    "frozen": NOT_LEARNING,
}


def run_check(log: str, args: list[str], timeout: float) -> dict[str, Any]:
    """`runwatch check LOG ARGS --json` in a subprocess: the parsed result, or the crash."""
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "runwatch", "check", log, *args, "--json"]
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"crash": f"timeout after {timeout:g} s", "seconds": time.perf_counter() - t0}
    seconds = time.perf_counter() - t0
    if p.returncode not in (0, 7) or "Traceback" in p.stderr:
        last = (p.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"crash": f"exit {p.returncode}: {last[:200]}", "seconds": seconds}
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        return {"crash": f"exit {p.returncode}: output is not JSON", "seconds": seconds}
    return {"exit": p.returncode, "doc": doc, "stderr": p.stderr.strip(), "seconds": seconds}


# The defaults' free values the folds choose among: each option's default first, then the values
# tried around it (one option varied at a time, the others at their defaults).
FREE: dict[str, tuple[float, ...]] = {
    "spike-min-excess": (0.1, 0.05, 0.5),
    "grad-factor": (10.0, 5.0, 20.0),
    "progress-min-drop": (0.05, 0.03, 0.1),
}


def candidates() -> list[tuple[str, ...]]:
    """The option sets tried by `--folds`: the defaults (empty), then one option moved at a time."""
    out: list[tuple[str, ...]] = [()]
    for name, values in FREE.items():
        out.extend((f"--{name}", f"{v:g}") for v in values[1:])
    return out


def run_in_process(log: str, args: list[str]) -> dict[str, Any]:
    """`runwatch check LOG ARGS --json` in this process (the command line's own `main`)."""
    if SRC not in sys.path:
        sys.path.insert(0, SRC)
    from runwatch.cli import main as cli_main

    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(["check", log, *args, "--json"])
    seconds = time.perf_counter() - t0
    if code not in (0, 7):
        last = (err.getvalue().strip().splitlines() or ["(no output)"])[-1]
        return {"crash": f"exit {code}: {last[:200]}", "seconds": seconds}
    try:
        return {"exit": code, "doc": json.loads(out.getvalue()), "seconds": seconds}
    except ValueError:
        return {"crash": f"exit {code}: output is not JSON", "seconds": seconds}


def assign_folds(repos: dict[str, str], k: int) -> dict[str, int]:
    """Entry id -> fold: repositories (largest first, then by name) to the fold with fewest entries."""
    by_repo: dict[str, list[str]] = {}
    for name, repo in sorted(repos.items()):
        by_repo.setdefault(repo, []).append(name)
    sizes = [0] * k
    out: dict[str, int] = {}
    for repo, names in sorted(by_repo.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        fold = min(range(k), key=lambda i: (sizes[i], i))
        sizes[fold] += len(names)
        for name in names:
            out[name] = fold
    return out


def errors(outcomes: list[str]) -> int:
    """What a choice of values costs: a healthy run stopped counts two, a broken run missed one."""
    return sum(2 if o == "false_alarm" else 1 if o in ("missed", "crash") else 0 for o in outcomes)


def folds(
    entries: list[tuple[str, str, list[str]]], labels: dict[str, Any], repos: dict[str, str], k: int
) -> dict[str, Any]:
    """Every candidate replayed over the labelled entries; per fold, the candidate chosen on the
    other folds and the held-out fold's outcomes under it."""
    labelled = [e for e in entries if labels.get(e[0], {}).get("label")]
    fold_of = assign_folds({e[0]: repos.get(e[0], e[0]) for e in labelled}, k)
    cands = candidates()
    outcome: dict[tuple[str, ...], dict[str, str]] = {}
    for cand in cands:
        outcome[cand] = {}
        for name, log, check_args in labelled:
            res = run_in_process(log, [*check_args, *cand])
            outcome[cand][name] = judge(labels[name]["label"], res)[1]
    out: list[dict[str, Any]] = []
    for fold in range(k):
        train = [e[0] for e in labelled if fold_of[e[0]] != fold]
        held = [e[0] for e in labelled if fold_of[e[0]] == fold]
        best = min(cands, key=lambda c: (errors([outcome[c][n] for n in train]), c != ()))
        rows = [{"id": n, "label": labels[n]["label"], "outcome": outcome[best][n]} for n in held]
        out.append(
            {
                "fold": fold + 1,
                "repos": sorted({repos.get(n, n) for n in held}),
                "chosen": " ".join(best) or "defaults",
                "held_out": fold_summary(rows),
                "defaults": fold_summary([{**r, "outcome": outcome[()][r["id"]]} for r in rows]),
            }
        )
    total = {key: sum(f["held_out"][key] for f in out) for key in out[0]["held_out"]} if out else {}
    # what each candidate changes against the defaults, over all labelled entries
    rank = {"found": 0, "clean": 0, "warned": 0, "missed": 1, "crash": 1, "false_alarm": 2}
    changes = []
    for cand in cands[1:]:
        better = sorted(n for n in outcome[cand] if rank[outcome[cand][n]] < rank[outcome[()][n]])
        worse = sorted(n for n in outcome[cand] if rank[outcome[cand][n]] > rank[outcome[()][n]])
        changes.append({"candidate": " ".join(cand), "better": better, "worse": worse})
    return {
        "k": k,
        "candidates": [" ".join(c) or "defaults" for c in cands],
        "folds": out,
        "held_out": total,
        "changes": changes,
    }


def fold_summary(rows: list[dict[str, Any]]) -> dict[str, int]:
    healthy = [r for r in rows if not r["label"].startswith("broken")]
    broken = [r for r in rows if r["label"].startswith("broken")]
    return {
        "healthy": len(healthy),
        "healthy_stopped": sum(r["outcome"] == "false_alarm" for r in healthy),
        "broken": len(broken),
        "broken_missed": sum(r["outcome"] != "found" for r in broken),
        "crashes": sum(r["outcome"] == "crash" for r in rows),
    }


def judge(label: str | None, res: dict[str, Any]) -> tuple[str, str]:
    """(verdict text, outcome): outcome one of crash, false_alarm, warned, clean (healthy runs),
    found, missed (broken runs), stop, warn, clean (unlabelled runs)."""
    if "crash" in res:
        return f"CRASH {res['crash']}", "crash"
    findings = res["doc"]["findings"]
    stops = [f for f in findings if f.get("severity", "stop") == "stop"]
    warns = [f for f in findings if f.get("severity") == "warn"]
    if stops:
        f = stops[0]
        verdict = f"STOP {f['kind']} step={f['step']}"
    elif warns:
        verdict = "WARN " + ", ".join(dict.fromkeys(f["kind"] for f in warns))
    else:
        verdict = f"clean step={res['doc']['last_step']}"
    if label is None:
        return verdict, "stop" if stops else "warn" if warns else "clean"
    if label.startswith("broken"):
        fitting = FITTING.get(label.split(":", 1)[-1], NOT_LEARNING | {"overfitting"})
        found = bool(stops) or any(f["kind"] in fitting for f in warns)
        return verdict, "found" if found else "missed"
    return verdict, "false_alarm" if stops else "warned" if warns else "clean"


def totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The counts the README reports, for one part of the corpus."""
    healthy = [r for r in rows if r["label"] is not None and not r["label"].startswith("broken")]
    broken = [r for r in rows if r["label"] is not None and r["label"].startswith("broken")]
    plain = [r for r in healthy if r["label"] == "healthy"]
    return {
        "entries": len(rows),
        "healthy": len(healthy),
        "healthy_stopped": sum(r["outcome"] == "false_alarm" for r in healthy),
        "healthy_warned": sum(r["outcome"] == "warned" for r in plain),
        "overfits_warned": sum(r["outcome"] == "warned" for r in healthy if r["label"] != "healthy"),
        "broken": len(broken),
        "broken_found": sum(r["outcome"] == "found" for r in broken),
        "stopped": sum(r["outcome"] in ("stop", "false_alarm") or r["verdict"].startswith("STOP") for r in rows),
        "warned_only": sum(r["verdict"].startswith("WARN") for r in rows),
        "clean": sum(r["verdict"].startswith("clean") for r in rows),
        "crashes": sum(r["outcome"] == "crash" for r in rows),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", help="a directory of <id>/source.json entries (and labels.json)")
    ap.add_argument("--json", metavar="OUT", help="also write every row and the totals as JSON to OUT ('-': stdout)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds one check may take (default 120)")
    ap.add_argument("--jobs", type=int, default=1, help="checks run at once (default 1)")
    ap.add_argument("--in-process", action="store_true", help="replay in this process (faster; same command line)")
    ap.add_argument("--folds", type=int, default=0, metavar="K", help="also judge K folds by repository (see above)")
    args = ap.parse_args(argv)
    corpus = args.corpus
    if not os.path.isdir(corpus):
        print(f"bench_detection: {corpus}: not a directory", file=sys.stderr)
        return 2
    labels_path = os.path.join(corpus, "labels.json")
    labels: dict[str, Any] = {}
    if os.path.isfile(labels_path):
        with open(labels_path, encoding="utf-8") as f:
            labels = json.load(f)
    entries = []
    repos: dict[str, str] = {}
    for name in sorted(os.listdir(corpus)):
        source = os.path.join(corpus, name, "source.json")
        if os.path.isfile(source):
            with open(source, encoding="utf-8") as f:
                meta = json.load(f)
            entries.append((name, os.path.join(corpus, name, meta["file"]), list(meta.get("check_args") or [])))
            repos[name] = str(meta.get("repo") or name)
    if not entries:
        print(f"bench_detection: {corpus}: no <id>/source.json entries", file=sys.stderr)
        return 2
    if args.in_process:
        results = [run_in_process(e[1], e[2]) for e in entries]
    else:
        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            results = list(pool.map(lambda e: run_check(e[1], e[2], args.timeout), entries))
    rows = []
    for (name, log, check_args), res in zip(entries, results):
        label = labels.get(name, {}).get("label")
        verdict, outcome = judge(label, res)
        rows.append(
            {
                "id": name,
                "label": label,
                "verdict": verdict,
                "outcome": outcome,
                "seconds": round(res["seconds"], 3),
                "findings": [] if "crash" in res else res["doc"]["findings"],
                "check_args": check_args,
            }
        )
    labelled = totals([r for r in rows if r["label"] is not None])
    unlabelled = totals([r for r in rows if r["label"] is None])
    if args.json != "-":
        width = max(len(r["id"]) for r in rows)
        for r in rows:
            print(f"{r['id']:<{width}}  {r['label'] or '-':<24}  {r['outcome']:<11}  {r['verdict']}")
        print()
        lab = labelled
        print(
            f"labelled ({lab['entries']}): healthy {lab['healthy']}: stopped {lab['healthy_stopped']} (false alarms), "
            f"healthy warned {lab['healthy_warned']}, healthy-but-overfits warned {lab['overfits_warned']}; "
            f"broken found {lab['broken_found']} of {lab['broken']}; crashes {lab['crashes']}"
        )
        un = unlabelled
        print(
            f"unlabelled ({un['entries']}): stopped {un['stopped']}, warnings only {un['warned_only']}, "
            f"clean {un['clean']}, crashes {un['crashes']}"
        )
    fold_doc = folds(entries, labels, repos, args.folds) if args.folds > 1 else None
    if fold_doc is not None and args.json != "-":
        print()
        print(f"folds ({fold_doc['k']}, by repository; candidates: {'; '.join(fold_doc['candidates'])}):")
        for f in fold_doc["folds"]:
            h, d = f["held_out"], f["defaults"]
            print(
                f"  fold {f['fold']}: {len(f['repos'])} repos, healthy {h['healthy']}, broken {h['broken']}; "
                f"chosen on the others: {f['chosen']}; held out: healthy stopped {h['healthy_stopped']}, "
                f"broken missed {h['broken_missed']}, crashes {h['crashes']} "
                f"(defaults: {d['healthy_stopped']}, {d['broken_missed']})"
            )
        for c in fold_doc["changes"]:
            print(
                f"  {c['candidate']} against the defaults: better on {len(c['better'])} "
                f"({', '.join(c['better']) or '-'}), worse on {len(c['worse'])} ({', '.join(c['worse']) or '-'})"
            )
        t = fold_doc["held_out"]
        print(
            f"  held out, all folds: healthy {t['healthy']}: stopped {t['healthy_stopped']}; "
            f"broken missed {t['broken_missed']} of {t['broken']}; crashes {t['crashes']}"
        )
    if args.json:
        doc = {"rows": rows, "labelled": labelled, "unlabelled": unlabelled, "folds": fold_doc}
        text = json.dumps(doc, indent=2)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w", encoding="utf-8") as f:
                f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
