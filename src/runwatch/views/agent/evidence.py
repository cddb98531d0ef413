"""The evidence an agent acts on, in one call each: a series around an onset, an incident, two
runs' code and config side by side.

    series(target, ["loss"], max_points=200)    # buckets [step_first, step_last, min, max, last]
    incident(run_dir, target, maps)             # verdict, records around the onset, output, checkpoints
    provenance(run_dir)                         # recipe, argv, git, versions, data of one run
    differences([p1, p2])                       # the flattened keys whose values differ

A bucket keeps its minimum and maximum, so a spike is never sampled away; non-finite values are
counted apart (with the steps of the first few) and left out of min/max/last. Provenance is read
from `run.json`'s and `launch.json`'s `provenance` objects where the program or the launch wrote
them (null where absent), the recipe from the latest session of `run.json`, the argv from
`launch.json`'s `command` when no provenance names it. Standard library only.
"""

from __future__ import annotations

import math
import os
from collections import deque
from typing import Any

from ...files import JOURNAL, VERDICT, RunDir, read_json
from ...reading import Record, RecordSource, Target, tail_lines
from .tail import minimal_rows, seq_len_of

# Records shown before and after an onset, and lines of the program's output.
AROUND = 10
OUTPUT_LINES = 30
# A line of output is cut to this many characters; the steps of at most this many non-finite values are named.
LINE_CHARS = 300
FIRST_NONFINITE = 5
# `incident` of a run with no recorded verdict replays the rules over a log up to this size (a
# replay reads every record: a 1 GB log takes a minute); over it, it says so.
REPLAY_BYTES = 64 << 20


def value_of(rec: Record, key: str, seq_len: int | None = None) -> float | None:
    """The value of a minimal-telemetry key in `rec` (None when it has none)."""
    if key == "loss":
        return rec.loss if rec.kind == "train" else None
    if key == "eval_loss":
        return rec.eval_loss
    if key == "lr":
        return rec.lr if rec.kind == "train" else None
    if key == "grad_norm":
        if rec.kind != "train":
            return None
        return rec.grad_mean if rec.grad_mean is not None else (math.nan if rec.nonfinite_grads else None)
    if key == "sps":
        if rec.kind != "train" or rec.throughput is None:
            return None
        return rec.throughput / seq_len if seq_len else rec.throughput
    if key.startswith("eval_") and rec.metrics:
        return rec.metrics.get(key[5:])
    return None


