"""Lesson 08 (layernorm): the definitions the kernels are checked against, the backward exercise, and the
autograd registration of the functional layernorm op.

Layernorm here is torch.nn.functional.layer_norm over the last dimension of a 2-D x: the biased variance,
eps inside the square root, weight and bias of shape [cols] in x's dtype; mean and rstd = 1 / sqrt(var + eps)
are returned in float32, one per row, for the backward.
"""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

import torch
import torch.nn.functional as F

from ..check import Diagnosis, ROWS, Report, SIM_ORDERS, TOLERANCE, check, merge
from . import Exercise, Hint, Variant

EPS = 1e-5
# ROWS (lengths 1, 31, 33, 1000, 1024, 4097) plus many short rows and a length that is a multiple of 4
SHAPES = (*ROWS, (4099, 7), (2, 4))
SHIFT, SPREAD = -2.3, 0.5  # shifted rows: -2.3 + 0.5 * randn, where E[x^2] - E[x]^2 starts to cancel
LARGE = 1e3                # the large-magnitude set: 300 + 1000 * randn
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
                       **common) -> Report:
    """check() on make(shift, 0.5) inputs and on make(300, 1000) inputs (marked "large"), as one report. The
    large values test the arithmetic, not the barriers: on the simulator they run in the first thread order only."""
    shifted = check(fn, ref, make(shift, SPREAD), quiet=True, tolerance=TOLERANCE_LN, **common)
    common["orders"] = (common.get("orders") or SIM_ORDERS)[:1]
    large = check(fn, ref, make(300.0, LARGE), quiet=True, tolerance=TOLERANCE_LN, **common)
    for case in large.cases:  # the report's size column says which input set a case used
        case.size = "x".join(map(str, case.size)) + " large"
    report = merge(shifted.name, [shifted, large])
    if not quiet:
        print(report)
    if raise_on_fail:
        report.raise_if_failed()
    return report


def check_layernorm(fn: Callable, shapes: Iterable = SHAPES, *, dtypes=(torch.float32,), name: str | None = None,
                    backend: str | None = None, quiet: bool = False, raise_on_fail: bool = False,
                    shift: float = SHIFT, orders: Sequence[str] | None = None) -> Report:
    """check() of an out-variant layernorm fn(x, weight, bias, eps, out, mean, rstd): once on shift + 0.5 * randn
    rows, once on 300 + 1000 * randn rows. `orders`: the simulator's thread orders (check()'s default: all)."""
    def op(x, w, b, out, mean, rstd):
        return fn(x, w, b, EPS, out, mean, rstd)

    return _shifted_and_large(op, layernorm_ref, shifted_rows, shift, quiet, raise_on_fail, out=_outputs,
                              out_names=("out", "mean", "rstd"), sizes=list(shapes), dtypes=dtypes,
                              name=name or getattr(fn, "__name__", None), backend=backend, orders=orders)


def check_layernorm_backward(fn: Callable, shapes: Iterable = SHAPES, *, dtypes=(torch.float32,),
                             name: str | None = None, backend: str | None = None, quiet: bool = False,
                             raise_on_fail: bool = False, orders: Sequence[str] | None = None) -> Report:
    """check() of a backward fn(dy, x, weight, mean, rstd) -> (dx, dweight, dbias) against autograd in float64,
    on shifted rows and on large-magnitude rows. `orders` as for check_layernorm."""
    return _shifted_and_large(fn, layernorm_backward_ref, backward_inputs, SHIFT, quiet, raise_on_fail,
                              out_names=("dx", "dweight", "dbias"), sizes=list(shapes), dtypes=dtypes,
                              name=name or getattr(fn, "__name__", None), backend=backend, orders=orders)


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


def _run_layernorm_backward(ext, backend) -> Report:
    forward = check_layernorm(ext.layernorm_forward, name="layernorm_forward", backend=backend, quiet=True)
    backward = check_layernorm_backward(ext.layernorm_backward, name="layernorm_backward", backend=backend,
                                        quiet=True)
    for label, part in (("forward", forward), ("backward", backward)):  # which op each line of the report is about
        for case in part.cases:
            size = case.size if isinstance(case.size, str) else "x".join(map(str, case.size))
            case.size = f"{label} {size}"
    report = merge("layernorm_backward", [forward, backward])
    print(report)
    return report


EXERCISES = [
    Exercise("08", "layernorm_backward", "layernorm_backward.cu", _run_layernorm_backward, hints=[
        Hint("Start with dx in layernorm_dx_kernel: one block per row, as the forward. Each thread adds up g = dy * w "
             "and g * xhat over its columns (xhat = (x - mean) * rstd, from the saved mean and rstd), "
             "block_reduce_sum turns both into the row's sums, then a second loop writes "
             "dx = rstd * (g - (sum_g + xhat * sum_gxhat) / cols).", answers=(Diagnosis.UNWRITTEN, Diagnosis.NAN_WHERE_REFERENCE_IS_NOT), parts=("dx",)),
        Hint("dweight and dbias are sums down the columns: dweight[c] = sum over rows of dy * xhat, dbias[c] = sum of "
             "dy. layernorm_dparams_kernel gives each block 32 columns and a slice of ROWS_PER_PART rows; thread "
             "(tx, ty) adds rows ty, ty + 8, ... of its slice for column c = 32 * blockIdx.x + tx.",
             parts=("dweight", "dbias")),
        Hint("The 8 threads of a column then combine their sums through shared memory: each writes its pair to "
             "sum_w[ty][tx] and sum_b[ty][tx]; after __syncthreads() (without it thread ty = 0 may read a slot "
             "before its owner wrote it), thread ty = 0 adds the 8 and writes the slice's partial "
             "to partial[blockIdx.y * 2 * cols + c] (dweight) and [... + cols + c] (dbias). The last kernel, already "
             "written, adds the parts of every column.", answers=(Diagnosis.RACE, Diagnosis.WRONG_VALUES)),
        Hint("dx: for (int64_t c = threadIdx.x; c < cols; c += BLOCK) { const float g = dyr[c] * w[c], xh = (xr[c] - "
             "m) * rs; sg += g; sgx += g * xh; }  then sg = block_reduce_sum(sg, scratch); sgx = block_reduce_sum(sgx, "
             "scratch); and a second loop storing rs * (g - (sg + xh * sgx) / cols).  dparams: for (int64_t r = r0 + ty; "
             "r < r1; r += TY) { const float d = dy[r * cols + c]; sw += d * (x[r * cols + c] - mean[r]) * rstd[r]; "
             "sb += d; }, the two shared writes, __syncthreads(), and the sum by ty == 0."),
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
