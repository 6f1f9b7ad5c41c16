"""Lesson 09 (matrix multiply): the reference C = A @ B, the awkward shapes every kernel is checked on, the
check that transposed inputs are refused, and the 2-D register-blocking exercise.

Shapes are (M, N, K) for A: [M, K] and B: [K, N]. The reference multiplies in float64 and rounds once to the
output's dtype; the tolerances allow for float32 sums of up to a few thousand terms.
"""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

import torch

from ..check import HINTS, Case, Diagnosis, Report, TOLERANCE, check, merge, profile_raised, random_tensor
from . import Exercise, Hint, Needs, Probe, Variant, on_the_simulator

# (M, N, K): 1s, sizes just past a 64-wide tile and an 8-deep step, K = 0 (C is all zeros), empty C
SHAPES = ((1, 1, 1), (1, 64, 8), (64, 1, 9), (64, 64, 8), (65, 65, 9), (63, 130, 17), (7, 3, 200), (130, 70, 1000),
          (5, 4, 0), (0, 3, 4))
# float32 sums of K products carry about sqrt(K) roundings: 1e-3 absolute covers K of a few thousand
MATMUL_TOLERANCE = {**TOLERANCE, torch.float32: (1e-4, 1e-3)}
# On the simulator the block-tile exercise's self-check also profiles its memory accesses on one shape (2 x 2 tiles
# of C, three steps along K, the last one ragged) and compares them with the solution's there, in warp-level
# requests: the tiles' staging makes all of its global loads, the inner loop reads only shared memory. An inner loop
# that reads A and B from global memory gets the values right with 4228 global loads and no shared ones.
PROFILE_SHAPE = (70, 70, 20)
SOLUTION_LOADS = {"global load": 228, "shared load": 6144}

# What needs more of a GPU than a T4 (compute capability 7.5) has: tensor cores take fp16 from 7.0 but bf16 and
# TF32 from 8.0, and a block may have more than 64 KB of shared memory from 8.0 on. The launchers in
# kernels/reference/09_matmul.cu refuse an older GPU with the same words (check_capability).
BF16_TENSOR_CORES = Needs((8, 0), "bf16 tensor cores", (torch.bfloat16,))
TF32_TENSOR_CORES = Needs((8, 0), "TF32 tensor cores")
MATMUL12_SHARED = Needs((8, 0), "74 KB of shared memory per block")  # and bf16 tensor cores, in bf16


