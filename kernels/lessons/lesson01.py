"""Lesson 01's exercise: scale, out[i] = a * x[i], the first kernel body a learner writes."""
from __future__ import annotations

import torch

from ..check import Diagnosis, Report, check, elementwise, like
from . import Exercise, Hint

A = 2.5  # the scale factor the self-check passes

# Ragged sizes whose last block of 256 threads overhangs the end by at most 56 elements: a
# missing guard then writes into the checker's canary margin (64 elements), where it is caught,
# and not into memory that belongs to something else.
SIZES = (0, 200, 1000, 65535, 2**20 + 250)


def run(ext, backend: str | None = None) -> Report:
    """Check ext.scale(x, A, out) against A * x on ragged sizes."""
    def scale(x: torch.Tensor, out: torch.Tensor) -> None:
        ext.scale(x, A, out)

    return check(scale, lambda x: A * x, elementwise(1), out=like(0), sizes=SIZES, name="scale",
                 backend=backend)


EXERCISES = [
    Exercise("01", "scale", "scale.cu", run, hints=[
        Hint("Start from add_kernel2 in kernels/reference/01_thread_model.cu: the same index, one input instead of "
             "two.", answers=(Diagnosis.UNWRITTEN,)),
        Hint("The index of a thread is blockIdx.x * blockDim.x + threadIdx.x; cast one factor to int64_t before "
             "multiplying, so it cannot overflow.", answers=(Diagnosis.WRONG_VALUES,)),
        Hint("The grid has ceil_div(n, 256) * 256 threads, more than n: wrap the write in `if (i < n)`.",
             answers=(Diagnosis.WROTE_PAST_END,)),
        "const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;  if (i < n) out[i] = a * x[i];",
    ]),
]
