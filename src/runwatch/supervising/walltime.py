"""Where a supervised run's wall time went (`breakdown`), and the steps it ran and kept.

    split = breakdown(sessions, journal)               # {"wall_seconds", "productive_seconds", "buckets", "advice"}
    steps_run(sessions), steps_kept(sessions, journal) # the updates the log shows, those on the path kept

`breakdown` cuts the supervision's wall time (from its first launch to its journal's last record)
into productive training and the lost buckets `startup`, `checkpoint`, `eval`, `redone`,
`detection`, `stopping`, `backoff`, `preempted`, attempt by attempt, from the journal's launches,
verdicts and signals and the log's record times; with the checkpoint interval Young and Daly's rule
advises for the run's own save time and interruption rate (docs/SUPERVISE.md, "Goodput, broken
down"). Productive time ends at the onset of the trouble an attempt was stopped for, an attempt
that logged nothing is lost whole (`startup`), and in a log without record times (a text log) an
attempt's training ends when its log last grew (the verdict's `last_record_time`) and splits into
kept and redone by `steps_kept / steps_run`. `goodput` makes the run's one figure of them.
Standard library only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, TypedDict

from ..reading import Record, Session, live_sessions, origin_step, path, valid_records


def steps_run(sessions: list[Session]) -> int | float:
    """Every successful optimizer update the log shows, over all sessions (schema v1: the windows'
    `updates`; minimal telemetry: step differences within a session)."""
    total: int | float = 0
    for i, s in enumerate(sessions):
        prev = origin_step(s, True) if i == 0 else None
        for r in s.records:
            if r.kind != "train":
                continue
            if r.raw is not None and type(r.raw.get("updates")) is int and "attempted" in r.raw:
                total += r.raw["updates"]
            elif prev is not None and r.step > prev:
                total += r.step - prev  # minimal telemetry: a relaunch's first record counts none
            prev = r.step
    return total


def steps_kept(sessions: list[Session], journal: list[dict[str, Any]] | None = None) -> int | float:
    """The updates on the path to the final step (to the onset of a divergence not recovered)."""
    stretches = path(sessions)
    if not stretches:
        return 0
    final = stretches[-1][1]
    onset = unrecovered_onset(journal or [])
    if onset is not None:
        final = min(final, max(onset - 1, 0))
    return max(0, final - origin_step(stretches[0][0], stretches[0][0] is live_sessions(sessions)[0]))


def unrecovered_onset(journal: list[dict[str, Any]]) -> int | float | None:
    """The onset step of the supervision's last verdict when it is a divergence that no rollback
    followed (the run ended on it), else None."""
    for rec in reversed(supervision(journal)):
        event = rec.get("event")
        if event in LAUNCHES:
            return None
        if event == "verdict":
            if rec.get("class") != "divergence":
                return None
            onset = rec.get("onset", rec.get("step"))
            return onset if type(onset) in (int, float) else None
    return None


def _start_time(s: Session) -> float | None:
    """When the session's logger opened: a v1 record's time minus its session's elapsed seconds."""
    for r in s.records:
        sess = r.raw.get("session") if r.raw else None
        if r.time is not None and isinstance(sess, dict) and type(sess.get("elapsed_seconds")) in (int, float):
            elapsed: int | float = sess["elapsed_seconds"]
            return r.time - elapsed
    return None


BUCKETS = ("startup", "checkpoint", "eval", "redone", "detection", "stopping", "backoff", "preempted")
_PRODUCTIVE = "productive"
LAUNCHES = ("launch", "relaunch", "rollback")
# Minimal telemetry's `t` may count from the program's start: under a journal, record times more
# than this before the first launch are taken for such (a log without times).
_CLOCK_SLACK_SECONDS = 86400.0


class Advice(TypedDict):
    """The checkpoint interval Young and Daly's rule gives for the run's own figures."""

    checkpoint_seconds: float | None  # C: the mean save time of the checkpoint events
    mtbi_seconds: float | None  # M: the time the program was up, over the interruptions
    interval_seconds: float | None  # sqrt(2 C M)
    saved_seconds: float | None  # what that interval would have saved against the one used
    used_interval_seconds: float | None  # the mean time between checkpoints within a session
    interruptions: int  # attempts ended by an anomaly or a preemption


