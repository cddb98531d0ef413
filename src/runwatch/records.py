"""One record parser for every reader: schema v1, minimal telemetry, trainer_state.json, --map.

Whatever a run wrote, readers (the watchdog, `check`, `status`, plots) see the same `Record`:

    for session in records.load_sessions("runs/a"):          # a run dir, a JSONL file, or
        for rec in session.records:                          # a Hugging Face trainer_state.json
            if rec.kind == "train":
                print(rec.step, rec.loss, rec.throughput)

- Schema v1 (a run directory with `run.json`): each record goes through `schema.SessionValidator`;
  one that fails it, or holds NaN, becomes a record of kind `invalid` carrying the message.
- Minimal telemetry (docs/WATCHDOG.md, "What is read"): `step`, `t`, `loss`, `lr`/`learning_rate`, `grad_norm`, `sps`,
  `eval_loss`, `eval_<metric>`, `FATAL`. A train record whose step does not exceed the previous
  train record's starts a new session (a relaunch). Sessions are keyed `session-1`, `session-2`, ...
- `trainer_state.json`: its `log_history` entries are minimal telemetry.
- `--map CANONICAL=SOURCE`: a mapped key is read only from SOURCE; every map reads the original record.
- TensorBoard event files, MLflow stores, CSV and text logs: `readers` turns them into minimal
  telemetry (`Target.format` names the reader; `--format`, `--pattern`, `--run` are `readers.ReadOptions`).

Standard library only (orjson is used for schema v1 when importable; same results).

Longer than 500 lines on purpose: `RecordParser` turns every dialect (schema v1, minimal
telemetry, trainer_state.json, the key maps, the readers' items) into the one `Record`; its
branches share the session and step bookkeeping.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from .errors import InvalidRunError, UsageError
from .readers import READER_FORMATS, ReadOptions, detect, open_reader, to_records
from .readers.keys import EVAL_PREFIXES
from .rundir import RunDir
from .schema import SessionValidator, loads, orjson_misread, read_manifest, read_regular_file

__all__ = [
    "Record",
    "Session",
    "Target",
    "RecordParser",
    "resolve_target",
    "parse_maps",
    "iter_records",
    "load_sessions",
    "parser_for",
    "read_trainer_state",
    "load_trainer_state",
    "MINIMAL_KEYS",
]

_orjson: ModuleType | None
try:  # optional fast path for schema v1 (orjson rejects NaN like the strict parser does)
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None

# The canonical keys of minimal telemetry (docs/WATCHDOG.md, "What is read"); `eval_<metric>` is any key starting eval_.
MINIMAL_KEYS = ("step", "t", "loss", "lr", "learning_rate", "grad_norm", "sps", "eval_loss", "FATAL")
# trainer_state.json is rewritten whole at each checkpoint; a few MB for a long run. Bound it anyway.
MAX_STATE_BYTES = 512 * 1024 * 1024


# A target that does not exist yet is a run directory unless its name ends like a log file.
FILE_SUFFIXES = (".jsonl", ".json", ".ndjson", ".log", ".txt")


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
class Target:
    """What a command was pointed at: the run directory, the log, and how to read it."""

    run_dir: str
    log_path: str
    # "jsonl" (schema v1 when run.json exists beside it, else minimal), "trainer_state", or a
    # `readers` format: "tensorboard", "mlflow", "csv", "text"
    format: str
    read: ReadOptions = ReadOptions()

    @property
    def manifest_path(self) -> str:
        return RunDir(self.run_dir).manifest

    def schema_v1(self) -> bool:
        """The log is schema v1: a `metrics.jsonl` beside a `run.json`."""
        return (
            self.format == "jsonl"
            and os.path.basename(self.log_path) == "metrics.jsonl"
            and os.path.lexists(self.manifest_path)
        )  # a broken run.json is still one: say so


def resolve_target(target: str, read: ReadOptions | None = None) -> Target:
    """A run directory, a JSONL file or a trainer_state.json → Target (the path may not exist yet).

    A directory without `metrics.jsonl` but with `trainer_state.json` is read through the latter
    (also one level down, in its latest `checkpoint-N/`). Other tools' logs (TensorBoard, MLflow,
    CSV, text) are detected by `readers.detect`, or named by `read.format`.
    """
    target = os.fspath(target)
    read = read or ReadOptions()
    # A run directory (metrics.jsonl) or a Hugging Face output directory (trainer_state.json) is read
    # as before, whatever else it holds (the HF Trainer's TensorBoard files, say), unless --format says.
    own = read.format is None and os.path.isdir(target) and _find_trainer_state(target) is not None
    found = None if own else detect(target, read)
    if found is not None:
        fmt, log, run_dir = found
        return Target(run_dir, log, fmt, read)
    if read.format == "jsonl" and os.path.isdir(target):
        return Target(target, RunDir(target).metrics, "jsonl", read)
    if read.format == "jsonl":
        return Target(os.path.dirname(os.path.abspath(target)), target, "jsonl", read)
    if not os.path.exists(target) and not target.endswith(FILE_SUFFIXES):
        target_is_dir = True  # not there yet: a run directory, unless it is named like a log file
    else:
        target_is_dir = os.path.isdir(target)
    if target_is_dir:
        log = RunDir(target).metrics
        if not os.path.exists(log):
            state = _find_trainer_state(target)
            if state is not None:
                return Target(target, state, "trainer_state")
        return Target(target, log, "jsonl")
    run_dir = os.path.dirname(os.path.abspath(target))
    if target.endswith(".json") and not target.endswith(".jsonl"):
        return Target(run_dir, target, "trainer_state")
    return Target(run_dir, target, "jsonl")


def _find_trainer_state(run_dir: str) -> str | None:
    direct = os.path.join(run_dir, "trainer_state.json")
    if os.path.isfile(direct):
        return direct
    best = None
    try:
        names = os.listdir(run_dir)
    except OSError:
        return None
    for name in names:
        if name.startswith("checkpoint-") and name[11:].isdigit():
            path = os.path.join(run_dir, name, "trainer_state.json")
            if os.path.isfile(path) and (best is None or int(name[11:]) > best[0]):
                best = (int(name[11:]), path)
    return best[1] if best else None


def parse_maps(items: list[str] | tuple[str, ...] | None) -> dict[str, str]:
    """`["step=iter", "loss=train/loss"]` → {"step": "iter", "loss": "train/loss"}; UsageError if bad."""
    maps: dict[str, str] = {}
    for item in items or ():
        if not isinstance(item, str) or "=" not in item:
            raise UsageError(f"watch.map must be CANONICAL=SOURCE, got {item!r}")
        canon, source = item.split("=", 1)
        if not (canon in MINIMAL_KEYS or (canon.startswith("eval_") and len(canon) > 5)):
            raise UsageError(
                f"watch.map: {canon!r} is not a minimal telemetry key "
                f"(expected one of {', '.join(MINIMAL_KEYS)} or eval_<metric>)"
            )
        if not source:
            raise UsageError(f"watch.map: empty SOURCE in {item!r}")
        if canon in maps:
            raise UsageError(f"watch.map: {canon!r} mapped twice")
        maps[canon] = source
    return maps


def _is_number(v: object) -> bool:
    t = type(v)
    return t is float or t is int


def _fmt(v: object) -> str:
    text = json.dumps(v, default=repr) if not isinstance(v, str) else repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


class RecordParser:
    """Turns raw lines (or trainer_state entries) into Records, keeping the per-session state.

    mode "v1" needs the manifest (`manifest=` or `refresh=`, a callable returning the current one
    when a record names a session it does not know); mode "minimal" reads minimal telemetry.
    `apply_maps=False`: the records come from a `readers` reader, which applied `maps` already.
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
    ) -> None:
        if mode not in ("v1", "minimal"):
            raise ValueError(f"RecordParser.mode must be 'v1' or 'minimal', got {mode!r}")
        if mode == "v1" and maps:
            raise UsageError("watch.map applies to minimal telemetry and trainer_state.json, not to a schema-v1 run")
        self.mode = mode
        self.name = name
        # A train record at the previous one's step continues the session (TensorBoard, MLflow: their
        # sessions are files and runs, and a live watch may apply a step before its last value came).
        self.same_step_continues = same_step_continues
        self.maps = maps or {}
        self.apply_maps = apply_maps
        self.refresh = refresh
        self.manifest = manifest
        self._validators: dict[str, SessionValidator] = {}
        self._entries: dict[str, dict[str, Any]] = {}
        self.session: str | None = None  # the session of the last record (invalid lines join it)
        self._last_train_step: float | None = None
        self._relaunches = 0
        self._finite_grad_session: str | None = None  # the minimal session that logged a finite grad_norm
        self.last_step: int | float = 0  # step of the last parsed record (invalid lines take it)
        # A log without steps (docs/FORMATS.md): None until decided, then "step", "epoch" or "record".
        self.step_by: str | None = None
        self._counted = 0  # records numbered so far, and the last epoch seen (stepping by them)
        self._epoch: int | float = 0
        # The key read as the loss when the log has no `loss` (None: not decided, "": none).
        self.loss_key: str | None = None
        self.max_steps_hint: int | None = None  # trainer_state.json's max_steps
        self.notes: list[str] = []  # things said once on stderr by the command (drained by it)
        if manifest is not None:
            self.set_manifest(manifest)

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
            "last_step": self.last_step,
            "finite_grad_session": self._finite_grad_session,
            "step_by": self.step_by,
            "counted": self._counted,
            "epoch": self._epoch,
            "loss_key": self.loss_key,
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
        self._finite_grad_session = state.get("finite_grad_session")
        self.last_step = state["last_step"]
        self.step_by = state.get("step_by")
        self._counted = int(state.get("counted") or 0)
        self._epoch = state.get("epoch") or 0
        self.loss_key = state.get("loss_key")
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
        """The next record starts a new session (minimal telemetry: a new event file, a new run)."""
        if self.mode == "minimal" and self.session is not None:
            self._relaunches += 1
            self.session = f"session-{self._relaunches}"
            self._last_train_step = None

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
        if step is None and "step" not in obj and self.step_by != "step":
            step = self._counted_step(obj)  # a log without steps: by epoch, else by record number
        elif self.step_by != "step":
            self.step_by = "step"
        if step is None or not _is_number(step) or not math.isfinite(step) or step < 0:
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
            elif not _is_number(loss):
                return self.invalid(where, f"{where}: loss must be a number, got {_fmt(loss)}", step)
        eval_loss = obj.get("eval_loss", _MISSING)
        if eval_loss is not _MISSING:
            if eval_loss is None:
                eval_loss = math.nan
            elif not _is_number(eval_loss):
                return self.invalid(where, f"{where}: eval_loss must be a number, got {_fmt(eval_loss)}", step)
        else:
            eval_loss = None
        metrics = None
        for key, value in obj.items():
            if key.startswith("eval_") and key != "eval_loss" and _is_number(value):
                if metrics is None:
                    metrics = {}
                metrics[key[5:]] = value
        t = obj.get("t")
        t = t if _is_number(t) else None
        if "FATAL" in obj:
            self.last_step = step
            return Record("fatal", self._minimal_session(None), step, where, t, error=str(obj["FATAL"]), raw=obj)
        if loss is _MISSING:
            self.last_step = step
            kind = "eval" if eval_loss is not None or metrics else "other"
            return Record(
                kind, self._minimal_session(None), step, where, t, eval_loss=eval_loss, metrics=metrics, raw=obj
            )
        lr = obj.get("lr", obj.get("learning_rate"))
        grad = obj.get("grad_norm")
        grad_mean = nonfinite = None
        session = self._minimal_session(step)
        if _is_number(grad):
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
            lr if _is_number(lr) else None,
            grad_mean,
            grad_mean,
            nonfinite or 0,
            sps if _is_number(sps) else None,
            eval_loss=eval_loss,
            metrics=metrics,
            raw=obj,
        )

    def _counted_step(self, obj: dict[str, Any]) -> int | float:
        """The step of a record of a log that has none: its epoch when the log has epochs (the step
        of the last record that had one), else its record number (1, 2, ...)."""
        self._counted += 1
        epoch = obj.get("epoch")
        good = (type(epoch) is int or type(epoch) is float) and math.isfinite(epoch) and epoch >= 0
        if self.step_by is None:
            self.step_by = "epoch" if good else "record"
            by = "its epoch column" if good else "record number"
            self.notes.append(f"{self.name} has no step column or field: stepping by {by}")
        if self.step_by == "epoch":
            if good and epoch is not None:
                self._epoch = int(epoch) if type(epoch) is float and epoch.is_integer() else epoch
            return self._epoch
        return self._counted

    def _pick_loss_key(self, obj: dict[str, Any]) -> None:
        """No `loss` key: when exactly one train key contains `loss` (any case: CatBoost's
        `Logloss`, `train/box_loss`), it is the loss for the rest of the log; several: none is."""
        if "loss" in self.maps:
            self.loss_key = ""
            return
        found = [k for k in obj if "loss" in k.lower() and not k.startswith(_EVAL_KEY_PREFIXES)]
        if len(found) == 1:
            self.loss_key = found[0]
            self.notes.append(f"{self.name} has no loss key: reading the train loss from {found[0]!r}")
        elif found:
            self.loss_key = ""

    def max_steps(self, key: str | None) -> int | None:
        """The session's `max_steps`: run.json's recipe (schema v1), trainer_state.json's; None unknown."""
        entry = self._entries.get(key) if key else None
        if entry is not None:
            n = (entry.get("recipe") or {}).get("max_steps")
            return n if type(n) is int and n > 0 else None
        return self.max_steps_hint

    def _minimal_session(self, train_step: int | float | None) -> str:
        if self.session is None:
            self._relaunches = 1
            self.session = "session-1"
        if train_step is not None:
            last = self._last_train_step
            # stepping by epoch, several train records of one epoch are one session
            same = self.step_by == "epoch" or self.same_step_continues
            if last is not None and (train_step < last or (train_step == last and not same)):
                self._relaunches += 1
                self.session = f"session-{self._relaunches}"
            self._last_train_step = train_step
        return self.session


