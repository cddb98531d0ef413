"""What a session records about the machine: the `hardware` of run.json and a record's `memory`;
and what `status` shows of its GPUs now (`gpu_info`: NVML, else nvidia-smi, else "no GPU").

Standard library only: torch is consulted only when the program has imported it.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any, TypedDict

# nvidia-smi can hang on a wedged driver; a check-in must not.
NVIDIA_SMI_TIMEOUT_SECONDS = 3.0


def detect_hardware() -> dict[str, Any]:
    """Host, world size and accelerators, without importing torch when the caller has not."""
    hw: dict[str, Any] = {
        "host": socket.gethostname(),
        "world_size": int(os.environ.get("WORLD_SIZE", "1") or 1),
    }
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        hw["device"] = torch.cuda.get_device_name(0)
        hw["device_count"] = torch.cuda.device_count()
    else:
        hw["device"] = "cpu"
        hw["device_count"] = 0
    return hw


def device_name() -> str:
    """This process's accelerator (the current CUDA device) or "cpu"; torch only if imported."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        return str(torch.cuda.get_device_name(torch.cuda.current_device()))
    return "cpu"


def rank_hardware(hw: dict[str, Any], peers: list[dict[str, Any]], detected: bool) -> dict[str, Any]:
    """`hardware` of a multi-rank session: world size, nodes (distinct hosts), and the device of
    each rank, run-length encoded in rank order (`[{"device": "NVIDIA H200", "ranks": 8}]`) so
    that 10k ranks stay a few bytes."""
    hw = dict(hw)
    runs: list[dict[str, Any]] = []
    for peer in peers:
        if runs and runs[-1]["device"] == peer["device"]:
            runs[-1]["ranks"] += 1
        else:
            runs.append({"device": peer["device"], "ranks": 1})
    extra = {"world_size": len(peers), "nodes": len({p["host"] for p in peers}), "rank_devices": runs}
    for key, value in extra.items():
        if detected:
            hw[key] = value
        else:  # the caller's own keys win
            hw.setdefault(key, value)
    return hw


try:
    import resource
except ImportError:  # pragma: no cover - not on Unix
    resource = None  # type: ignore[assignment]
# ru_maxrss is in KiB on Linux, in bytes on macOS.
_RSS_UNIT = 1 if sys.platform == "darwin" else 1024
# Whose usage to ask for. Linux reports the process's peak RSS (its memory's high-water mark) for
# the calling thread as for the whole process (tests/test_hardware.py), and RUSAGE_THREAD spares
# the kernel summing the CPU times of every thread, which grows with the threads torch starts (a
# record asks once a window).
_RUSAGE_WHO: int = 0 if resource is None else resource.RUSAGE_SELF
if sys.platform == "linux" and resource is not None:
    _RUSAGE_WHO = getattr(resource, "RUSAGE_THREAD", _RUSAGE_WHO)


def memory_peaks() -> dict[str, int]:
    """A record's `memory`: CUDA peaks (when CUDA is in use) and the host's peak RSS."""
    memory: dict[str, int] = {}
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized() and torch.cuda.is_available():  # cheap test first
        memory["cuda_allocated_peak_bytes"] = int(torch.cuda.max_memory_allocated())
        memory["cuda_reserved_peak_bytes"] = int(torch.cuda.max_memory_reserved())
    if resource is not None:
        memory["host_rss_peak_bytes"] = resource.getrusage(_RUSAGE_WHO).ru_maxrss * _RSS_UNIT
    return memory


class GpuInfo(TypedDict):
    """One device, as NVML or nvidia-smi reports it."""

    index: int
    name: str
    utilization_percent: int
    memory_used_bytes: int
    memory_total_bytes: int


def gpu_info() -> list[GpuInfo] | str:
    """Per device utilisation and memory through NVML, else nvidia-smi, else "no GPU"."""
    try:
        import pynvml
    except ImportError:
        pynvml = None
    if pynvml is not None:
        try:
            pynvml.nvmlInit()
            try:
                out: list[GpuInfo] = []
                for i in range(pynvml.nvmlDeviceGetCount()):
                    h = pynvml.nvmlDeviceGetHandleByIndex(i)
                    util = pynvml.nvmlDeviceGetUtilizationRates(h)
                    mem = pynvml.nvmlDeviceGetMemoryInfo(h)
                    name = pynvml.nvmlDeviceGetName(h)
                    out.append(
                        {
                            "index": i,
                            "name": name.decode() if isinstance(name, bytes) else name,
                            "utilization_percent": util.gpu,
                            "memory_used_bytes": mem.used,
                            "memory_total_bytes": mem.total,
                        }
                    )
                return out or "no GPU"
            finally:
                pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - NVML errors are many; fall back to nvidia-smi
            pass
    import shutil
    import subprocess

    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            res = subprocess.run(
                [
                    smi,
                    "--query-gpu=index,name,utilization.gpu,memory.used,memory.total",
                    "--format=csv,noheader,nounits",
                ],
                capture_output=True,
                text=True,
                timeout=NVIDIA_SMI_TIMEOUT_SECONDS,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return "no GPU (nvidia-smi did not answer)"
        out = []
        for line in res.stdout.splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 5 and parts[0].isdigit():
                try:
                    out.append(
                        {
                            "index": int(parts[0]),
                            "name": parts[1],
                            "utilization_percent": int(parts[2]),
                            "memory_used_bytes": int(parts[3]) * 2**20,
                            "memory_total_bytes": int(parts[4]) * 2**20,
                        }
                    )
                except ValueError:
                    continue
        return out or "no GPU"
    return "no GPU"
