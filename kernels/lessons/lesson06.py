"""Lesson 06 (reductions): the exercises (a row max with warp shuffles, a row sum by one block in
shared memory) and the checks for sums with their tolerance.

A float32 sum is rounded differently in every summation order, so it is checked against the
exactly rounded float64 sum with a tolerance that grows with the length: see sum_tolerance.
"""
from __future__ import annotations

from typing import Callable, Iterable

import torch

from ..check import Diagnosis, REDUCTION_ROWS, Report, SIZES, check, elementwise, merge, rows
from . import Exercise, Hint, Probe, Variant


def sum_tolerance(n: int) -> dict:
    """{float32: (rtol, atol)} for a sum of n standard-normal floats: atol = 2 eps sqrt(n) ||x||, ||x|| ~ sqrt(n)."""
    eps = torch.finfo(torch.float32).eps
    return {torch.float32: (1e-5, 2 * eps * max(n, 1))}


def scalar_out(inputs) -> list:
    """The output of a full-vector sum: one float32 (shape [1]; the ops take shape [] too)."""
    return [((1,), torch.float32)]


def rows_out(inputs) -> list:
    """The output of a row reduction: one float32 per row."""
    return [((inputs[0].shape[0],), torch.float32)]


def exact_sum(x: torch.Tensor) -> torch.Tensor:
    """The sum in float64, rounded once to x's dtype: the check measures the kernel's rounding alone."""
    return x.double().sum().reshape(1).to(x.dtype)


def exact_row_sum(x: torch.Tensor) -> torch.Tensor:
    """The row sums in float64, rounded once to x's dtype."""
    return x.double().sum(dim=-1).to(x.dtype)


def row_max(x: torch.Tensor) -> torch.Tensor:
    return x.amax(dim=-1)


def check_sum(fn: Callable, sizes: Iterable = SIZES, *, inputs: Callable | None = None, name: str | None = None,
              backend: str | None = None, quiet: bool = False, raise_on_fail: bool = False) -> Report:
    """check() of a full-vector sum (an out-variant op) at each size, with that size's tolerance."""
    reports = [check(fn, exact_sum, inputs or elementwise(1), out=scalar_out, sizes=[n], tolerance=sum_tolerance(n),
                     name=name, backend=backend, quiet=True) for n in sizes]
    return merge(name or reports[0].name, reports, quiet=quiet, raise_on_fail=raise_on_fail)


def check_row_sum(fn: Callable, shapes: Iterable = REDUCTION_ROWS, *, name: str | None = None,
                  backend: str | None = None, quiet: bool = False, raise_on_fail: bool = False) -> Report:
    """check() of a row sum on rows(1) inputs (an all-negative and a constant row) at each shape, with the
    tolerance of its row length."""
    reports = [check(fn, exact_row_sum, rows(1), out=rows_out, sizes=[shape], tolerance=sum_tolerance(shape[1]),
                     name=name, backend=backend, quiet=True) for shape in shapes]
    return merge(name or reports[0].name, reports, quiet=quiet, raise_on_fail=raise_on_fail)


def check_row_max(fn: Callable, shapes: Iterable = REDUCTION_ROWS, *, name: str | None = None,
                  backend: str | None = None, quiet: bool = False, raise_on_fail: bool = False) -> Report:
    """check() of a row max on rows(1) inputs: exact (a max rounds nothing), and row 0 is all negative,
    so a max that starts from 0 instead of -inf fails every case."""
    return check(fn, row_max, rows(1), out=rows_out, sizes=shapes, tolerance={torch.float32: (0.0, 0.0)},
                 name=name, backend=backend, quiet=quiet, raise_on_fail=raise_on_fail)


# The exercises' shapes: ragged widths (31, 33, 1000, 4097: no multiples of 32 or 256), rows of one
# column, and many rows. rows() makes row 0 all negative (a max that starts from 0 fails every case)
# and row 1 constant.
EXERCISE_SHAPES = (*REDUCTION_ROWS, (300, 1), (2000, 40))


def _run_row_max(ext, backend) -> Report:
    return check_row_max(ext.row_max, EXERCISE_SHAPES, name="row_max", backend=backend)


def _run_row_sum_block(ext, backend) -> Report:
    return check_row_sum(ext.row_sum_block, EXERCISE_SHAPES, name="row_sum_block", backend=backend)