_MISSING = object()
# Keys that hold eval values (readers.keys: `eval/`, `val/`, `val_`, `validation/`), never the train loss.
_EVAL_KEY_PREFIXES = ("eval_", *EVAL_PREFIXES)


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    return {bool: "bool", int: "number", float: "number", str: "string", list: "array"}.get(
        type(value), type(value).__name__
    )


# --- whole-target reading -------------------------------------------------------------------------


def read_trainer_state(path: str) -> list[Any]:
    """The `log_history` list of a Hugging Face trainer_state.json (NaN tokens allowed)."""
    return load_trainer_state(path)[0]


def load_trainer_state(path: str) -> tuple[list[Any], int | None]:
    """The `log_history` list of a Hugging Face trainer_state.json and its `max_steps` (None when
    absent or not a positive int)."""
    name = os.path.basename(path)
    data = read_regular_file(path, name, MAX_STATE_BYTES)
    state = loads(data, name, strict=False)
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise InvalidRunError(f"{name}: log_history must be a list, got {_json_type(history)}")
    max_steps = state.get("max_steps")
    return history, max_steps if type(max_steps) is int and max_steps > 0 else None


def parser_for(target: Target, maps: dict[str, str] | None = None) -> RecordParser:
    """The RecordParser for `target` as it stands (reads run.json for a schema-v1 run)."""
    if target.format == "jsonl" and target.schema_v1():
        return RecordParser("v1", manifest=read_manifest(target.run_dir), maps=maps)
    name = os.path.basename(os.path.normpath(target.log_path))
    if target.format in READER_FORMATS:  # the reader maps the keys
        same = target.format in ("tensorboard", "mlflow")
        return RecordParser("minimal", maps=maps, name=name, apply_maps=False, same_step_continues=same)
    return RecordParser("minimal", maps=maps, name=name)


