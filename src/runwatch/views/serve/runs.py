"""Each run under a folder, read incrementally: what `runwatch serve` shows of it.

    for rel, target in find_runs("/runs"):       # every run up to MAX_DEPTH levels down (`folder`)
        view = RunView(rel, target)
        view.refresh()                           # reads only the bytes added since the last call
        view.summary(time.time())                # the `status --json` facts, and the verdict

A `RunView` keeps one `source.RecordSource` per run (the watchdog's way of reading any log),
judges every record as `runwatch check` does (`replay.RunReplay`: each session's rules, the
log-wide signal, a fault a later session went on from recovered) and, once the log has settled
(its latest session ended, or it has not grown for `SETTLED_SECONDS`), adds what `check` decides at the end of the log (`Replay.finish`, previewed:
the replay goes on if the log does), keeps the last records of the latest session for the status facts
(`status.describe`), one downsampled `Series` per value (`export.record_values`) along the path
to the final step (a session that redoes steps cuts the earlier ones: `export.session_cut`), and
the checkpoints saved on that path (`markers.Checkpoints`). A refresh reads at most a bounded
number of bytes, so a huge log is caught up over several refreshes and never holds the server.
Standard library only.

Which paths are runs and finding them is `folder`'s (`run_target`, `find_runs` and `MAX_DEPTH`
are re-exported here).
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from typing import Any, NotRequired, TypedDict

from ...errors import InvalidRunError, UsageError
from ...files import RunDir
from ...judging import STOP, Finding, RuleOptions, RunReplay, recoverable, watchdog_liveness
from ...options import build
from ...procs import launch_info
from ...reading import Record, RecordParser, RecordSource, Target, reached, recorded_rule_options
from ..checkin import Status, StatusHead, format_status
from ..status import TAIL_RECORDS, describe
from .bests import Best, BestMetric, GoodputSteps, best_point, origin_facts, task_metric
from .export import record_values, session_cut
from .facts import FactsCache
from .folder import MAX_DEPTH as MAX_DEPTH
from .folder import find_runs as find_runs
from .folder import run_target as run_target
from .markers import Checkpoints, Marker, markers
from .series import Point, Series
from .supervision import SupervisionView

# The watchdog's verdict as the list shows it; `class` (watchdog.json's, as read) on an anomaly only.
ListVerdict = TypedDict("ListVerdict", {"state": str, "label": str, "class": NotRequired[Any]})


class RunSummary(Status):
    """A run in the list: the `status --json` facts, then these."""

    path: str  # relative to the served folder, "/" separated
    verdict: ListVerdict
    findings: int  # the rules' findings so far
    warnings: int  # those of them that do not stop (severity warn, or recovered by a later session)
    first_finding: dict[str, Any] | None
    records: int
    error: str | None  # the first of `errors`
    errors: list[str]  # why the log, a line of it or runwatch.toml cannot be read
    catching_up: bool  # the last pass stopped at its bound with more of the log waiting
    version: int
    best_eval_loss: Best | None  # the lowest eval loss on the path to the final step, and its step
    best_metric: BestMetric | None  # the best value of the run's task metric (bests.task_metric)
    goodput_ratio: float | None  # steps kept / steps run of a supervised run (`goodput`'s, else so far); else None
    finding_kinds: list[str]  # the kinds of the findings so far (stops and warnings)
    warning_kinds: list[str]  # the kinds of those that do not stop


class ChartSeries(TypedDict):
    """One line of a chart: its points (downsampled) and its latest point."""

    name: str
    key: str  # the value's column in the CSV
    points: list[Point]
    last: Point | None


class Chart(TypedDict):
    """One chart of the run's page."""

    name: str
    title: str
    series: list[ChartSeries]
    unit: NotRequired[str]  # "bytes": the page writes its ticks as KiB, MiB, GiB


class RunDetail(RunSummary):
    """A run's page: its summary, then these (`supervise` is the supervisor journal's facts)."""

    status_lines: list[str]
    findings_list: list[dict[str, Any]]
    charts: list[Chart]
    markers: list[Marker]
    first_time: float | None  # the time of the run's first record: "time since start" counts from it
    recipe: dict[str, Any] | None  # the latest session's recipe (run.json)
    provenance: dict[str, Any] | None  # the latest session's provenance (run.json)
    launch: dict[str, Any] | None  # how `launch`/`supervise` started it: command, cwd, provenance


