"""Lesson 03's exercise: fma(x, y, z) = x * y + z as a real PyTorch op, with its derivative.

The self-check builds fma.cu, imports fma_op.py from the same folder (the solution's when there
is none there) and registers the Python half, then checks, each with its own pass/fail lines:
the forward values on ragged sizes (float32 and float64), the gradients against autograd of the
eager formula, torch.library.opcheck, and torch.autograd.gradcheck in float64.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from ..check import Case, Diagnosis, Report, check, diagnose_error, elementwise, merge, where_raised
from . import Exercise, Hint, lesson_dir

# The GPU computes x * y + z with one fused multiply-add (one rounding), eager PyTorch with two:
# they differ by up to half a unit in the last place of x * y, so fp32 gets a little absolute slack.
FMA_TOLERANCE = {torch.float32: (1e-5, 1e-5)}


def _python_half(cu_file: Path):
    """Import fma_op.py from next to the .cu file (the solution's if there is none there)."""
    path = cu_file.parent / "fma_op.py"
    if not path.exists():
        path = lesson_dir("03", solution=True) / "fma_op.py"
    spec = importlib.util.spec_from_file_location(f"fma_op_{abs(hash(path.read_text()))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _first_line(e: Exception) -> str:
    lines = [l for l in str(e).strip().splitlines() if l.strip()]
    return (lines[0] if lines else "")[:160]


def _one_case(name: str, label: str, dtype: torch.dtype, fn, hint: str, stub: str = "fma_op.py") -> Report:
    """A report of one case: `fn()` passes when it returns without raising. An error that says "not written
    yet" (the stub's NotImplementedError) gets the hint that the Python file `stub` is unfinished."""
    report = Report(name)
    case = Case(label, dtype)
    report.cases.append(case)
    try:
        fn()
    except Exception as e:  # the report shows the message; the notebook keeps running
        where = where_raised(e)
        case.passed, case.problem = False, "raised " + type(e).__name__
        case.diagnosis, case.part = diagnose_error(e), label
        case.detail = _first_line(e) + (f"\nat {where}" if where else "")
        if "not written yet" in str(e):  # the stub's NotImplementedError, possibly inside an opcheck error
            hint = f"{stub} is not finished: " + _first_line(e).split(" failed with ")[-1].split(" (scroll")[0]
        report.hints.append(hint)
    print(report)
    return report


def _not_run(name: str, why: str) -> Report:
    """A failing report for checks that cannot run yet, saying why."""
    report = Report(name)
    report.cases.append(Case("not run", torch.float32, passed=False, problem=why))
    print(report)
    return report


def run_fma(ext, backend):
    """Check ext.fma and its derivative; print a report per part and return them merged."""
    dev = torch.device("cuda" if (backend or ext.backend) == "cuda" else "cpu")
    registration = _one_case("fma registration", "register", torch.float32,
                             lambda: _python_half(Path(ext.path)).register(ext.ns),
                             "fma_op.register raised: read its message above. 'does not exist' means an op "
                             "is not declared in fma.cu (m.def); anything else is in fma_op.py")
    registered = registration.passed

    def eager_grads(g, x, y, z):
        x, y, z = (t.detach().requires_grad_() for t in (x, y, z))
        return torch.autograd.grad(x * y + z, (x, y, z), g)

    def op_grads(g, x, y, z):
        x, y, z = (t.detach().requires_grad_() for t in (x, y, z))
        return torch.autograd.grad(ext.fma(x, y, z), (x, y, z), g)

    parts = [
        check(ext.fma, lambda x, y, z: x * y + z, elementwise(3), dtypes=(torch.float32, torch.float64),
              tolerance=FMA_TOLERANCE, name="fma forward", backend=backend),
    ]
    if not registered:
        # Everything below needs the Python half. opcheck on a half-registered op can also leave
        # cached state behind that fails later runs in the same session, so it does not run.
        parts.append(_not_run("fma backward, opcheck, gradcheck",
                              "not run until fma_op.register(ns) works: fix the registration first"))
    else:
        parts.append(check(op_grads, eager_grads, elementwise(4), out_names=("grad_x", "grad_y", "grad_z"),
                           dtypes=(torch.float32,), name="fma backward (grads of x, y, z)", backend=backend))

    def small(dtype):
        return [torch.randn(7, 5, dtype=dtype, device=dev, requires_grad=True) for _ in range(3)]

    def opcheck():
        torch.library.opcheck(ext.fma, tuple(small(torch.float32)))
        x, y, _ = small(torch.float32)
        torch.library.opcheck(ext.fma_backward, (torch.randn_like(x), x.detach(), y.detach()))

    if registered:
        parts.append(_one_case("fma opcheck", "opcheck", torch.float32, opcheck,
                               "opcheck needs a fake kernel for both ops (register_fake) and a derivative that "
                               "autograd can trace (register_autograd)"))
        parts.append(_one_case("fma gradcheck", "gradcheck", torch.float64,
                               lambda: torch.autograd.gradcheck(ext.fma, tuple(small(torch.float64))),
                               "gradcheck compares your backward with finite differences in float64: check "
                               "which gradient goes with which input"))
    return merge("fma", [registration, *parts])


EXERCISES = [
    Exercise("03", "fma", "fma.cu", run_fma, hints=[
        Hint("Both kernels are elementwise, like mul_kernel in kernels/reference/03_pytorch_op.cu: thread i "
             "owns element i, guarded by `if (i < n)`. The two registration lines follow mul_backward's in the "
             "same file. A fake kernel runs no kernel at all: it only returns empty tensors of the right shape "
             "and dtype (torch.empty_like).", answers=(Diagnosis.UNWRITTEN,), parts=("register", "opcheck")),
        Hint("setup_context(ctx, inputs, output) gets inputs = (x, y, z): save x and y with "
             "ctx.save_for_backward. backward(ctx, grad) returns one gradient per input, in order: "
             "(grad_x, grad_y, grad_z) with grad_x = grad * y, grad_y = grad * x, grad_z = grad.",
             answers=(Diagnosis.NOT_IMPLEMENTED,), parts=("grad_x", "grad_y", "grad_z", "gradcheck")),
        Hint("The kernels accept only contiguous tensors, and autograd can hand backward a strided grad (the "
             "grad of out.sum() is an expanded tensor of ones): pass grad.contiguous() to ops.fma_backward.",
             answers=(Diagnosis.INPUT_REFUSED,)),
        "Kernels: `if (i < n) out[i] = x[i] * y[i] + z[i];` and `if (i < n) { grad_x[i] = grad[i] * y[i]; "
        "grad_y[i] = grad[i] * x[i]; }`. Registration: `m.def(\"fma_backward(Tensor grad, Tensor x, Tensor y) "
        "-> (Tensor, Tensor)\");` and `m.impl(\"fma_backward\", &fma_backward);`. fma_op.py: `return torch.empty_like(x)`, "
        "`return torch.empty_like(x), torch.empty_like(y)`, `x, y, z = inputs; ctx.save_for_backward(x, y)`, "
        "`x, y = ctx.saved_tensors; gx, gy = ops.fma_backward(grad.contiguous(), x, y); return gx, gy, grad`.",
    ]),
]
