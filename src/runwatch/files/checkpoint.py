"""Reading a checkpoint back: `verify_checkpoint(path)` for torch and safetensors files.

A checkpoint that was written but cannot be read back is worth nothing; a training loop (or
`runwatch smoke`) calls this right after writing one. torch and safetensors are imported only
here, inside the function, so `import runwatch` stays light.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any, TypedDict

from ..errors import CheckpointError

# What a checkpoint directory (e.g. a Hugging Face `checkpoint-500/`) holds that we read back.
CHECKPOINT_SUFFIXES = (".safetensors", ".pt", ".pth", ".bin", ".ckpt")


class CheckpointReport(TypedDict):
    """What `verify_checkpoint` read back."""

    path: str
    format: str  # "torch", "safetensors", or "mixed" (a directory of both)
    files: int
    tensors: int
    tensor_bytes: int
    file_bytes: int


def _walk_tensors(obj: Any, torch: ModuleType, acc: list[int]) -> None:
    """Count tensors and their bytes anywhere in a loaded object (state dicts nest)."""
    if isinstance(obj, torch.Tensor):
        acc[0] += 1
        acc[1] += obj.numel() * obj.element_size()
    elif isinstance(obj, dict):
        for value in obj.values():
            _walk_tensors(value, torch, acc)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            _walk_tensors(value, torch, acc)


def _read_file(path: str) -> tuple[str, int, int]:
    if path.endswith(".safetensors"):
        try:
            from safetensors import safe_open
        except ImportError:
            raise CheckpointError(f"{path}: reading safetensors needs the 'safetensors' package (extra: hf)") from None
        tensors = nbytes = 0
        try:
            with safe_open(path, framework="np") as f:
                for key in f.keys():  # noqa: SIM118 (a safetensors file, not a dict)
                    array = f.get_tensor(key)
                    tensors += 1
                    nbytes += int(array.nbytes)
        except Exception as exc:  # safetensors raises its own SafetensorError and OSError
            raise CheckpointError(f"{path}: not a readable safetensors file: {exc}") from None
        return "safetensors", tensors, nbytes
    try:
        import torch
    except ImportError:
        raise CheckpointError(f"{path}: reading a torch checkpoint needs the 'torch' package (extra: torch)") from None
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # pickle, zip and weights-only errors all say what broke
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"{path}: cannot be loaded by torch.load(weights_only=True): {first}") from None
    acc = [0, 0]
    _walk_tensors(obj, torch, acc)
    return "torch", acc[0], acc[1]


def verify_checkpoint(path: str | os.PathLike[str]) -> CheckpointReport:
    """Read a checkpoint back; return `{"path", "format", "files", "tensors", "tensor_bytes", "file_bytes"}`.

    `path` is a torch file (`torch.load(..., weights_only=True)`), a `.safetensors` file, or a
    directory holding such files (all of them are read). Raises CheckpointError when a file is
    missing, cannot be read, or when nothing in it is a tensor.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        files = sorted(
            os.path.join(path, name)
            for name in os.listdir(path)
            if name.endswith(CHECKPOINT_SUFFIXES) and os.path.isfile(os.path.join(path, name))
        )
        if not files:
            raise CheckpointError(f"{path}: a directory without checkpoint files ({', '.join(CHECKPOINT_SUFFIXES)})")
    elif os.path.isfile(path):
        files = [path]
    else:
        raise CheckpointError(f"{path}: no such checkpoint file")
    formats: set[str] = set()
    tensors = tensor_bytes = file_bytes = 0
    for name in files:
        fmt, n, b = _read_file(name)
        formats.add(fmt)
        tensors += n
        tensor_bytes += b
        file_bytes += os.path.getsize(name)
    if tensors == 0:
        raise CheckpointError(f"{path}: holds no tensors")
    return {
        "path": path,
        "format": formats.pop() if len(formats) == 1 else "mixed",
        "files": len(files),
        "tensors": tensors,
        "tensor_bytes": tensor_bytes,
        "file_bytes": file_bytes,
    }
