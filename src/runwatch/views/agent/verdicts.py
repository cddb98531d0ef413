"""Has a run reached its final verdict, is something still watching it, or nothing at all?

    state = watch_state("/runs/a")   # {"state": "final"|"watching"|"unwatched", ...}

What `wait_for_verdict` decides on, from the files `watch` and `supervise` write as they write
them: `watchdog.json` (the watch's verdict, or its `watching` record while it runs, judged alive
or not as `runwatch status` judges it) and `supervise.jsonl` with `supervise.lock` (a supervisor
and whether it still runs). A verdict a live supervisor acts on (a relaunch, a rollback) is not
final: the end of the supervisor's allocation (`done`, `gave_up`, `preempted`:
`supervision.ENDS`) is, with the exit status the supervisor ended with (`exit`: 0 done, 75
preempted, 130 Ctrl-C, 7 otherwise, or what `--exit-code` set). Standard library only.
"""

from __future__ import annotations

import os
import time
from typing import Any

from ...errors import InvalidRunError
from ...files import JOURNAL, LOCK
from ...judging import Verdict
from ...procs import alive, not_supervisor, read_pid_file
from ...supervising import ENDS, supervise_status
from ..serve.supervision import SupervisionView
from ..status import watchdog_facts


def files_signature(run_dir: str) -> tuple[tuple[int, int, int] | None, ...]:
    """(inode, size, mtime) of watchdog.json and supervise.jsonl: what changes when a verdict lands."""
    out: list[tuple[int, int, int] | None] = []
    for name in ("watchdog.json", JOURNAL):
        try:
            st = os.stat(os.path.join(run_dir, name))
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            out.append(None)
    return tuple(out)


def live_supervisor(run_dir: str, supervision: dict[str, Any] | None = None) -> int | None:
    """The pid of a `runwatch supervise` that still supervises `run_dir`, else None: the journal's
    supervisor while its supervision has not ended, or the holder named in `supervise.lock` (a
    supervisor that has not written its first record yet, or one started again after an end)."""
    sup = supervise_status(run_dir) if supervision is None else supervision
    if sup is not None and sup["supervisor_running"]:
        return int(sup["supervisor_pid"])
    holder = read_pid_file(os.path.join(run_dir, LOCK))
    if holder is None or not alive(holder):
        return None
    if sup is not None and sup["supervisor_pid"] == holder and sup["event"] in ENDS:
        return None  # it has written its end and is on its way out
    return holder


def _journal_end(run_dir: str) -> dict[str, Any]:
    """The journal's last record (`done`, `gave_up` or `preempted`), read as the run page reads the journal."""
    view = SupervisionView(os.path.join(run_dir, JOURNAL))
    try:
        view.refresh()
    except InvalidRunError:  # not a regular file: no end to read
        return {}
    facts = view.facts()
    return facts["last_event"] if facts is not None and facts["last_event"] is not None else {}


def _after(watchdog: dict[str, Any] | None, when: object) -> bool:
    """watchdog.json was written by a watch that began (or a verdict reached) after `when`."""
    if watchdog is None or not isinstance(when, (int, float)):
        return False
    key = "since" if watchdog.get("verdict") == "watching" else "time"
    t = watchdog.get(key)
    return isinstance(t, (int, float)) and t > when


def _line(doc: dict[str, Any]) -> str:
    """The verdict line of a watchdog.json verdict (the one place it is formatted: `Verdict.line`)."""
    step = doc.get("step")
    return Verdict(
        str(doc.get("verdict")),
        doc.get("kind"),
        step if isinstance(step, (int, float)) else 0,
        str(doc.get("message") or ""),
        0.0,
    ).line()


def watch_state(run_dir: str, now: float | None = None) -> dict[str, Any]:
    """Where the run's verdict stands: `state` is `final` (with the verdict and its line),
    `watching` (a watch or a supervisor runs) or `unwatched` (nothing would ever write a verdict),
    with `by` (`watch` or `supervise`) and a one-line `message`. watchdog.json is judged as
    `runwatch status` judges it (`status.watchdog_facts`)."""
    now = time.time() if now is None else now
    sup = supervise_status(run_dir)
    watchdog = watchdog_facts(run_dir, now)
    pid = live_supervisor(run_dir, sup)
    if pid is not None and not_supervisor(run_dir, pid) is not None:
        pid = None  # a pid written into the journal or the lock, not a supervisor holding the run
    if pid is not None:
        return {
            "state": "watching",
            "by": "supervise",
            "message": f"supervisor {pid} is supervising the run",
            "supervisor_pid": pid,
            "watchdog": watchdog,
        }
    last = _journal_end(run_dir) if sup is not None and sup["event"] in ENDS else None
    if last is not None and not _after(watchdog, last.get("time")):  # (a watch started since is the news)
        verdict = {
            "verdict": "done" if last.get("event") == "done" else "anomaly",
            "kind": last.get("kind"),
            "class": last.get("class"),
            "step": last.get("step"),
            "onset": last.get("onset"),
            "message": last.get("message"),
        }
        return {
            "state": "final",
            "by": "supervise",
            "message": (
                "the supervisor was preempted: its allocation ended; a requeued job continues the supervision"
                if last.get("event") == "preempted"
                else f"the supervision ended: {last.get('event')}"
            ),
            "event": last.get("event"),
            "exit": last.get("exit_code"),  # the supervisor's exit status (absent from older journals)
            "line": last.get("line") or _line(verdict),
            "verdict": verdict,
            "goodput": last.get("goodput"),
            # the watch's own verdict, when the supervisor wrote one (not the record of its watching)
            "watchdog": watchdog if watchdog is not None and watchdog.get("verdict") != "watching" else None,
        }
    if watchdog is None:
        return {"state": "unwatched", "by": None, "message": "nothing is watching this run (no watchdog.json)"}
    if watchdog.get("verdict") == "watching":
        if watchdog["alive"]:
            return {"state": "watching", "by": "watch", "message": watchdog["line"], "watchdog": watchdog}
        return {
            "state": "unwatched",
            "by": None,
            "message": f"nothing is watching this run: {watchdog['line']}",
            "watchdog": watchdog,
        }
    if watchdog["before_current_launch"]:
        return {
            "state": "unwatched",
            "by": None,
            "message": "nothing is watching this run: the verdict in watchdog.json is older than the current launch",
            "watchdog": watchdog,
        }
    return {"state": "final", "by": "watch", "message": "the watch ended", "line": _line(watchdog), "verdict": watchdog}
