"""Schema v1 of a run directory (docs/FORMAT.md): the manifest and the records of `metrics.jsonl`.

This is the one validator of the manifest and the records; the summary, the watchdog, `status`
and the plots all check through it (`lines` reads the files themselves: regular files only,
bounded). The strict JSON it parses and writes with (`loads`, `dumps`, ...) is
`jsonio`'s, re-exported here. Standard library only.

Decisions where docs/FORMAT.md is silent (documented in docs/SCHEMA.md):
- Unknown keys in records and manifests are allowed and ignored (forward compatibility).
- `memory` values must be ints >= 0; their names are not checked.
- The manifest's `recipe` must hold all four named keys (`qk_clip_threshold` may be null).
"""

from __future__ import annotations

import json
import math
from typing import Any

from ..errors import InvalidRunError
from .jsonio import dumps as dumps
from .jsonio import json_problem as json_problem
from .jsonio import loads as loads
from .jsonio import orjson_misread as orjson_misread
from .jsonio import strict_json as strict_json
from .lines import MAX_LINE_BYTES as MAX_LINE_BYTES  # (the names below moved to lines: kept here for one release)
from .lines import iter_line_blocks as iter_line_blocks
from .lines import iter_lines as iter_lines
from .lines import open_run_file
from .lines import read_regular_file as read_regular_file
from .rundir import RunDir

SCHEMA_VERSION = 1
RECORD_EVENTS = frozenset({"train", "val", "checkpoint", "session_end"})
END_REASONS = frozenset({"normal", "nonfinite_loss", "error", "interrupted"})

# run.json grows by ~400 bytes a session; 64 MiB is ~150k resumes.
MAX_MANIFEST_BYTES = 64 * 1024 * 1024


# Floats at or beyond 2**63 in magnitude are left to the precise checks (see SessionValidator.take_window).
_BIG = 2.0**63
_MINUS_BIG = -_BIG  # a constant, not a negation (and a new float) at each use

# --- value checks ---------------------------------------------------------------------------------
# Each returns the value or raises InvalidRunError("<where>: <field> must be ..., got ...").


def _show(value: Any) -> str:
    text = json.dumps(value, allow_nan=True, default=repr) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _fail(where: str, field: str, expected: str, value: Any) -> InvalidRunError:
    return InvalidRunError(f"{where}: {field} must be {expected}, got {_show(value)}")


def _int(value: Any, where: str, field: str, minimum: int = 0) -> int:
    if type(value) is not int or value < minimum:
        expected = "an int >= 0" if minimum == 0 else f"an int >= {minimum}"
        raise _fail(where, field, expected, value)
    return value


def _number(value: object, where: str, field: str, minimum: float | None = None) -> float:
    if (type(value) is int or (type(value) is float and math.isfinite(value))) and (
        minimum is None or value >= minimum
    ):
        return value
    expected = "a finite number" if minimum is None else f"a finite number >= {minimum:g}"
    raise _fail(where, field, expected, value)


def _str(value: Any, where: str, field: str) -> str:
    if type(value) is not str:
        raise _fail(where, field, "a string", value)
    return value


def _obj(value: Any, where: str, field: str) -> dict[str, Any]:
    if type(value) is not dict:
        raise _fail(where, field, "an object", value)
    return value


def _get(obj: dict[str, Any], key: str, where: str, field: str) -> Any:
    try:
        return obj[key]
    except KeyError:
        raise InvalidRunError(f"{where}: missing {field}") from None


# --- the manifest ---------------------------------------------------------------------------------


def read_manifest(run_dir: str) -> dict[str, Any]:
    """Read and validate `run_dir/run.json`; return it."""
    where = "run.json"
    data = read_regular_file(RunDir(run_dir).manifest, where, MAX_MANIFEST_BYTES, show_path=True)
    manifest: dict[str, Any] = loads(data, where)  # validated just below
    validate_manifest(manifest, where)
    return manifest


