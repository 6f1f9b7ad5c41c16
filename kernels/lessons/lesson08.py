"""Lesson 08 (layernorm): the definitions the kernels are checked against, the backward exercise and the optional
Welford exercise, and the autograd registration of the functional layernorm op.

Layernorm here is torch.nn.functional.layer_norm over the last dimension of a 2-D x: the biased variance,
eps inside the square root, weight and bias of shape [cols] in x's dtype; mean and rstd = 1 / sqrt(var + eps)
are returned in float32, one per row, for the backward.
"""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

import torch
import torch.nn.functional as F

from ..check import ROW_OP_SHAPES, Diagnosis, Report, SIM_ORDERS, TOLERANCE, check, check_deterministic, merge
from . import Exercise, Hint, Variant

EPS = 1e-5
SHAPES = ROW_OP_SHAPES  # kernels/check.py says why each shape
SHIFT, SPREAD = -2.3, 0.5  # shifted rows: -2.3 + 0.5 * randn, where E[x^2] - E[x]^2 starts to cancel
LARGE = 1e3                # the large-magnitude set: 300 + 1000 * randn
# The offset set: 100 + randn, a mean far from 0 next to the spread, where E[x^2] - E[x]^2 (the one-pass variance,
# the lesson's pitfall) puts out 2 to 60 times the tolerance off; at -2.3 + 0.5 * randn it stays inside it. Short
# rows only: a thread-per-row kernel's sequential float32 sum of values near 100 moves the mean itself, to 0.65 of
# the tolerance on rows of 33 (the worst of 150 draws) and past it on rows of 300.
OFFSET = 100.0
OFFSET_SHAPES = ((3, 31), (7, 33))
# The backward's column sums are checked for the same bits on two runs on this shape: 3 slices of 64 rows and a
# ragged second block of 32 columns
DETERMINISM_SHAPE = (130, 40)
# float32: out = (x - mean) * rstd * weight + bias. Summing a row of thousands of values in float32
# moves the mean by a few ulps of the row sum, and rstd multiplies that error: a thread-per-row
# kernel's sequential sum of 4097 values shifted by -2.3 lands about 2e-5 from float64's answer.
# bfloat16 keeps the checker's tolerance (one rounding of the output dominates).
TOLERANCE_LN = {torch.float32: (1e-4, 1e-4), torch.bfloat16: TOLERANCE[torch.bfloat16]}


def layernorm_ref(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = EPS):
    """(out, mean, rstd) computed in float64: out in x's dtype, mean and rstd in float32."""
    xd = x.double()
    out = F.layer_norm(xd, (x.shape[-1],), weight.double(), bias.double(), eps)
    mean = xd.mean(dim=-1)
    rstd = (((xd - mean[:, None]) ** 2).mean(dim=-1) + eps).rsqrt()  # the biased variance
    return out.to(x.dtype), mean.float(), rstd.float()


def layernorm_backward_ref(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, mean: torch.Tensor,
                           rstd: torch.Tensor):
    """(dx, dweight, dbias) from autograd through F.layer_norm in float64, in x's dtype; mean, rstd unused."""
    xd = x.double().requires_grad_()
    wd = weight.double().requires_grad_()
    bd = torch.zeros_like(wd, requires_grad=True)
    y = F.layer_norm(xd, (x.shape[-1],), wd, bd, EPS)
    dx, dw, db = torch.autograd.grad(y, (xd, wd, bd), dy.double())
    return dx.to(x.dtype), dw.to(x.dtype), db.to(x.dtype)


def _params(cols: int, dtype, device) -> list[torch.Tensor]:
    """weight around 1 and bias around 0, random (never all ones and zeros, which hide a swapped or skipped term)."""
    w = 1.0 + 0.5 * torch.randn(cols, device=device)
    b = 0.5 * torch.randn(cols, device=device)
    return [w.to(dtype), b.to(dtype)]


def shifted_rows(shift: float = SHIFT, spread: float = SPREAD) -> Callable:
    """Inputs for check() of a forward: x = shift + spread * randn of the case's shape, weight and bias."""
    def inputs(size, dtype, device):
        x = (shift + spread * torch.randn(size, device=device)).to(dtype)
        return [x, *_params(size[1], dtype, device)]
    return inputs


