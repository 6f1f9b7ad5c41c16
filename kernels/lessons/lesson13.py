"""Lesson 13 (Hopper's tensor cores): the shapes the matmul kernels are checked on, the check itself (lesson 09's,
in bf16 and fp16), what each variant needs of a GPU, and the exercise: the producer/consumer hand-off of a
warp-specialised matmul (full and empty mbarriers, expect_tx, phase parity) and the wgmma descriptors of its tiles.

Shapes are (M, N, K) for A: [M, K] and B: [K, N]. The reference multiplies in float64 and rounds once to the
inputs' dtype; the kernels accumulate in fp32 and round once, so bf16 and fp16 outputs differ from it by about one
unit in the last place. The TMA variants read rows of 16-byte multiples: K and N multiples of 8 (M too for a
column-major A). matmul13_5 takes either operand column-major (the transpose of a contiguous tensor, such as
w.t()); linear13 is nn.Linear's product with the bias and an activation fused into matmul13_5's epilogue;
scaled_mm13 is torch._scaled_mm's fp8 product (e4m3 in, per-tensor scales, bf16 out) on the same kernel.
"""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

import torch

from ..check import TOLERANCE, Diagnosis, Report, check, random_tensor
from . import Exercise, Hint, Needs, Variant
from .lesson09 import MATMUL_TOLERANCE
from .lesson09 import SHAPES as ANY_SHAPES
from .lesson09 import check_matmul

HALF_DTYPES = (torch.bfloat16, torch.float16)
# (M, N, K), K and N multiples of 8: one row of C; one whole 128 x 128 tile of matmul13_1 and half of a 128 x 256 one;
# edges that cross every tile (M past 128 and 64, N past 128 and 64 but short of 256, K past 64 and 32 but short of
# two steps); six 64-deep steps, the last 8 deep, so that a 4-stage ring wraps and its barriers reach their second
# phase; K = 0 (C is all zeros); an empty C.
SHAPES = ((1, 8, 8), (128, 128, 128), (200, 136, 72), (65, 264, 328), (5, 8, 0), (0, 8, 8))
# The reference variants run in one thread order: each order is a whole run of every case, and the order of the
# threads cannot change what an mbarrier or a wgmma wait lets through.
ONE_ORDER = ("forward",)

# What the variants need beyond a T4 (compute capability 7.5). The launchers in kernels/reference/13_hopper_matmul.cu
# refuse a GPU below these with the same words (check_capability); the Hopper ones refuse a 10.x GPU too (sm_90a code
# runs on 9.0 only), which a gate, a lower bound, cannot say.
MMA_SYNC = Needs((8, 0), "mma.sync m16n8k16 on bf16/fp16 and cp.async")
HOPPER = Needs((9, 0), "TMA, mbarrier transactions and wgmma", only_major=True)  # sm_90a: 9.x alone


def check_matmul13(fn: Callable, shapes: Iterable = SHAPES, *, dtypes: Sequence[torch.dtype] = HALF_DTYPES,
                   name: str | None = None, backend: str | None = None, quiet: bool = False,
                   raise_on_fail: bool = False, orders: Sequence[str] | None = ONE_ORDER) -> Report:
    """check() of an out-variant matmul fn(a, b, c) in bf16/fp16 on (M, N, K) shapes against the float64 product.

    Without the simulator's race check: its instrumented build of a Hopper file costs half a minute, and what it
    would find here the simulator's own rules already stop at the line (kernels/sim/README.md, "Rules checked"): a
    wait that can never end, a copy into a stage that a wgmma still reads, a read before the copy landed, a wgmma
    without its fence. The kernels' global stores go to disjoint tiles of C."""
    return check_matmul(fn, shapes, dtypes=dtypes, name=name, backend=backend, quiet=quiet,
                        raise_on_fail=raise_on_fail, orders=orders, races=False)


# ---------------------------------------------------------------------------------------------
# Column-major operands (matmul13_5) and the fused epilogue (linear13).

# (M, N, K) with M, N and K multiples of 8, which every layout's rows in memory need: whole tiles, edges in every
# direction, six k-steps (the ring's second phase); one small tile; K = 0 (zeros, and for linear13 the bias and the
# activation alone); an empty C.
LAYOUT_SHAPES = ((128, 256, 64), (200, 136, 72), (72, 264, 328), (8, 8, 8), (8, 16, 0), (0, 8, 8))
LAYOUTS = (("a column-major", True, False), ("b column-major", False, True), ("both column-major", True, True))
ACTIVATIONS = ("none", "relu", "gelu")


def column_major(t: torch.Tensor) -> torch.Tensor:
    """The same values as t, laid out column-major: the transpose of a contiguous copy of t.t()."""
    return t.t().contiguous().t()


def in_layout(fn: Callable, a_column_major: bool, b_column_major: bool) -> Callable:
    """An out-variant matmul fn(a, b, c) called with a and/or b column-major: what check_matmul13 hands it (row-major
    operands) re-laid out, the values unchanged, so the reference stays a @ b."""
    def call(a, b, c):
        return fn(column_major(a) if a_column_major else a, column_major(b) if b_column_major else b, c)
    return call