def _finite(v: float) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def read_points(
    target: Target,
    keys: list[str],
    min_step: float | None = None,
    max_step: float | None = None,
    maps: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One read of the log: per key its finite `(step, value)` points in log order, `nonfinite`
    per key (count and first steps), `records` read in the step range."""
    points: dict[str, list[tuple[float, float]]] = {k: [] for k in keys}
    nonfinite: dict[str, dict[str, Any]] = {}
    source = RecordSource(target, maps=maps)
    count = 0
    try:
        for rec in source.records():
            if rec.kind not in ("train", "eval"):
                continue
            step = rec.step
            if (min_step is not None and step < min_step) or (max_step is not None and step > max_step):
                continue
            count += 1
            seq_len = seq_len_of(source.parser, rec) if source.parser is not None else None
            for k in keys:
                v = value_of(rec, k, seq_len)
                if v is None:
                    continue
                if not _finite(v):
                    n = nonfinite.setdefault(k, {"count": 0, "first_steps": []})
                    n["count"] += 1
                    if len(n["first_steps"]) < FIRST_NONFINITE:
                        n["first_steps"].append(step)
                    continue
                points[k].append((step, float(v)))
    finally:
        source.close()
    return {"points": points, "nonfinite": nonfinite, "records": count}


def series(
    read: dict[str, Any], max_points: int, min_step: float | None = None, max_step: float | None = None
) -> dict[str, Any]:
    """Per key of `read_points`'s result, at most `max_points` ordered buckets covering the step
    range, each `[step_first, step_last, min, max, last]` (values to 6 significant digits);
    `nonfinite` per key; `steps` the range covered; `records` read."""
    points: dict[str, list[tuple[float, float]]] = read["points"]
    lo, hi = min_step, max_step
    if any(points.values()):
        lo = lo if lo is not None else min(min(st for st, _ in pts) for pts in points.values() if pts)
        hi = hi if hi is not None else max(max(st for st, _ in pts) for pts in points.values() if pts)
    return {
        "steps": [lo, hi],
        "records": read["records"],
        "series": {k: bucket(pts, max_points, lo, hi) for k, pts in points.items()},
        "nonfinite": read["nonfinite"],
    }


def _g(v: float) -> float:
    return float(f"{v:.6g}")


def bucket(pts: list[tuple[float, float]], max_points: int, lo: float | None, hi: float | None) -> list[list[Any]]:
    """`pts` (step, value) in at most `max_points` buckets of equal step width over [lo, hi], in
    log order within each; each `[step_first, step_last, min, max, last]`."""
    if not pts or lo is None or hi is None:
        return []
    if len(pts) <= max_points:
        return [[s, s, _g(v), _g(v), _g(v)] for s, v in sorted(pts, key=lambda p: p[0])]
    width = (hi - lo) / max_points or 1.0
    out: dict[int, list[Any]] = {}
    for s, v in pts:
        i = min(int((s - lo) / width), max_points - 1)
        b = out.get(i)
        if b is None:
            out[i] = [s, s, v, v, v]
        else:
            b[1] = s
            b[2] = min(b[2], v)
            b[3] = max(b[3], v)
            b[4] = v
    return [[b[0], b[1], _g(b[2]), _g(b[3]), _g(b[4])] for b in (out[i] for i in sorted(out))]


# --- incident -------------------------------------------------------------------------------------


def latest_stop(run_dir: str) -> dict[str, Any] | None:
    """The latest verdict the run was stopped for: the journal's last `verdict` (or end) record
    with a kind, else watchdog.json's anomaly; None when there is none."""
    from .events import journal_records

    def stop(rec: dict[str, Any], source: str) -> dict[str, Any]:
        fields = {k: rec.get(k) for k in ("kind", "class", "step", "message")}
        return {**fields, "severity": "stop", "onset": rec.get("onset", rec.get("step")), "source": source}

    recs, _, _ = journal_records(run_dir, 0)
    for rec in reversed(recs):
        if rec.get("event") in ("verdict", "gave_up", "done", "preempted") and rec.get("kind"):
            return stop(rec, JOURNAL)
    doc = read_json(os.path.join(run_dir, VERDICT))
    if isinstance(doc, dict) and doc.get("verdict") == "anomaly":
        return stop(doc, VERDICT)
    return None


def around(target: Target, onset: float | None, maps: dict[str, str] | None = None) -> dict[str, Any]:
    """The AROUND records before the first record that reaches the onset and the AROUND from it on,
    in log order (after a relaunch, the relaunched session's records follow), as minimal rows; and
    the checkpoints the log names before that record at or before the onset (the last five)."""
    before: deque[dict[str, Any]] = deque(maxlen=AROUND)
    after: list[dict[str, Any]] = []
    ckpts: deque[dict[str, Any]] = deque(maxlen=5)
    source = RecordSource(target, maps=maps)
    try:
        for rec in source.records():
            if rec.kind == "checkpoint":
                if not after and (onset is None or rec.step <= onset):
                    raw = rec.raw or {}
                    ckpts.append({"step": rec.step, "path": raw.get("path"), "verified": raw.get("verified")})
                continue
            if rec.kind not in ("train", "eval", "fatal"):
                continue
            rows = minimal_rows(rec, seq_len_of(source.parser, rec))
            if onset is not None and (
                after or rec.step >= onset
            ):  # from the first record at the onset on, in log order
                if len(after) >= AROUND:
                    break
                after.extend(rows)
            else:
                before.extend(rows)
    finally:
        source.close()
    if onset is None:  # no onset: the last records
        return {"before": list(before), "after": [], "checkpoints": list(ckpts)}
    return {"before": list(before), "after": after[:AROUND], "checkpoints": list(ckpts)}


def output_tail(run_dir: str, n: int = OUTPUT_LINES) -> list[str]:
    """The last `n` lines of RUN_DIR/stdout.log (read from its end), each cut to LINE_CHARS."""
    path = RunDir(run_dir).stdout
    try:
        if not os.path.isfile(path):
            return []
        lines, _ = tail_lines(path, n)
    except OSError:
        return []
    out = []
    for raw in lines:
        text = raw.decode("utf-8", "replace").rstrip()
        out.append(text if len(text) <= LINE_CHARS else text[: LINE_CHARS - 3] + "...")
    return out


def incident(run_dir: str, target: Target, maps: dict[str, str] | None = None) -> dict[str, Any]:
    """The verdict, the records around its onset, the output's tail, the checkpoints at or before
    the onset, and the run's recipe, argv and provenance."""
    verdict = latest_stop(run_dir)
    note = None
    if verdict is None and _size(target.log_path) <= REPLAY_BYTES:
        from ...judging import check

        result = check(target.log_path if os.path.isfile(target.log_path) else run_dir)
        first = result.first_stop
        if first is not None:
            verdict = {**first.to_json(), "source": "check"}
    elif verdict is None:
        note = f"no verdict recorded, and the log is over {REPLAY_BYTES >> 20} MiB: check_run replays the rules"
    onset = verdict.get("onset") if verdict else None
    doc: dict[str, Any] = {
        "verdict": verdict,
        **around(target, onset if isinstance(onset, (int, float)) else None, maps),
        "output": output_tail(run_dir),
        **provenance(run_dir),
    }
    if note is not None:
        doc["note"] = note
    return doc


def _size(path: str) -> int:
    """The bytes of a log file, or of the files in a log folder (one level), 0 when unreadable."""
    try:
        if os.path.isdir(path):
            return sum(e.stat().st_size for e in os.scandir(path) if e.is_file())
        return os.path.getsize(path)
    except OSError:
        return 0


# --- provenance -----------------------------------------------------------------------------------


def provenance(run_dir: str) -> dict[str, Any]:
    """`recipe`, `argv`, `git` (`commit`, `dirty`), `versions` (`python`, `torch`, `runwatch`), `data`
    and `host` of a run, from run.json and launch.json; null where they say nothing."""
    rd = RunDir(run_dir)
    manifest = read_json(rd.manifest)
    launch = read_json(rd.launch)
    manifest = manifest if isinstance(manifest, dict) else {}
    launch = launch if isinstance(launch, dict) else {}
    sessions = manifest.get("sessions")
    latest = sessions[-1] if isinstance(sessions, list) and sessions and isinstance(sessions[-1], dict) else {}
    prov: dict[str, Any] = {}
    for source in (launch.get("provenance"), latest.get("provenance"), manifest.get("provenance")):
        if isinstance(source, dict):
            prov.update({k: v for k, v in source.items() if v is not None})
    git = prov.get("git") if isinstance(prov.get("git"), dict) else None
    launched: dict[str, Any] = launch["provenance"] if isinstance(launch.get("provenance"), dict) else {}
    # the launched command (with its interpreter) over the program's own sys.argv
    argv = launched.get("argv") or launch.get("command") or prov.get("argv")
    recipe = latest.get("recipe")
    return {
        "recipe": recipe if isinstance(recipe, dict) else None,
        "argv": argv if isinstance(argv, list) else None,
        "git": {"commit": git.get("commit"), "dirty": git.get("dirty")} if git is not None else None,
        "versions": {k: prov.get(k) for k in ("python", "torch", "runwatch")} if prov else None,
        "data": prov.get("data"),
        "host": prov.get("host") or launch.get("host"),
    }


def _flat(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict) and value:
        for k, v in value.items():
            _flat(f"{prefix}.{k}" if prefix else str(k), v, out)
    else:
        out[prefix] = value


def differences(docs: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """The flattened keys (`recipe.lr`, `git.commit`) whose values differ between the runs'
    provenance documents: {key: [value of each run]}."""
    flats = []
    for d in docs:
        flat: dict[str, Any] = {}
        _flat("", d, flat)
        flats.append(flat)
    keys = sorted({k for f in flats for k in f})
    out: dict[str, list[Any]] = {}
    for k in keys:
        values = [f.get(k) for f in flats]
        if any(v != values[0] for v in values[1:]):
            out[k] = values
    return out