def backward_inputs(shift: float = SHIFT, spread: float = SPREAD) -> Callable:
    """Inputs for check() of a backward: dy, x = shift + spread * randn, weight, and x's mean and rstd (float32)."""
    def inputs(size, dtype, device):
        x, w, _ = shifted_rows(shift, spread)(size, dtype, device)
        _, mean, rstd = layernorm_ref(x, w, torch.zeros_like(w))
        return [torch.randn(size, device=device).to(dtype), x, w, mean, rstd]
    return inputs


def _outputs(ins) -> list:
    rows = ins[0].shape[0]
    return [(tuple(ins[0].shape), ins[0].dtype), ((rows,), torch.float32), ((rows,), torch.float32)]


def _shifted_and_large(fn: Callable, ref: Callable, make: Callable, shift: float, quiet: bool, raise_on_fail: bool,
                       offset_shapes: Iterable = (), **common) -> Report:
    """check() on make(shift, 0.5) inputs, on make(300, 1000) inputs (marked "large") and, on `offset_shapes`, on
    make(100, 1) inputs (marked "mean 100"), as one report. The large and offset values test the arithmetic, not the
    barriers: on the simulator they run in the first thread order only (the offset set without the race check)."""
    shifted = check(fn, ref, make(shift, SPREAD), quiet=True, tolerance=TOLERANCE_LN, **common)
    common["orders"] = (common.get("orders") or SIM_ORDERS)[:1]
    large = check(fn, ref, make(300.0, LARGE), quiet=True, tolerance=TOLERANCE_LN, **common)
    parts = [shifted, (large, "large")]
    if offset_shapes:
        common["sizes"] = list(offset_shapes)
        offset = check(fn, ref, make(OFFSET, 1.0), quiet=True, tolerance=TOLERANCE_LN, races=False, **common)
        parts.append((offset, "mean 100"))
    for part, mark in parts[1:]:
        for case in part.cases:  # the report's size column says which input set a case used
            case.size = "x".join(map(str, case.size)) + " " + mark
    return merge(shifted.name, [shifted, *(part for part, _ in parts[1:])], quiet=quiet, raise_on_fail=raise_on_fail)


def check_layernorm(fn: Callable, shapes: Iterable = SHAPES, *, dtypes=(torch.float32,), name: str | None = None,
                    backend: str | None = None, quiet: bool = False, raise_on_fail: bool = False,
                    shift: float = SHIFT, orders: Sequence[str] | None = None,
                    offset_shapes: Iterable = OFFSET_SHAPES) -> Report:
    """check() of an out-variant layernorm fn(x, weight, bias, eps, out, mean, rstd): once on shift + 0.5 * randn
    rows, once on 300 + 1000 * randn rows, and on `offset_shapes` once on 100 + randn rows (where the one-pass
    variance E[x^2] - E[x]^2 cancels). `orders`: the simulator's thread orders (check()'s default: all)."""
    def op(x, w, b, out, mean, rstd):
        return fn(x, w, b, EPS, out, mean, rstd)

    return _shifted_and_large(op, layernorm_ref, shifted_rows, shift, quiet, raise_on_fail, offset_shapes, out=_outputs,
                              out_names=("out", "mean", "rstd"), sizes=list(shapes), dtypes=dtypes,
                              name=name or getattr(fn, "__name__", None), backend=backend, orders=orders)


def check_layernorm_backward(fn: Callable, shapes: Iterable = SHAPES, *, dtypes=(torch.float32,),
                             name: str | None = None, backend: str | None = None, quiet: bool = False,
                             raise_on_fail: bool = False, orders: Sequence[str] | None = None,
                             deterministic: bool = False) -> Report:
    """check() of a backward fn(dy, x, weight, mean, rstd) -> (dx, dweight, dbias) against autograd in float64,
    on shifted rows and on large-magnitude rows. `orders` as for check_layernorm. `deterministic`: also run it
    twice on DETERMINISM_SHAPE (on the simulator in two thread and block orders) and require the same bits of
    dweight and dbias both times."""
    name = name or getattr(fn, "__name__", None)
    names = ("dx", "dweight", "dbias")
    report = _shifted_and_large(fn, layernorm_backward_ref, backward_inputs, SHIFT, True, False, out_names=names,
                                sizes=list(shapes), dtypes=dtypes, name=name, backend=backend, orders=orders)
    parts = [report]
    if deterministic:
        parts.append(check_deterministic(fn, backward_inputs(), DETERMINISM_SHAPE, parts=("dweight", "dbias"),
                                         out_names=names, name=name, backend=backend, quiet=True,
                                         why="the column sums are not deterministic (an atomicAdd of floats adds in "
                                             "the order the threads arrive)"))
    return merge(report.name, parts, quiet=quiet, raise_on_fail=raise_on_fail)


