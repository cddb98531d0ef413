"""The watchdog (`runwatch watch`) and its replay (`runwatch check`), SPEC §4–5.

    verdict = watch("runs/a", Options(stall=120))   # blocks; Verdict("done"|"anomaly", ...)
    result = check("runs/a")                        # every finding of the log as it stands

Data flows one way: the log → `follow.LogFollower` (new bytes only) → `records.RecordParser` →
`rules.Rules` → a Verdict. Every poll also checks time (stall, startup grace, timeout), the
process (`--pid` or `RUN_DIR/pid`), the `--done` sentinel and the checks in `POLL_CHECKS`.
Only `watch()`'s caller decides the exit code (0 done, 7 anomaly). Standard library only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

from .errors import InvalidRunError, UsageError
from .follow import LogFollower, ManifestFollower
from .heartbeats import RankMonitor
from .journal import atomic_write_text
from .readers import READER_FORMATS, ReadOptions, open_reader, to_records
from .readers import add_arguments as add_read_arguments, read_options
from .records import Record, RecordParser, Target, parse_maps, parser_for, read_trainer_state, resolve_target
from .rules import Finding, Rules, fmt_step
from . import process as _proc

__all__ = ["Options", "Verdict", "Watcher", "CheckResult", "watch", "check", "load_options", "POLL_CHECKS"]

EXIT_OK = 0
EXIT_ANOMALY = 7


@dataclass(frozen=True)
class Options:
    """The watchdog's options (SPEC §5 defaults); invalid values raise UsageError naming the option."""

    poll: float = 5.0  # SPEC §5 --poll
    stall: float = 360.0  # SPEC §5 --stall
    startup_grace: float = 600.0  # SPEC §5 --startup-grace
    timeout: float | None = None  # SPEC §5 --timeout: none
    pid: int | None = None  # SPEC §5 --pid: RUN_DIR/pid if present
    done: str | None = None  # SPEC §5 --done: none
    metric: str = "auroc"  # SPEC §5 --metric
    metric_min: float = 0.70  # SPEC §5 --metric-min
    metric_after_step: int = 500  # SPEC §5 --metric-after-step
    chance_loss: float | None = None  # SPEC §5 --chance-loss: off
    chance_after_step: int = 400  # SPEC §5
    chance_patience: int = 3  # SPEC §5
    chance_tolerance: float = 0.02  # SPEC §5
    grad_max: float = 50.0  # SPEC §5 --grad-max
    grad_min: float = 1e-3  # SPEC §5 --grad-min
    grad_patience: int = 3  # SPEC §5 --grad-patience
    throughput_drop: float = 0.25  # SPEC §5 --throughput-drop
    throughput_baseline_steps: int = 200  # SPEC §5
    throughput_patience: int = 3  # SPEC §5
    stop_on_anomaly: bool = False  # SPEC §5: off
    rank_stall: float = 300.0  # SPEC §5 --rank-stall (checked by the heartbeat poll check)
    straggler_factor: float = 1.5  # SPEC §5 --straggler-factor
    straggler_patience: int = 5  # SPEC §5 --straggler-patience
    spike_factor: float = 3.0  # SPEC §5 --spike-factor
    spike_window: int = 20  # SPEC §5 --spike-window
    spike_patience: int = 2  # SPEC §5 --spike-patience
    collapse_patience: int = 5  # SPEC §5 --collapse-patience
    overfit_tolerance: float = 0.10  # SPEC §5 --overfit-tolerance
    overfit_patience: int = 3  # SPEC §5 --overfit-patience
    map: tuple[str, ...] = ()  # SPEC §5 --map CANONICAL=SOURCE, repeatable

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            _check_option(f.name, getattr(self, f.name))
        if self.grad_min >= self.grad_max:
            raise UsageError(f"watch.grad_min must be < watch.grad_max {self.grad_max:g}, got {self.grad_min:g}")
        object.__setattr__(self, "map", tuple(self.map))
        parse_maps(self.map)

    @property
    def maps(self) -> dict[str, str]:
        return parse_maps(self.map)


