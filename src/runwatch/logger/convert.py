"""Python floats from what a training loop hands the logger: numbers, numpy scalars, 0-dim tensors.

`as_float_list` is the logger's one host-device sync: a window's values are converted together, one
`.tolist()` per device, instead of a `float()` (a sync each on a GPU) per value. Standard library
only; torch is imported inside the functions that only run when tensors were passed (and torch is
then already imported by the caller).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, SupportsFloat, TypeAlias, cast

if TYPE_CHECKING:
    import torch


# What a training loop hands the logger for one value (`RunLogger.step()`, `val()`):
# a host number: a Python float, int or bool, a numpy scalar, or any other number that float() takes;
Number: TypeAlias = "float | int | SupportsFloat"
# or such a number, or a one-element tensor on any device (kept there until the window closes);
Scalar: TypeAlias = "Number | torch.Tensor"
# a yes/no of one update (`clipped`, `skipped`): a bool, 0 or 1, or a bool tensor (`grad_norm > 1.0`).
Flag: TypeAlias = "bool | Number | torch.Tensor"

_HOST_NUMBER_TYPES = frozenset({float, int, bool})
_TENSOR_TYPES: dict[type, bool] = {}  # type -> whether it is a torch tensor type (memo)


def _is_tensor_type(t: type) -> bool:
    known = _TENSOR_TYPES.get(t)
    if known is None:
        known = _TENSOR_TYPES[t] = hasattr(t, "device") and hasattr(t, "detach")
    return known


def as_float_list(values: Sequence[Scalar]) -> list[float]:
    """Python floats for `values` (numbers, numpy scalars, 0-dim tensors): one sync per device."""
    if _HOST_NUMBER_TYPES.issuperset(map(type, values)):  # the common case: plain Python numbers
        return list(map(float, values))
    out: list[Any] = list(values)  # each entry is replaced by its float below
    groups: dict[tuple[torch.device, torch.dtype], list[int]] = {}  # (device, dtype) -> indices of the tensors
    tensors = cast("Sequence[torch.Tensor]", values)  # read at the indices of tensors only
    for i, v in enumerate(values):
        t = type(v)
        if t in _HOST_NUMBER_TYPES:
            out[i] = float(v)
        elif _is_tensor_type(t):
            tensor = tensors[i]
            key = (tensor.device, tensor.dtype)
            group = groups.get(key)
            if group is None:
                groups[key] = [i]
            else:
                group.append(i)
        else:  # numpy scalars and other numbers: host values, no sync
            out[i] = float(v)
    if groups:
        by_device: dict[torch.device, list[list[int]]] = {}
        for (device, _dtype), group in groups.items():
            by_device.setdefault(device, []).append(group)
        for device, device_groups in by_device.items():
            idx = [i for group in device_groups for i in group]
            # note: this is the logger's only CPU-GPU sync point, once per window and device
            for i, f in zip(idx, _stack_all(device, [[tensors[i] for i in group] for group in device_groups]).tolist()):
                out[i] = float(f)
    return out


def as_numbers(values: list[Scalar]) -> list[float]:
    """`values` as host numbers in one sync per device, like `as_float_list`, except that a list of
    Python floats, ints and bools only (the common case) is returned as it is, unconverted: the
    window's sums and counts take them as they are, and a float() of each would cost a window close
    more than its sums do."""
    if _HOST_NUMBER_TYPES.issuperset(map(type, values)):
        return cast("list[float]", values)  # ints and bools are numbers (PEP 484's numeric tower)
    return as_float_list(values)


def _stack_all(device: torch.device, groups: list[list[torch.Tensor]]) -> torch.Tensor:
    """One 1-d tensor of the one-element tensors in `groups` (one device, one dtype a group)."""
    import torch

    # One stack per dtype: stacking mixed dtypes takes a much slower promoting path.
    parts = [_stack_one_dtype(group) for group in groups]
    if not all(p.dtype is torch.bool or p.is_floating_point() for p in parts):
        # Integers go to float64, as float() would round them (float32 where a device has no float64).
        wide = torch.float64 if device.type in ("cpu", "cuda") else torch.float32
        parts = [p.to(wide) for p in parts]
    # Floats and bools promote to the widest float among them, exactly.
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def _stack_one_dtype(tensors: list[torch.Tensor]) -> torch.Tensor:
    import torch

    # (Tensors that require grad are stacked with a graph that is dropped at once; no_grad would
    # cost more than it saves.)
    stacked: torch.Tensor | None
    try:
        stacked = torch.stack(tensors)
    except RuntimeError:  # shapes differ, e.g. 0-dim and (1,)
        stacked = None
    if stacked is None or stacked.shape != (len(tensors),):
        # reshape(()) raises the usual error for a tensor of more than one element
        stacked = torch.stack([t.reshape(()) for t in tensors])
    return stacked
