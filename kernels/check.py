"""The checker: run a kernel against PyTorch on fresh random inputs of awkward sizes, and say why it fails.

    report = check(ext.add, torch.add, inputs=elementwise(2), out=like(0))

For every case (a size and a dtype) it draws new random inputs, carves inputs and outputs from
larger buffers whose margins hold canary values, fills the outputs with NaN, runs the kernel,
and then checks: the margins are intact (no write past either end), no output element is NaN
(every element was written), the inputs are unchanged, and the values match the reference within
a tolerance scaled to the dtype. On the simulator every case also runs with the threads of each
block in reverse and in random order, so a missing barrier shows up.

The printed report is the same on both backends and on every run (pass/fail per case); error
sizes and mismatching indices appear only for failing cases.
"""
from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import torch

from . import backend as _backend

# Sizes that are not multiples of any block size, plus one and empty.
SIZES = (0, 1, 31, 33, 1000, 2**20 + 3)
ROWS = ((1, 1), (3, 31), (7, 33), (33, 1000), (64, 1024), (5, 4097))

# (rtol, atol) per dtype: about 10 ulps of the type for a few roundings.
TOLERANCE = {
    torch.float64: (1e-10, 1e-12),
    torch.float32: (1e-5, 1e-6),
    torch.float16: (2e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
}

MARGIN = 64  # elements of canary on each side of every tensor: 256 bytes for fp32, so alignment is kept
SIM_ORDERS = ("forward", "reverse", "random")


class CheckFailed(AssertionError):
    """Raised by check(..., raise_on_fail=True) with the report as its message."""


@dataclass
class Case:
    """One size and dtype: whether it passed and, if not, why."""

    size: object
    dtype: torch.dtype
    passed: bool = True
    problem: str = ""
    detail: str = ""

    def label(self) -> str:
        size = "x".join(map(str, self.size)) if isinstance(self.size, tuple) else str(self.size)
        return f"{size:>12}  {str(self.dtype).replace('torch.', '')}"


@dataclass
class Report:
    """The outcome of a check: a line per case, and hints when something failed."""

    name: str
    cases: list[Case] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.cases) and all(c.passed for c in self.cases)

    def __str__(self) -> str:
        ok = sum(c.passed for c in self.cases)
        lines = [f"{self.name}: {ok}/{len(self.cases)} cases passed"]
        for c in self.cases:
            lines.append(f"  {'PASS' if c.passed else 'FAIL'}  {c.label()}" + ("" if c.passed else f"   {c.problem}"))
            if not c.passed and c.detail:
                lines.extend("          " + d for d in c.detail.splitlines())
        if not self.passed:
            for h in dict.fromkeys(self.hints):
                lines.append(f"  hint: {h}")
        return "\n".join(lines)

    def _repr_pretty_(self, p, cycle):
        p.text(str(self))

    def raise_if_failed(self) -> "Report":
        if not self.passed:
            raise CheckFailed(str(self))
        return self


# ---------------------------------------------------------------------------------------------
# Input and output specifications.

def random_tensor(shape, dtype: torch.dtype, device, low: float | None = None, high: float | None = None) -> torch.Tensor:
    """Fresh random values: normal by default (never zeros), or uniform in [low, high)."""
    if dtype.is_floating_point:
        if low is not None:
            t = torch.empty(shape, dtype=torch.float32, device=device).uniform_(low, high)
        else:
            t = torch.randn(shape, dtype=torch.float32, device=device)
        return t.to(dtype)
    return torch.randint(-1000, 1000, shape, dtype=dtype, device=device)


def elementwise(n_inputs: int, low: float | None = None, high: float | None = None):
    """Inputs for an elementwise op: `n_inputs` random 1-D tensors of the case's size."""
    def make(size, dtype, device):
        shape = size if isinstance(size, tuple) else (size,)
        return [random_tensor(shape, dtype, device, low, high) for _ in range(n_inputs)]
    return make


def rows(n_inputs: int = 1, *, neg_inf: bool = False):
    """Inputs for a row-wise op on 2-D (rows, cols) cases: random rows plus rows that catch the usual bugs.

    Row 0 is all negative (a max that starts from 0 fails every case), row 1 is constant, and with
    `neg_inf=True` row 2 is all -inf (for ops that define it, such as a masked softmax). The other
    rows are standard normal. Only the first input gets the special rows.
    """
    def make(size, dtype, device):
        shape = size if isinstance(size, tuple) else (1, size)
        ts = [random_tensor(shape, dtype, device) for _ in range(n_inputs)]
        x = ts[0]
        r = x.shape[0]
        if x.numel() and x.dtype.is_floating_point:
            x[0] = -(x[0].abs() + 1)
            if r > 1:
                x[1] = x[1, 0]
            if neg_inf and r > 2:
                x[2] = float("-inf")
        return ts
    return make


def like(*indices: int, dtype: torch.dtype | None = None):
    """Outputs shaped like the given inputs (an out-variant op writes into them)."""
    def spec(inputs):
        return [(tuple(inputs[i].shape), dtype or inputs[i].dtype) for i in indices]
    return spec


