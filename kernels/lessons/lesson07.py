"""Lesson 07 (softmax): the definition the kernels are checked against, the online-softmax exercise, and
the autograd registration of the functional softmax op.

A row that is entirely -inf (a fully masked row) has no finite maximum; torch.softmax returns NaN for
it (-inf - -inf). This lesson defines its softmax as all zeros, and every kernel and check follows that.
"""
from __future__ import annotations

import math
from typing import Callable, Iterable, Sequence

import torch

from ..check import ROW_OP_SHAPES, Diagnosis, Report, SIM_ORDERS, check, like, merge, rows
from . import Exercise, Hint, Variant

SHAPES = ROW_OP_SHAPES  # kernels/check.py says why each shape
LARGE = 1e4  # the second input set: values of about +-1e4, where exp(x) without the max overflows


def softmax_ref(x: torch.Tensor) -> torch.Tensor:
    """torch.softmax over the last dimension in float32, with all -inf rows set to 0, in x's dtype."""
    y = torch.softmax(x.float(), dim=-1)
    masked = torch.isneginf(x).all(dim=-1, keepdim=True)
    return torch.where(masked, torch.zeros_like(y), y).to(x.dtype)


def causal_ref(x: torch.Tensor, scale: float, q_len: int) -> torch.Tensor:
    """softmax_ref of x * scale with column j of query i = row % q_len masked where j > i."""
    rows, cols = x.shape
    i = torch.arange(rows, device=x.device).remainder(q_len)[:, None]
    j = torch.arange(cols, device=x.device)[None, :]
    return softmax_ref((x.float() * scale).masked_fill(j > i, float("-inf"))).to(x.dtype)


def awkward_rows(scale: float = 1.0) -> Callable:
    """Inputs for check(): standard-normal rows times `scale`; row 0 all negative, row 1 constant, row 2 all -inf."""
    make = rows(1, neg_inf=True)

    def inputs(size, dtype, device):
        return [t * scale for t in make(size, dtype, device)]
    return inputs


def check_softmax(fn: Callable, shapes: Iterable = SHAPES, *, dtypes=(torch.float32,), name: str | None = None,
                  backend: str | None = None, quiet: bool = False, raise_on_fail: bool = False,
                  orders: Sequence[str] | None = None) -> Report:
    """check() of an out-variant softmax on the awkward rows, once with values ~N(0, 1) and once ~1e4 times that.
    `orders`: the simulator's thread orders for the first set (check()'s default: all of them); the large values
    test the arithmetic, not the barriers, so they run in the first order only."""
    shapes = list(shapes)
    normal = check(fn, softmax_ref, awkward_rows(), out=like(0), sizes=shapes, dtypes=dtypes, name=name,
                   backend=backend, quiet=True, orders=orders)
    large = check(fn, softmax_ref, awkward_rows(LARGE), out=like(0), sizes=shapes, dtypes=dtypes, name=name,
                  backend=backend, quiet=True, orders=(orders or SIM_ORDERS)[:1])
    for case in large.cases:  # the report's size column says which input set a case used
        case.size = "x".join(map(str, case.size)) + " *1e4"
    return merge(normal.name, [normal, large], quiet=quiet, raise_on_fail=raise_on_fail)


_registered: set[str] = set()


def register_softmax(ext) -> None:
    """Give `ext`'s functional softmax op its fake kernels and its derivative (the lesson 03 route); once per build."""
    ns = ext.ns
    if ns in _registered:
        return
    ops = getattr(torch.ops, ns)

    @torch.library.register_fake(f"{ns}::softmax")
    def _(x):
        return torch.empty_like(x)

    @torch.library.register_fake(f"{ns}::softmax_backward")
    def _(y, dy):
        return torch.empty_like(y)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)  # the backward needs y = softmax(x), not x

    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return ops.softmax_backward(y, grad.contiguous())  # autograd may pass a strided gradient

    torch.library.register_autograd(f"{ns}::softmax", backward, setup_context=setup_context)
    _registered.add(ns)


def _run_softmax_online(ext, backend) -> Report:
    return check_softmax(ext.softmax_online, name="softmax_online", backend=backend)


EXERCISES = [
    Exercise("07", "softmax_online", "softmax_online.cu", _run_softmax_online, hints=[
        Hint("A pair (m, s) stands for a set of values: m is their max, s the sum of exp(v - m). To merge two "
             "sets, the new max is the larger max; each sum was taken relative to its own max, so scale it to the "
             "new one before adding.",
             answers=(Diagnosis.WRONG_VALUES,)),
        Hint("NaN in the output: exp(v - m) = exp(v - a.m) * exp(a.m - m), so a.s becomes a.s * exp(a.m - m). "
             "When both a.m and b.m are -inf (two empty pairs: the lanes of a row shorter than 32 that have no "
             "columns) the new m is -inf and a.m - m is -inf - -inf = NaN: return {m, 0} before computing it.",
             answers=(Diagnosis.NAN_WHERE_REFERENCE_IS_NOT, Diagnosis.UNWRITTEN)),
        "The lanes merge like warp_reduce_max in helpers.cuh: for offset = 16, 8, 4, 2, 1, take the other "
        "lane's pair with two __shfl_xor_sync(FULL_MASK, value, offset) calls (one for m, one for s) and merge "
        "it into yours. With xor every lane ends with the row's pair, which every lane needs to write its columns.",
        "merge: const float m = fmaxf(a.m, b.m); if (m == -INFINITY) return {m, 0.0f}; "
        "return {m, a.s * __expf(a.m - m) + b.s * __expf(b.m - m)};   loop: for (int offset = 16; offset > 0; "
        "offset /= 2) { MaxSum o = {__shfl_xor_sync(FULL_MASK, p.m, offset), __shfl_xor_sync(FULL_MASK, p.s, "
        "offset)}; p = merge(p, o); }   (kernels/reference/07_softmax.cu has the same as online_merge and "
        "warp_merge.)",
    ]),
]


# ---------------------------------------------------------------------------------------------
# The reference file's variants, as `make profile KERNEL=...` (Nsight Compute) runs them. A size is (rows, cols).

GPU_SIZE = (8192, 8192)


def _softmax_args(size, dtype, device) -> tuple:
    return torch.rand(size, dtype=dtype, device=device), torch.empty(size, dtype=dtype, device=device)


def _causal_args(size, dtype, device) -> tuple:
    x, out = _softmax_args(size, dtype, device)
    return x, 0.125, math.gcd(size[0], 1024), out  # blocks of up to 1024 query rows (q_len divides the rows)


def _backward_args(size, dtype, device) -> tuple:
    y = torch.softmax(torch.rand(size, device=device), dim=1).to(dtype)
    return y, torch.rand(size, dtype=dtype, device=device), torch.empty(size, dtype=dtype, device=device)


VARIANTS = [
    *(Variant(f"softmax{k}", _softmax_args) for k in range(1, 7)),
    Variant("softmax7", _causal_args),
    Variant("softmax_backward1", _backward_args),
    Variant("softmax_backward2", _backward_args),
]
FORWARD = [v.name for v in VARIANTS if v.args is _softmax_args]  # the row-wise forward ladder, softmax1-6