# option -> (what it must be, "none" when it may be None); the kinds are spelled out in _EXPECT
_RULES: dict[str, tuple[str, ...]] = {
    "poll": ("pos",), "stall": ("pos",), "startup_grace": ("pos",), "timeout": ("pos", "none"),
    "pid": ("int1", "none"), "done": ("str", "none"), "metric": ("str",),
    "metric_min": ("frac_half",), "metric_after_step": ("int0",), "chance_loss": ("num", "none"),
    "chance_after_step": ("int0",), "chance_patience": ("int1",), "chance_tolerance": ("nonneg",),
    "grad_max": ("pos",), "grad_min": ("nonneg",), "grad_patience": ("int1",),
    "throughput_drop": ("open01",), "throughput_baseline_steps": ("int1",), "throughput_patience": ("int1",),
    "stop_on_anomaly": ("bool",), "rank_stall": ("pos",), "straggler_factor": ("gt1",),
    "straggler_patience": ("int1",), "spike_factor": ("gt1",), "spike_window": ("int1",),
    "spike_patience": ("int1",), "collapse_patience": ("int1",), "overfit_tolerance": ("nonneg",),
    "overfit_patience": ("int1",), "map": ("strs",),
}
_EXPECT = {
    "pos": "a number > 0", "nonneg": "a number >= 0", "num": "a finite number", "int1": "an int >= 1",
    "int0": "an int >= 0", "str": "a non-empty string", "bool": "true or false", "gt1": "a number > 1",
    "open01": "a number in (0, 1)", "frac_half": "a number in [0.5, 1]", "strs": "a list of CANONICAL=SOURCE strings",
}


def _check_option(name: str, value: Any) -> None:
    kind, *rest = _RULES[name]
    if value is None and "none" in rest:
        return
    is_num = type(value) in (int, float) and math.isfinite(value)
    ok = {
        "pos": is_num and value > 0,
        "nonneg": is_num and value >= 0,
        "num": is_num,
        "int1": type(value) is int and value >= 1,
        "int0": type(value) is int and value >= 0,
        "str": type(value) is str and value != "",
        "bool": type(value) is bool,
        "gt1": is_num and value > 1,
        "open01": is_num and 0 < value < 1,
        "frac_half": is_num and 0.5 <= value <= 1,
        "strs": isinstance(value, (list, tuple)) and all(type(v) is str for v in value),
    }[kind]
    if not ok:
        shown = f"{value:g}" if type(value) is float else repr(value) if type(value) is str else json.dumps(value, default=repr)
        raise UsageError(f"watch.{name} must be {_EXPECT[kind]}, got {shown}")


CHECK_OPTIONS = frozenset({
    "metric", "metric_min", "metric_after_step", "chance_loss", "chance_after_step", "chance_patience",
    "chance_tolerance", "grad_max", "grad_min", "grad_patience", "throughput_drop", "throughput_baseline_steps",
    "throughput_patience", "spike_factor", "spike_window", "spike_patience", "collapse_patience",
    "overfit_tolerance", "overfit_patience", "map",
})
TOML_NAME = "runwatch.toml"


def load_options(run_dir: str | None, given: dict[str, Any], *, only: frozenset[str] | None = None) -> Options:
    """Options from `run_dir/runwatch.toml` ([watch] table), then `given` (the command line) on top."""
    merged: dict[str, Any] = {}
    path = os.path.join(run_dir, TOML_NAME) if run_dir else None
    if path and os.path.isfile(path):
        import tomllib

        try:
            with open(path, "rb") as f:
                doc = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise UsageError(f"{TOML_NAME}: {exc}") from None
        table = doc.get("watch", {})
        if not isinstance(table, dict):
            raise UsageError(f"{TOML_NAME}: [watch] must be a table")
        names = {f.name for f in dataclasses.fields(Options)}
        for key, value in table.items():
            name = key.replace("-", "_")
            if name not in names:
                raise UsageError(f"{TOML_NAME}: unknown option {key!r} in [watch]")
            if only is None or name in only:
                merged[name] = tuple(value) if name == "map" and isinstance(value, list) else value
    for key, value in given.items():
        if value is not None and value != ():
            merged[key] = value
    return Options(**merged)


# --- verdicts -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Verdict:
    """How a watch ended: `done` (exit 0) or `anomaly` (exit 7)."""

    verdict: str
    kind: str | None
    step: int | float
    message: str
    time: float

    def line(self) -> str:
        if self.verdict == "done":
            return f"OK done step={fmt_step(self.step)}"
        return f"ANOMALY {self.kind} step={fmt_step(self.step)}: {self.message}"

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.verdict == "done" else EXIT_ANOMALY

    def to_json(self) -> dict:
        return {"verdict": self.verdict, "kind": self.kind, "step": self.step, "message": self.message, "time": self.time}