_registered: set[str] = set()


def register_layernorm(ext) -> None:
    """Give `ext`'s functional layernorm op its fake kernels and its derivative (the lesson 03 route); once per build."""
    ns = ext.ns
    if ns in _registered:
        return
    ops = getattr(torch.ops, ns)

    @torch.library.register_fake(f"{ns}::layernorm")
    def _(x, weight, bias, eps):
        stats = x.new_empty((x.shape[0],), dtype=torch.float32)
        return torch.empty_like(x), stats, torch.empty_like(stats)

    for name in ("layernorm_backward", "layernorm_backward1", "layernorm_backward2"):
        @torch.library.register_fake(f"{ns}::{name}")
        def _(dy, x, weight, mean, rstd):
            return torch.empty_like(x), torch.empty_like(weight), torch.empty_like(weight)

    def setup_context(ctx, inputs, output):
        x, weight, _, _ = inputs
        _, mean, rstd = output
        ctx.save_for_backward(x, weight, mean, rstd)
        ctx.mark_non_differentiable(mean, rstd)  # statistics for the backward, not outputs to train through

    def backward(ctx, grad, _grad_mean, _grad_rstd):
        x, weight, mean, rstd = ctx.saved_tensors
        dx, dw, db = ops.layernorm_backward(grad.contiguous(), x, weight, mean, rstd)  # grad may be strided
        return dx, dw, db, None

    torch.library.register_autograd(f"{ns}::layernorm", backward, setup_context=setup_context)
    _registered.add(ns)


# NaN in dweight or dbias: column_sum_kernel (given written) always writes them, from partial sums that held NaN
PARTIAL_NAN = ("column_sum_kernel added up a partial sum that held NaN: one that layernorm_dparams_kernel never wrote, "
               "or added to (+=) before writing it")
PARTIAL_NAN_HINT = ("NaN in dweight or dbias: the partial sums are not zeroed (in the check they start as NaN), so "
                    "layernorm_dparams_kernel must write every one of them, with =, from a grid that covers every "
                    "slice of rows")


def _run_layernorm_backward(ext, backend) -> Report:
    forward = check_layernorm(ext.layernorm_forward, name="layernorm_forward", backend=backend, quiet=True)
    backward = check_layernorm_backward(ext.layernorm_backward, name="layernorm_backward", backend=backend,
                                        quiet=True, deterministic=True)
    for label, part in (("forward", forward), ("backward", backward)):  # which op each line of the report is about
        for case in part.cases:
            size = case.size if isinstance(case.size, str) else "x".join(map(str, case.size))
            case.size = f"{label} {size}"
    nan = (Diagnosis.UNWRITTEN, Diagnosis.NAN_WHERE_REFERENCE_IS_NOT)
    for case in backward.cases:
        if not case.passed and case.part in ("dweight", "dbias") and case.diagnosis in nan:
            case.detail = case.detail.split(": ")[0] + ": " + PARTIAL_NAN  # "first at flat index i: ..."
            backward.hints.append(PARTIAL_NAN_HINT)
    return merge("layernorm_backward", [forward, backward], quiet=False)


# The Welford exercise's rows: 1, 5 and 31 columns leave lanes of the warp with no value (n = 0), 32 gives each lane
# one, 33 and 100 give lanes unequal counts, 1000 runs 32 steps a lane; 9 rows: a second block with one busy warp.
WELFORD_SHAPES = ((3, 1), (2, 5), (9, 31), (4, 32), (5, 33), (3, 100), (2, 1000))
WELFORD_OFFSET_SHAPES = ((2, 5), (3, 31), (7, 33), (2, 1000))  # 100 + randn rows, where E[x^2] - E[x]^2 cancels
# A failing Welford exercise's statistic at fault is found on fixed rows of 300 + randn of this shape (lanes of 1 and
# 2 values): there the merge by E[x^2] - E[x]^2 puts the rows' rstd 4 to 20 times the tolerance off, and Welford's
# stays 30 times inside it (on the simulator).
PROBE_SHAPE, PROBE_OFFSET = (4, 37), 300.0


