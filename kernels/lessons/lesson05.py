"""Lesson 05's exercise: SwiGLU's gate, out = silu(a) * b, forward and backward in one kernel each."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..check import Diagnosis, Report, check, elementwise, like, merge
from . import Exercise, Hint, Variant

# Ragged sizes: not multiples of a 16-byte vector (4 floats, 8 bf16), smaller than one, and empty.
SIZES = (0, 1, 7, 33, 1000, 4099, 2**20 + 3)
DTYPES = (torch.float32, torch.bfloat16)


def swiglu_ref(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """silu(a) * b computed in float64, rounded to a's dtype (the kernel computes in float32)."""
    return (F.silu(a.double()) * b.double()).to(a.dtype)


def swiglu_backward_ref(grad: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(da, db) of silu(a) * b by autograd in float64, rounded to a's dtype."""
    a64 = a.double().requires_grad_()
    b64 = b.double().requires_grad_()
    da, db = torch.autograd.grad(F.silu(a64) * b64, (a64, b64), grad.double())
    return da.to(a.dtype), db.to(a.dtype)


def run_swiglu(ext, backend: str | None) -> Report:
    """The forward and the backward on ragged sizes, float32 and bfloat16."""
    fwd = check(ext.swiglu, swiglu_ref, elementwise(2), out=like(0), sizes=SIZES, dtypes=DTYPES,
                name="swiglu (forward)", backend=backend)
    bwd = check(ext.swiglu_backward, swiglu_backward_ref, elementwise(3), out=like(1, 2), out_names=("da", "db"),
                sizes=SIZES, dtypes=DTYPES, name="swiglu_backward", backend=backend)
    both = merge("swiglu", [fwd, bwd])
    print(f"forward and backward: {'PASS' if both.passed else 'FAIL'}")
    return both


EXERCISES = [
    Exercise("05", "swiglu", "swiglu.cu", run_swiglu, hints=[
        "Start from relu_add_bias_kernel2 in kernels/reference/05_fused.cu: the same mapping, two inputs, no bias. "
        "Get the forward to pass before you touch the backward.",
        Hint("Vector v covers elements v*V .. v*V+V-1, and only v < nvec are whole: guard every load and store "
             "with `if (v < nvec)`. Load all UNROLL vectors of a and b first, then compute and store in a second "
             "loop.", answers=(Diagnosis.WROTE_PAST_END,)),
        "The elements past nvec*V (fewer than V) are the tail: `const int64_t t = nvec * V + threadIdx.x; "
        "if (blockIdx.x == 0 && t < n) out[t] = ...` with scalar loads. Sizes 1, 7, 33, 4099 and 2^20 + 3 fail without it.",
        Hint("Per element, in float: s = sigmoid(a); forward out = a * s * b; backward db = g * a * s and "
             "da = g * b * s * (1 + a * (1 - s)). Convert with to_float(...) on the way in and from_float<T>(...) "
             "on the way out.", answers=(Diagnosis.WRONG_VALUES,)),
    ]),
]


# ---------------------------------------------------------------------------------------------
# The reference file's variants, as `make profile KERNEL=...` (Nsight Compute) runs them. A size is
# (rows, cols); bias has one value per column.

GPU_SIZE = (8192, 8192)


def _mat(size, dtype, device, k: int) -> list[torch.Tensor]:
    return [torch.rand(size, dtype=dtype, device=device) for _ in range(k)]


def _vec(size, dtype, device) -> torch.Tensor:
    return torch.rand(size[1], dtype=dtype, device=device)


VARIANTS = [
    Variant("relu_add_bias1", lambda s, dt, dev: (*_mat(s, dt, dev, 2), _vec(s, dt, dev), *_mat(s, dt, dev, 1))),
    Variant("relu_add_bias2", lambda s, dt, dev: (*_mat(s, dt, dev, 2), _vec(s, dt, dev), *_mat(s, dt, dev, 1))),
    Variant("bias_gelu3", lambda s, dt, dev: (*_mat(s, dt, dev, 1), _vec(s, dt, dev), True, *_mat(s, dt, dev, 1))),
    Variant("relu_add_bias_backward4", lambda s, dt, dev: (*_mat(s, dt, dev, 3), _vec(s, dt, dev))),
    Variant("bias_gelu_backward5",
            lambda s, dt, dev: (*_mat(s, dt, dev, 2), _vec(s, dt, dev), True, *_mat(s, dt, dev, 1), _vec(s, dt, dev))),
]