# ---------------------------------------------------------------------------------------------
# Guarded tensors: a view into a buffer whose margins hold canaries.

def _canary(dtype: torch.dtype) -> float:
    return 1234.5 if dtype.is_floating_point else 0x5A5A


def guarded(shape, dtype, device, fill: torch.Tensor | float) -> tuple[torch.Tensor, torch.Tensor]:
    """(view, buffer): a contiguous tensor of `shape` in the middle of a buffer with canary margins."""
    n = math.prod(shape)
    buf = torch.full((n + 2 * MARGIN,), _canary(dtype), dtype=dtype, device=device)
    view = buf[MARGIN:MARGIN + n].view(shape)
    if isinstance(fill, torch.Tensor):
        view.copy_(fill)
    else:
        view.fill_(fill)
    return view, buf


def _margins_intact(buf: torch.Tensor, n: int) -> tuple[bool, str]:
    c = _canary(buf.dtype)
    before, after = buf[:MARGIN].cpu(), buf[MARGIN + n:].cpu()
    bad_before = (before != c).nonzero().flatten()
    bad_after = (after != c).nonzero().flatten()
    if len(bad_after):
        return False, f"wrote past the end: element(s) {', '.join(str(n + int(i)) for i in bad_after[:4])} (size is {n})"
    if len(bad_before):
        return False, f"wrote before the start: element(s) {', '.join(str(int(i) - MARGIN) for i in bad_before[-4:])}"
    return True, ""


def _first_mismatches(got: torch.Tensor, want: torch.Tensor, bad: torch.Tensor, limit: int = 5) -> str:
    idx = bad.nonzero()
    lines = []
    for row in idx[:limit].tolist():
        where = tuple(row) if len(row) != 1 else row[0]
        lines.append(f"at {where}: got {got[tuple(row)].item():.6g}, expected {want[tuple(row)].item():.6g}")
    if len(idx) > limit:
        lines.append(f"... {len(idx)} mismatching elements of {got.numel()}")
    return "\n".join(lines)


def compare(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float) -> tuple[bool, str, str]:
    """(ok, problem, detail) for one output against its reference; NaN never passes."""
    got, want = got.detach().cpu(), want.detach().cpu()
    if got.shape != want.shape:
        return False, f"shape {tuple(got.shape)}, expected {tuple(want.shape)}", ""
    if got.numel() == 0:
        return True, "", ""
    g64, w64 = got.double(), want.double()
    nan = torch.isnan(g64)
    if nan.any():
        first = nan.flatten().nonzero()[0].item()
        count = int(nan.sum())
        what = "never written (still the NaN poison)" if not torch.isnan(w64).flatten()[first] else "NaN"
        return False, f"{count} of {got.numel()} elements are NaN", f"first at flat index {first}: {what}"
    bad = (g64 - w64).abs() > atol + rtol * w64.abs()
    if bad.any():
        err = (g64 - w64).abs().max().item()
        return False, f"{int(bad.sum())} of {got.numel()} elements differ (max abs error {err:.3g})", _first_mismatches(got, want, bad)
    return True, "", ""


@contextlib.contextmanager
def sim_order(order: str):
    """Run the simulator's threads in `order` (forward, reverse, random) inside the block."""
    old = os.environ.get("CUDASIM_ORDER")
    os.environ["CUDASIM_ORDER"] = order
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("CUDASIM_ORDER", None)
        else:
            os.environ["CUDASIM_ORDER"] = old


def _as_list(x) -> list:
    if x is None:
        return []
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _name_of(fn) -> str:
    """A stable name for the report: an op's name without its per-build namespace."""
    qualified = getattr(fn, "_qualified_op_name", None)
    if qualified:
        return qualified.split("::")[-1]
    return getattr(fn, "__name__", None) or type(fn).__name__


def _hint_for(problem: str) -> str:
    if problem.startswith("wrote past the end"):
        return "a write past the end usually means a missing or off-by-one bounds check: `if (i < n)`, not `i <= n`"
    if problem.startswith("wrote before"):
        return "a write before the start means a negative index: check how the index is computed"
    if "NaN" in problem:
        return ("unwritten elements mean the grid does not cover the whole tensor (use ceil_div for the number "
                "of blocks) or a loop stops early (the ragged tail)")
    if "input" in problem:
        return "a kernel must not modify its inputs: write only to the output"
    if "differ" in problem:
        return "wrong values: compare your formula and indexing with the reference on a tiny size first"
    if "NotImplementedError" in problem:
        return "something is not written yet (NotImplementedError): look for FILL ME IN in your files"
    if "raised" in problem:
        return "the kernel raised an error: its message is under the failing case"
    return ""