def iter_records(
    target: str | Target,
    *,
    maps: dict[str, str] | None = None,
    on_torn: Callable[[int | str], None] | None = None,
    parser: RecordParser | None = None,
) -> Iterator[Record]:
    """Every record of `target` in log order (invalid lines as kind `invalid`).

    A torn final line (no newline yet) is left out; `on_torn(lineno)` is told about it (other
    formats: `on_torn(where)`, a str). `parser` (from `parser_for`) lets the caller see the sessions'
    start steps.
    """
    t = target if isinstance(target, Target) else resolve_target(target)
    if parser is None:
        parser = parser_for(t, maps)
    if t.format in READER_FORMATS:
        yield from _iter_reader(t, parser, on_torn)
        return
    if t.format == "trainer_state":
        name = os.path.basename(t.log_path)
        history, parser.max_steps_hint = load_trainer_state(t.log_path)
        for i, entry in enumerate(history):
            rec = parser.parse_object(entry, f"{name}:log_history[{i}]")
            if rec is not None:
                yield rec
        return
    from .follow import LogFollower

    name = os.path.basename(t.log_path)
    if not os.path.exists(t.log_path):
        raise InvalidRunError(f"{name}: missing ({t.log_path})")
    with LogFollower(t.log_path) as follower:
        while True:
            batch = follower.poll()
            if batch.too_long is not None:
                where = f"{name}:{batch.too_long}"
                yield parser.invalid(where, f"{where}: line longer than {follower.max_line_bytes} bytes")
            for lineno, raw in batch.lines:
                rec = parser.parse_line(lineno, raw)
                if rec is not None:
                    yield rec
            if not batch.more:
                break
        if follower.pending_bytes() and on_torn is not None:
            on_torn(follower.lineno + 1)


