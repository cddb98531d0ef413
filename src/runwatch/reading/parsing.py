"""One record parser for every format: schema v1, minimal telemetry, trainer_state.json, --map.

Whatever a run wrote, every reader sees the same `Record`; `RecordParser` turns each dialect into
it, keeping the per-session state:

- Schema v1 (a run directory with `run.json`): each record goes through `schema.SessionValidator`;
  one that fails it, or holds NaN, becomes a record of kind `invalid` carrying the message.
- Minimal telemetry (docs/WATCHDOG.md, "What is read"): `step`, `t`, `loss`, `lr`/`learning_rate`, `grad_norm`, `sps`,
  `eval_loss`, `eval_<metric>`, `FATAL`. A train record whose step does not exceed the previous
  train record's starts a new session (a relaunch). Sessions are keyed `session-1`, `session-2`, ...
  (how its steps, sessions and loss key are told: `minimal.MinimalSteps`).
- `trainer_state.json`: its `log_history` entries are minimal telemetry.
- `--map CANONICAL=SOURCE`: a mapped key is read only from SOURCE; every map reads the original record.
- TensorBoard event files, MLflow stores, CSV and text logs: their `readers` give minimal telemetry.

**The dialect is answered here, once.** A caller asks the parser the facts it needs, which hold
for every dialect, and never which dialect the log is: `manifest` (run.json, None when the log
has none), `start_step(session)` (None when the log does not say where a session started),
`entry(session)` (the session's run.json entry, None when none), `max_steps(session)`,
`sessions_by` ("manifest" or "records"), `windows` (a train record covers a window of updates
and carries the logger's fields), `throughput` (what a train record's `throughput` counts, its
unit and its column: `ThroughputKind`) and `record_times` (a record's time says when it was
logged). `source.RecordSource` hands `sessions_by` on (None before the log is open).

Opening, following and keeping the position of a log is `source.RecordSource`'s. Standard library
only (orjson is used for schema v1 when importable; same results).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from ..errors import InvalidRunError, UsageError
from ..files import SessionValidator, loads, orjson_misread
from .minimal import MINIMAL_KEYS as MINIMAL_KEYS
from .minimal import MinimalSteps, is_number
from .minimal import parse_maps as parse_maps

_orjson: ModuleType | None
try:  # optional fast path for schema v1 (orjson rejects NaN like the strict parser does)
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None


@dataclass(slots=True)
class Record:
    """One normalized record.

    kind: `train`, `eval`, `checkpoint`, `end`, `fatal`, `invalid` or `other`. A minimal train
    record may also carry eval values (`eval_loss`, `metrics`): rules look at both parts.
    Losses of minimal telemetry may be NaN/inf (null is read as NaN); schema v1 ones never are.
    """

    kind: str
    session: str
    step: int | float
    where: str = ""
    time: float | None = None
    loss: float | None = None
    lr: float | None = None
    grad_mean: float | None = None  # None: no finite norm in the record
    grad_max: float | None = None
    nonfinite_grads: int = 0
    throughput: float | None = None  # tokens (or samples) per second of training time
    tokens: int | None = None
    eval_loss: float | None = None
    metrics: dict[str, float] | None = None
    reason: str | None = None  # session_end reason
    error: str | None = None  # session_end error, FATAL text, or the invalid_log message
    raw: dict[str, Any] | None = field(default=None, repr=False)
    seconds: float | None = None  # training seconds the record covers (schema v1's train_seconds)

    @property
    def has_eval(self) -> bool:
        """The record carries eval values (a val record, or minimal eval keys)."""
        return self.eval_loss is not None or bool(self.metrics) or self.kind == "eval"


@dataclass(slots=True)
class Session:
    """The records of one session, in log order."""

    key: str
    start_step: int | float  # run.json's `start.step`; else the first record's step (minimal telemetry)
    records: list[Record] = field(default_factory=list)
    manifest_entry: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ThroughputKind:
    """What a train Record's `throughput` counts a second, and how reports name it."""

    counts: str  # "tokens" (seq_len known: run.json's recipe) or "samples" (the log's own `sps`)
    unit: str  # a chart's label: "tokens/s of training time", "the log's sps"
    column: str  # the CSV column and the run page's series: "tokens_per_second", "samples_per_second"


