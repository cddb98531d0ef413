"""GPU utilisation and memory sampled through NVML at a window's close: a train record's `gpus`.

    sampler = GpuSampler()               # GpuSampler(enabled=False): never samples (ranks that write no log)
    sampler.sample()     # [{"index": 0, "util_percent": 97, "memory_used_bytes": 71234567890}, ...]
                         # or None: no NVML (pynvml not importable, no driver), or sampled < 1 s ago

NVML (the `pynvml` module, from the nvidia-ml-py package) is imported the first time a sample is
asked for, never before: a process without it pays one failed import, once, and its records have
no `gpus`. A sample costs two NVML calls per device (microseconds each); it is taken at most once
every `MIN_INTERVAL_SECONDS`, so windows of fast steps do not pay it each time. Any NVML error
turns sampling off for the rest of the session: a record never waits for, or fails on, a GPU
query. Standard library only (pynvml when installed).
"""

from __future__ import annotations

import time
from typing import Any

# Samples are this far apart at least (a window that closes sooner carries none).
MIN_INTERVAL_SECONDS = 1.0
# Devices sampled per record: a node's worth.
MAX_GPUS = 16


class GpuSampler:
    """Samples every visible device's utilisation and memory in use, lazily and at most once a second."""

    def __init__(self, enabled: bool = True) -> None:
        self._nvml: Any = None
        self._handles: list[Any] | None = None if enabled else []  # None: not tried yet; []: nothing to sample
        self._last = -float("inf")

    def _start(self) -> list[Any]:
        try:
            import pynvml  # optional: nvidia-ml-py

            pynvml.nvmlInit()
            count = min(int(pynvml.nvmlDeviceGetCount()), MAX_GPUS)
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception:  # no module, no driver, no device: nothing to sample, ever
            return []
        self._nvml = pynvml
        return handles

    def sample(self) -> list[dict[str, int]] | None:
        """Each device's `index`, `util_percent` and `memory_used_bytes`; None when there is no
        NVML, no device, or the last sample was taken less than `MIN_INTERVAL_SECONDS` ago."""
        if self._handles is None:
            self._handles = self._start()
        if not self._handles:
            return None
        now = time.monotonic()
        if now - self._last < MIN_INTERVAL_SECONDS:
            return None
        self._last = now
        nvml = self._nvml
        try:
            out = []
            for i, h in enumerate(self._handles):
                util = nvml.nvmlDeviceGetUtilizationRates(h)
                mem = nvml.nvmlDeviceGetMemoryInfo(h)
                out.append({"index": i, "util_percent": int(util.gpu), "memory_used_bytes": int(mem.used)})
        except Exception:  # a device lost, a driver reset: stop asking
            self._handles = []
            return None
        return out