def write_verdict(run_dir: str, verdict: Verdict) -> str:
    """Write `run_dir/watchdog.json` atomically (temp file + fsync + os.replace); return its path."""
    path = os.path.join(run_dir, "watchdog.json")
    atomic_write_text(path, json.dumps(verdict.to_json(), allow_nan=False) + "\n")
    return path


def _rank_check(w: "Watcher") -> Finding | None:
    """`rank_stall` / `straggler` from RUN_DIR/heartbeats/ (multi-rank runs; silent otherwise)."""
    monitor = w.__dict__.get("_rank_monitor")
    if monitor is None:
        monitor = w._rank_monitor = RankMonitor(w.opts.rank_stall, w.opts.straggler_factor, w.opts.straggler_patience)
    found = monitor.poll(w.run_dir, w.clock())
    return None if found is None else Finding(found[0], found[1], found[2])


# Poll-time checks beyond the log (e.g. per-rank heartbeats): each is called once per poll with the
# Watcher and returns a Finding or None. Plug one in by appending it here.
POLL_CHECKS: list[Callable[["Watcher"], Finding | None]] = [_rank_check]


# --- the watch loop -------------------------------------------------------------------------------


def _empty(path: str) -> bool:
    try:
        return os.path.getsize(path) == 0
    except OSError:
        return True