def check(fn: Callable, ref: Callable, inputs: Callable, *, out: Callable | None = None,
          sizes: Iterable = SIZES, dtypes: Sequence[torch.dtype] = (torch.float32,),
          tolerance: dict | None = None, name: str | None = None, backend: str | None = None,
          orders: Sequence[str] | None = None, raise_on_fail: bool = False, quiet: bool = False,
          seed: int | None = None) -> Report:
    """Check `fn` against `ref` on every size and dtype; print and return the report.

    fn:      the kernel, called as fn(*inputs, *outputs) when `out` is given (an out-variant op),
             else fn(*inputs), returning a tensor or a tuple of tensors.
    ref:     the PyTorch reference, ref(*inputs) -> tensor or tuple of tensors.
    inputs:  inputs(size, dtype, device) -> list of tensors, e.g. elementwise(2).
    out:     out(inputs) -> [(shape, dtype), ...] for an out-variant op, e.g. like(0).
    tolerance: {dtype: (rtol, atol)} overriding TOLERANCE.
    """
    be = _backend.resolve(backend)
    device = torch.device("cuda" if be == "cuda" else "cpu")
    tol = {**TOLERANCE, **(tolerance or {})}
    orders = tuple(orders) if orders is not None else (SIM_ORDERS if be == "sim" else ("forward",))
    report = Report(name or _name_of(fn))
    gen_state = torch.random.get_rng_state()
    if seed is not None:
        torch.manual_seed(seed)
    for dtype in dtypes:
        for size in sizes:
            case = Case(size, dtype)
            report.cases.append(case)
            # Run the orders until one fails; after a failure, go on only until one passes, to
            # tell a race (the result depends on the order) from a plain bug (wrong in every order).
            # The same inputs for every order, so that only the order differs between the runs.
            failure, passed_in = None, []
            raw = [t for t in inputs(size, dtype, device)]
            for order in orders:
                ok, problem, detail = _run_case(fn, ref, raw, out, size, dtype, device, tol[dtype], be, order)
                if ok:
                    passed_in.append(order)
                elif failure is None:
                    failure = (order, problem, detail)
                if failure and passed_in:
                    break
            if failure:
                order, problem, detail = failure
                case.passed, case.problem, case.detail = False, problem, detail
                if passed_in:
                    case.detail = (detail + "\n" if detail else "") + (
                        f"(wrong with the threads of each block in {order} order, right in {passed_in[0]} "
                        "order: a race between threads)")
                    report.hints.append("results that depend on thread order mean a missing __syncthreads() "
                                        "(or __syncwarp) between a write and a read of shared memory")
                report.hints.append(_hint_for(problem))
    if seed is not None:
        torch.random.set_rng_state(gen_state)
    report.hints = [h for h in report.hints if h]
    if not quiet:
        print(report)
    if raise_on_fail:
        report.raise_if_failed()
    return report


def _run_case(fn, ref, raw, out, size, dtype, device, tol, be, order) -> tuple[bool, str, str]:
    rtol, atol = tol
    # inputs live inside canary-guarded buffers; a pristine copy checks they are unchanged
    guarded_in = [guarded(tuple(t.shape), t.dtype, device, t) for t in raw]
    ins = [g[0] for g in guarded_in]
    pristine = [t.clone() for t in raw]
    want = _as_list(ref(*[t.clone() for t in raw]))
    outs, out_bufs = [], []
    if out is not None:
        for shape, odt in out(ins):
            v, b = guarded(shape, odt, device, float("nan") if odt.is_floating_point else -1)
            outs.append(v)
            out_bufs.append(b)
    try:
        ctx = sim_order(order) if be == "sim" else contextlib.nullcontext()
        with ctx, _poison_empty():
            result = fn(*ins, *outs)
        if device.type == "cuda":
            torch.cuda.synchronize()
    except Exception as e:  # the report shows the message; the notebook keeps running
        msg = str(e).strip().splitlines()
        return False, "raised " + type(e).__name__, "\n".join(msg[:6])
    got = outs if out is not None else _as_list(result)
    if len(got) != len(want):
        return False, f"returned {len(got)} outputs, expected {len(want)}", ""
    for i, (g, b) in enumerate(zip(outs, out_bufs)):
        ok, why = _margins_intact(b, g.numel())
        if not ok:
            return False, why + (f" of output {i}" if len(outs) > 1 else ""), ""
    for i, ((view, buf), p) in enumerate(zip(guarded_in, pristine)):
        ok, why = _margins_intact(buf, view.numel())
        if not ok:
            return False, why + f" of input {i}", ""
        if not torch.equal(view.cpu(), p.cpu()) and not (torch.isnan(p).any() and torch.allclose(view.cpu(), p.cpu(), equal_nan=True)):
            return False, f"input {i} was modified", ""
    for i, (g, w) in enumerate(zip(got, want)):
        ok, problem, detail = compare(g, w.to(g.dtype) if g.dtype != w.dtype else w, rtol, atol)
        if not ok:
            return False, problem + (f" in output {i}" if len(got) > 1 else ""), detail
    return True, "", ""


@contextlib.contextmanager
def _poison_empty():
    """Make torch.empty (also at::empty inside a kernel's wrapper) return NaN-filled memory.

    PyTorch fills uninitialized memory when deterministic algorithms are on; that poisons the
    outputs of functional ops that allocate their own result.
    """
    old = torch.are_deterministic_algorithms_enabled()
    old_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    old_fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(old, warn_only=old_warn)
        torch.utils.deterministic.fill_uninitialized_memory = old_fill