EXERCISES = [
    Exercise("06", "row_max", "row_reductions.cu", _run_row_max, hints=[
        Hint("Look at row_sum_kernel1 in kernels/reference/06_reductions.cu: the same warp-per-row layout, "
             "with + turned into a max. What is the max of no values at all (the start value)? Row 0 of every "
             "case is all negative: a max that starts from 0 gets it wrong.", answers=(Diagnosis.UNWRITTEN, Diagnosis.WRONG_VALUES)),
        "Start from m = -INFINITY; lane l visits columns l, l + 32, l + 64, ... while c < cols "
        "(that loop covers the ragged end of a row: 33 columns means lane 0 takes columns 0 and 32).",
        Hint("Then 5 exchanges: for offset 16, 8, 4, 2, 1: m = fmaxf(m, __shfl_xor_sync(FULL_MASK, m, offset)); "
             "after them every lane holds the row's max. Only lane 0 writes out[row]. All 32 lanes take part, "
             "also those that had no columns (a row narrower than 32): a lane that returns before the shuffles "
             "leaves nothing defined for the others to read, so keep it until the shuffles are done.",
             answers=(Diagnosis.EXITED_LANE,)),
        "for (int64_t c = lane; c < cols; c += 32) m = fmaxf(m, r[c]);  then the shuffle loop, then "
        "if (lane == 0) out[row] = m;  (warp_reduce_max in helpers.cuh is that shuffle loop)",
    ]),
    Exercise("06", "row_sum_block", "row_reductions.cu", _run_row_sum_block, hints=[
        Hint("Three steps with a __syncthreads() between each and the next: (1) thread tid adds columns tid, "
             "tid + 256, ... into partial[tid]; (2) the tree of sum_kernel3 in kernels/reference/06_reductions.cu; "
             "(3) thread 0 writes out[blockIdx.x]. NaN in every row: step 3 is missing; NaN in the narrow rows "
             "only: see hint 3.", answers=(Diagnosis.UNWRITTEN,)),
        Hint("Right in one thread order and wrong in another (the report says 'a race between threads'): a "
             "barrier is missing. One goes after the stores into partial, and one at the end of every level of "
             "the tree, because each level reads what the previous level wrote.", answers=(Diagnosis.RACE,)),
        Hint("NaN only in the narrow rows (1, 31, 33 columns): some slots of partial were never written. A thread "
             "with no columns must still write partial[tid] = 0 and reach every barrier (no `return` before them: "
             "the simulator fills shared memory with NaN at each block start, so an unwritten slot shows). Wrong "
             "sums: the column loop runs while c < cols, not c <= cols.", answers=(Diagnosis.WRONG_VALUES, Diagnosis.UNWRITTEN, Diagnosis.NAN_WHERE_REFERENCE_IS_NOT)),
        "float acc = 0.0f;  for (int64_t c = tid; c < cols; c += BLOCK) acc += r[c];  partial[tid] = acc;  "
        "__syncthreads();  for (int s = BLOCK / 2; s > 0; s /= 2) { if (tid < s) partial[tid] += "
        "partial[tid + s]; __syncthreads(); }  if (tid == 0) out[blockIdx.x] = partial[0];",
    ]),
]


# ---------------------------------------------------------------------------------------------
# The reference file's variants, as `make profile` (the simulator's access tables, and Nsight Compute with
# KERNEL=) runs them. A size is an element count: a vector of that many floats for the sums, a square
# matrix of about as many for the row reductions.

GPU_SIZE = 2**26        # 256 MiB of floats; the row reductions: 8192 x 8192
SIM_SIZE = 64 * 1024    # the simulator's access tables


def _sum_args(n: int, dtype, device) -> tuple:
    return torch.rand(n, dtype=dtype, device=device), torch.zeros(1, dtype=dtype, device=device)


def _row_args(n: int, dtype, device) -> tuple:
    side = max(1, int(n ** 0.5))
    return torch.rand(side, side, dtype=dtype, device=device), torch.empty(side, dtype=dtype, device=device)


SUMS = ("sum1", "sum2", "sum3", "sum2_noatomic", "sum3_noatomic", "sum4", "sum5", "sum6", "sum7")
PROBES = {"sum2": "interleaved addressing", "sum3": "sequential addressing", "sum5": "the last steps with warp shuffles"}
VARIANTS = [
    *(Variant(name, _sum_args, probes=(Probe(f"{name}: {PROBES[name]}"),) if name in PROBES else ()) for name in SUMS),
    Variant("row_sum1", _row_args),
    Variant("row_sum2", _row_args),
    Variant("row_max2", _row_args),
]