def matmul_ref(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b in float64, rounded once to a's dtype."""
    return (a.double() @ b.double()).to(a.dtype)


def operands(size: tuple[int, int, int], dtype: torch.dtype, device) -> list[torch.Tensor]:
    """Inputs for check(): fresh standard-normal a: [M, K] and b: [K, N] for size (M, N, K)."""
    m, n, k = size
    return [random_tensor((m, k), dtype, device), random_tensor((k, n), dtype, device)]


def product_shape(out_dtype: torch.dtype | None = None) -> Callable:
    """The out-variant's output: [M, N] in out_dtype (default: a's dtype)."""
    def spec(inputs: list[torch.Tensor]) -> list[tuple[tuple[int, int], torch.dtype]]:
        a, b = inputs
        return [((a.shape[0], b.shape[1]), out_dtype or a.dtype)]
    return spec


def check_matmul(fn: Callable, shapes: Iterable = SHAPES, *, dtypes=(torch.float32,), ref: Callable = matmul_ref,
                 out_dtype: torch.dtype | None = None, name: str | None = None, backend: str | None = None,
                 quiet: bool = False, raise_on_fail: bool = False, orders: Sequence[str] | None = None,
                 races: bool = True) -> Report:
    """check() of an out-variant matmul fn(a, b, c) on (M, N, K) shapes against `ref`; c in out_dtype
    (default: the inputs' dtype). `orders`: the simulator's thread orders (check()'s default: all); `races`: the
    simulator's race check on the small cases (check()'s)."""
    return check(fn, ref, operands, out=product_shape(out_dtype), sizes=list(shapes), dtypes=dtypes,
                 tolerance=MATMUL_TOLERANCE, name=name, backend=backend, quiet=quiet, raise_on_fail=raise_on_fail,
                 orders=orders, races=races)


def _refused(fn: Callable, args: tuple, expected: str) -> tuple[bool, str]:
    """(passed, problem): fn(*args) must raise a RuntimeError whose message contains `expected`."""
    try:
        fn(*args)
    except RuntimeError as e:
        said = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return (expected in str(e), "" if expected in str(e) else f"refused, but the message does not say "
                f"{expected!r}: {said[:160]}")
    return False, "accepted a bad input: it must raise an error that says what was expected"


def check_refusals(fn: Callable, device, dtype: torch.dtype = torch.float32, name: str = "refusals",
                   quiet: bool = False, out_dtype: torch.dtype | None = None) -> Report:
    """A transposed a or b (a view, not contiguous) and mismatched shapes must be refused with a clear error."""
    report = Report(name)
    a, b = torch.randn(6, 4, device=device).to(dtype), torch.randn(4, 5, device=device).to(dtype)
    c = torch.empty(6, 5, device=device, dtype=out_dtype or dtype)
    cases = [("a transposed", (a.t().contiguous().t(), b, c), "contiguous"),
             ("b transposed", (a, b.t().contiguous().t(), c), "contiguous"),
             ("a: [6, 4], b: [5, 5]", (a, torch.randn(5, 5, device=device).to(dtype), c), "[6, 4]")]
    for label, args, expected in cases:
        passed, problem = _refused(fn, args, expected)
        report.cases.append(Case(label, dtype, passed, problem, part="" if passed else label))
    if not report.passed:
        report.hints.append("call CHECK_CONTIGUOUS on every tensor before the launch, and check that a's columns "
                            "equal b's rows, saying both shapes in the message")
    if not quiet:
        print(report)
    return report


def loads(fn: Callable, shape: tuple[int, int, int] = PROFILE_SHAPE):
    """({"global load": n, "shared load": n}, the profile): the warp-level load requests of a sim-loaded float32
    matmul fn(a, b, c) on one (M, N, K), by the simulator's access profile (kernels.profile)."""
    from ..sim.profile import profile

    m, n, _ = shape
    a, b = operands(shape, torch.float32, "cpu")
    report = profile(fn, a, b, torch.empty(m, n))
    return {kind: sum(r.requests for r in report.rows if r.kind == kind) for kind in SOLUTION_LOADS}, report


def check_tile_reuse(fn: Callable, name: str = "tile reuse") -> Report:
    """On the simulator: the inner loop must read the tiles staged in shared memory, not A and B in global memory.
    One case on PROFILE_SHAPE: some shared loads, and no more global loads than the solution's (SOLUTION_LOADS)."""
    shown = "x".join(map(str, PROFILE_SHAPE))
    case = Case(f"{shown} profile", torch.float32, part="profile")
    report = Report(name, [case])
    try:
        got, profiled = loads(fn)
    except Exception as e:  # noqa: BLE001 - the report says what went wrong, as a failing case does
        return profile_raised(report, case, e)
    want_global, want_shared = SOLUTION_LOADS["global load"], SOLUTION_LOADS["shared load"]
    if got["shared load"] == 0 or got["global load"] > want_global:
        case.passed, case.diagnosis = False, Diagnosis.ACCESS_PATTERN
        case.problem = ("the inner loop reads global memory, not the shared-memory tiles" if got["shared load"] == 0
                        else "more global loads than the solution's: some of the inner loop's reads go to global memory")
        case.detail = (f"the simulator's access profile on {shown} (M x N x K) shows {got['global load']} global load "
                       f"requests and {got['shared load']} shared load requests (each a warp's);\nthe solution's shows "
                       f"{want_global} global (the staging of the tiles, the only reads of A and B) and {want_shared} "
                       "shared (the inner loop reading As and Bs). By line:\n" + str(profiled))
        report.hints.append(HINTS[Diagnosis.ACCESS_PATTERN])
    return report


def _values_and_refusals(fn: Callable, name: str, backend: str | None, dtype: torch.dtype,
                         reuse: Callable[[], Callable] | None = None, **kw) -> Report:
    """The exercise's check: values on SHAPES, then the refusal of transposed inputs, and with `reuse` (which gives
    the op as the simulator runs it), once the values are right, check_tile_reuse; one printed report."""
    from ..backend import device, resolve

    values = check_matmul(fn, dtypes=(dtype,), name=name, backend=backend, quiet=True, **kw)
    refusals = check_refusals(fn, device(resolve(backend)), dtype, name=f"{name} refusals", quiet=True,
                              out_dtype=kw.get("out_dtype"))
    parts = [values, refusals]
    if reuse is not None and values.passed:  # the simulator's access profile, on a GPU too
        parts.append(check_tile_reuse(reuse(), name=f"{name} tile reuse"))
    return merge(name, parts, quiet=False)


def _run_blocktile(ext, backend) -> Report:
    return _values_and_refusals(ext.matmul_blocktile, "matmul_blocktile", backend, torch.float32,
                                reuse=lambda: on_the_simulator(ext, "matmul_blocktile", backend))


def _run_wmma(ext, backend) -> Report:
    return _values_and_refusals(ext.matmul_wmma, "matmul_wmma", backend, torch.bfloat16,
                                ref=lambda a, b: (a.double() @ b.double()).float(), out_dtype=torch.float32)


EXERCISES = [
    Exercise("09", "matmul_blocktile", "matmul_blocktile.cu", _run_blocktile, hints=[
        Hint("Two gaps. First the inner loop: after the barrier, every thread walks kk = 0 .. BK-1; for each kk it "
             "reads TM values of the A tile (As[tr + i][kk]) and TN values of the B tile (Bs[kk][tc + j]) into ra and "
             "rb, then adds their outer product into acc. matmul_kernel5 in kernels/reference/09_matmul.cu is the "
             "same loop.", answers=(Diagnosis.WRONG_VALUES, Diagnosis.ACCESS_PATTERN)),
        Hint("Second the store: the thread's acc[i][j] belongs at row m0 + tr + i, column n0 + tc + j of C, which is "
             "C[(int64_t)m * N + n]. Elements that are never written stay NaN in the check.", answers=(Diagnosis.UNWRITTEN, Diagnosis.NAN_WHERE_REFERENCE_IS_NOT)),
        Hint("The edges: M and N need not be multiples of 64, so the last tiles hang over the bottom and right of C. "
             "Store only where m < M and n < N (strictly less: row M is already outside C).",
             answers=(Diagnosis.WROTE_PAST_END, Diagnosis.WROTE_BEFORE_START)),
        Hint("for (int kk = 0; kk < BK; ++kk) { for (int i = 0; i < TM; ++i) ra[i] = As[tr + i][kk]; "
             "for (int j = 0; j < TN; ++j) rb[j] = Bs[kk][tc + j]; for (int i = 0; i < TM; ++i) for (int j = 0; "
             "j < TN; ++j) acc[i][j] += ra[i] * rb[j]; }   and after the K loop: for i < TM, j < TN: "
             "const int m = m0 + tr + i, n = n0 + tc + j; if (m < M && n < N) C[(int64_t)m * N + n] = acc[i][j];"),
    ]),
    Exercise("09", "matmul_wmma", "matmul_wmma.cu", _run_wmma, needs=BF16_TENSOR_CORES, hints=[
        Hint("The accumulator starts at zero: wmma::fill_fragment(acc, 0.0f) before the loop. Inside the loop, after "
             "the barrier, the step's tiles are BK = 32 deep and a fragment 16: for each 16-deep slice kk = 0, 16, "
             "every lane of the warp makes the same three calls: two load_matrix_sync and one mma_sync (they are "
             "warp-wide: the 32 lanes do them together).", answers=(Diagnosis.WRONG_VALUES, Diagnosis.UNWRITTEN, Diagnosis.NAN_WHERE_REFERENCE_IS_NOT)),
        Hint("load_matrix_sync(frag, pointer, ldm): pointer is the fragment's top-left element in shared memory, "
             "ldm the length of a row of that array, not of the fragment (16). The A tile has BK values per row, so "
             "the warp's fragment of slice kk starts at row wm, column kk: &As[wm * BK + kk], rows BK apart; the B "
             "tile has BN per row, and its fragment starts at row kk, column wn: &Bs[kk * BN + wn], rows BN apart."),
        Hint("wmma::fill_fragment(acc, 0.0f);   and in the loop:   for (int kk = 0; kk < BK; kk += F) { "
             "wmma::load_matrix_sync(fa, &As[wm * BK + kk], BK); wmma::load_matrix_sync(fb, &Bs[kk * BN + wn], BN); "
             "wmma::mma_sync(acc, fa, fb, acc); }"),
    ]),
]


# ---------------------------------------------------------------------------------------------
# The reference file's variants, as `make profile` (the simulator's access tables, and Nsight Compute with
# KERNEL=) and the benchmark run them, each in the dtypes it takes: the fp32 ladder, the tensor-core
# variants in bf16 and fp16, matmul11 in float32 rounded to TF32. A size is n, for n x n matrices.

GPU_SIZE = 2048
SIM_SIZE = 128    # one whole 128x128 tile of matmul6
HALF_DTYPES = (torch.bfloat16, torch.float16)


def _matmul_args(n: int, dtype, device) -> tuple:
    a, b = (torch.rand(n, n, device=device).to(dtype) for _ in range(2))
    return a, b, torch.empty(n, n, dtype=dtype, device=device)


PROBES = {"matmul1": "lanes walk down a column of C", "matmul2": "lanes walk along a row of C",
          "matmul3": "32x32 tiles staged in shared memory", "matmul6": "float4 tile loads, the A tile stored transposed"}
VARIANTS = [
    *(Variant(f"matmul{k}", _matmul_args, (torch.float32,),
              (Probe(f"matmul{k}: {PROBES[f'matmul{k}']}"),) if f"matmul{k}" in PROBES else ()) for k in range(1, 9)),
    Variant("matmul9", _matmul_args, HALF_DTYPES, needs=BF16_TENSOR_CORES),
    Variant("matmul10", _matmul_args, HALF_DTYPES, needs=BF16_TENSOR_CORES),
    Variant("matmul11", _matmul_args, (torch.float32,), needs=TF32_TENSOR_CORES),  # TF32 tensor cores on float32 inputs
    Variant("matmul12", _matmul_args, HALF_DTYPES, needs=MATMUL12_SHARED),
]
# The functional form: matmul12 for bfloat16 and float16 (matmul8 for float32, which needs no more than 7.5).
OP_NEEDS = {"matmul": Needs((8, 0), MATMUL12_SHARED.what, HALF_DTYPES)}
FP32 = [v.name for v in VARIANTS if v.dtypes == (torch.float32,) and v.name != "matmul11"]
HALF = [v.name for v in VARIANTS if v.dtypes == HALF_DTYPES]
