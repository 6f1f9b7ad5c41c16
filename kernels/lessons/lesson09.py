"""Lesson 09 (matrix multiply): the reference C = A @ B, the awkward shapes every kernel is checked on, the
check that transposed inputs are refused, and the 2-D register-blocking exercise.

Shapes are (M, N, K) for A: [M, K] and B: [K, N]. The reference multiplies in float64 and rounds once to the
output's dtype; the tolerances allow for float32 sums of up to a few thousand terms.
"""
from __future__ import annotations

from typing import Callable, Iterable

import torch

from ..check import Case, Diagnosis, Report, TOLERANCE, check, merge, random_tensor
from . import Exercise, Hint, Probe, Variant

# (M, N, K): 1s, sizes just past a 64-wide tile and an 8-deep step, K = 0 (C is all zeros), empty C
SHAPES = ((1, 1, 1), (1, 64, 8), (64, 1, 9), (64, 64, 8), (65, 65, 9), (63, 130, 17), (7, 3, 200), (130, 70, 1000),
          (5, 4, 0), (0, 3, 4))
# float32 sums of K products carry about sqrt(K) roundings: 1e-3 absolute covers K of a few thousand
MATMUL_TOLERANCE = {**TOLERANCE, torch.float32: (1e-4, 1e-3)}


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
                 quiet: bool = False, raise_on_fail: bool = False) -> Report:
    """check() of an out-variant matmul fn(a, b, c) on (M, N, K) shapes against `ref`; c in out_dtype
    (default: the inputs' dtype)."""
    return check(fn, ref, operands, out=product_shape(out_dtype), sizes=list(shapes), dtypes=dtypes,
                 tolerance=MATMUL_TOLERANCE, name=name, backend=backend, quiet=quiet, raise_on_fail=raise_on_fail)


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


def _values_and_refusals(fn: Callable, name: str, backend: str | None, dtype: torch.dtype, **kw) -> Report:
    """The exercise's check: values on SHAPES, then the refusal of transposed inputs; one printed report."""
    from ..backend import device, resolve

    values = check_matmul(fn, dtypes=(dtype,), name=name, backend=backend, quiet=True, **kw)
    refusals = check_refusals(fn, device(resolve(backend)), dtype, name=f"{name} refusals", quiet=True,
                              out_dtype=kw.get("out_dtype"))
    report = merge(name, [values, refusals])
    print(report)
    return report


def _run_blocktile(ext, backend) -> Report:
    return _values_and_refusals(ext.matmul_blocktile, "matmul_blocktile", backend, torch.float32)


def _run_wmma(ext, backend) -> Report:
    return _values_and_refusals(ext.matmul_wmma, "matmul_wmma", backend, torch.bfloat16,
                                ref=lambda a, b: (a.double() @ b.double()).float(), out_dtype=torch.float32)


EXERCISES = [
    Exercise("09", "matmul_blocktile", "matmul_blocktile.cu", _run_blocktile, hints=[
        Hint("Two gaps. First the inner loop: after the barrier, every thread walks kk = 0 .. BK-1; for each kk it "
             "reads TM values of the A tile (As[tr + i][kk]) and TN values of the B tile (Bs[kk][tc + j]) into ra and "
             "rb, then adds their outer product into acc. matmul_kernel5 in kernels/reference/09_matmul.cu is the "
             "same loop.", answers=(Diagnosis.WRONG_VALUES,)),
        Hint("Second the store: the thread's acc[i][j] belongs at row m0 + tr + i, column n0 + tc + j of C, which is "
             "C[(int64_t)m * N + n]. Elements that are never written stay NaN in the check.", answers=(Diagnosis.UNWRITTEN, Diagnosis.NAN_WHERE_REFERENCE_IS_NOT)),
        Hint("The edges: M and N need not be multiples of 64, so the last tiles hang over the bottom and right of C. "
             "Store only where m < M and n < N (strictly less: row M is already outside C).",
             answers=(Diagnosis.WROTE_PAST_END, Diagnosis.WROTE_BEFORE_START)),
        Hint("for (int kk = 0; kk < BK; ++kk) { for (int i = 0; i < TM; ++i) ra[i] = As[tr + i][kk]; "
             "for (int j = 0; j < TN; ++j) rb[j] = Bs[kk][tc + j]; for (int i = 0; i < TM; ++i) for (int j = 0; "
             "j < TN; ++j) acc[i][j] += ra[i] * rb[j]; }   and after the K loop: for i < TM, j < TN: "
             "const int m = m0 + tr + i, n = n0 + tc + j; if (m < M && n < N) C[(int64_t)m * N + n] = acc[i][j];"),
    ]),    Exercise("09", "matmul_wmma", "matmul_wmma.cu", _run_wmma, hints=[
        Hint("The accumulator starts at zero: wmma::fill_fragment(acc, 0.0f) before the loop. Inside the loop, after "
             "the barrier, every lane of the warp makes the same three calls: two load_matrix_sync and one "
             "mma_sync (they are warp-wide: the 32 lanes do them together).", answers=(Diagnosis.WRONG_VALUES, Diagnosis.UNWRITTEN, Diagnosis.NAN_WHERE_REFERENCE_IS_NOT)),
        Hint("load_matrix_sync(frag, pointer, ldm): pointer is the fragment's top-left element in shared memory, "
             "ldm the length of a row of that array. The A tile has BK values per row, so the warp's rows start at "
             "&As[wm * BK]; the B tile has BN per row, and the warp's columns start at &Bs[wn]."),
        Hint("wmma::fill_fragment(acc, 0.0f);   and in the loop:   wmma::load_matrix_sync(fa, &As[wm * BK], BK); "
             "wmma::load_matrix_sync(fb, &Bs[wn], BN); wmma::mma_sync(acc, fa, fb, acc);"),
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
    Variant("matmul9", _matmul_args, HALF_DTYPES),
    Variant("matmul10", _matmul_args, HALF_DTYPES),
    Variant("matmul11", _matmul_args, (torch.float32,)),  # TF32 tensor cores on float32 inputs
    Variant("matmul12", _matmul_args, HALF_DTYPES),
]
FP32 = [v.name for v in VARIANTS if v.dtypes == (torch.float32,) and v.name != "matmul11"]
HALF = [v.name for v in VARIANTS if v.dtypes == HALF_DTYPES]