class Watcher:
    """Follows one run and judges its latest session; `run()` blocks until a Verdict."""

    def __init__(self, target: str, opts: Options | None = None, *, stop_grace: float = _proc.STOP_GRACE_SECONDS,
                 poll_checks: list[Callable[["Watcher"], Finding | None]] | None = None,
                 clock: Callable[[], float] = time.time, log: Callable[[str], None] | None = None,
                 read: ReadOptions | None = None) -> None:
        self.opts = opts or Options()
        self.target_arg = os.fspath(target)
        self.read = read  # --format, --pattern, --run (readers.ReadOptions)
        self.target: Target = resolve_target(self.target_arg, read)
        self.run_dir = self.target.run_dir
        self.stop_grace = stop_grace
        self.poll_checks = list(POLL_CHECKS if poll_checks is None else poll_checks)
        self.clock = clock
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.started = clock()
        self.grace_anchor = self.started
        self.rules = Rules(self.opts)
        self.parser: RecordParser | None = None
        self.manifest: ManifestFollower | None = None
        self.follower: LogFollower | None = None
        self.reader: Any = None  # a readers.Reader for TensorBoard, MLflow, CSV and text logs
        self.current: str | None = None  # the session being judged
        self.have_record = False  # a record of the current session was applied
        self.last_step: int | float = 0
        self.last_growth = -math.inf
        self.catching_up = True
        self.pending: Finding | None = None  # minimal telemetry catch-up: the current session's first finding
        self.ended_normally: Record | None = None
        self._state_seen = None  # trainer_state.json: (inode, size, mtime) and entries read
        self._state_count = 0
        self._pid_sig: Any = None
        self._pid: int | None = self.opts.pid

    # --- reading -----------------------------------------------------------------------------

    def _open(self) -> bool:
        """Set up the reader once the log exists; False while it does not."""
        if self.parser is not None:
            return True
        self.target = resolve_target(self.target_arg, self.read)  # the target or a trainer_state.json may have appeared
        self.run_dir = self.target.run_dir
        if not os.path.exists(self.target.log_path):
            return False
        t = self.target
        if (t.format == "jsonl" and os.path.basename(t.log_path) == "metrics.jsonl"
                and not os.path.exists(t.manifest_path) and _empty(t.log_path)):
            # The logger creates metrics.jsonl before run.json and writes run.json before any record:
            # decide between schema v1 and minimal telemetry only once the log has bytes.
            return False
        maps = self.opts.maps
        if t.format in READER_FORMATS:  # other tools' logs: one reader a format, minimal telemetry out
            self.parser = parser_for(t, maps)
            self.reader = open_reader(t.format, t.log_path, t.read, maps)
            return True
        if t.format == "jsonl" and t.schema_v1():
            self.manifest = ManifestFollower(t.run_dir)
            self.manifest.poll()
            self.parser = RecordParser("v1", manifest=self.manifest.manifest, maps=maps, refresh=self._refresh_manifest)
            self._switch(self.parser.latest_session())
        else:
            self.parser = parser_for(t, maps) if t.format == "jsonl" else RecordParser("minimal", maps=maps, name=os.path.basename(t.log_path))
        if t.format == "jsonl":
            self.follower = LogFollower(t.log_path)
        return True

    def _refresh_manifest(self) -> dict | None:
        if self.manifest is None:
            return None
        self.manifest.poll()
        return self.manifest.manifest

    def _switch(self, session: str | None) -> None:
        if self.current is not None and session != self.current and self.parser is not None and self.parser.mode == "v1":
            self.log(f"runwatch watch: new session {session} in run.json; rules restart")
        self.current = session
        self.rules.reset(self.parser.start_step(session) if self.parser and session else None)
        self.have_record = False
        self.pending = None
        self.grace_anchor = self.clock()
        start = self.parser.start_step(session) if self.parser else None
        self.last_step = start if start is not None else 0

    def _read_log(self) -> Verdict | None:
        """Judge what is new in the JSONL log, a line at a time (no batch of records is kept)."""
        while True:
            batch = self.follower.poll()
            if batch.reset:
                self.log(f"runwatch watch: {self.target.log_path} was {batch.reset}; reading it again from the start")
                follower, self.parser, self.current = self.follower, None, None
                self.rules.reset()
                self._open()
                self.follower = follower  # keeps its restarted offset
            if batch.grew and not self.catching_up:
                self.last_growth = self.clock()
            apply = self._apply
            if batch.too_long is not None:
                where = f"{os.path.basename(self.target.log_path)}:{batch.too_long}"
                v = apply(self.parser.invalid(where, f"{where}: line longer than {self.follower.max_line_bytes} bytes"))
                if v is not None:
                    return v
            parse = self.parser.parse_line
            for lineno, raw in batch.lines:
                rec = parse(lineno, raw)
                if rec is not None:
                    v = apply(rec)
                    if v is not None:
                        return v
            if not batch.more:
                return None

    def _read_reader(self, final: bool = False) -> Verdict | None:
        """Judge what is new in a log read through `readers`; `final`: also the step held back."""
        while True:
            chunk = self.reader.poll()
            if chunk.reset:
                self.log(f"runwatch watch: {self.target.log_path}: a file was {chunk.reset}; reading it again")
            if chunk.grew and not self.catching_up:
                self.last_growth = self.clock()
            items = chunk.items + self.reader.finish() if final and not chunk.more else chunk.items
            for rec in to_records(self.parser, items):
                v = self._apply(rec)
                if v is not None:
                    return v
            if not chunk.more:
                return None

    def _read_trainer_state(self) -> Verdict | None:
        """trainer_state.json is rewritten whole: judge the entries beyond those seen."""
        try:
            st = os.stat(self.target.log_path)
        except FileNotFoundError:
            return None
        sig = (st.st_ino, st.st_size, st.st_mtime_ns)
        if sig == self._state_seen:
            return None
        if self._state_seen is not None and not self.catching_up:
            self.last_growth = self.clock()
        self._state_seen = sig
        history = read_trainer_state(self.target.log_path)
        name = os.path.basename(self.target.log_path)
        if len(history) < self._state_count:
            self.log(f"runwatch watch: {self.target.log_path} lost entries; reading it again from the start")
            self._state_count = 0
            self.parser = RecordParser("minimal", maps=self.opts.maps, name=name)
        start, self._state_count = self._state_count, len(history)
        for i in range(start, len(history)):
            rec = self.parser.parse_object(history[i], f"{name}:log_history[{i}]")
            if rec is not None:
                v = self._apply(rec)
                if v is not None:
                    return v
        return None

    def _mtime(self) -> float:
        if self.reader is not None:
            return self.reader.mtime()
        try:
            return os.stat(self.target.log_path).st_mtime
        except OSError:
            return -math.inf

    # --- judging -----------------------------------------------------------------------------

    def _apply(self, rec: Record) -> Verdict | None:
        if rec.session != self.current:  # (v1: `current` is always run.json's latest session)
            if self.parser.mode == "v1":
                if rec.session != self.parser.latest_session():
                    return None  # a session a later one replaced: dropped
            elif self.current is not None:
                self.log(f"runwatch watch: relaunch at step {fmt_step(rec.step)} ({rec.session}); rules restart")
            self._switch(rec.session)
        self.have_record = True
        self.last_step = rec.step
        finding = self.rules.observe(rec)
        if finding is not None:
            if self.catching_up and self.parser.mode == "minimal":
                if self.pending is None:
                    self.pending = finding
            else:
                return self._anomaly(finding.kind, finding.step, finding.message)
        if rec.kind == "end" and rec.reason == "normal":
            return self._verdict("done", None, rec.step, f"session {rec.session} ended normally at step {fmt_step(rec.step)}")
        return None

    def _verdict(self, verdict: str, kind: str | None, step: Any, message: str) -> Verdict:
        return Verdict(verdict, kind, step, message, self.clock())

    def _anomaly(self, kind: str, step: Any, message: str) -> Verdict:
        return self._verdict("anomaly", kind, step, message)

    def _read(self, final: bool = False) -> Verdict | None:
        """Read and judge new records; a Verdict when one decides the watch (`final`: the
        process is gone, so a step a reader holds back is complete)."""
        if self.manifest is not None and self.manifest.poll():
            self.parser.set_manifest(self.manifest.manifest)
        if self.parser is not None and self.parser.mode == "v1" and self.parser.latest_session() != self.current:
            self._switch(self.parser.latest_session())
        if not self._open():
            return None
        if self.reader is not None:
            return self._read_reader(final)
        return self._read_log() if self.follower is not None else self._read_trainer_state()

    def poll_once(self) -> Verdict | None:
        """One poll: records, the done file, the process, poll checks, time."""
        try:
            v = self._read()
        except InvalidRunError as exc:  # run.json broken, log not a regular file, ...
            return self._anomaly("invalid_log", self.last_step, str(exc))
        if v is not None:
            if v.verdict == "done":
                # What the poll checks see (per-rank heartbeats) was written before the session's
                # end record: judge it before the run is called done.
                for check_fn in self.poll_checks:
                    f = check_fn(self)
                    if f is not None:
                        return self._anomaly(f.kind, f.step, f.message)
            return v
        if self.catching_up and self.parser is not None:
            self.catching_up = False
            if self.pending is not None:
                p = self.pending
                return self._anomaly(p.kind, p.step, p.message)
        opts = self.opts
        if opts.done and os.path.exists(os.path.join(self.run_dir, opts.done)):
            return self._verdict("done", None, self.last_step, f"completion sentinel {opts.done} appeared")
        v = self._check_process()
        if v is not None:
            return v
        for check_fn in self.poll_checks:
            f = check_fn(self)
            if f is not None:
                return self._anomaly(f.kind, f.step, f.message)
        now = self.clock()
        if opts.timeout is not None and now - self.started >= opts.timeout:
            return self._anomaly("timeout", self.last_step, f"the watch ran {now - self.started:.0f} s (--timeout {opts.timeout:g})")
        if not self.have_record:
            if now - self.grace_anchor >= opts.startup_grace:
                what = "after the watch began" if self.current is None or self.grace_anchor == self.started else f"after session {self.current} began"
                return self._anomaly("stall", self.last_step, f"no record {now - self.grace_anchor:.0f} s {what} (--startup-grace {opts.startup_grace:g})")
        else:
            last = max(self.last_growth, self._mtime())
            if now - last >= opts.stall:
                return self._anomaly("stall", self.last_step, f"no new record for {now - last:.0f} s (--stall {opts.stall:g})")
        return None

    def _current_pid(self) -> int | None:
        if self.opts.pid is not None:
            return self.opts.pid
        path = os.path.join(self.run_dir, "pid")
        try:
            st = os.stat(path)
        except OSError:
            return self._pid
        sig = (st.st_ino, st.st_size, st.st_mtime_ns)
        if sig != self._pid_sig:
            self._pid_sig = sig
            self._pid = _proc.read_pid_file(path, self.log)
        return self._pid

    def _check_process(self) -> Verdict | None:
        pid = self._current_pid()
        if pid is None or _proc.alive(pid):
            return None
        # The process is gone: read the log to its end first; a normal session_end means done.
        v = self._read(final=True)
        if v is not None:
            return v
        if self.pending is not None:
            return self._anomaly(self.pending.kind, self.pending.step, self.pending.message)
        status = _proc.exit_status(pid)
        oom = _proc.oom_line(os.path.join(self.run_dir, "stdout.log"))
        if oom is not None:
            return self._anomaly("oom", self.last_step, f"process {pid} ran out of memory: {oom}")
        how = f" ({status})" if status else ""
        return self._anomaly("process_exit", self.last_step, f"process {pid} is gone{how} and the log has no normal session_end")

    def run(self) -> Verdict:
        """Poll until a verdict; write watchdog.json; stop the process on an anomaly if asked."""
        opts = self.opts
        self.log(f"runwatch watch: {self.target.log_path} (poll {opts.poll:g} s, stall {opts.stall:g} s, "
                 f"startup grace {opts.startup_grace:g} s)")
        while True:
            v = self.poll_once()
            if v is not None:
                break
            time.sleep(opts.poll)
        try:
            write_verdict(self.run_dir, v)
        except OSError as exc:
            self.log(f"runwatch watch: could not write watchdog.json: {exc.strerror or exc}")
        if v.verdict == "anomaly" and opts.stop_on_anomaly:
            pid = self._current_pid()
            if pid is None:
                self.log("runwatch watch: --stop-on-anomaly: no process to stop (no --pid, no RUN_DIR/pid)")
            else:
                self.log(_proc.stop(pid, self.run_dir, self.stop_grace))
        return v