# Bytes of log one refresh of one run reads: a 1 GB log is caught up over ~30 refreshes while
# the other runs keep being refreshed in between.
REFRESH_BYTES = 32 * 1024 * 1024
# Bytes one poll reads: the reader thread holds the run for one poll's records at a time.
POLL_BYTES = 1024 * 1024
# A log quiet this long: the step a reader holds back (TensorBoard, MLflow) is shown as complete.
SETTLE_SECONDS = 2.0
# A log that has not grown for this long is settled (a run whose writer ended without an end
# record, or any other tool's log): the page adds the findings `check` makes at the end of a log.
SETTLED_SECONDS = 60.0
# Records applied per hold of a run's lock: a request waits for at most this many (~20 ms).
APPLY_LINES = 1000
# Findings kept per run (a log that fails every line would otherwise grow this without bound).
MAX_FINDINGS = 500


def verdict_of(watchdog: dict[str, Any] | None, now: float) -> ListVerdict:
    """The watchdog's verdict as the list shows it: state (anomaly, watching, stale, ok, none) and label."""
    if not isinstance(watchdog, dict):
        return {"state": "none", "label": "no watchdog"}
    v = watchdog.get("verdict")
    if v == "done":
        return {"state": "ok", "label": "OK"}
    if v == "anomaly":
        label = f"ANOMALY {watchdog.get('kind')}"
        return {"state": "anomaly", "label": label, "class": watchdog.get("class")}
    if v == "watching":  # the same judgement as `runwatch status`
        running, _line = watchdog_liveness(watchdog, now)
        if running:
            return {"state": "watching", "label": "watching"}
        return {"state": "stale", "label": "watchdog not running"}
    return {"state": "none", "label": "no watchdog"}


