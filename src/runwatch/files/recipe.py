"""What `RunLogger` accepts: the recipe, the counters a resumed session starts from, its other
arguments, each checked on construction, and a checkpoint's fields: a `ConfigError` names the argument, what it must be and
what it got. Standard library only.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from typing import Any

from ..errors import ConfigError
from .heartbeats import HeartbeatConfig


def check_recipe(recipe: object) -> dict[str, Any]:
    """A copy of `recipe` with its required keys checked and `qk_clip_threshold` set."""
    if not isinstance(recipe, dict):
        got = "None" if recipe is None else type(recipe).__name__
        raise ConfigError(
            f"RunLogger.recipe must be a dict with batch_size, seq_len and gradient_accumulation_steps, got {got}"
        )
    checked: dict[str, Any] = dict(recipe)
    for key in ("batch_size", "seq_len", "gradient_accumulation_steps"):
        if key not in checked:
            raise ConfigError(f"RunLogger.recipe.{key} must be a positive int, got none (the key is missing)")
        value = checked[key]
        if type(value) is not int or value < 1:
            raise ConfigError(f"RunLogger.recipe.{key} must be a positive int, got {value!r}")
    threshold = checked.setdefault("qk_clip_threshold", None)
    if threshold is not None and (
        type(threshold) not in (int, float) or not math.isfinite(threshold) or threshold <= 0
    ):
        raise ConfigError(f"RunLogger.recipe.qk_clip_threshold must be a positive number or None, got {threshold!r}")
    return checked


def check_start(state: object) -> dict[str, int]:
    """The counters a resumed session starts from (`resume_from`, a `state_dict()`)."""
    if not isinstance(state, dict):
        raise ConfigError(f"RunLogger.resume_from must be a dict from state_dict(), got {type(state).__name__}")
    start: dict[str, int] = {}
    for key in ("step", "tokens", "skipped"):
        value = state.get(key)
        if type(value) is not int or value < 0:
            raise ConfigError(f"RunLogger.resume_from.{key} must be an int >= 0, got {value!r}")
        start[key] = value
    return start


def check_arguments(
    window: int,
    max_window_seconds: float | None,
    optimizers: Iterable[dict[str, Any]],
    hardware: dict[str, Any] | None,
    heartbeat: HeartbeatConfig | None,
) -> None:
    """The other arguments of RunLogger, each named in its error (also when a caller passed what
    its annotations do not allow)."""
    if type(window) is not int or window < 1:
        raise ConfigError(f"RunLogger.window must be an int >= 1, got {window!r}")
    if max_window_seconds is not None and (
        type(max_window_seconds) not in (int, float) or not math.isfinite(max_window_seconds) or max_window_seconds <= 0
    ):
        raise ConfigError(
            f"RunLogger.max_window_seconds must be a finite number > 0 or None, got {max_window_seconds!r}"
        )
    for i, opt in enumerate(optimizers):
        if not isinstance(opt, dict) or not isinstance(opt.get("algorithm"), str):
            raise ConfigError(f"RunLogger.optimizers[{i}] must be a dict with a string 'algorithm', got {opt!r}")
    if heartbeat is not None and not isinstance(heartbeat, HeartbeatConfig):
        raise ConfigError(f"RunLogger.heartbeat must be a HeartbeatConfig or None, got {type(heartbeat).__name__}")
    if hardware is not None and not isinstance(hardware, dict):
        raise ConfigError(f"RunLogger.hardware must be a dict or None, got {type(hardware).__name__}")


def check_checkpoint(
    path: str | os.PathLike[str], seconds: object, bytes: object = None, verified: object = None
) -> dict[str, Any]:
    """The fields of `RunLogger.checkpoint`'s record: `path`, `seconds` (a finite number >= 0),
    `bytes` (an int >= 0) and `verified` when given."""
    try:
        value = float(seconds)  # type: ignore[arg-type]  # anything float() takes; checked below
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"RunLogger.checkpoint: seconds must be a finite number >= 0, got {seconds!r}")
    fields: dict[str, Any] = {"path": os.fspath(path), "seconds": value}
    if bytes is not None:
        if type(bytes) is not int or bytes < 0:
            raise ConfigError(f"RunLogger.checkpoint: bytes must be an int >= 0, got {bytes!r}")
        fields["bytes"] = bytes
    if verified is not None:
        fields["verified"] = bool(verified)
    return fields