def watch(target: str, options: Options | None = None, **kwargs: Any) -> Verdict:
    """Watch `target` (run dir, JSONL log or trainer_state.json) until done or an anomaly."""
    return Watcher(target, options, **kwargs).run()


# --- the replay -----------------------------------------------------------------------------------


@dataclass(slots=True)
class CheckResult:
    """Every finding of a replay, and the step of the last record applied."""

    findings: list[Finding]
    last_step: int | float
    torn_line: int | str | None = None  # a line number; other formats: where (a str)

    @property
    def exit_code(self) -> int:
        return EXIT_ANOMALY if self.findings else EXIT_OK

    def lines(self) -> list[str]:
        out = [f.line("FINDING") for f in self.findings]
        out.append(self.findings[0].line() if self.findings else f"OK clean step={fmt_step(self.last_step)}")
        return out


def check(target: str, options: Options | None = None, read: ReadOptions | None = None) -> CheckResult:
    """Replay every session of `target` as it stands (a torn last line is left out)."""
    from .records import iter_records

    opts = options or Options()
    target = os.fspath(target)
    if not os.path.exists(target):
        raise UsageError(f"check: {target}: no such run directory or log")
    t = resolve_target(target, read)
    if not os.path.exists(t.log_path):
        raise UsageError(f"check: {target}: no metrics.jsonl or trainer_state.json")
    findings: list[Finding] = []
    try:
        parser = parser_for(t, opts.maps)
    except InvalidRunError as exc:
        return CheckResult([Finding("invalid_log", 0, str(exc))], 0)
    torn: list[int] = []
    engines: dict[str, Rules] = {}
    last_step: int | float = parser.start_step(parser.latest_session()) or 0 if parser.mode == "v1" else 0
    try:
        for rec in iter_records(t, parser=parser, on_torn=torn.append):
            eng = engines.get(rec.session)
            if eng is None:
                eng = engines[rec.session] = Rules(opts, parser.start_step(rec.session))
            if rec.kind != "invalid":
                last_step = rec.step
            f = eng.observe(rec)
            if f is not None:
                findings.append(f)
    except InvalidRunError as exc:  # the log is not a regular file, trainer_state.json is broken, ...
        findings.append(Finding("invalid_log", last_step, str(exc)))
    return CheckResult(findings, last_step, torn[0] if torn else None)


