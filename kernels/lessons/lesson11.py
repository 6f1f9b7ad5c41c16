"""Lesson 11 (other routes to the GPU): the references the routes are checked against, and the
"spot the bugs" exercise on a CuPy kernel inside autograd (lessons/11_other_routes/cupy_autograd.py).

The exercise's self-check runs in three parts. The launch configuration and the scalar arguments'
types are plain Python and are checked everywhere. The autograd wiring is checked everywhere too:
without CuPy or a GPU the module's two kernel functions are replaced, for the check only, by PyTorch
versions of the same math, so what is tested is the Function around them. The kernels themselves run
through the checker only where CuPy and a GPU are; elsewhere that part says it was skipped and why.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterable

import torch
import torch.nn.functional as F

from . import lesson11_cupy as cupy_route
from ..check import ROWS, Case, Report, check, merge, random_tensor
from . import Exercise, Hint

# ROWS plus an empty batch; the Triton interpreter runs one program per row in Python, so its
# softmax shapes keep the row counts small (TRITON_SHAPES)
SHAPES = (*ROWS, (0, 8))
TRITON_SHAPES = ((1, 1), (3, 31), (7, 33), (33, 1000), (5, 4097), (40, 7), (2, 4))
MAX_BLOCK = 1024  # threads a block may hold on every NVIDIA GPU


def bias_gelu_ref(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """gelu(x + bias), tanh approximation, computed in float64 and rounded to x's dtype."""
    return F.gelu(x.double() + bias.double(), approximate="tanh").to(x.dtype)


def with_bias(size, dtype, device) -> list[torch.Tensor]:
    """Inputs for check(): a random [rows, C] x and a random [C] bias."""
    return [random_tensor(size, dtype, device), random_tensor((size[1],), dtype, device)]


def check_bias_gelu(fn: Callable, shapes: Iterable = SHAPES, *, dtypes=(torch.float32,), name: str | None = None,
                    backend: str | None = None, orders=None, quiet: bool = False,
                    raise_on_fail: bool = False) -> Report:
    """check() of a functional bias + GELU, fn(x, bias) -> out, against bias_gelu_ref."""
    return check(fn, bias_gelu_ref, with_bias, sizes=list(shapes), dtypes=dtypes, name=name, backend=backend,
                 orders=orders, quiet=quiet, raise_on_fail=raise_on_fail)


def bias_gelu_grads_ref(x: torch.Tensor, bias: torch.Tensor, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dbias) of sum(grad * gelu(x + bias)) by PyTorch's autograd in float64, in x's dtype."""
    xd, bd = x.double().requires_grad_(), bias.double().requires_grad_()
    dx, db = torch.autograd.grad(F.gelu(xd + bd, approximate="tanh"), (xd, bd), grad.double())
    return dx.to(x.dtype), db.to(x.dtype)


def grads_of(fn: Callable) -> Callable:
    """A function of (x, bias, grad) that returns the (dx, dbias) autograd computes through fn(x, bias)."""
    def run(x, bias, grad):
        xg, bg = x.detach().clone().requires_grad_(), bias.detach().clone().requires_grad_()
        return torch.autograd.grad(fn(xg, bg), (xg, bg), grad)
    return run


def with_bias_and_grad(size, dtype, device) -> list[torch.Tensor]:
    return [*with_bias(size, dtype, device), random_tensor(size, dtype, device)]


# ---------------------------------------------------------------------------------------------
# The exercise's self-check.

def _case(label: str, problem: str = "", detail: str = "") -> Case:
    """A case of the exercise's own checks; a failing one is about the part `label` (what the hints answer)."""
    return Case(label, torch.float32, not problem, problem, detail, part=label if problem else "")


def _launch_config_case(module) -> Case:
    """launch_config(n) must give a grid of whole blocks that covers n, and a block a GPU can run."""
    for n in (1, 255, 256, 1000, 2**20 + 3):
        try:
            grid, block = module.launch_config(n)
            g, b = int(grid[0]), int(block[0])
        except Exception as e:  # noqa: BLE001 (the report shows it)
            return _case("launch config", f"launch_config({n}) raised {type(e).__name__}", str(e))
        if not 32 <= b <= MAX_BLOCK or b % 32:
            return _case("launch config", f"launch_config({n}) gives a block of {b} threads",
                         f"grid {tuple(grid)}, block {tuple(block)}: a block holds a multiple of 32 threads, at most "
                         f"{MAX_BLOCK}, and CuPy's RawKernel is called as kernel(grid, block, args)")
        if g * b < n or (g - 1) * b >= n:
            return _case("launch config", f"launch_config({n}) gives {g} blocks of {b} threads",
                         f"{n} elements need ceil({n} / {b}) = {(n + b - 1) // b} blocks")
    return _case("launch config")


def _scalar_args_case(module) -> Case:
    """scalar_args(n, C) must hold NumPy scalars of the kernel's types: int64 for long long n, int32 for int C."""
    import numpy as np

    why = ("CuPy hands the kernel each argument's bytes as they are: a Python int goes as 8 bytes, whatever "
           "the kernel's parameter is. The kernel declares `long long n, int C`: pass np.int64(n) and np.int32(C)")
    try:
        args = tuple(module.scalar_args(3000000000, 7))  # n past 2^31: a tensor of 12 GB of float32
    except Exception as e:  # noqa: BLE001
        return _case("scalar types", f"scalar_args(3000000000, 7) raised {type(e).__name__}", f"{e}\n{why}")
    want = (np.int64, np.int32)
    got = [type(a).__name__ for a in args]
    if len(args) != 2 or any(type(a) is not w for a, w in zip(args, want)) or [int(a) for a in args] != [3000000000, 7]:
        return _case("scalar types", f"scalar_args(3000000000, 7) gives {', '.join(got)}, not int64, int32", why)
    return _case("scalar types")