def _iter_reader(t: Target, parser: RecordParser, on_torn: Callable[[int | str], None] | None) -> Iterator[Record]:
    from .readers.mlflowstore import wait_unlocked

    reader = open_reader(t.format, t.log_path, t.read, parser.maps)
    try:
        while True:
            chunk = wait_unlocked(reader, reader.poll())
            if not chunk.exists:
                raise InvalidRunError(f"{os.path.basename(t.log_path)}: missing ({t.log_path})")
            yield from to_records(parser, chunk.items)
            if not chunk.more:
                break
        yield from to_records(parser, reader.finish())
        torn = reader.torn()
        if torn is not None and on_torn is not None:
            on_torn(torn)
    finally:
        reader.close()


def load_sessions(target: str | Target, *, maps: dict[str, str] | None = None) -> list[Session]:
    """The records of `target` grouped by session, sessions in order of first appearance."""
    t = target if isinstance(target, Target) else resolve_target(target)
    sessions: dict[str, Session] = {}
    manifest = read_manifest(t.run_dir) if t.format == "jsonl" and t.schema_v1() else None
    for rec in iter_records(t, maps=maps):
        s = sessions.get(rec.session)
        if s is None:
            entry = None
            if manifest is not None:
                entry = next((e for e in manifest["sessions"] if e["session_id"] == rec.session), None)
            start = entry["start"]["step"] if entry else (rec.step if rec.kind == "train" else 0)
            s = sessions[rec.session] = Session(rec.session, start, manifest_entry=entry)
        s.records.append(rec)
    return list(sessions.values())