def validate_manifest(manifest: Any, where: str = "run.json") -> None:
    """Check a manifest against docs/FORMAT.md, "run.json"; raise InvalidRunError naming the first problem."""
    _obj(manifest, where, "the manifest")
    version = _get(manifest, "schema_version", where, "schema_version")
    if type(version) is not int or version != SCHEMA_VERSION:
        raise _fail(where, "schema_version", str(SCHEMA_VERSION), version)
    _str(_get(manifest, "run_id", where, "run_id"), where, "run_id")
    sessions = _get(manifest, "sessions", where, "sessions")
    if type(sessions) is not list or not sessions:
        raise _fail(where, "sessions", "a non-empty list", sessions)
    seen: set[str] = set()
    for i, session in enumerate(sessions):
        field = f"sessions[{i}]"
        validate_session(session, where, field)
        if session["session_id"] in seen:
            raise InvalidRunError(f"{where}: {field}.session_id {session['session_id']!r} is not unique")
        seen.add(session["session_id"])


def validate_session(session: Any, where: str, field: str) -> None:
    """Check one manifest session entry."""
    _obj(session, where, field)
    _str(_get(session, "session_id", where, f"{field}.session_id"), where, f"{field}.session_id")
    start = _obj(_get(session, "start", where, f"{field}.start"), where, f"{field}.start")
    for key in ("step", "tokens", "skipped"):
        _int(_get(start, key, where, f"{field}.start.{key}"), where, f"{field}.start.{key}")
    recipe = _obj(_get(session, "recipe", where, f"{field}.recipe"), where, f"{field}.recipe")
    for key in ("batch_size", "seq_len", "gradient_accumulation_steps"):
        _int(_get(recipe, key, where, f"{field}.recipe.{key}"), where, f"{field}.recipe.{key}", minimum=1)
    threshold = _get(recipe, "qk_clip_threshold", where, f"{field}.recipe.qk_clip_threshold")
    if threshold is not None:
        _number(threshold, where, f"{field}.recipe.qk_clip_threshold")
        if threshold <= 0:
            raise _fail(where, f"{field}.recipe.qk_clip_threshold", "a positive number or null", threshold)
    optimizers = _get(session, "optimizers", where, f"{field}.optimizers")
    if type(optimizers) is not list:
        raise _fail(where, f"{field}.optimizers", "a list", optimizers)
    for j, opt in enumerate(optimizers):
        _obj(opt, where, f"{field}.optimizers[{j}]")
        _str(
            _get(opt, "algorithm", where, f"{field}.optimizers[{j}].algorithm"),
            where,
            f"{field}.optimizers[{j}].algorithm",
        )
    _obj(_get(session, "hardware", where, f"{field}.hardware"), where, f"{field}.hardware")


def window_tokens(recipe: dict[str, Any], attempted: int) -> int:
    """Tokens of `attempted` updates under `recipe` (docs/FORMAT.md, "train": the token identity)."""
    tokens: int = recipe["batch_size"] * recipe["seq_len"] * recipe["gradient_accumulation_steps"] * attempted
    return tokens


# --- records --------------------------------------------------------------------------------------

# What the summary sums of one train window (`SessionValidator.take_window`): step, updates,
# skipped, tokens, nonfinite_grad_norms, train_seconds, loss, grad_norm.max, grad_clipped_fraction,
# qk_clip (None when absent), memory (None when absent).
WindowSums = tuple[int, int, int, int, int, float, float, float, float, dict[str, Any] | None, dict[str, int] | None]


