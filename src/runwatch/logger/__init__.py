"""The training side: `RunLogger` writes a run directory (schema v1) from the training loop, with its
window, the ranks' heartbeats, signal handling and the GPU sampler. Standard library only (torch and
NVML are used when importable).

    from runwatch.logger import RunLogger

    log = RunLogger("runs/a", recipe={"batch_size": 32, "seq_len": 1024, "max_steps": 20_000})
    with log:                                  # session_end on exit: normal, error or interrupted
        for batch in loader:
            ...
            log.step(loss=loss, lr=lr, grad_norm=grad_norm)  # tensors are read when a window closes

`from runwatch import RunLogger` is the same object. This is the layer's face: every name below is
imported on first use from the module that defines it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import lazy

if TYPE_CHECKING:
    from .convert import Flag as Flag
    from .convert import Scalar as Scalar
    from .distributed import HeartbeatWriter as HeartbeatWriter
    from .distributed import process_group as process_group
    from .distributed import rank_group as rank_group
    from .gpus import GpuSampler as GpuSampler
    from .metrics import RunLogger as RunLogger
    from .window import DEFAULT_MAX_WINDOW_SECONDS as DEFAULT_MAX_WINDOW_SECONDS
    from .window import default_window as default_window

# The public names, module -> names: this face's __all__.
_PUBLIC: dict[str, tuple[str, ...]] = {
    ".convert": ("Flag", "Scalar"),
    ".distributed": ("process_group", "rank_group", "HeartbeatWriter"),
    ".gpus": ("GpuSampler",),
    ".metrics": ("RunLogger",),
    ".window": ("DEFAULT_MAX_WINDOW_SECONDS", "default_window"),
}
# The other names the modules listed as exported before the faces: importable from here for one
# release, not in __all__ (import them from the face, or better, use a public name).
_KEPT: dict[str, tuple[str, ...]] = {
    ".convert": ("as_float_list", "as_numbers", "Number"),
    ".distributed": ("RankGroup", "SoloGroup", "is_waiting_frame"),
    ".gpus": ("MAX_GPUS", "MIN_INTERVAL_SECONDS"),
    ".metrics": ("PHASE_NAME",),
    ".signals": ("SignalGuard",),
    ".window": (
        "WINDOW_ENV",
        "DEFAULT_WINDOW",
        "OpenWindow",
        "WindowValues",
        "ROW_SIZE",
        "window_row",
        "columns",
        "window_fields",
        "TrainLine",
    ),
}
_WHERE = lazy.index(_PUBLIC, _KEPT)

__all__ = lazy.public(_PUBLIC)


def __getattr__(name: str) -> Any:
    return lazy.resolve(__name__, globals(), _WHERE, name)


def __dir__() -> list[str]:
    return lazy.listing(globals(), _WHERE)
