"""Moving a record of tensors (a batch, its plan, a layout) to a device in one transfer per dtype.

A record is a dataclass instance; its tensors are its tensor fields and those of the records in
its fields, recursively, in field order (``tensors_of``). ``with_tensors`` rebuilds a record from
such a list, which is how ``tensors_to`` moves one and how a captured CUDA graph's flat tensor
inputs become a batch again.
"""
from __future__ import annotations

import dataclasses
from typing import Iterator

import torch


def tensors_to(obj, device: torch.device | str):
    """A copy of a dataclass instance with its tensors on ``device``: its tensor fields and those of
    the dataclasses in its fields, recursively; other fields are shared. Tensors not yet there
    travel packed, one buffer per dtype, and arrive as views of it: one transfer per dtype instead
    of one per tensor, and to a GPU from pinned memory without waiting (a plain copy to a GPU makes
    the host wait for everything queued before it)."""
    return with_tensors(obj, iter(_moved_packed(tensors_of(obj), torch.device(device))))


def tensors_of(obj) -> list[torch.Tensor]:
    """The tensors of a dataclass instance and of the dataclasses in its fields, in field order."""
    out = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if isinstance(value, torch.Tensor):
            out.append(value)
        elif _is_record(value):
            out += tensors_of(value)
    return out


def with_tensors(obj, tensors: Iterator[torch.Tensor]):
    """A copy of ``obj`` whose tensors are the next ones of ``tensors``, in ``tensors_of``'s order."""
    changes = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if isinstance(value, torch.Tensor):
            changes[f.name] = next(tensors)
        elif _is_record(value):
            changes[f.name] = with_tensors(value, tensors)
    return dataclasses.replace(obj, **changes)


def _is_record(value) -> bool:
    """A dataclass instance (its tensors travel with the object holding it)."""
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def _moved_packed(tensors: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """``tensors`` on ``device``: those elsewhere moved by (dtype, device) group with ``packed_to``,
    those already there as they are."""
    groups: dict[tuple[torch.dtype, torch.device], list[int]] = {}
    for i, t in enumerate(tensors):
        if t.device.type != device.type or device.index not in (None, t.device.index):
            groups.setdefault((t.dtype, t.device), []).append(i)
    out = list(tensors)
    for idx in groups.values():
        for i, moved in zip(idx, packed_to([tensors[i] for i in idx], device)):
            out[i] = moved
    return out


def packed_to(tensors: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """Tensors of one dtype and device, concatenated into one buffer, moved (to a GPU: pinned, not
    waiting) and returned as views of the moved buffer, in their shapes."""
    flat = torch.cat([t.reshape(-1) for t in tensors])
    if device.type == "cuda" and flat.device.type == "cpu":
        # The caching host allocator keeps the pinned buffer until its copy is done.
        flat = flat.pin_memory().to(device, non_blocking=True)
    else:
        flat = flat.to(device)
    return [part.view(t.shape) for part, t in zip(flat.split([t.numel() for t in tensors]), tensors)]