class Breakdown(TypedDict):
    """`runwatch goodput --json`: the wall time split into productive training and what was lost."""

    wall_seconds: float | None
    productive_seconds: float | None
    ratio: float | None  # productive / wall
    buckets: dict[str, float | None]
    advice: Advice


@dataclass
class _Attempt:
    """One launched attempt as the journal tells it."""

    start: float
    backoff: float = 0.0  # the back-off before it
    continued: bool = False  # the first launch of a new allocation (a requeued job)
    verdict: dict[str, Any] | None = None
    signal_time: float | None = None  # when the supervisor was told to stop (preempted, Ctrl-C)
    preempted: bool = False


def _num(v: Any) -> float | None:
    return float(v) if type(v) in (int, float) and math.isfinite(v) else None


def _ms(t: float) -> int:
    return round(t * 1000)


def supervision(journal: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of the journal's latest supervision (those sharing its `first_launch`: a
    requeued job's allocations and a restarted supervisor continue it; a new one starts afresh)."""
    if not journal:
        return []
    first = journal[-1].get("first_launch")
    if first is None:
        return journal
    return [r for r in journal if r.get("first_launch") == first]


def journal_attempts(journal: list[dict[str, Any]]) -> list[_Attempt]:
    """The launched attempts of a supervision's journal records, each with its verdict and signal."""
    out: list[_Attempt] = []
    for rec in journal:
        t = _num(rec.get("time"))
        if t is None:
            continue
        event = rec.get("event")
        if event in LAUNCHES and not rec.get("adopted"):
            start = _num(rec.get("launched_at")) or t
            out.append(_Attempt(start, _num(rec.get("backoff_seconds")) or 0.0, bool(rec.get("continued"))))
            continue
        if not out:
            out.append(_Attempt(t))
        a = out[-1]
        if event == "verdict" and a.verdict is None:
            a.verdict = rec
        elif event in ("preempted", "gave_up") and _num(rec.get("signal_time")) is not None and a.signal_time is None:
            a.signal_time = _num(rec.get("signal_time"))
            a.preempted = event == "preempted"
    return out


def _timed(sessions: list[Session], floor: float = -math.inf) -> list[tuple[float, Session, Record]]:
    """Every valid record with a time from `floor` on, in time order (stable)."""
    out = [(r.time, s, r) for s in sessions for r in valid_records(s) if r.time is not None and r.time >= floor]
    out.sort(key=lambda x: x[0])
    return out


def _sessionattempts(sessions: list[Session]) -> tuple[list[_Attempt], float, float] | None:
    """Without a journal: each session is an attempt launched when the one before logged its last."""
    attempts: list[_Attempt] = []
    end = None
    for s in live_sessions(sessions):
        times = [r.time for r in valid_records(s) if r.time is not None]
        if not times:
            return None
        attempts.append(_Attempt(end if end is not None else (_start_time(s) or times[0])))
        end = times[-1]
    return (attempts, attempts[0].start, end) if attempts and end is not None else None


def breakdown(
    sessions: list[Session],
    journal: list[dict[str, Any]] | None = None,
    *,
    end: float | None = None,
    exited: float | None = None,
) -> Breakdown:
    """Split the wall time of the supervision in `journal` (its latest; from the first launch to
    `end`, default its last record) into productive training and the lost buckets of `BUCKETS`,
    from the log's `sessions`; without a journal, from the first session's start to the last
    record. `exited`: when the last attempt's process ended (its `exit.json`), for an attempt the
    journal has no verdict on yet: the time after it waits for one (`detection`).
    docs/SUPERVISE.md, "Goodput, broken down", states the model. Each bucket is counted
    in whole milliseconds, so the buckets and productive time sum to the wall time exactly."""
    recs = supervision(journal or [])
    if recs:
        attempts = journal_attempts(recs)
        first = [x for x in (_num(recs[0].get("first_launch")), _num(recs[0].get("time"))) if x is not None]
        w0 = min(first) if first else None
        w1 = end if end is not None else _num(recs[-1].get("time"))
    else:
        found = _sessionattempts(sessions)
        attempts, w0, w1 = found if found is not None else ([], None, None)
    if w0 is None or w1 is None or not attempts:
        return _empty()
    timed = _timed(sessions, w0 - _CLOCK_SLACK_SECONDS if recs else -math.inf)
    keep = {id(s): upto for s, upto in path(sessions)}
    run = steps_run(sessions)
    share = min(1.0, steps_kept(sessions) / run) if run else 1.0  # without record times: training split by steps
    windowed = [x for x in timed if w0 <= x[0] <= w1]
    cuts: list[tuple[float, str]] = []
    interruptions = 0
    for i, a in enumerate(attempts):
        nxt = attempts[i + 1] if i + 1 < len(attempts) else None
        stop = nxt.start if nxt is not None else w1
        ended = exited if nxt is None else None
        cuts_a, interrupted = _attempt_cuts(a, nxt, stop, windowed if timed else None, keep, share, ended)
        cuts.extend(cuts_a)
        interruptions += interrupted
    totals = dict.fromkeys((*BUCKETS, _PRODUCTIVE), 0)
    cursor, last = _ms(w0), max(_ms(w0), _ms(w1))
    for t, label in cuts:
        c = min(max(_ms(t), cursor), last)
        totals[label] += c - cursor
        cursor = c
    totals["stopping"] += last - cursor
    wall = (last - _ms(w0)) / 1000
    productive = totals[_PRODUCTIVE] / 1000
    buckets: dict[str, float | None] = {k: totals[k] / 1000 for k in BUCKETS}
    return {
        "wall_seconds": wall,
        "productive_seconds": productive,
        "ratio": round(productive / wall, 4) if wall else None,
        "buckets": buckets,
        "advice": _advice(sessions, windowed, wall, buckets, interruptions),
    }


def _empty() -> Breakdown:
    return {
        "wall_seconds": None,
        "productive_seconds": None,
        "ratio": None,
        "buckets": dict.fromkeys(BUCKETS),
        "advice": {
            "checkpoint_seconds": None,
            "mtbi_seconds": None,
            "interval_seconds": None,
            "saved_seconds": None,
            "used_interval_seconds": None,
            "interruptions": 0,
        },
    }


def _attempt_cuts(
    a: _Attempt,
    nxt: _Attempt | None,
    stop: float,
    timed: list[tuple[float, Session, Record]] | None,
    keep: dict[int, int | float],
    share: float,
    exited: float | None = None,
) -> tuple[list[tuple[float, str]], int]:
    """The cuts of one attempt's time, from its launch to the next one's: each (time, label of
    the span that ends there), and whether the attempt was interrupted (1) or not (0)."""
    v = a.verdict
    v_time = _num(v.get("time")) if v is not None else None
    done = v is not None and v.get("kind") is None
    ends = [x for x in (v_time, a.signal_time, stop) if x is not None]
    until = min(ends)  # the program's own time ends at the verdict or the signal
    cuts: list[tuple[float, str]] = []
    if timed is None:  # no record times: the training, to when the log last grew, splits into kept and redone by steps
        last = _num(v.get("last_record_time")) if v is not None else None
        train_end = min(until, last) if last is not None and last >= a.start else until
        if v is not None and "last_record_time" in v and last is None and not done:  # it logged nothing: lost whole
            train_end = a.start
        cuts += [(a.start + (train_end - a.start) * share, _PRODUCTIVE), (train_end, "redone")]
    else:
        mine = [x for x in timed if a.start <= x[0] < stop and x[0] <= until]
        if v is not None and not done and mine and (a.signal_time is None or v_time == until):
            onset = _num(v.get("onset", v.get("step")))
            before = [x[0] for x in mine if onset is not None and x[2].step <= onset]
            z = before[-1] if before else mine[0][0]
            mine = [x for x in mine if x[0] <= z]  # later records fall in the detection
        seen: set[int] = set()
        for t, s, r in mine:
            if id(s) not in seen:
                seen.add(id(s))
                cuts.append((_start_time(s) or t, "startup"))
            upto = keep.get(id(s))
            trained = _PRODUCTIVE if upto is not None and r.step <= upto else "redone"
            if r.kind == "eval":
                cuts.append((t, "eval"))
            elif r.kind == "checkpoint":
                seconds = _num(r.raw.get("seconds")) if r.raw else None
                if seconds is not None:
                    cuts.append((t - seconds, trained))
                cuts.append((t, "checkpoint"))
            elif r.kind in ("train", "end"):
                cuts.append((t, trained))
        if not mine:  # it logged nothing: lost whole, from its launch to its exit
            ended = (
                _num((v.get("exit") or {}).get("time")) if v is not None and isinstance(v.get("exit"), dict) else None
            )
            cuts.append((min(until, ended) if ended is not None and ended >= a.start else until, "startup"))
    interrupted = 0
    if v is not None and v_time is not None and (a.signal_time is None or v_time <= a.signal_time):
        cuts.append((v_time, "stopping" if done else "detection"))
        interrupted = 0 if done else 1
    if a.signal_time is not None:
        cuts.append((a.signal_time, "redone" if v is None else "stopping"))
        cuts.append((stop, "preempted" if a.preempted else "stopping"))
        interrupted = 1 if a.preempted else interrupted
    elif nxt is not None and nxt.continued:  # the allocation ended without the supervisor's word
        cuts.append((stop, "preempted"))
        interrupted = 1
    elif nxt is not None:
        cuts += [(stop - nxt.backoff, "stopping"), (stop, "backoff")]
    else:
        if v is None and exited is not None:  # it ended; no verdict yet
            cuts += [(exited, _PRODUCTIVE), (stop, "detection")]
        cuts.append((stop, "stopping" if v is not None else _PRODUCTIVE))
    return cuts, interrupted


def _advice(
    sessions: list[Session],
    timed: list[tuple[float, Session, Record]],
    wall: float,
    buckets: dict[str, float | None],
    interruptions: int,
) -> Advice:
    """Young/Daly: with a save costing C and an interruption every M seconds of uptime, the
    checkpoint interval that loses least is sqrt(2 C M). Over an uptime T with n interruptions an
    interval t loses W(t) = (T / t) C (saving) + n t / 2 (redoing half an interval, on average, at
    each interruption); `saved_seconds` is W(used) - W(advised)."""
    saves: list[float] = []
    for sess in sessions:
        for r in valid_records(sess):
            seconds = _num(r.raw.get("seconds")) if r.kind == "checkpoint" and r.raw else None
            if seconds is not None:
                saves.append(seconds)
    c = sum(saves) / len(saves) if saves else None
    gaps: list[float] = []
    last: dict[int, float] = {}
    for t, s, r in timed:
        if r.kind == "checkpoint":
            if id(s) in last:
                gaps.append(t - last[id(s)])
            last[id(s)] = t
    used = sum(gaps) / len(gaps) if gaps else None
    uptime = wall - (buckets["backoff"] or 0.0) - (buckets["preempted"] or 0.0)
    m = uptime / interruptions if interruptions and uptime > 0 else None
    advised = math.sqrt(2 * c * m) if c is not None and m is not None else None
    saved = None
    if advised is not None and used is not None and c is not None and advised > 0 and used > 0:

        def waste(t: float) -> float:
            return uptime / t * c + interruptions * t / 2

        saved = round(max(0.0, waste(used) - waste(advised)), 3)
    return {
        "checkpoint_seconds": None if c is None else round(c, 3),
        "mtbi_seconds": None if m is None else round(m, 3),
        "interval_seconds": None if advised is None else round(advised, 3),
        "saved_seconds": saved,
        "used_interval_seconds": None if used is None else round(used, 3),
        "interruptions": interruptions,
    }