def _statistic_at_fault(ext, backend) -> str:
    """Which of a wrong forward's statistics is off on PROBE_SHAPE's rows: "mean", "variance" (the mean
    right, rstd not), "lanes" (both right: lane 0 writes them, so the lanes that are wrong are the others), or "" if
    the run raised."""
    from ..backend import device

    g = torch.Generator().manual_seed(8)
    x = PROBE_OFFSET + torch.randn(PROBE_SHAPE, generator=g)
    w, b = 1.0 + 0.5 * torch.randn(PROBE_SHAPE[1], generator=g), 0.5 * torch.randn(PROBE_SHAPE[1], generator=g)
    x, w, b = (t.to(device(backend)) for t in (x, w, b))
    out, mean, rstd = torch.empty_like(x), x.new_empty(x.shape[0]), x.new_empty(x.shape[0])
    try:
        ext.welford_layernorm(x, w, b, EPS, out, mean, rstd)
    except Exception:  # the check's report says what went wrong; the hints then go by its diagnoses alone
        return ""
    _, want_mean, want_rstd = layernorm_ref(x, w, b)
    rtol, atol = TOLERANCE_LN[torch.float32]
    for name, got, want in (("mean", mean, want_mean), ("variance", rstd, want_rstd)):
        if not torch.allclose(got.cpu(), want.cpu(), rtol=rtol, atol=atol):  # NaN is never close
            return name
    return "lanes"


def _run_welford_layernorm(ext, backend) -> Report:
    report = check_layernorm(ext.welford_layernorm, WELFORD_SHAPES, name="welford_layernorm", backend=backend,
                             quiet=True, offset_shapes=WELFORD_OFFSET_SHAPES)
    wrong = [c for c in report.cases if not c.passed and c.diagnosis is Diagnosis.WRONG_VALUES]
    at_fault = _statistic_at_fault(ext, backend) if wrong else ""
    for case in wrong:  # the part the hints answer: the statistic that is off, or the lanes past lane 0
        case.part = at_fault or case.part
    print(report)
    return report


