"""The simulator's race and bounds check of a call: `checked(fn, *args)`.

The call runs with the ops (and pybind11 functions) of sim-loaded files taken from their instrumented
twins (kernels/sim/instrumented.py) with the check of kernels/sim/include/cudasim_check.h on: every load
and store of a kernel is checked against the other threads' accesses of the same memory (a data race:
two threads, at least one writing, with no barrier, warp synchronisation, mbarrier hand-off (an arrival
before the one access, a wait that saw that phase complete before the other) or atomic ordering them, in one
block or in two) and against the memory the call may use (the tensors it was given, what it allocates
itself, cudaMalloc'd memory). A finding stops the kernel before the access and raises a RuntimeError
that names both sides of the race, or the tensor an access missed and by how much; the checker
(kernels.check) reports it as a failing case, diagnosed RACE or OUT_OF_BOUNDS.

It costs an instrumented build of the file (about twice a plain one, cached as any build) and runs kernels about 10-20 times slower than a plain build, so the checker runs it on the
smaller cases only (kernels.check: RACE_CHECK_ELEMENTS).
"""
from __future__ import annotations

from typing import Callable

import torch

from .instrumented import Twin, prepare, redirected, twin_function

__all__ = ["checked", "prepare", "tensor_label"]


def _tensors(x) -> list[torch.Tensor]:
    """The tensors in an argument (lists and tuples of them too)."""
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    return []


def _span(t: torch.Tensor) -> tuple[int, int]:
    """(address, bytes) of the memory a tensor's elements cover, strides and all (0 bytes when empty)."""
    if t.numel() == 0:
        return t.data_ptr(), 0
    reach = 1 + sum((size - 1) * abs(stride) for size, stride in zip(t.shape, t.stride()))
    return t.data_ptr(), reach * t.element_size()


def tensor_label(name: str, t: torch.Tensor) -> str:
    """How a message names a tensor: "`out` (output 0, 4900 float32)"."""
    return f"`{name}` ({t.numel()} {str(t.dtype).replace('torch.', '')})"


def checked(fn: Callable, *args, labels: dict[int, str] | None = None, spans: dict[int, tuple[int, int]] | None = None,
            **kwargs):
    """fn(*args, **kwargs) with the simulator's race and bounds check on; its result, or the finding raised.

    `labels` names tensors by their data pointer ({x.data_ptr(): "`x` (input 0, 1000 float32)"}) for
    the messages; other tensors are named by the op and argument that took them. `spans` widens what a
    tensor may be accessed at ({x.data_ptr(): (address, bytes)}): the checker's tensors lie in buffers
    whose canary margins catch a small overshoot the same way on both backends, so only an access past
    the margins is out of bounds here.
    """
    labels = labels or {}
    spans = spans or {}

    def around(twin: Twin, call, name: str, args, kwargs):
        twin.lib.cudasim_check_start()
        try:
            given = [*args, *kwargs.values()]
            for i, arg in enumerate(given):
                for t in _tensors(arg):
                    if t.device.type != "cpu":
                        continue
                    lo, size = _span(t)
                    if size:
                        label = labels.get(lo) or tensor_label(f"argument {i} of {name}", t)
                        lo, size = spans.get(lo, (lo, size))
                        twin.lib.cudasim_check_region(lo, size, t.element_size(), label.encode())
            return call()
        finally:
            twin.lib.cudasim_check_stop()

    direct = twin_function(fn, around)
    with redirected(around):
        return (direct or fn)(*args, **kwargs)