def linear_operands(size: tuple[int, int, int], dtype: torch.dtype, device) -> list[torch.Tensor]:
    """x: [M, K], w: [N, K] (nn.Linear's weight) and bias: [N] for size (M, N, K), standard normal."""
    m, n, k = size
    return [random_tensor((m, k), dtype, device), random_tensor((n, k), dtype, device), random_tensor((n,), dtype, device)]


def linear_ref(act: str) -> Callable:
    """act(x @ w.T + bias) in float64, rounded once to x's dtype (gelu: the exact, erf form)."""
    def ref(x, w, bias):
        y = x.double() @ w.double().t() + bias.double()
        y = {"none": y, "relu": torch.relu(y), "gelu": torch.nn.functional.gelu(y)}[act]
        return y.to(x.dtype)
    return ref


def check_linear13(fn: Callable, act: str, shapes: Iterable = LAYOUT_SHAPES, *,
                   dtypes: Sequence[torch.dtype] = HALF_DTYPES, backend: str | None = None, quiet: bool = False,
                   raise_on_fail: bool = False) -> Report:
    """check() of fn(x, w, bias, act) (linear13) on (M, N, K) shapes against act(x @ w.T + bias) in float64."""
    return check(lambda x, w, bias: fn(x, w, bias, act), linear_ref(act), linear_operands, sizes=list(shapes),
                 dtypes=dtypes, tolerance=MATMUL_TOLERANCE, name=f"linear13 {act}", backend=backend, quiet=quiet,
                 raise_on_fail=raise_on_fail, orders=ONE_ORDER, races=False)


# ---------------------------------------------------------------------------------------------
# fp8 (scaled_mm13): torch._scaled_mm's product of e4m3 operands with per-tensor scales, in bf16.

FP8 = torch.float8_e4m3fn
# (M, N, K), K a multiple of 16 (rows of 16 bytes of e4m3) and N of 8: one whole 128 x 256 tile, one 128-deep step;
# edges in M and N and a second step 16 deep; six steps, the ring's second phase; a tiny product; K = 0; an empty C.
FP8_SHAPES = ((128, 256, 128), (200, 136, 144), (72, 264, 656), (8, 8, 16), (8, 16, 0), (0, 8, 16))
# The product of two e4m3 values is exact in fp32. The H100's tensor cores add the 32 products of one fp8 wgmma with
# fewer bits than fp32 (tests/ptx_cases.py records it: about 3e-3 off sums of 10), and scaled_mm13 accumulates in the
# wgmma's registers all along K, as torch._scaled_mm(use_fast_accum=True) does; the scales below bring the products'
# sums to about 1, where that is well inside bf16's tolerance, which the output's rounding needs anyway.
FP8_TOLERANCE = {FP8: TOLERANCE[torch.bfloat16]}


def fp8_operands(size: tuple[int, int, int], dtype: torch.dtype, device) -> list[torch.Tensor]:
    """a: [M, K] and w: [N, K] in e4m3 (standard normal values, rounded); scale_a in [0.25, 0.5) / sqrt(K) and scale_b
    in [2, 4): float32 scalars, each far enough from 1 that a kernel which leaves one out fails, and together bringing
    the sums of K products (about sqrt(K) in size) to about 1, as scales do in a model."""
    m, n, k = size
    scales = [(torch.rand((), device=device) * span + low).float() for low, span in ((0.25, 0.25), (2.0, 2.0))]
    scales[0] /= max(k, 1) ** 0.5
    return [random_tensor((m, k), dtype, device), random_tensor((n, k), dtype, device), *scales]


def scaled_mm_ref(a: torch.Tensor, w: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor) -> torch.Tensor:
    """(a @ w.T) * scale_a * scale_b in float64, rounded once to bf16: torch._scaled_mm(a, w.t(), ...)'s answer."""
    return (a.double() @ w.double().t() * scale_a.double() * scale_b.double()).to(torch.bfloat16)


def check_scaled_mm13(fn: Callable, shapes: Iterable = FP8_SHAPES, *, backend: str | None = None, quiet: bool = False,
                      raise_on_fail: bool = False) -> Report:
    """check() of fn(a, b, scale_a, scale_b) (scaled_mm13, or torch._scaled_mm with out_dtype=torch.bfloat16) on (M,
    N, K) shapes, b = w.t() column-major as both require, against the float64 product."""
    return check(lambda a, w, sa, sb: fn(a, w.t(), sa, sb), scaled_mm_ref, fp8_operands, sizes=list(shapes),
                 dtypes=(FP8,), tolerance=FP8_TOLERANCE, name="scaled_mm13", backend=backend, quiet=quiet,
                 raise_on_fail=raise_on_fail, orders=ONE_ORDER, races=False)