def _torch_forward(x, bias):
    return F.gelu(x + bias, approximate="tanh")


def _torch_backward(grad, x, bias):
    with torch.enable_grad():  # a Function's backward runs with gradients off
        h = (x + bias).detach().requires_grad_()
        (dx,) = torch.autograd.grad(F.gelu(h, approximate="tanh"), (h,), grad)
    return dx


@contextlib.contextmanager
def _torch_kernels(module):
    """The module's forward_kernel and backward_kernel replaced by PyTorch's math while the block runs."""
    saved = module.forward_kernel, module.backward_kernel
    module.forward_kernel, module.backward_kernel = _torch_forward, _torch_backward
    try:
        yield
    finally:
        module.forward_kernel, module.backward_kernel = saved


def _autograd_cases(module, device) -> list[Case]:
    """Gradients through the Function match autograd's, and changing x in place after the forward makes
    the backward refuse, as save_for_backward guarantees, instead of using the new values."""
    cases = []
    x, b, g = (random_tensor(s, torch.float32, device) for s in ((5, 7), (7,), (5, 7)))
    try:
        got = grads_of(module.bias_gelu)(x, b, g)
        want = bias_gelu_grads_ref(x, b, g)
        wrong = [n for n, u, v in zip(("dx", "dbias"), got, want) if not torch.allclose(u, v, rtol=1e-5, atol=1e-5)]
        cases.append(_case("gradients", f"{' and '.join(wrong)} differ from autograd's" if wrong else ""))
    except Exception as e:  # noqa: BLE001
        cases.append(_case("gradients", f"the backward raised {type(e).__name__}", str(e).splitlines()[0]))
    xg = x.clone().requires_grad_()
    y = module.bias_gelu(xg, b)
    with torch.no_grad():
        xg.mul_(2.0)  # x changes after the forward, as an optimizer step or an in-place op would change it
    try:
        y.backward(g)
        cases.append(_case("x changed in place", "the backward ran with x changed after the forward",
                           "the backward used x's new values without a word: a tensor kept as a plain attribute of "
                           "ctx skips autograd's check; ctx.save_for_backward(x, bias) records the versions and "
                           "makes autograd refuse"))
    except RuntimeError as e:
        ok = "modified by an inplace operation" in str(e)
        cases.append(_case("x changed in place", "" if ok else "the backward raised another error", str(e)[:200]))
    return cases


def run_cupy_autograd(module, backend: str | None) -> Report:
    """The exercise's self-check: launch configuration, argument types, autograd; the kernels on a GPU with CuPy."""
    report = Report("cupy_autograd")
    report.cases += [_launch_config_case(module), _scalar_args_case(module)]
    why = cupy_route.missing()
    if why:
        with _torch_kernels(module):
            report.cases += _autograd_cases(module, torch.device("cpu"))
        print(report)
        print(f"(the kernels themselves were not run: {why})")
        return report
    report.cases += _autograd_cases(module, torch.device("cuda"))
    fwd = check_bias_gelu(module.bias_gelu, name="forward", backend="cuda", quiet=True)
    bwd = check(grads_of(module.bias_gelu), bias_gelu_grads_ref, with_bias_and_grad, sizes=SHAPES,
                out_names=("dx", "dbias"), tolerance={torch.float32: (1e-5, 1e-5)}, name="backward",
                backend="cuda", quiet=True)
    for r, label in ((fwd, "forward"), (bwd, "backward")):
        for c in r.cases:
            c.size = f"{label} " + "x".join(map(str, c.size))
    merged = merge("cupy_autograd", [report, fwd, bwd])
    print(merged)
    return merged


EXERCISES = [
    Exercise("11", "cupy_autograd", "cupy_autograd.py", run_cupy_autograd, hints=[
        Hint("Launch: CuPy's RawKernel is called as kernel(grid, block, args), and a block holds at most 1024 "
             "threads. Read launch_config's return line against that order: which tuple is the number of blocks?",
             parts=("launch config",)),
        Hint("Arguments: CuPy does not read the kernel's parameter list; it passes each Python value as it is, "
             "and a Python int as a 64-bit integer. The kernel declares `long long n, int C`: wrap them as "
             "np.int64(n) and np.int32(C) (a Python float for a `float` parameter is the same bug, and worse).",
             parts=("scalar types",)),
        Hint("Autograd: a tensor the backward needs goes through ctx.save_for_backward(x, bias) in the forward "
             "and comes back as `x, bias = ctx.saved_tensors` in the backward. A plain attribute (ctx.x = x) "
             "skips autograd's version check, so an in-place change of x between forward and backward gives "
             "silently wrong gradients (and a saved output kept that way leaks memory through a cycle).",
             parts=("x changed in place",)),
        "The three fixed lines: `return (blocks,), (THREADS,)`; `return np.int64(n), np.int32(C)`; in forward "
        "`ctx.save_for_backward(x, bias)`, and in backward `x, bias = ctx.saved_tensors` passed to backward_kernel.",
    ]),
]
