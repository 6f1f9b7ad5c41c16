"""Lesson 02's exercise: saxpy, out = a * x + y, kernel body and grid size on ragged vectors."""
from __future__ import annotations

import torch

from ..check import Diagnosis, Report, check, elementwise, like
from . import Exercise, Hint, Variant

A = -1.5  # the scalar a the self-check passes

# Ragged sizes (none a multiple of 256): each leaves a partly filled last block, so a missing
# bounds guard writes past the end and a grid of n / 256 blocks leaves the tail unwritten. The
# overhang is at most 56 elements: a missing guard writes into the checker's canary margin
# (64 elements), where it is caught, not into memory that belongs to something else.
SIZES = (0, 200, 1000, 4095, 65500, 2**20 + 250)


def run(ext, backend: str | None = None) -> Report:
    """Check ext.saxpy(A, x, y, out) against A * x + y on ragged sizes."""
    def saxpy(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
        ext.saxpy(A, x, y, out)

    return check(saxpy, lambda x, y: A * x + y, elementwise(2), out=like(0), sizes=SIZES, name="saxpy",
                 backend=backend)


EXERCISES = [
    Exercise("02", "saxpy", "saxpy.cu", run, hints=[
        Hint("Two gaps: the kernel body, and `blocks` in the launcher (0 blocks is an invalid launch, which is "
             "the error the stub reports).", answers=(Diagnosis.INVALID_LAUNCH,)),
        Hint("Blocks: enough to give every element a thread, rounded UP: ceil_div(n, THREADS). n / THREADS "
             "rounds down and leaves the ragged tail without threads.", answers=(Diagnosis.UNWRITTEN,)),
        Hint("Kernel: the index as in add_kernel2 of kernels/reference/02_first_kernel.cu, then a guard: the "
             "last block has threads past the end of the vector.", answers=(Diagnosis.WROTE_PAST_END, Diagnosis.WRONG_VALUES)),
        "const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;  if (i < n) out[i] = a * x[i] + y[i];",
    ]),
]


# ---------------------------------------------------------------------------------------------
# The reference file's variants, as `make profile KERNEL=...` (Nsight Compute) runs them. A size is an
# element count; add4 and square5 also run in float16, as the benchmark times them.

GPU_SIZE = 2**26


def _add_args(*extra):
    def args(n: int, dtype, device) -> tuple:
        x, y = (torch.rand(n, device=device).to(dtype) for _ in range(2))
        return (x, y, torch.empty(n, dtype=dtype, device=device), *extra)
    return args


def _square_args(n: int, dtype, device) -> tuple:
    return torch.rand(n, device=device).to(dtype), torch.empty(n, dtype=dtype, device=device)


VARIANTS = [
    Variant("add1", _add_args(), (torch.float32,)),
    Variant("add2", _add_args(), (torch.float32,)),
    Variant("add3", _add_args(256), (torch.float32,)),
    Variant("add4", _add_args(), (torch.float32, torch.float16)),  # templated: one instance per dtype
    Variant("square5", _square_args, (torch.float16, torch.float32)),
]