# ---------------------------------------------------------------------------------------------
# The exercise: ws_matmul.cu, the mbarrier protocol and the descriptors of a warp-specialised bf16 matmul.

# Whole tiles; edges of every tile and six 64-deep steps, so that each of the 2 stages is used three times (phases
# of parity 0, 1, 0) and a consumer hands stages back while the producer waits for them; a tiny product inside one tile.
EXERCISE_SHAPES = ((128, 128, 128), (200, 136, 328), (8, 8, 8))


def _run_ws_matmul(ext, backend) -> Report:
    return check_matmul13(ext.ws_matmul, EXERCISE_SHAPES, dtypes=(torch.bfloat16,), name="ws_matmul",
                          backend=backend)


EXERCISES = [
    # races=False: check_matmul13 says why; the simulator's rules catch the protocol's bugs by themselves.
    Exercise("13", "ws_matmul", "ws_matmul.cu", _run_ws_matmul, needs=HOPPER, races=False, hints=[
        Hint("Start with full[stage]. Its init counts one arrival, the producer's; TMA's bytes complete on it too. "
             "So before the loads, the producer arrives AND announces the bytes the stage's loads bring, in one "
             "instruction (one of the wrappers above the kernel). A consumer must not read the stage before that "
             "phase has completed: step s is use u = s / STAGES of its stage, that use is phase u of the barrier, and "
             "a wait names the phase's parity, u % 2. Without the wait the wgmma read the stage before the copy "
             "landed (NaN here); without the bytes, the phase completes at once, or the copies bring more than was "
             "announced.",
             answers=(Diagnosis.MBARRIER, Diagnosis.NAN_WHERE_REFERENCE_IS_NOT, Diagnosis.UNWRITTEN)),
        Hint("Then empty[stage], the way back: 8 arrivals, lane 0 of each consumer warp. A stage may go back only when "
             "no wgmma of the warp still reads it: after wgmma_wait<1>() the newest group (step s's, on this stage) "
             "may still run, so the stage that is free is step s - 1's ((s - 1) % STAGES, and only when s > 0). The "
             "producer, before use u > 0 of a stage, waits for the phase of use u - 1 of its empty barrier: parity "
             "(u - 1) % 2.", answers=(Diagnosis.WGMMA_IN_FLIGHT,)),
        Hint("Right protocol, wrong products: the descriptors. desc: (addr >> 4) & 0x3FFF in bits 0-13, (lbo >> 4) & "
             "0x3FFF from bit 16, (sbo >> 4) & 0x3FFF from bit 32, the swizzle mode from bit 62, in 64 bits. The tiles "
             "are 128-byte swizzled (SWIZZLE_128B, as the tensor maps say), 8 rows of 128 bytes to a core block: SBO "
             "1024 for both. A: slice kk starts kk * 32 bytes on, LBO 16. B: slice kk starts kk * 16 rows of 128 "
             "bytes on, and the second 64 columns are B_BOX_BYTES on (LBO).",
             answers=(Diagnosis.WRONG_VALUES, Diagnosis.WGMMA_DESCRIPTOR)),
        Hint("Producer: if (use > 0) mbar_wait(&empty[stage], (use - 1) % 2); mbar_expect_bytes(&full[stage], "
             "STAGE_BYTES);   Consumer: mbar_wait(&full[stage], s / STAGES % 2); before the wgmma, and after "
             "wgmma_wait<1>(): if (s > 0 && lane == 0) mbar_arrive(&empty[(s - 1) % STAGES]);   Descriptors: return "
             "((addr >> 4) & 0x3FFFull) | (uint64_t((lbo >> 4) & 0x3FFF) << 16) | (uint64_t((sbo >> 4) & 0x3FFF) "
             "<< 32) | (uint64_t(swizzle) << 62);   a_desc: desc(a + kk * 32, 16, 1024, SWIZZLE_128B);   b_desc: "
             "desc(b + kk * 16 * 128, B_BOX_BYTES, 1024, SWIZZLE_128B)."),
    ]),
]


# ---------------------------------------------------------------------------------------------
# The reference file's variants, as `make profile KERNEL=...` (Nsight Compute) and the benchmark run them. A size is
# n, for n x n matrices.

GPU_SIZE = 4096


def _matmul_args(n: int, dtype, device) -> tuple:
    a, b = (torch.randn(n, n, device=device).to(dtype) for _ in range(2))
    return a, b, torch.empty(n, n, dtype=dtype, device=device)


VARIANTS = [
    Variant("matmul13_1", _matmul_args, HALF_DTYPES, needs=MMA_SYNC),
    *(Variant(f"matmul13_{k}", _matmul_args, HALF_DTYPES, needs=HOPPER) for k in range(2, 7)),
]
# The functional form takes matmul13_5 on an H100 and matmul13_1 elsewhere: it needs what matmul13_1 needs.
# linear13 and scaled_mm13 run matmul13_5's kernel only.
OP_NEEDS = {"matmul13": MMA_SYNC, "linear13": HOPPER, "scaled_mm13": HOPPER}