class SessionValidator:
    """Validates the records of one session in order (docs/FORMAT.md, "metrics.jsonl", and the summary's step 3).

    `check(record, where)` raises InvalidRunError on the first problem; the validator keeps the
    current step and whether the session has ended. The caller skips other sessions' records.
    """

    def __init__(self, run_id: str, session: dict[str, Any]) -> None:
        self.run_id = run_id
        self.session_id: str = session["session_id"]
        self.recipe: dict[str, Any] = session["recipe"]
        self.threshold: float | None = self.recipe.get("qk_clip_threshold")
        # take_window compares a window's qk_clip.threshold with this: a number equal to it is then
        # within (-2**63, 2**63) too. None (equal to no number) leaves any threshold to check().
        self._fast_threshold = self.threshold if self.threshold is not None and -_BIG < self.threshold < _BIG else None
        self.tokens_per_attempt = window_tokens(self.recipe, 1)
        self.start_step: int = session["start"]["step"]
        self.step = self.start_step
        self.ended = False

    def accept(self, rec: dict[str, Any]) -> bool:
        """Take `rec` if it is a valid train record that `check` would take; else return False.

        See `take_window`; call `check(rec, where)` when it returns False.
        """
        return self.take_window(rec) is not None

    def take_window(self, rec: Any) -> WindowSums | None:
        """Take `rec` if it is a train record of this session that `check` would take; else None.

        The common record of a log, checked by the same rules as `check` written inline, several
        times faster (the summary spends most of its time here). Returns what the summary sums,
        so that it need not look the fields up again: `(step, updates, skipped, tokens,
        nonfinite_grad_norms, train_seconds, loss, grad_norm.max, grad_clipped_fraction, qk_clip,
        memory)`, the last two None when absent. It never takes a record that `check` refuses; it
        may leave a valid one to `check` (another session's record, any event but train, a float
        of 2**63 or more), and it names no problem: call `check(rec, where)` when it returns None.
        """
        if self.ended:
            return None
        try:
            if rec["event"] != "train" or rec["session_id"] != self.session_id or rec["run_id"] != self.run_id:
                return None
            step, updates, skipped, attempted = rec["step"], rec["updates"], rec["skipped"], rec["attempted"]
            tokens, nonfinite = rec["tokens"], rec["nonfinite_grad_norms"]
            if not (
                type(step) is int
                and type(updates) is int
                and type(skipped) is int
                and type(attempted) is int
                and type(tokens) is int
                and type(nonfinite) is int
                and updates > 0
                and skipped >= 0
                and nonfinite >= 0
                and attempted == updates + skipped
                and step == self.step + updates
                and tokens == self.tokens_per_attempt * attempted
            ):
                return None
            # A number is a float strictly between -2**63 and 2**63 (so finite; orjson reads larger
            # integers as floats, and those are left to check()), or an int. Floats come first: most
            # fields are floats, and are compared with float constants (0.0, not 0), which Python
            # compares about twice as fast as a float with an int; ints compare the same either way.
            session, grad = rec["session"], rec["grad_norm"]
            if type(session) is not dict or type(grad) is not dict:
                return None
            v = rec["time"]
            if not ((type(v) is float or type(v) is int) and _MINUS_BIG < v < _BIG):
                return None
            v = session["elapsed_seconds"]
            if not ((type(v) is float or type(v) is int) and 0.0 <= v < _BIG):
                return None
            v = session["tokens"]
            if not (type(v) is int and v >= 0):
                return None
            v = session["tokens_per_second"]
            if not (v is None or (type(v) is float or type(v) is int) and 0.0 <= v < _BIG):
                return None
            v = session["profiling_seconds"]
            if not ((type(v) is float or type(v) is int) and 0.0 <= v < _BIG):
                return None
            seconds = rec["train_seconds"]
            if not ((type(seconds) is float or type(seconds) is int) and 0.0 < seconds < _BIG):
                return None
            loss = rec["loss"]
            if not ((type(loss) is float or type(loss) is int) and _MINUS_BIG < loss < _BIG):
                return None
            v = rec["lr"]
            if not ((type(v) is float or type(v) is int) and 0.0 <= v < _BIG):
                return None
            v = grad["mean"]
            if not ((type(v) is float or type(v) is int) and 0.0 <= v < _BIG):
                return None
            grad_max = grad["max"]
            if not ((type(grad_max) is float or type(grad_max) is int) and 0.0 <= grad_max < _BIG):
                return None
            fraction = rec["grad_clipped_fraction"]
            if not ((type(fraction) is float or type(fraction) is int) and 0.0 <= fraction <= 1.0):
                return None
            memory = rec.get("memory")
            if memory is not None:
                if type(memory) is not dict:
                    return None
                for v in memory.values():
                    if type(v) is not int or v < 0:
                        return None
            qk = rec.get("qk_clip")
            if qk is not None:
                if type(qk) is not dict:
                    return None
                v = qk["threshold"]
                observed, clipped = qk["observed_head_updates"], qk["clipped_head_updates"]
                if not (
                    (type(v) is float or type(v) is int)
                    and v == self._fast_threshold
                    and type(observed) is int
                    and type(clipped) is int
                    and 0 <= clipped <= observed
                ):
                    return None
                v = qk["max_logit"]
                if not (v is None or (type(v) is float or type(v) is int) and _MINUS_BIG < v < _BIG):
                    return None
        except (KeyError, TypeError):  # a missing key; no object where one belongs (`rec` included)
            return None
        self.step = step
        return step, updates, skipped, tokens, nonfinite, seconds, loss, grad_max, fraction, qk, memory

    @staticmethod
    def window_values(rec: dict[str, Any]) -> WindowSums:
        """What `take_window` returns, of a train record that `check` took."""
        return (
            rec["step"],
            rec["updates"],
            rec["skipped"],
            rec["tokens"],
            rec["nonfinite_grad_norms"],
            rec["train_seconds"],
            rec["loss"],
            rec["grad_norm"]["max"],
            rec["grad_clipped_fraction"],
            rec.get("qk_clip"),
            rec.get("memory"),
        )

    def check(self, rec: dict[str, Any], where: str) -> None:
        """Validate `rec` (already known to be of this session) against the session so far."""
        if not self.accept(rec):
            self._check_fields(rec, where)

    def _check_fields(self, rec: dict[str, Any], where: str) -> None:
        """`check` field by field: names the first problem."""
        if self.ended:
            raise InvalidRunError(f"{where}: record after session_end")
        run_id = _get(rec, "run_id", where, "run_id")
        if run_id != self.run_id:
            raise InvalidRunError(f"{where}: run_id {_show(run_id)} differs from the manifest's {self.run_id!r}")
        event = _get(rec, "event", where, "event")
        if type(event) is not str or event not in RECORD_EVENTS:
            raise _fail(where, "event", "one of train, val, checkpoint, session_end", event)
        step = _int(_get(rec, "step", where, "step"), where, "step")
        _number(_get(rec, "time", where, "time"), where, "time")
        session = _obj(_get(rec, "session", where, "session"), where, "session")
        _number(_get(session, "elapsed_seconds", where, "session.elapsed_seconds"), where, "session.elapsed_seconds", 0)
        _int(_get(session, "tokens", where, "session.tokens"), where, "session.tokens")
        tps = _get(session, "tokens_per_second", where, "session.tokens_per_second")
        if tps is not None:
            _number(tps, where, "session.tokens_per_second", 0)
        _number(
            _get(session, "profiling_seconds", where, "session.profiling_seconds"),
            where,
            "session.profiling_seconds",
            0,
        )
        memory = rec.get("memory")
        if memory is not None:
            for key, value in _obj(memory, where, "memory").items():
                _int(value, where, f"memory.{key}")
        if event == "train":
            self._check_train(rec, step, where)
            return
        if step != self.step:
            raise InvalidRunError(f"{where}: {event} step {step} is not the current step {self.step}")
        if event == "val":
            _number(_get(rec, "loss", where, "loss"), where, "loss")
            metrics = rec.get("metrics")
            if metrics is not None:
                for key, value in _obj(metrics, where, "metrics").items():
                    _number(value, where, f"metrics.{key}")
        elif event == "checkpoint":
            _str(_get(rec, "path", where, "path"), where, "path")
            _number(_get(rec, "seconds", where, "seconds"), where, "seconds", 0)
            if rec.get("bytes") is not None:
                _int(rec["bytes"], where, "bytes")
            if rec.get("verified") is not None and type(rec["verified"]) is not bool:
                raise _fail(where, "verified", "a bool", rec["verified"])
        else:  # session_end
            reason = _get(rec, "reason", where, "reason")
            if type(reason) is not str or reason not in END_REASONS:
                raise _fail(where, "reason", "one of normal, nonfinite_loss, error, interrupted", reason)
            error = _get(rec, "error", where, "error")
            if error is not None:
                _str(error, where, "error")
            totals = _obj(_get(rec, "totals", where, "totals"), where, "totals")
            _int(_get(totals, "tokens", where, "totals.tokens"), where, "totals.tokens")
            _int(_get(totals, "skipped", where, "totals.skipped"), where, "totals.skipped")
            self.ended = True

    def _check_train(self, rec: dict[str, Any], step: int, where: str) -> None:
        updates = _int(_get(rec, "updates", where, "updates"), where, "updates", minimum=1)
        skipped = _int(_get(rec, "skipped", where, "skipped"), where, "skipped")
        attempted = _int(_get(rec, "attempted", where, "attempted"), where, "attempted")
        if attempted != updates + skipped:
            raise InvalidRunError(f"{where}: attempted {attempted} != updates {updates} + skipped {skipped}")
        expected_step = self.step + updates
        if step != expected_step:
            raise InvalidRunError(
                f"{where}: step {step} after {self.step} with {updates} updates (expected {expected_step})"
            )
        tokens = _int(_get(rec, "tokens", where, "tokens"), where, "tokens")
        expected_tokens = self.tokens_per_attempt * attempted
        if tokens != expected_tokens:
            r = self.recipe
            raise InvalidRunError(
                f"{where}: tokens {tokens} != batch_size {r['batch_size']} * seq_len {r['seq_len']}"
                f" * gradient_accumulation_steps {r['gradient_accumulation_steps']} * attempted {attempted}"
                f" (expected {expected_tokens})"
            )
        seconds = _number(_get(rec, "train_seconds", where, "train_seconds"), where, "train_seconds")
        if seconds <= 0:
            raise _fail(where, "train_seconds", "a finite number > 0", seconds)
        _number(_get(rec, "loss", where, "loss"), where, "loss")
        _number(_get(rec, "lr", where, "lr"), where, "lr", 0)
        grad = _obj(_get(rec, "grad_norm", where, "grad_norm"), where, "grad_norm")
        _number(_get(grad, "mean", where, "grad_norm.mean"), where, "grad_norm.mean", 0)
        _number(_get(grad, "max", where, "grad_norm.max"), where, "grad_norm.max", 0)
        _int(_get(rec, "nonfinite_grad_norms", where, "nonfinite_grad_norms"), where, "nonfinite_grad_norms")
        frac = _number(
            _get(rec, "grad_clipped_fraction", where, "grad_clipped_fraction"), where, "grad_clipped_fraction", 0
        )
        if frac > 1:
            raise _fail(where, "grad_clipped_fraction", "a number in [0, 1]", frac)
        qk = rec.get("qk_clip")
        if qk is not None:
            _obj(qk, where, "qk_clip")
            threshold = _get(qk, "threshold", where, "qk_clip.threshold")
            _number(threshold, where, "qk_clip.threshold")
            if self.threshold is None or threshold != self.threshold:
                raise InvalidRunError(
                    f"{where}: qk_clip.threshold {_show(threshold)} differs from the recipe's "
                    f"qk_clip_threshold {_show(self.threshold)}"
                )
            observed = _int(
                _get(qk, "observed_head_updates", where, "qk_clip.observed_head_updates"),
                where,
                "qk_clip.observed_head_updates",
            )
            clipped = _int(
                _get(qk, "clipped_head_updates", where, "qk_clip.clipped_head_updates"),
                where,
                "qk_clip.clipped_head_updates",
            )
            if clipped > observed:
                raise InvalidRunError(
                    f"{where}: qk_clip.clipped_head_updates {clipped} > observed_head_updates {observed}"
                )
            max_logit = _get(qk, "max_logit", where, "qk_clip.max_logit")
            if max_logit is not None:
                _number(max_logit, where, "qk_clip.max_logit")
        self.step = step


# Former names, kept for one release: the record events were `EVENTS`, a window's sums `WindowValues`.
EVENTS = RECORD_EVENTS
WindowValues = WindowSums
open_regular = open_run_file  # (now lines.open_run_file)
