"""Framework integrations: thin callbacks that translate a framework's hooks into `RunLogger` calls.

    from runwatch.integrations import HFCallback, auroc_metrics   # transformers Trainer ([hf] extra)
    trainer = Trainer(..., compute_metrics=auroc_metrics, callbacks=[HFCallback()])

    from runwatch.integrations import LightningCallback           # Lightning ([lightning] extra)
    trainer = lightning.Trainer(..., callbacks=[LightningCallback()])

This is the layer's face and imports nothing at import time: `HFCallback` imports transformers (not
lightning) on first use, `LightningCallback` lightning (not transformers). What the two share,
framework-neutral, is in `session.py`. `RunwatchCallback`, the earlier name of both, stays in
`runwatch.integrations.hf` and `runwatch.integrations.lightning` for one release.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import lazy

if TYPE_CHECKING:
    from .hf import HFCallback as HFCallback
    from .hf import auroc_metrics as auroc_metrics
    from .lightning import LightningCallback as LightningCallback
    from .session import CallbackOptions as CallbackOptions

# The public names, module -> names: this face's __all__.
_PUBLIC: dict[str, tuple[str, ...]] = {
    ".hf": ("HFCallback", "auroc_metrics"),
    ".lightning": ("LightningCallback",),
    ".session": ("CallbackOptions",),
}
# The other names the modules listed as exported before the faces: importable from here for one
# release, not in __all__ (import them from the face, or better, use a public name).
_KEPT: dict[str, tuple[str, ...]] = {
    ".session": (
        "STATE_FILE",
        "NO_SESSION",
        "PhaseHolder",
        "write_state",
        "read_state",
        "resume_state",
        "feed",
        "folder_bytes",
    ),
}
_WHERE = lazy.index(_PUBLIC, _KEPT)

__all__ = lazy.public(_PUBLIC)


def __getattr__(name: str) -> Any:
    return lazy.resolve(__name__, globals(), _WHERE, name)


def __dir__() -> list[str]:
    return lazy.listing(globals(), _WHERE)