# Schema v1: a window's `tokens` over its `train_seconds` (a session whose run.json recipe says
# `"tokens": "samples"` counted samples: the Hugging Face callback without seq_len).
TOKENS = ThroughputKind("tokens", "tokens/s of training time", "tokens_per_second")
# Any other log: its own `sps` (samples a second; a text log's iterations a second, docs/FORMATS.md).
SAMPLES = ThroughputKind("samples", "the log's sps", "samples_per_second")


def _fmt(v: object) -> str:
    text = json.dumps(v, default=repr) if not isinstance(v, str) else repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


class RecordParser(MinimalSteps):
    """Turns raw lines (or trainer_state entries) into Records, keeping the per-session state.

    mode "v1" needs the manifest (`manifest=` or `refresh=`, a callable returning the current one
    when a record names a session it does not know); mode "minimal" reads minimal telemetry.
    `apply_maps=False`: the records come from a `readers` reader, which applied `maps` already.
    `record_times`: the log's times are its own (a reader of another tool's log).

    The mode is this module's and `source`'s business; a caller asks the facts that hold for
    every dialect (`manifest`, `start_step`, `entry`, `max_steps`, `latest_session`,
    `sessions_by`, `windows`, `throughput`, `record_times`), so that

        parser.mode == "v1"                   → parser.sessions_by == "manifest" (sessions, their
                                                 ends and heartbeats are run.json's), or
                                                 parser.windows (raw `updates`, `memory`, ...), or
                                                 parser.throughput.counts == "tokens"
        parser.mode == "minimal"              → parser.sessions_by == "records"
        parser.manifest if v1 else None       → parser.manifest
        parser.start_step(s) if v1 else None  → parser.start_step(s)
        parser.entry(s) if v1 else None       → parser.entry(s)
    """

    def __init__(
        self,
        mode: str,
        *,
        manifest: dict[str, Any] | None = None,
        maps: dict[str, str] | None = None,
        refresh: Callable[[], dict[str, Any] | None] | None = None,
        name: str = "metrics.jsonl",
        apply_maps: bool = True,
        same_step_continues: bool = False,
        record_times: bool = False,
    ) -> None:
        if mode not in ("v1", "minimal"):
            raise ValueError(f"RecordParser.mode must be 'v1' or 'minimal', got {mode!r}")
        if mode == "v1" and maps:
            raise UsageError("watch.map applies to minimal telemetry and trainer_state.json, not to a schema-v1 run")
        super().__init__(name, maps or {}, same_step_continues)
        self.mode = mode
        self.apply_maps = apply_maps
        self.refresh = refresh
        self.manifest = manifest  # run.json as last read; None: the log has none
        self._record_times = record_times
        self._validators: dict[str, SessionValidator] = {}
        self._entries: dict[str, dict[str, Any]] = {}
        self._finite_grad_session: str | None = None  # the minimal session that logged a finite grad_norm
        self.max_steps_hint: int | None = None  # trainer_state.json's max_steps
        if manifest is not None:
            self.set_manifest(manifest)

    # --- what the log tells, whatever its dialect -------------------------------------------

    @property
    def sessions_by(self) -> str:
        """How the log's sessions are told apart. "manifest": run.json names each session, by the
        writer's own id, before its records come (a session a later one replaced is known while
        its records are still read; a session ends in an end record; its heartbeat is kept under
        its id). "records": a session starts where the records show one (a train step that goes
        back, a new event file or MLflow run), keyed `session-1`, `session-2`, ..."""
        return "manifest" if self.mode == "v1" else "records"

    @property
    def windows(self) -> bool:
        """A train record covers a window of updates, and its `raw` holds the logger's fields:
        `updates`, `attempted`, `train_seconds`, `tokens`, `time`, and the optional `memory`,
        `gpus` and `session` (its running `tokens_per_second`). False: a record is one logged
        step and its `raw` the log's own keys, which mean nothing of the kind."""
        return self.mode == "v1"

    @property
    def throughput(self) -> ThroughputKind:
        """What a train record's `throughput` counts: TOKENS (a window's tokens over its training
        seconds) or SAMPLES (the log's own `sps`)."""
        return TOKENS if self.mode == "v1" else SAMPLES

    @property
    def record_times(self) -> bool:
        """A record's `time` says when it was logged, so a record's age is counted from it:
        schema v1's `time`, a TensorBoard or MLflow value's own time, a CSV's or a text log's time
        column (when the record has one). False: minimal telemetry's `t` in a JSON-lines log or
        trainer_state.json, which may count from anything (the log's mtime says instead)."""
        return self.mode == "v1" or self._record_times

    # --- sessions -----------------------------------------------------------------------------

    def set_manifest(self, manifest: dict[str, Any]) -> None:
        """Take a (re-read) manifest: sessions it adds become known."""
        self.manifest = manifest
        for entry in manifest["sessions"]:
            sid = entry["session_id"]
            if sid not in self._entries:
                self._entries[sid] = entry
                self._validators[sid] = SessionValidator(manifest["run_id"], entry)

    def state_dict(self) -> dict[str, Any]:
        """Where the parser is, as plain JSON: the current session, the relaunch count (minimal
        telemetry) and each schema-v1 session's validated step (the manifest is read anew)."""
        return {
            "mode": self.mode,
            "session": self.session,
            "last_train_step": self._last_train_step,
            "relaunches": self._relaunches,
            "new_session": self._new_session,
            "last_step": self.last_step,
            "finite_grad_session": self._finite_grad_session,
            "step_by": self.step_by,
            "counted": self._counted,
            "epoch": self._epoch,
            "loss_key": self.loss_key,
            "step_key": self.step_key,
            "recent": [list(x) for x in self._recent],
            "validators": {
                sid: {"step": v.step, "ended": v.ended}
                for sid, v in self._validators.items()
                if v.step != v.start_step or v.ended
            },
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from `state_dict()` (a v1 parser needs its manifest set first)."""
        if state.get("mode") != self.mode:
            raise ValueError(f"RecordParser state is for mode {state.get('mode')!r}, not {self.mode!r}")
        self.session = state["session"]
        self._last_train_step = state["last_train_step"]
        self._relaunches = int(state["relaunches"])
        self._new_session = bool(state.get("new_session"))
        self._finite_grad_session = state.get("finite_grad_session")
        self.last_step = state["last_step"]
        self.step_by = state.get("step_by")
        self._counted = int(state.get("counted") or 0)
        self._epoch = state.get("epoch") or 0
        self.loss_key = state.get("loss_key")
        self.step_key = state.get("step_key")
        self._recent = [(x[0], x[1]) for x in state.get("recent") or []]
        for sid, v in state["validators"].items():
            validator = self._validators.get(sid)
            if validator is not None:
                validator.step, validator.ended = v["step"], bool(v["ended"])

    def latest_session(self) -> str | None:
        """The latest session: run.json's last entry (v1), or the last relaunch seen (minimal)."""
        if self.mode == "v1":
            return self.manifest["sessions"][-1]["session_id"] if self.manifest else None
        return self.session or "session-1"

    def start_step(self, key: str | None) -> int | None:
        """The step a session resumed from: run.json's `start.step` (v1); None when unknown
        (minimal telemetry: rules then take the step of the session's first train record)."""
        entry = self._entries.get(key) if key else None
        return entry["start"]["step"] if entry else None

    def entry(self, key: str) -> dict[str, Any] | None:
        return self._entries.get(key)

    # --- parsing ------------------------------------------------------------------------------

    def new_session(self) -> None:
        """The next record with values (a loss, eval values, FATAL) starts a new session (minimal
        telemetry: a new event file, a new run). Records of no kind before it (a test metric or a
        hyperparameter at step 0 in a file of their own) stay in the session before: they neither
        end it nor move the step it reached back."""
        if self.mode == "minimal" and self.session is not None:
            self._new_session = True

    def invalid(self, where: str, message: str, step: int | float | None = None) -> Record:
        """A record of kind `invalid` in the current session."""
        session = self.session or self.latest_session() or "session-1"
        if step is None:
            step = self.last_step
        return Record("invalid", session, step, where, error=message)

    def parse_line(self, lineno: int, raw: bytes) -> Record | None:
        """One complete line (without its newline) → a Record, or None for a blank line."""
        where = f"{self.name}:{lineno}"
        if self.mode == "v1":
            return self._v1(raw, where)
        if not raw.strip():
            return None
        try:
            # Minimal telemetry may hold NaN/Infinity tokens (Python's json writes them): they are
            # findings (`nonfinite_loss`), not parse errors.
            obj = loads(raw, where, strict=False)
        except InvalidRunError as exc:
            return self.invalid(where, str(exc))
        return self.parse_object(obj, where)

    def _v1(self, raw: bytes, where: str) -> Record:
        try:
            if _orjson is not None:
                try:
                    rec = _orjson.loads(raw)
                except ValueError:
                    rec = loads(raw, where)  # the standard library names the error
                else:
                    if orjson_misread(raw, rec):
                        rec = loads(raw, where)
            else:
                rec = loads(raw, where)
        except InvalidRunError as exc:
            return self.invalid(where, str(exc))
        if type(rec) is not dict:
            return self.invalid(where, f"{where}: a record must be a JSON object, got {_json_type(rec)}")
        sid = rec.get("session_id")
        if type(sid) is not str:
            return self.invalid(where, f"{where}: session_id must be a string, got {_fmt(sid)}")
        validator = self._validators.get(sid)
        if validator is None and self.refresh is not None:
            manifest = self.refresh()
            if manifest is not None:
                self.set_manifest(manifest)
            validator = self._validators.get(sid)
        if validator is None:
            return self.invalid(where, f"{where}: session_id {sid!r} is not in run.json")
        self.session = sid
        try:
            validator.check(rec, where)
        except InvalidRunError as exc:
            step = rec.get("step")
            return self.invalid(where, str(exc), step if type(step) is int else None)
        return self._from_v1(rec, sid, where)

    def parse_unchecked(self, raw: bytes, where: str = "") -> Record | None:
        """A schema-v1 line without the session's continuity checks (reading a log's tail, where
        the records before are unknown); None when it is not a readable record."""
        try:
            rec = loads(raw, where)
            if type(rec) is not dict or type(rec.get("session_id")) is not str:
                return None
            return self._from_v1(rec, rec["session_id"], where)
        except (InvalidRunError, KeyError, TypeError, ZeroDivisionError):
            return None

    def _from_v1(self, rec: dict[str, Any], sid: str, where: str) -> Record:
        event = rec["event"]
        step = rec["step"]
        self.last_step = step
        if event == "train":
            grad = rec["grad_norm"]
            nonfinite = rec["nonfinite_grad_norms"]
            no_norm = nonfinite >= rec["attempted"]  # every norm non-finite: mean/max are placeholders
            return Record(
                "train",
                sid,
                step,
                where,
                rec["time"],
                rec["loss"],
                rec["lr"],
                None if no_norm else grad["mean"],
                None if no_norm else grad["max"],
                nonfinite,
                rec["tokens"] / rec["train_seconds"],
                rec["tokens"],
                raw=rec,
                seconds=rec["train_seconds"],
            )
        if event == "val":
            return Record(
                "eval", sid, step, where, rec["time"], eval_loss=rec["loss"], metrics=rec.get("metrics") or {}, raw=rec
            )
        if event == "checkpoint":
            return Record("checkpoint", sid, step, where, rec["time"], raw=rec)
        return Record("end", sid, step, where, rec["time"], reason=rec["reason"], error=rec["error"], raw=rec)

    def parse_object(self, obj: Any, where: str) -> Record | None:
        """One minimal-telemetry object (a JSONL line's or a log_history entry) → a Record."""
        if type(obj) is not dict:
            return self.invalid(where, f"{where}: a record must be a JSON object, got {_json_type(obj)}")
        if self.maps and self.apply_maps:
            view = dict(obj)
            for canon in self.maps:
                view.pop(canon, None)
            for canon, source in self.maps.items():
                if source in obj:
                    view[canon] = obj[source]
            obj = view
        step = obj.get("step")
        if step is None and "step" not in obj and self.step_key != "":
            step = self._keyed_step(obj)  # an integer step under another name (`current_steps`, `iter`)
        if step is None and "step" not in obj and self.step_by != "step" and not self.step_key:
            step = self._counted_step(obj)  # a log without steps: by epoch, else by record number
        elif self.step_by != "step":
            self.step_by = "step"
        if step is None or not is_number(step) or not math.isfinite(step) or step < 0:
            what = "missing step" if "step" not in obj else f"step must be a number >= 0, got {_fmt(step)}"
            return self.invalid(where, f"{where}: {what}")
        if type(step) is float and step.is_integer():
            step = int(step)
        if "loss" not in obj and self.loss_key != "":
            if self.loss_key is None:
                self._pick_loss_key(obj)
            key = self.loss_key
            if key and key in obj:
                obj = dict(obj)
                obj["loss"] = obj[key]
        elif self.loss_key is None:
            self.loss_key = ""  # the log names its loss: never guess one
        loss = obj.get("loss", _MISSING)
        if loss is not _MISSING:
            if loss is None:
                loss = math.nan
            elif not is_number(loss):
                return self.invalid(where, f"{where}: loss must be a number, got {_fmt(loss)}", step)
        eval_loss = obj.get("eval_loss", _MISSING)
        if eval_loss is not _MISSING:
            if eval_loss is None:
                eval_loss = math.nan
            elif not is_number(eval_loss):
                return self.invalid(where, f"{where}: eval_loss must be a number, got {_fmt(eval_loss)}", step)
        else:
            eval_loss = None
        metrics = None
        for key, value in obj.items():
            if key.startswith("eval_") and key != "eval_loss" and is_number(value):
                if metrics is None:
                    metrics = {}
                metrics[key[5:]] = value
        t = obj.get("t")
        t = t if is_number(t) else None
        if "FATAL" in obj:
            self.last_step = step
            return Record("fatal", self._minimal_session(None), step, where, t, error=str(obj["FATAL"]), raw=obj)
        if loss is _MISSING and eval_loss is None and not metrics and "ckpt" in obj:
            # a line naming a saved checkpoint (a text log's `ckpt` group): at the latest step
            self.last_step = step
            raw = {**obj, "path": str(obj["ckpt"])}
            return Record("checkpoint", self._minimal_session(None, False), step, where, t, raw=raw)
        if loss is _MISSING:
            self.last_step = step
            kind = "eval" if eval_loss is not None or metrics else "other"
            session = self._minimal_session(None, kind == "eval")
            return Record(kind, session, step, where, t, eval_loss=eval_loss, metrics=metrics, raw=obj)
        lr = obj.get("lr", obj.get("learning_rate"))
        grad = obj.get("grad_norm")
        grad_mean = nonfinite = None
        session = self._minimal_session(step, loss=loss)
        if is_number(grad):
            if math.isfinite(grad):
                grad_mean = grad
                self._finite_grad_session = session
            elif self._finite_grad_session == session or loss == 0:
                nonfinite = 1
            # else: NaN in every train record of the session so far is a norm that was not logged
            # (a callback writing NaN when the trainer reports none), not a non-finite one. A loss of
            # exactly 0 beside it stays a finding: how the HF Trainer logs a NaN loss.
        sps = obj.get("sps")
        self.last_step = step
        return Record(
            "train",
            session,
            step,
            where,
            t,
            loss,
            lr if is_number(lr) else None,
            grad_mean,
            grad_mean,
            nonfinite or 0,
            sps if is_number(sps) else None,
            eval_loss=eval_loss,
            metrics=metrics,
            raw=obj,
        )

    def max_steps(self, key: str | None) -> int | None:
        """The session's `max_steps`: run.json's recipe (schema v1), trainer_state.json's; None unknown."""
        entry = self._entries.get(key) if key else None
        if entry is not None:
            n = (entry.get("recipe") or {}).get("max_steps")
            return n if type(n) is int and n > 0 else None
        return self.max_steps_hint


_MISSING = object()


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    return {bool: "bool", int: "number", float: "number", str: "string", list: "array"}.get(
        type(value), type(value).__name__
    )
