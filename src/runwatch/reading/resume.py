"""Where a training script resumes from: `runwatch.resume_checkpoint()`.

    r = runwatch.resume_checkpoint(default=None)
    if r.path:
        state = torch.load(r.path)                       # resume
    for step in range(start, max_steps):
        batch = next(data)
        if r.skip and step + 1 in r.skip:                # RUNWATCH_SKIP_STEPS: leave these batches out
            continue
        ...

`runwatch supervise` rolls a diverged run back by relaunching it with `RUNWATCH_RESUME_FROM`
(the checkpoint), `RUNWATCH_ROLLBACK` (1, 2, ...) and `RUNWATCH_SKIP_STEPS=<a>-<b>` (the steps
whose batches led into the trouble) in its environment. Without them, the path is the run's
latest checkpoint event that was verified (or, failing that, whose file still exists) on the path
to its latest session, else `default`. Standard library only.
"""

from __future__ import annotations

import os
import warnings
from typing import NamedTuple

from ..errors import ConfigError, InvalidRunError
from ..files import ENV_RESUME_FROM, ENV_ROLLBACK, ENV_RUN_DIR, ENV_SKIP_STEPS, RunDir
from ..files import RESUME_ENV as RESUME_ENV


class Resume(NamedTuple):
    """What to resume from: the checkpoint path (None: start afresh), the steps whose batches to
    skip (1-based update numbers, None: none), and which rollback this is (0: not a rollback)."""

    path: str | None
    skip: range | None
    rollback: int


def parse_skip_steps(text: str | None) -> range | None:
    """`"201-230"` → range(201, 231); None or "" → None; ConfigError when malformed."""
    if not text:
        return None
    a, dash, b = text.strip().partition("-")
    if not (dash and a.isdigit() and b.isdigit() and 1 <= int(a) <= int(b)):
        raise ConfigError(f"RUNWATCH_SKIP_STEPS must be <a>-<b> with 1 <= a <= b, got {text!r}")
    return range(int(a), int(b) + 1)


def _rollback(text: str | None) -> int:
    if not text:
        return 0
    if not text.isdigit():
        raise ConfigError(f"RUNWATCH_ROLLBACK must be an int >= 0, got {text!r}")
    return int(text)


def resume_checkpoint(default: str | None = None, run_dir: str | os.PathLike[str] | None = None) -> Resume:
    """The checkpoint to resume from and the steps to skip (see the module docstring).

    `run_dir` defaults to `RUNWATCH_RUN_DIR` (set by `runwatch launch` and `supervise`).
    """
    env = os.environ
    skip = parse_skip_steps(env.get(ENV_SKIP_STEPS))
    rollback = _rollback(env.get(ENV_ROLLBACK))
    if env.get(ENV_RESUME_FROM):
        return Resume(env[ENV_RESUME_FROM], skip, rollback)
    run_dir = os.fspath(run_dir) if run_dir is not None else env.get(ENV_RUN_DIR)
    if not run_dir or not os.path.exists(RunDir(run_dir).metrics):
        return Resume(default, skip, rollback)
    from .history import latest_checkpoint
    from .records import load_sessions

    try:
        found = latest_checkpoint(load_sessions(run_dir), cwd=os.getcwd())
    except InvalidRunError as exc:
        warnings.warn(
            f"runwatch: cannot read the checkpoints of {run_dir} ({exc}); resuming from {default!r}",
            RuntimeWarning,
            stacklevel=2,
        )
        found = None
    return Resume(found.path if found is not None else default, skip, rollback)