# --- the command line -----------------------------------------------------------------------------

_FLAGS: list[tuple[str, Any, str]] = [
    # (option, type, help); the dest is the Options field
    ("--poll", float, "seconds between polls (default 5)"),
    ("--stall", float, "stall: no new record for S seconds (default 360)"),
    ("--startup-grace", float, "stall before the first record: S seconds after the watch began (default 600)"),
    ("--timeout", float, "timeout: the watch has run S seconds (default none)"),
    ("--pid", int, "the training process (default: RUN_DIR/pid if present)"),
    ("--done", str, "completion sentinel file, relative to RUN_DIR"),
    ("--metric", str, "eval metric whose chance level is 0.5 (default auroc)"),
    ("--metric-min", float, "inverted_metric below 1-X, stuck_metric below X (default 0.70)"),
    ("--metric-after-step", int, "judge the metric from step N (default 500)"),
    ("--chance-loss", float, "loss_at_chance: the loss at chance level (default off; BCE: 0.693)"),
    ("--chance-after-step", int, "(default 400)"),
    ("--chance-patience", int, "(default 3)"),
    ("--chance-tolerance", float, "(default 0.02)"),
    ("--grad-max", float, "grad_explosion above X (default 50)"),
    ("--grad-min", float, "grad_collapse below Y (default 1e-3)"),
    ("--grad-patience", int, "consecutive train records (default 3)"),
    ("--throughput-drop", float, "throughput_drop below (1-F) x baseline (default 0.25)"),
    ("--throughput-baseline-steps", int, "baseline over the session's first N steps (default 200)"),
    ("--throughput-patience", int, "(default 3)"),
    ("--rank-stall", float, "rank_stall: a rank's heartbeat S seconds behind (default 300)"),
    ("--straggler-factor", float, "straggler: window time above F x the median over ranks (default 1.5)"),
    ("--straggler-patience", int, "(default 5)"),
    ("--spike-factor", float, "loss_spike above F x the recent median (default 3)"),
    ("--spike-window", int, "(default 20)"),
    ("--spike-patience", int, "(default 2)"),
    ("--collapse-patience", int, "loss_collapse: K train records with loss exactly 0 (default 5)"),
    ("--overfit-tolerance", float, "overfitting above (1+F) x the best eval loss (default 0.10)"),
    ("--overfit-patience", int, "(default 3)"),
]