EXERCISES = [
    Exercise("08", "layernorm_backward", "layernorm_backward.cu", _run_layernorm_backward, hints=[
        Hint("Start with dx in layernorm_dx_kernel: one block per row, as the forward. Each thread adds up g = dy * w "
             "and g * xhat over its columns (xhat = (x - mean) * rstd, from the saved mean and rstd), "
             "block_reduce_sum turns both into the row's sums, then a second loop writes "
             "dx = rstd * (g - (sum_g + xhat * sum_gxhat) / cols).", answers=(Diagnosis.UNWRITTEN, Diagnosis.NAN_WHERE_REFERENCE_IS_NOT), parts=("dx",)),
        Hint("dweight and dbias are sums down the columns: dweight[c] = sum over rows of dy * xhat, dbias[c] = sum of "
             "dy. layernorm_dparams_kernel gives each block 32 columns and a slice of ROWS_PER_PART rows, r0 = 64 * "
             "blockIdx.y up to r1 = min(r0 + 64, rows); thread (tx, ty) adds rows r0 + ty, r0 + ty + 8, ... below r1 "
             "for column c = 32 * blockIdx.x + tx, if c < cols (a warp, one ty, then reads 32 neighbouring columns "
             "of a row).",
             parts=("dweight", "dbias")),
        Hint("The 8 threads of a column then combine their sums through shared memory: each writes its pair to "
             "two __shared__ float arrays of [TY][TX], say sum_w[ty][tx] and sum_b[ty][tx] (threads past the last "
             "column too, with 0: no thread may return before the barrier); after __syncthreads() (without it "
             "thread ty = 0 may read a slot before its owner wrote it), thread ty = 0 adds the 8 and writes the "
             "slice's partial to partial[blockIdx.y * 2 * cols + c] (dweight) and [... + cols + c] (dbias), with =: "
             "the buffer is not zeroed. The last kernel, already written, adds the parts of every column in a fixed "
             "order, so the sums are the same bits on every run; atomicAdd would add them in whatever order the "
             "threads arrive.",
             answers=(Diagnosis.RACE, Diagnosis.WRONG_VALUES, Diagnosis.NOT_DETERMINISTIC)),
        Hint("dx: with xr = x + blockIdx.x * cols, dyr likewise, m and rs the row's mean and rstd, a __shared__ "
             "float scratch[32], and sg = sgx = 0: for (int64_t c = threadIdx.x; c < cols; c += BLOCK) { "
             "const float g = dyr[c] * w[c], xh = (xr[c] - m) * rs; sg += g; sgx += g * xh; }  then "
             "sg = block_reduce_sum(sg, scratch); sgx = block_reduce_sum(sgx, scratch); and a second loop storing "
             "rs * (g - (sg + xh * sgx) / cols).  dparams: for (int64_t r = r0 + ty; r < r1; r += TY) { "
             "const float d = dy[r * cols + c]; sw += d * (x[r * cols + c] - mean[r]) * rstd[r]; sb += d; }, "
             "the two shared writes, __syncthreads(), and the sum by ty == 0."),
    ]),
    Exercise("08", "welford_layernorm", "welford_layernorm.cu", _run_welford_layernorm, hints=[
        Hint("The row's mean is off. Start with one lane: welford_add counts x in (n += 1), then moves the mean "
             "a fraction of the way to x, by d / n with d = x - mean. The merge's mean is the two means weighted "
             "by their counts, a.mean + (b.mean - a.mean) * b.n / n; a plain average is wrong when the lanes hold "
             "different numbers of values (a row of 33 columns). The warp merge must take in every lane once: "
             "5 steps, offsets 16, 8, 4, 2, 1, each merging with the lane `offset` away; a step fewer, or a lane "
             "merged with a copy of itself, leaves lanes out.", parts=("mean",)),
        Hint("The mean is right, the variance is not. M2 is sum((x - mean)^2) about the current mean: welford_add "
             "grows it by d * (x - new mean), never by x * x (on rows of 100 + randn, x^2 is 10^4 and the "
             "variance 1: float32's E[x^2] - E[x]^2 cancels away all but a few bits). The merge adds the two "
             "M2s and the spread of the two means: d^2 * a.n * b.n / n, d = b.mean - a.mean.",
             parts=("variance",)),
        Hint("NaN where the reference has a number: rows shorter than 32 columns leave lanes with no value, "
             "n = 0, mean = 0, and two of them merged make n = 0 and b.n / n = 0 / 0. An empty lane adds nothing: "
             "if the merged count is 0, return either triple.",
             answers=(Diagnosis.NAN_WHERE_REFERENCE_IS_NOT, Diagnosis.UNWRITTEN)),
        Hint("mean and rstd are right (lane 0 writes them) but out is not: every lane normalises its own columns "
             "with its own p, so every lane must end with the row's triple. __shfl_down_sync gathers the whole "
             "row in lane 0 only; __shfl_xor_sync(FULL_MASK, v, offset) swaps values between lane l and lane "
             "l ^ offset, so after the 5 steps every lane has merged all 32 (a butterfly).", parts=("lanes",)),
        Hint("welford_add: a.n += 1.0f; const float d = x - a.mean; a.mean += d / a.n; a.m2 += d * (x - a.mean); "
             "return a;  welford_merge: const float n = a.n + b.n; if (n == 0.0f) return a; const float "
             "d = b.mean - a.mean, wb = b.n / n; return {n, a.mean + d * wb, a.m2 + b.m2 + d * d * a.n * wb};  "
             "warp_welford: for (int offset = 16; offset > 0; offset /= 2) { const Welford other = "
             "{__shfl_xor_sync(FULL_MASK, p.n, offset), ... p.mean ..., ... p.m2 ...}; p = welford_merge(p, other); "
             "} return p;"),
    ]),
]


# ---------------------------------------------------------------------------------------------
# The reference file's variants, as `make profile KERNEL=...` (Nsight Compute) runs them. A size is (rows, cols).

GPU_SIZE = (8192, 8192)


def _forward_args(size, dtype, device) -> tuple:
    x, w, b = shifted_rows()(size, dtype, device)
    stats = [torch.empty(size[0], device=device) for _ in range(2)]
    return x, w, b, EPS, torch.empty_like(x), *stats


def _backward_args(size, dtype, device) -> tuple:
    return tuple(backward_inputs()(size, dtype, device))


VARIANTS = [
    *(Variant(f"layernorm{k}", _forward_args) for k in range(1, 7)),
    Variant("layernorm_backward1", _backward_args),
    Variant("layernorm_backward2", _backward_args),
]
FORWARD = [v.name for v in VARIANTS if v.args is _forward_args]  # the forward ladder, layernorm1-6