class RunView:
    """One run, read incrementally; its facts for the list and its page.

    One thread (the server's reader) calls `refresh`; others call `summary` and `detail` while
    holding `lock`. `refresh` reads outside the lock and takes it only to apply a slice of
    records at a time, so a request waits at most one slice, never a read.
    """

    def __init__(self, rel: str, target: Target) -> None:
        self.lock = threading.Lock()
        self.rel = rel
        self.target = target
        self.opts = RuleOptions()
        self.options_error: str | None = None
        try:
            # runwatch.toml and the options the run directory recorded at launch, as `check` reads them
            self.opts = build(
                RuleOptions, target.run_dir, recorded_rule_options(target.run_dir, RuleOptions, "check"), "check"
            )
        except UsageError as exc:
            self.options_error = f"{exc} (the rules use their defaults)"
        self.supervision = SupervisionView(RunDir(target.run_dir).journal)
        self.facts: FactsCache[RunSummary] = FactsCache(target.run_dir, rel)
        self.error: str | None = None  # why the log cannot be read now
        self.version = 0  # bumps whenever something new was read
        self._reset()

    def _reset(self) -> None:
        source: RecordSource | None = getattr(self, "source", None)  # (none yet when called by __init__)
        if source is not None:
            source.close()
        # the log of any format, read a poll (about POLL_BYTES) at a time
        self.source = RecordSource(self.target, maps=self.opts.maps, chunk_bytes=POLL_BYTES, settle=SETTLE_SECONDS)
        # check's judge: each session's rules from its first record, the log-wide signal
        self.replay = RunReplay(self.opts, self._start_step, self._max_steps)
        self.reached: int | float | None = None  # the step the log reached (`source.reached`)
        self.last_session: str | None = None  # the session of the latest record
        self.ended_session: str | None = None  # the latest session that ended (an end record)
        self.caught_up = False  # the last refresh read to the log's end
        self.behind = False  # the last refresh stopped at its bound (REFRESH_BYTES) with more waiting
        self.findings: list[dict[str, Any]] = []
        self.findings_total = 0
        self.warnings_total = 0  # those of the findings that warn
        self.kinds: dict[str, bool] = {}  # the findings' kinds: True when one of that kind warned
        # the stops a later session may recover ((session, kind, onset): how many), beyond MAX_FINDINGS too
        self.recoverable: dict[tuple[str, str, int | float], int] = {}
        self.goodput = GoodputSteps()
        self.path_session: str | None = None  # the session of the last record on the path
        self.first_time: float | None = None
        self.checkpoints = Checkpoints()
        self.records = 0
        self.invalid: str | None = None  # the latest invalid line's message
        self.tail: deque[Record] = deque(maxlen=TAIL_RECORDS)
        self.series: dict[str, Series] = {}
        self.version += 1

    @property
    def parser(self) -> RecordParser | None:
        return self.source.parser

    def _start_step(self, session: str) -> int | None:
        return self.parser.start_step(session) if self.parser is not None else None

    def _max_steps(self, session: str) -> int | None:
        return self.parser.max_steps(session) if self.parser is not None else None

    # --- reading ----------------------------------------------------------------------------

    def refresh(self, max_bytes: int | None = None) -> bool:
        """Read what is new (about `max_bytes`, default REFRESH_BYTES, at most); True when more
        is waiting already."""
        more = behind = False
        error = None
        try:
            more, behind = self._refresh(REFRESH_BYTES if max_bytes is None else max_bytes)
        except InvalidRunError as exc:  # not a regular file, run.json broken, trainer_state.json broken
            error = str(exc)
        except OSError as exc:
            error = f"{os.path.basename(self.target.log_path)}: cannot read: {exc.strerror or exc}"
        try:
            changed = self.supervision.refresh()
            sup_error = None
        except (InvalidRunError, OSError) as exc:
            changed, sup_error = True, str(exc)
        with self.lock:
            self.error = error
            self.caught_up = not more and error is None
            self.behind = behind and error is None
            if sup_error is not None:
                self.supervision.error = sup_error
            if changed:
                self.version += 1
        return more

    def _refresh(self, max_bytes: int) -> tuple[bool, bool]:
        """Poll the source (the reads outside the lock), apply the records under it, a slice at a
        time. (more waiting, stopped at the bound with more of the log unread)"""
        source = self.source
        for _ in range(max(1, max_bytes // POLL_BYTES)):
            polled = source.poll()
            if polled.reset is not None:  # read again from its start: what was shown goes
                with self.lock:
                    self._reset()
                return True, True
            if polled.manifest_changed:
                with self.lock:
                    self.version += 1
            recs = polled.records
            for i in range(0, len(recs), APPLY_LINES):
                with self.lock:
                    for rec in recs[i : i + APPLY_LINES]:
                        self._apply(rec)
                    self.version += 1
            if not polled.more:
                # a step held back (values grouped by step) is released by the next, idle poll: ask for it
                return polled.grew and source.holding(), False
        return True, True

    def _apply(self, rec: Record) -> None:
        self.records += 1
        for f in self.replay.observe(rec):
            finding = {**f.to_json(), "session": rec.session, "time": rec.time}
            self.findings_total += 1
            self.warnings_total += not f.stops
            self.kinds[f.kind] = self.kinds.get(f.kind, False) or not f.stops
            if f.stops and recoverable(f.kind):
                at = (rec.session, f.kind, f.step if f.onset is None else f.onset)
                self.recoverable[at] = self.recoverable.get(at, 0) + 1
            if len(self.findings) < MAX_FINDINGS:
                self.findings.append(finding)
        if rec.kind == "invalid":
            self.invalid = rec.error
            return
        self.reached = rec.step if self.reached is None else reached(self.reached, rec)
        self.last_session = rec.session
        if rec.kind == "end":
            self.ended_session = rec.session
        if self.tail and self.tail[-1].session != rec.session:
            self.tail.clear()
        self.tail.append(rec)
        if self.first_time is None and rec.time is not None:
            self.first_time = rec.time
        if rec.session != self.path_session:
            if self.path_session is not None:  # a relaunch or a rollback: the steps it redoes go
                cut = session_cut(self.parser, rec)
                for series in self.series.values():
                    series.cut(cut)
                self.checkpoints.cut(cut)
            self.path_session = rec.session
        if rec.kind == "checkpoint":
            self.checkpoints.add(rec)
        parser = self.source.parser
        assert parser is not None  # the record came from it
        if rec.kind == "train":
            updates = rec.raw.get("updates") if parser.windows and rec.raw is not None else None
            start = self._start_step(rec.session)
            self.goodput.add(rec.session, rec.step, updates if type(updates) is int else None, start)
        for key, value in record_values(rec, parser):
            s = self.series.get(key)
            if s is None:
                if key.startswith("eval_") and key != "eval_loss" and self._metrics() >= MAX_METRICS:
                    continue
                if key.startswith(SYSTEM_PREFIXES) and len(self.series) >= MAX_SERIES:
                    continue
                s = self.series[key] = Series()
            s.add(rec.step, value, rec.time)  # (a non-finite value is skipped: nothing to draw)

    def _metrics(self) -> int:
        return sum(k.startswith("eval_") and k != "eval_loss" for k in self.series)

    # --- the end of the log ---------------------------------------------------------------

    def settled(self, now: float) -> bool:
        """The log is judged as a whole: its latest session ended (an end record), or it has not
        grown for SETTLED_SECONDS (a writer gone without an end record; any other tool's log)."""
        if self.records == 0 or not self.caught_up:
            return False
        if self.ended_session is not None and self.ended_session == self.last_session:
            return True
        mtime = self.source.mtime()
        return mtime is not None and mtime <= now - SETTLED_SECONDS

    def settled_findings(self, now: float) -> tuple[list[dict[str, Any]], int, dict[str, bool]]:
        """The findings as `check` gives them (those of the end added, a fault a later session
        went on from recovered: `RunReplay.settle`), how many do not stop, and their kinds (True:
        one of that kind does not stop)."""
        end = self.end_findings(now)
        kinds = dict(self.kinds)
        quiet = self.warnings_total
        for f in end:
            kinds[f["kind"]] = kinds.get(f["kind"], False) or f["severity"] != STOP
            quiet += f["severity"] != STOP
        for (session, kind, onset), n in self.recoverable.items():
            if self.replay.recovered_by(kind, STOP, session, onset) is not None:
                kinds[kind] = True  # (a kind that also stopped in the latest session still counts there)
                quiet += n
        return self.replay.settle_json(self.findings + end), quiet, kinds

    def end_findings(self, now: float) -> list[dict[str, Any]]:
        """What `check` decides at the end of the log (no_progress on each session's whole length,
        no_signal at the step reached), once the log has settled; else none. A preview: the
        replay goes on if the log does."""
        if not self.settled(now):
            return []
        step = self.reached
        if step is None:  # (check starts from the latest session's start step in a schema-v1 log)
            p = self.parser
            step = (p.start_step(p.latest_session()) or 0) if p is not None else 0
        found: list[Finding] = self.replay.finish(step, commit=False)
        return [{**f.to_json(), "session": f.session, "time": None} for f in found]

    # --- facts ------------------------------------------------------------------------------

    def _status(self, now: float) -> Status:
        t = self.target
        source = self.source
        recs = list(self.tail)
        out: StatusHead = {
            "run_dir": t.run_dir,
            "log": t.log_path,
            "run_id": None,
            "session_id": None,
            "sessions": None,
            "max_steps": source.max_steps(),
            "torn_tail": source.torn() is not None,
        }
        m = source.parser.manifest if source.parser is not None else None
        if m is not None:
            latest = m["sessions"][-1]["session_id"]
            out.update({"run_id": m["run_id"], "session_id": latest, "sessions": len(m["sessions"])})
            recs = [r for r in recs if r.session == latest]
        mtime = source.mtime() if source.reader is not None else None
        return describe(t, out, recs, mtime, now, gpus=False, parser=source.parser)

    def summary(self, now: float | None = None) -> RunSummary:
        """The list's facts: the `status --json` keys plus path, verdict, findings and errors
        (kept while nothing they come from changed: `facts.FactsCache`)."""
        now = time.time() if now is None else now
        pending = self.source.pending_bytes()
        # behind: the last pass stopped at its bound; or a tail longer than a poll not read yet
        catching_up = self.behind or pending > POLL_BYTES
        key = (self.version, self.error, self.invalid, self.options_error, pending, catching_up, self.settled(now))
        return self.facts.get(key, now, lambda: self._summary(now, catching_up))

    def _summary(self, now: float, catching_up: bool) -> RunSummary:
        st = self._status(now)
        errors = [e for e in (self.error, self.invalid, self.options_error) if e]
        findings, quiet, kinds = self.settled_findings(now)
        eval_loss = self.series.get("eval_loss")
        metric = task_metric(self.series)
        best_metric: BestMetric | None = None
        if metric is not None:
            best = best_point(self.series[metric[0]].points(), metric[1])
            if best is not None:
                best_metric = {**best, "name": metric[0][5:], "direction": metric[1]}
        goodput = None
        if self.supervision.present:  # the journal's end record's figure (status's `goodput`), else so far
            ratio = (st.get("goodput") or {}).get("ratio")
            goodput = ratio if type(ratio) in (int, float) else self.goodput.ratio(self.reached)
        return {
            **st,
            "path": self.rel,
            "verdict": verdict_of(st["watchdog"], now),
            "findings": self.findings_total + len(findings) - len(self.findings),  # (and those of the end)
            "warnings": quiet,
            # the first finding that stops, else the first warning (or recovered one)
            "first_finding": next((f for f in findings if f["severity"] == STOP), None)
            or (findings[0] if findings else None),
            "records": self.records,
            "error": errors[0] if errors else None,
            "errors": errors,
            "catching_up": catching_up,
            "version": self.version,
            "best_eval_loss": best_point(eval_loss.points(), "min") if eval_loss is not None else None,
            "best_metric": best_metric,
            "goodput_ratio": goodput,
            "finding_kinds": sorted(kinds),
            "warning_kinds": sorted(k for k, warned in kinds.items() if warned),
        }

    def detail(self, now: float | None = None) -> RunDetail:
        """The run page's facts: the summary, the status lines, the charts, the findings, supervision."""
        now = time.time() if now is None else now
        summary = self.summary(now)
        findings = self.settled_findings(now)[0]
        p = self.parser
        manifest = p.manifest if p is not None else None
        origin = origin_facts(manifest, launch_info(self.target.run_dir))  # (as status reads launch.json)
        st: RunDetail = {
            **summary,
            "status_lines": format_status(summary),
            "findings_list": findings,
            "charts": [c for c in (self._chart(*spec) for spec in CHARTS) if c["series"]],
            "markers": markers(findings, self.checkpoints, self.supervision.moves, summary["watchdog"]),
            "first_time": self.first_time,
            "recipe": origin["recipe"],
            "provenance": origin["provenance"],
            "launch": origin["launch"],
        }
        for key in sorted(k for k in self.series if k.startswith("eval_") and k != "eval_loss"):
            st["charts"].append(self._chart(key, f"eval {key[5:]}", ((key, key[5:]),)))
        st["charts"].extend(c for c in self._system_charts() if c["series"])
        st["supervise"] = self.supervision.facts()
        return st

    def _system_charts(self) -> list[Chart]:
        """The memory peaks the logger records, and each GPU's memory and utilisation (NVML samples)."""
        keys = sorted(self.series)
        mem = tuple((k, k.removesuffix("_peak_bytes").removesuffix("_bytes")) for k in keys if k.startswith("mem_"))
        gpus = [k for k in keys if k.startswith("gpu")]
        gmem = tuple((k, k.split("_", 1)[0]) for k in gpus if k.endswith("_memory_used_bytes"))
        util = tuple((k, k.split("_", 1)[0]) for k in gpus if k.endswith("_util_percent"))
        charts = [
            self._chart("memory", "memory peaks", tuple((k, label[4:]) for k, label in mem)),
            self._chart("gpu_memory", "GPU memory in use", gmem),
            self._chart("gpu_util", "GPU utilisation (%)", util),
        ]
        charts[0]["unit"] = charts[1]["unit"] = "bytes"
        return charts

    def _chart(self, name: str, title: str, keys: tuple[tuple[str, str], ...]) -> Chart:
        series: list[ChartSeries] = [
            {"name": label, "key": k, "points": self.series[k].points(), "last": self.series[k].last}
            for k, label in keys
            if k in self.series
        ]
        return {"name": name, "title": title, "series": series}


# Eval metric names charted per run (a log may carry any number of eval_* keys).
MAX_METRICS = 8
# The system series (memory peaks `mem_*`, GPU samples `gpu<i>_*`) stop being added past this
# many series in all: a log of unbounded memory names must not grow a run without bound.
SYSTEM_PREFIXES = ("mem_", "gpu")
MAX_SERIES = 48
# (chart, title, ((series key, legend), ...)); one chart per eval metric follows these.
CHARTS: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = (
    ("loss", "loss", (("loss", "train"), ("eval_loss", "eval"))),
    ("lr", "learning rate", (("lr", "lr"),)),
    ("grad_norm", "gradient norm", (("grad_norm", "mean"), ("grad_norm_max", "max"))),
    ("throughput", "throughput (tokens/s)", (("tokens_per_second", "tokens/s"),)),
    # minimal telemetry's `sps`: a chart of its own, so that a comparison never mixes the two units
    ("throughput_samples", "throughput (samples/s)", (("samples_per_second", "samples/s"),)),
)
