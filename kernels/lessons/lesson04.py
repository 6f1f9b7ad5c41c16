"""Lesson 04's exercise: scale_add_vec4, out = a * x + y with float4 loads, a grid-stride loop and the tail."""
from __future__ import annotations

import torch

from ..check import Diagnosis, Report, check, elementwise, like
from . import Exercise, Hint, Probe, Variant

A = 1.5  # the scalar a the self-check passes

# Every remainder n % 4 (0, 1, 2, 3) appears, so a missing or wrong tail leaves NaN behind;
# n < 4 has no whole float4 at all. 2^20 + 3 elements are 262144 float4s, more than the capped
# grid has threads on any current GPU (4 blocks of 256 per SM), so a kernel without the
# grid-stride loop leaves most of the vector unwritten.
SIZES = (0, 1, 2, 3, 4, 31, 33, 1000, 4098, 2**20 + 3)


def run(ext, backend: str | None = None) -> Report:
    """Check ext.scale_add_vec4(A, x, y, out) against torch.add(y, x, alpha=A) on ragged sizes."""
    def scale_add_vec4(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
        ext.scale_add_vec4(A, x, y, out)

    return check(scale_add_vec4, lambda x, y: torch.add(y, x, alpha=A), elementwise(2), out=like(0),
                 sizes=SIZES, name="scale_add_vec4", backend=backend)


EXERCISES = [
    Exercise("04", "scale_add_vec4", "scale_add_vec4.cu", run, hints=[
        "Two ideas of the lesson in one kernel: scale_add_kernel2's grid-stride loop (the launcher starts at "
        "most 4 blocks per SM, so a thread must do many float4s) and scale_add_kernel4's float4 body and tail.",
        "const float4* x4 = reinterpret_cast<const float4*>(x); (the same for y, and float4* for out); "
        "n4 = n / 4 whole float4s; the loop runs i = t, t + stride, ... while i < n4, with "
        "t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x and stride = gridDim.x * blockDim.x.",
        Hint("Loop body: const float4 xv = x4[i], yv = y4[i]; out4[i] = make_float4(a * xv.x + yv.x, "
             "a * xv.y + yv.y, a * xv.z + yv.z, a * xv.w + yv.w);", answers=(Diagnosis.WRONG_VALUES,)),
        Hint("After the loop, the tail: const int64_t j = 4 * n4 + t; if (j < n) out[j] = a * x[j] + y[j]; "
             "(only threads 0, 1, 2 can pass the guard, and only when n % 4 leaves that many)",
             answers=(Diagnosis.WROTE_PAST_END,)),
    ]),
]


# ---------------------------------------------------------------------------------------------
# The reference file's variants, as `make profile` (the simulator's access tables, and Nsight Compute with
# KERNEL=) and the benchmark run them. A size is an element count.

GPU_SIZE = 2**26       # floats per tensor: 256 MiB, enough to fill an H100's DRAM path
SIM_SIZE = 32 * 1024   # the simulator's access tables: a few hundred warps


def _copy_args(n: int, dtype, device) -> tuple:
    return torch.rand(n, dtype=dtype, device=device), torch.empty(n, dtype=dtype, device=device)


def _scale_add_args(*extra):
    def args(n: int, dtype, device) -> tuple:
        x, y = (torch.rand(n, dtype=dtype, device=device) for _ in range(2))
        return (A, x, y, torch.empty(n, dtype=dtype, device=device), *extra)
    return args


VARIANTS = [
    Variant("copy1", _copy_args, probes=(Probe("copy1: one float per thread"),)),
    Variant("copy5", _copy_args),
    Variant("scale_add1", _scale_add_args(256)),
    Variant("scale_add2", _scale_add_args()),
    Variant("scale_add3", _scale_add_args(1), probes=tuple(
        Probe(f"scale_add3 with stride {s}", _scale_add_args(s)) for s in (1, 2, 32))),
    Variant("scale_add4", _scale_add_args(), probes=(Probe("scale_add4: float4 loads and stores"),)),
    Variant("scale_add5", _scale_add_args()),
]