def add_arguments(p: argparse.ArgumentParser, command: str) -> None:
    """The options of `runwatch watch` (all) or `runwatch check` (the record rules and --map)."""
    if command != "launch":
        p.add_argument("target", metavar="RUN_DIR|FILE", help="a run directory, a JSONL log or a trainer_state.json")
    for flag, typ, text in _FLAGS:
        dest = flag[2:].replace("-", "_")
        if command == "check" and dest not in CHECK_OPTIONS:
            continue
        if command == "launch" and dest == "pid":
            continue
        p.add_argument(flag, type=typ, default=None, dest=dest, help=text)
    p.add_argument("--map", action="append", default=None, metavar="CANONICAL=SOURCE",
                   help="read a minimal telemetry key from another key of the log (repeatable)")
    if command != "check":
        p.add_argument("--stop-on-anomaly", action="store_true", default=None,
                       help="on an anomaly, stop the training (SIGTERM, then SIGKILL after 30 s)")
    if command != "launch":
        add_read_arguments(p)  # --format, --pattern, --run (readers)


def options_from_args(args: argparse.Namespace, run_dir: str | None, command: str) -> Options:
    names = {f.name for f in dataclasses.fields(Options)}
    given = {k: v for k, v in vars(args).items() if k in names}
    if given.get("map") is not None:
        given["map"] = tuple(given["map"])
    return load_options(run_dir, given, only=CHECK_OPTIONS if command == "check" else None)


def run_watch(args: argparse.Namespace) -> int:
    read = read_options(args)
    run_dir = resolve_target(args.target, read).run_dir
    opts = options_from_args(args, run_dir, "watch")
    v = Watcher(args.target, opts, read=read).run()
    print(v.line(), flush=True)
    return v.exit_code


def run_check(args: argparse.Namespace) -> int:
    if not os.path.exists(args.target):
        raise UsageError(f"check: {args.target}: no such run directory or log")
    read = read_options(args)
    opts = options_from_args(args, resolve_target(args.target, read).run_dir, "check")
    result = check(args.target, opts, read)
    if isinstance(result.torn_line, str):
        print(f"runwatch check: left out {result.torn_line} (not complete yet)", file=sys.stderr)
    elif result.torn_line is not None:
        print(f"runwatch check: left out the torn last line {result.torn_line} (no newline yet)", file=sys.stderr)
    if getattr(args, "json", False):
        print(json.dumps({"findings": [f.to_json() for f in result.findings], "last_step": result.last_step,
                          "torn_line": result.torn_line, "verdict": result.lines()[-1]}, indent=2, allow_nan=False))
    else:
        for line in result.lines():
            print(line)
    return result.exit_code

