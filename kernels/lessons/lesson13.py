"""Lesson 13 (Hopper's tensor cores): the shapes the matmul kernels are checked on, the check itself (lesson 09's,
in bf16 and fp16), what each variant needs of a GPU, and the exercise: the producer/consumer hand-off of a
warp-specialised matmul (full and empty mbarriers, expect_tx, phase parity) and the wgmma descriptors of its tiles.

Shapes are (M, N, K) for A: [M, K] and B: [K, N]. The reference multiplies in float64 and rounds once to the
inputs' dtype; the kernels accumulate in fp32 and round once, so bf16 and fp16 outputs differ from it by about one
unit in the last place. The TMA variants read rows of 16-byte multiples: K and N multiples of 8 (M too for a
column-major A). matmul13_5 takes either operand column-major (the transpose of a contiguous tensor, such as
w.t()); linear13 is nn.Linear's product with the bias and an activation fused into matmul13_5's epilogue.
"""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

import torch

from ..check import Diagnosis, Report, check, random_tensor
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
HOPPER = Needs((9, 0), "TMA, mbarrier transactions and wgmma")


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
    *(Variant(f"matmul13_{k}", _matmul_args, HALF_DTYPES, needs=HOPPER) for k in range(2, 6)),
]
# The functional form takes matmul13_5 on an H100 and matmul13_1 elsewhere: it needs what matmul13_1 needs.
# linear13 runs matmul13_5's kernel only.
OP_NEEDS = {"matmul13": MMA_SYNC, "linear13": HOPPER}
