"""The checker: run a kernel against PyTorch on fresh random inputs of awkward sizes, and say why it fails.

    report = check(ext.add, torch.add, inputs=elementwise(2), out=like(0))

For every case (a size and a dtype) it draws new random inputs, carves inputs and outputs from
larger buffers whose margins hold canary values, fills the outputs with NaN, runs the kernel,
and then checks: the margins are intact (no write past either end), no output element is NaN
(every element was written), the inputs are unchanged, and the values match the reference within
a tolerance scaled to the dtype, with torch.testing.assert_close's rules (the dtype must be the
reference's, an infinity matches only the same infinity, NaN only where the reference has NaN).
On the simulator every case also runs with the threads of each block in reverse and in random
order, so a missing barrier shows up.

The printed report is the same on both backends and on every run (pass/fail per case); error
sizes and mismatching indices appear only for failing cases, in full for the first few. After an
error that leaves the CUDA context unusable the check stops and says to restart the process.
"""
from __future__ import annotations

import contextlib
import enum
import math
import re
import sys
import sysconfig
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

import torch

from . import backend as _backend
from .paths import PACKAGE, ROOT

# Sizes that are not multiples of any block size, plus one and empty.
SIZES = (0, 1, 31, 33, 1000, 2**20 + 3)
ROWS = ((1, 1), (3, 31), (7, 33), (33, 1000), (64, 1024), (5, 4097))
# Shapes for the row-wise ops (softmax, layernorm): ROWS plus many short rows and a length that is a multiple of 4.
# The short rows: 517 = 2 * 256 + 5, ragged for a block of 256 row-threads, 8 row-warps or 64 rows of column sums,
# and more rows than the simulator's 132 SMs x 2 blocks of a grid-stride kernel. Kept small: on the simulator a
# row costs a block of threads whatever its length (4099 such rows took 2/3 of a layernorm check's time).
ROW_OP_SHAPES = (*ROWS, (517, 7), (2, 4))
# Shapes for row reductions: ROWS plus several rows of one column (a reduction of one value,
# where 31 lanes of a warp, or 255 threads of a block, hold only the start value).
REDUCTION_ROWS = ROWS + ((5, 1),)

# (rtol, atol) per dtype: about 10 ulps of the type for a few roundings.
TOLERANCE = {
    torch.float64: (1e-10, 1e-12),
    torch.float32: (1e-5, 1e-6),
    torch.float16: (2e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
}

MARGIN = 64  # elements of canary on each side of every tensor: 256 bytes for fp32, so alignment is kept
# On the simulator, a case whose inputs hold at most this many elements runs first with the simulator's race
# and bounds check (kernels/sim/racecheck.py: 10-20 times slower than a plain run); larger ones do not. A race
# shows in a few blocks (every pattern of tests/sim_kernels/races.cu and the lessons' planted races is caught
# at this size), and the checked run of a larger case costs more than all the plain runs of a check together.
RACE_CHECK_ELEMENTS = 1 << 14
SIM_ORDERS = ("forward", "reverse", "random")
DETAILED = 4  # failing cases whose details a report prints; the others get their one line

# CUDA errors that leave the context unusable: every later CUDA call in the process fails too.
STICKY_CUDA_ERRORS = (
    "an illegal memory access was encountered",
    "unspecified launch failure",
    "device-side assert triggered",
    "misaligned address",
    "an illegal instruction was encountered",
    "invalid program counter",
    "hardware stack error",
    "the launch timed out and was terminated",
    "operation not supported on global/shared address space",
    "uncorrectable ECC error",
)


class CheckFailed(AssertionError):
    """Raised by check(..., raise_on_fail=True) with the report as its message."""


class Diagnosis(enum.Enum):
    """Why a case failed, by name: what a lesson's hints answer (kernels.exercises.Hint) and what the
    checker's own hint for the failure is chosen by. The report prints the problem's text, not these."""

    WROTE_PAST_END = "a write past the end of a tensor (a canary after it changed)"
    WROTE_BEFORE_START = "a write before the start of a tensor (a canary before it changed)"
    UNWRITTEN = "output elements still hold the NaN poison: never written"
    NAN_WHERE_REFERENCE_IS_NOT = "the kernel computed NaN where the reference has a number"
    NUMBER_WHERE_REFERENCE_IS_NAN = "a number where the reference has NaN"
    WRONG_DTYPE = "an output of another dtype than the reference's"
    WRONG_SHAPE = "an output of another shape than the reference's"
    WRONG_OUTPUTS = "another number or kind of outputs than the reference returns"
    WRONG_VALUES = "values outside the tolerance"
    INPUT_MODIFIED = "an input changed"
    RAISED = "the kernel (or its wrapper) raised an error"
    NOT_IMPLEMENTED = "NotImplementedError: a part not written yet"
    INPUT_REFUSED = "the op's input checks refused an argument (helpers.cuh's CHECK_* macros: x must be ...)"
    INVALID_LAUNCH = "a launch refused for its configuration (a grid or block of 0, or too many threads)"
    EXITED_LANE = "a warp-wide operation named a lane that has exited (the simulator)"
    RACE = "results depend on the order of the threads, or the simulator reported a data race"
    OUT_OF_BOUNDS = "an access outside memory, reported by the simulator"
    NOT_DETERMINISTIC = "an output that must be the same bits on every run differs between two runs"
    MBARRIER = ("an mbarrier's phases or bytes went wrong (the simulator): a wait that can never end (a wrong parity, "
                "a missing arrival or expect_tx), or copies that bring more bytes than expect_tx announced")
    WGMMA_IN_FLIGHT = ("a copy into shared memory that a wgmma still in flight reads (the simulator): a stage released "
                       "or refilled before the wgmma that reads it completed")
    WGMMA_DESCRIPTOR = "a wgmma matrix descriptor that reaches outside the block's shared memory (the simulator)"
    CLUSTER_SYNC = ("a block of a thread-block cluster reached another block's shared memory or mbarriers before that "
                    "block started (or initialised them) or after it exited (the simulator): a missing cluster barrier")
    ACCESS_PATTERN = ("right values, but memory accesses unlike the exercise's design, by the simulator's access "
                      "profile (say, an inner loop that reads global memory instead of the shared-memory tiles)")
    BUILD_FAILED = "the file does not compile (or a Python file does not import)"


# What a raised error says about the failure, most specific first: (exception type, a regular expression
# searched in its message, diagnosis). The simulator's findings start with "cudasim: "; the CUDA runtime's
# errors (which the simulator words as a GPU does) carry "CUDA error: "; helpers.cuh's CHECK_* macros say
# "x must be ...". A RuntimeError with a `diagnosis` attribute (a Diagnosis) is taken at its word, so a
# new finding is one line here or one attribute on the exception.
ERROR_DIAGNOSES: tuple[tuple[type, str, Diagnosis], ...] = (
    (NotImplementedError, r"", Diagnosis.NOT_IMPLEMENTED),
    # the instrumented build's findings (cudasim_check.h), as the launch rethrows them:
    # "cudasim: exception in kernel K: data race on ...", "... out-of-bounds write at ..."
    (RuntimeError, r"^cudasim:.*\bdata race on ", Diagnosis.RACE),
    (RuntimeError, r"^cudasim:.*\bout-of-bounds (?:read|write) at ", Diagnosis.OUT_OF_BOUNDS),
    (RuntimeError, r"^cudasim: illegal memory access\b", Diagnosis.OUT_OF_BOUNDS),  # a fault outside mapped memory
    # the asynchronous proxy's rules (kernels/sim/README.md, "Rules checked"): the Hopper lesson's protocol bugs
    (RuntimeError, r"^cudasim: \S*mbarrier\S* at .*: deadlock: this wait for the phase of parity", Diagnosis.MBARRIER),
    (RuntimeError, r"^cudasim:.* bytes that expect_tx announced", Diagnosis.MBARRIER),
    (RuntimeError, r"^cudasim:.* that the wgmma\.mma_async issued at \S+ still reads", Diagnosis.WGMMA_IN_FLIGHT),
    (RuntimeError, r"^cudasim: wgmma\.\S* at .*: the matrix descriptor .* outside the block's shared memory",
     Diagnosis.WGMMA_DESCRIPTOR),
    # a block of a cluster that reaches another's memory too early or too late (kernels/sim/README.md, "Thread-block
    # clusters"): the simulator runs one block of each cluster ahead of the others
    (RuntimeError, r"^cudasim:.*(?:, which has not started yet \(|was written before that block started|whose threads "
                   r"have all exited: a block's shared memory goes|was written after all of that block's threads had "
                   r"exited|no mbarrier is initialised at shared address \S+ in the cluster's block of rank)",
     Diagnosis.CLUSTER_SYNC),
    (RuntimeError, r"\bwhich has exited \(|\blane \d+ \(thread \([\d,]+\)\) has exited \(", Diagnosis.EXITED_LANE),
    (RuntimeError, r"CUDA error: invalid (argument|configuration argument)\b", Diagnosis.INVALID_LAUNCH),
    (RuntimeError, r"^[\w.\[\]'\" ]+ must (be|have|equal) ", Diagnosis.INPUT_REFUSED),
)


def diagnose_error(error: BaseException) -> Diagnosis:
    """The diagnosis of a case whose kernel raised `error` (RAISED unless ERROR_DIAGNOSES knows better)."""
    said = getattr(error, "diagnosis", None)
    if isinstance(said, Diagnosis):
        return said
    text = str(error).strip()
    for kind, pattern, diagnosis in ERROR_DIAGNOSES:
        if isinstance(error, kind) and re.search(pattern, text, re.M):
            return diagnosis
    return Diagnosis.RAISED


@dataclass
class Case:
    """One size and dtype: whether it passed and, if not, why (`diagnosis`, by name; `problem` and
    `detail`, the report's words; `part`, the output or the part of a check the failure is in)."""

    size: object
    dtype: torch.dtype
    passed: bool = True
    problem: str = ""
    detail: str = ""
    diagnosis: Diagnosis | None = None
    part: str = ""

    def label(self) -> str:
        size = "x".join(map(str, self.size)) if isinstance(self.size, tuple) else str(self.size)
        return f"{size:>12}  {str(self.dtype).replace('torch.', '')}"


@dataclass
class Report:
    """The outcome of a check: a line per case, and hints when something failed."""

    name: str
    cases: list[Case] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)
    stopped: str = ""  # why the check stopped before its last case (the CUDA context is unusable)

    @property
    def passed(self) -> bool:
        return bool(self.cases) and all(c.passed for c in self.cases) and not self.stopped

    def __str__(self) -> str:
        """A line per case; the details of the first DETAILED failing cases; each hint once."""
        ok = sum(c.passed for c in self.cases)
        lines = [f"{self.name}: {ok}/{len(self.cases)} cases passed"]
        failing, left_out = 0, 0
        for c in self.cases:
            lines.append(f"  {'PASS' if c.passed else 'FAIL'}  {c.label()}" + ("" if c.passed else f"   {c.problem}"))
            if not c.passed:
                failing += 1
                if c.detail and failing <= DETAILED:
                    lines.extend("          " + d for d in c.detail.splitlines())
                elif c.detail:
                    left_out += 1
        if left_out:
            lines.append(f"  (details of {left_out} more failing case{'s' if left_out > 1 else ''} left out: "
                         "fix the first ones and run again)")
        if self.stopped:
            lines.append(f"  STOPPED: {self.stopped}")
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


def merge(name: str, reports: Iterable[Report], *, quiet: bool = True, raise_on_fail: bool = False) -> Report:
    """One report of several: their cases and hints in order, and the first reason one of them stopped. Printed
    unless `quiet`; with `raise_on_fail`, an AssertionError with the report if a case failed (as check() does)."""
    merged = Report(name)
    for r in reports:
        merged.cases += r.cases
        merged.hints += r.hints
        merged.stopped = merged.stopped or r.stopped
    if not quiet:
        print(merged)
    if raise_on_fail:
        merged.raise_if_failed()
    return merged


def profile_raised(report: Report, case: Case, e: BaseException) -> Report:
    """`report` with its profile `case` failed because profiling the kernel raised `e` (the error's first lines
    as the detail, as a failing case of check() shows them)."""
    case.passed, case.problem, case.diagnosis = False, "the access profile raised " + type(e).__name__, Diagnosis.RAISED
    case.detail = "\n".join(str(e).strip().splitlines()[:6])
    report.hints.append(HINTS[Diagnosis.RAISED])
    return report


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
                x[1] = x[1, 0].item()  # a number, not a view: CUDA refuses a copy from an overlapping view
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
    if dtype.is_floating_point:  # exact in every float type; the 8-bit ones reach 448 (e4m3) and 57344 (e5m2)
        return 96.0 if dtype.itemsize == 1 else 1234.5
    return 0x5A5A


@dataclass
class Guarded:
    """A tensor the checker hands a kernel: `view`, elements `start` to `start + view.numel()` of `buffer`,
    whose other elements are canaries."""

    view: torch.Tensor
    buffer: torch.Tensor
    start: int

    def margins_intact(self) -> tuple[Diagnosis | None, str]:
        """(None, "") when the canaries on both sides are intact, else the diagnosis and the problem."""
        c, n, start = _canary(self.buffer.dtype), self.view.numel(), self.start
        before, after = self.buffer[:start].cpu(), self.buffer[start + n:].cpu()
        bad_before = (before != c).nonzero().flatten()
        bad_after = (after != c).nonzero().flatten()
        if len(bad_after):
            return (Diagnosis.WROTE_PAST_END,
                    f"wrote past the end: element(s) {', '.join(str(n + int(i)) for i in bad_after[:4])} (size is {n})")
        if len(bad_before):
            return (Diagnosis.WROTE_BEFORE_START,
                    f"wrote before the start: element(s) {', '.join(str(int(i) - start) for i in bad_before[-4:])}")
        return None, ""


def guarded(shape, dtype, device, fill: torch.Tensor | float) -> Guarded:
    """A contiguous tensor of `shape` in the middle of a buffer with canary margins of at least MARGIN
    elements. On the CPU (the simulator) the buffer also lies between two stretches of memory with no
    access (kernels/sim/guarded.py), so a write far past the end faults instead of corrupting the process."""
    n = math.prod(shape)
    if torch.device(device).type == "cpu":
        from .sim.guarded import guarded_buffer

        buf, start = guarded_buffer(n + MARGIN, dtype, MARGIN)
        start += MARGIN
        buf.fill_(_canary(dtype))
    else:
        buf, start = torch.full((n + 2 * MARGIN,), _canary(dtype), dtype=dtype, device=device), MARGIN
    view = buf[start:start + n].view(shape)
    if isinstance(fill, torch.Tensor):
        view.copy_(fill)
    else:
        view.fill_(fill)
    return Guarded(view, buf, start)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _first_mismatches(got: torch.Tensor, want: torch.Tensor, bad: torch.Tensor, limit: int = 5) -> str:
    idx = bad.nonzero()
    lines = []
    for row in idx[:limit].tolist():
        where = tuple(row) if len(row) != 1 else row[0]
        lines.append(f"at {where}: got {got[tuple(row)].item():.6g}, expected {want[tuple(row)].item():.6g}")
    if len(idx) > limit:
        lines.append(f"... {len(idx)} mismatching elements of {got.numel()}")
    return "\n".join(lines)


def _widened(t: torch.Tensor) -> torch.Tensor:
    """t in a type that holds every value of its dtype exactly (float64, complex128, or itself)."""
    if t.dtype.is_complex:
        return t.to(torch.complex128)
    if t.dtype.is_floating_point:
        return t.double()
    return t


def _nan_mask(t: torch.Tensor) -> torch.Tensor:
    if t.dtype.is_floating_point or t.dtype.is_complex:
        return torch.isnan(t)
    return torch.zeros_like(t, dtype=torch.bool)


def _poison_bits(t: torch.Tensor) -> torch.Tensor:
    """Where t holds exactly the poison the checker writes (NaN as torch.full and PyTorch's filled
    uninitialized memory make it), bit for bit: a NaN a kernel computes has another sign or payload
    on the CPU (x86's default NaN is negative) and on a GPU (0x7fffffff)."""
    poison = torch.full((1,), float("nan"), dtype=t.dtype)
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.contiguous().view(width) == poison.view(width)


def compare(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float) -> tuple[bool, str, str]:
    """(ok, problem, detail) for one output against its reference; see diagnose_output."""
    diagnosis, problem, detail = diagnose_output(got, want, rtol, atol)
    return diagnosis is None, problem, detail


def diagnose_output(got: torch.Tensor, want: torch.Tensor, rtol: float,
                    atol: float) -> tuple[Diagnosis | None, str, str]:
    """(diagnosis, problem, detail) for one output against its reference; (None, "", "") when it matches.

    The values are judged by torch.testing.assert_close (the tolerance |got - want| <= atol + rtol * |want|,
    an infinity matched only by the same infinity, NaN only by NaN); before it, the checker tells apart what
    assert_close would call a mismatch alike: another dtype or shape (nothing is cast), elements still
    holding the NaN poison (never written), a NaN the kernel computed, a number where the reference has NaN.
    """
    if not isinstance(got, torch.Tensor):
        return Diagnosis.WRONG_OUTPUTS, f"returned a {type(got).__name__}, expected a tensor", ""
    got, want = got.detach().cpu(), want.detach().cpu()
    if got.dtype != want.dtype:
        return (Diagnosis.WRONG_DTYPE, f"dtype {_dtype_name(got.dtype)}, expected {_dtype_name(want.dtype)}",
                "the output must have the reference's dtype: the checker does not cast it")
    if got.shape != want.shape:
        return Diagnosis.WRONG_SHAPE, f"shape {tuple(got.shape)}, expected {tuple(want.shape)}", ""
    if got.numel() == 0:
        return None, "", ""
    g, w = _widened(got), _widened(want)
    got_nan, want_nan = _nan_mask(g), _nan_mask(w)
    nan_here = got_nan & ~want_nan
    if nan_here.any():
        first = nan_here.flatten().nonzero()[0].item()
        poisoned = nan_here & _poison_bits(got) if got.dtype.is_floating_point else nan_here
        if poisoned.any():
            first = poisoned.flatten().nonzero()[0].item()
            return (Diagnosis.UNWRITTEN, f"{int(nan_here.sum())} of {got.numel()} elements are NaN",
                    f"first at flat index {first}: never written (still the NaN poison)")
        return (Diagnosis.NAN_WHERE_REFERENCE_IS_NOT, f"{int(nan_here.sum())} of {got.numel()} elements are NaN",
                f"first at flat index {first}: a NaN the kernel computed (not the poison), where the reference "
                "has a number")
    lost_nan = want_nan & ~got_nan
    if lost_nan.any():
        return (Diagnosis.NUMBER_WHERE_REFERENCE_IS_NAN,
                f"{int(lost_nan.sum())} of {got.numel()} elements are numbers where the reference is NaN",
                _first_mismatches(got, want, lost_nan))
    try:
        torch.testing.assert_close(g, w, rtol=rtol, atol=atol, equal_nan=True, check_dtype=False)
    except AssertionError:
        pass
    else:
        return None, "", ""
    exact = got.dtype.is_floating_point or got.dtype.is_complex
    # which elements: the same rule as assert_close's, for the report's lines
    bad = ~torch.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True) if exact else g != w
    err = ((g[bad] - w[bad]) if exact else (g[bad].double() - w[bad].double())).abs().max().item()
    return (Diagnosis.WRONG_VALUES, f"{int(bad.sum())} of {got.numel()} elements differ (max abs error {err:.3g})",
            _first_mismatches(got, want, bad))


def close(got: torch.Tensor, want: torch.Tensor, tolerance: dict | None = None) -> bool:
    """Whether `got` matches `want` within the checker's tolerance for got's dtype (TOLERANCE, or `tolerance`
    for the dtypes it names), by torch.testing.assert_close's rules, both widened first (want may be a
    float32 reference of a bfloat16 output). The verdict a benchmark's check after timing uses."""
    rtol, atol = {**TOLERANCE, **(tolerance or {})}.get(got.dtype, (0.0, 0.0))
    wide = torch.float64 if got.dtype == torch.float64 or want.dtype == torch.float64 else torch.float32
    try:
        torch.testing.assert_close(got.detach().to(wide), want.detach().to(wide), rtol=rtol, atol=atol)
    except AssertionError:
        return False
    return True


def _identical(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The same shape, dtype and bits: NaN equals the same NaN, -0.0 differs from 0.0."""
    a, b = a.detach().cpu().contiguous(), b.detach().cpu().contiguous()
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def _first_change(now: torch.Tensor, before: torch.Tensor) -> str:
    """Where an input first differs from its pristine copy, bit for bit."""
    n, b = now.detach().cpu().reshape(-1), before.detach().cpu().reshape(-1)
    size = n.element_size()
    changed = (n.view(torch.uint8).view(-1, size) != b.view(torch.uint8).view(-1, size)).any(dim=1)
    i = int(changed.nonzero()[0].item())
    return f"first change at flat index {i}: was {b[i].item():.6g}, now {n[i].item():.6g}"


def sim_order(order: str):
    """Run the simulator's threads in `order` (forward, reverse, random) inside the block."""
    from .sim import knobs

    return knobs.set(order=order)


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


def _output_names(fn, out_names: Sequence[str] | None, n_in: int, n_out: int) -> list[str]:
    """What the report calls each output: out_names, else the names in the op's schema, else `output i`."""
    if out_names is not None:
        if len(out_names) != n_out:
            raise ValueError(f"out_names has {len(out_names)} names ({', '.join(out_names)}), "
                             f"but the op has {n_out} outputs")
        return list(out_names)
    schema = getattr(getattr(fn, "default", None), "_schema", None) or getattr(fn, "_schema", None)
    if schema is not None:
        if len(schema.arguments) == n_in + n_out:  # an out-variant op: its outputs are its last arguments
            return [a.name for a in schema.arguments[n_in:]]
        if len(schema.returns) == n_out and all(r.name for r in schema.returns):
            return [r.name for r in schema.returns]
    return [f"output {i}" for i in range(n_out)]


# ---------------------------------------------------------------------------------------------
# Errors: where a Python exception was raised, and whether a CUDA error broke the context.

_STDLIB = Path(sysconfig.get_paths()["stdlib"]).resolve()


def _in_learner_code(filename: str) -> bool:
    """True for a file of the learner's: not the toolkit, not Python's library, not an installed package."""
    if filename.startswith("<"):
        return False
    path = Path(filename).resolve()
    if "site-packages" in path.parts or "dist-packages" in path.parts:
        return False
    return not (path.is_relative_to(PACKAGE) or path.is_relative_to(_STDLIB))


def _shown_path(filename: str) -> str:
    """A file as the report names it: relative to the repository, else by its name alone."""
    if "ipykernel_" in filename:  # the code of a notebook cell
        return "a notebook cell"
    path = Path(filename).resolve()
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name


def where_raised(error: BaseException) -> str:
    """'lessons/03_pytorch_op/fma_op.py, line 36, in backward': the innermost frame of `error` (or of
    the error that caused it) in the learner's code, or "" when it was raised elsewhere (in C++)."""
    chain, e = [], error
    while e is not None and e not in chain:
        chain.append(e)
        e = e.__cause__ or (None if e.__suppress_context__ else e.__context__)
    for e in reversed(chain):  # the root cause first
        for frame in reversed(traceback.extract_tb(e.__traceback__)):
            if _in_learner_code(frame.filename):
                return f"{_shown_path(frame.filename)}, line {frame.lineno}, in {frame.name}"
    return ""


def cuda_context_lost(error: BaseException | None, backend: str) -> str:
    """Why the CUDA context can no longer be used after `error` (or now, for None); "" while it works.

    Some CUDA errors (an illegal memory access, a device-side assert, ...) are sticky: the context is
    broken and every later CUDA call in the process fails with the same error. They are told by
    their text, or by a trivial CUDA call (a synchronize) that fails too. Never on the simulator.
    """
    if backend != "cuda":
        return ""
    text = str(error) if error is not None else ""
    for sticky in STICKY_CUDA_ERRORS:
        if sticky in text:
            return sticky
    try:
        torch.cuda.synchronize()
    except Exception as e:  # the probe failed: the context is unusable, whatever the first error said
        lines = [line for line in str(e).strip().splitlines() if line.strip()]
        return (lines[0] if lines else type(e).__name__).removeprefix("CUDA error: ")
    return ""


def _restart_line(reason: str, ran: int, total: int) -> str:
    """The one line a report ends with when the CUDA context broke: restart the process."""
    when = "before the first case" if ran == 0 else f"after case {ran} of {total}"
    return (f"the CUDA context is broken ({reason}) and every later CUDA call in this process fails, so the "
            f"check stopped {when}. Restart the Python process (in Jupyter: Kernel > Restart) and run it again.")


# The checker's own hint for each diagnosis (a lesson's exercises add their ladders: kernels.exercises).
RAISED_HINT = "the kernel raised an error: its message is under the failing case"
RACE_HINT = ("results that depend on thread order mean a missing __syncthreads() (or __syncwarp) between a write and "
             "a read of shared memory, or a value used before anything wrote it (an accumulator never set to zero, "
             "a register or shared array never filled), whose garbage differs from run to run")
RACE_FOUND_HINT = ("a data race: two threads touched the same memory, at least one writing, with nothing ordering them (a "
                   "__syncthreads() for threads of a block, a __syncwarp() within a warp, an atomic, or a second kernel "
                   "across blocks); the failing case names both lines")
HINTS = {
    Diagnosis.WROTE_PAST_END: "a write past the end usually means a missing or off-by-one bounds check: `if (i < n)`, "
                              "not `i <= n`",
    Diagnosis.WROTE_BEFORE_START: "a write before the start means a negative index: check how the index is computed",
    Diagnosis.WRONG_DTYPE: "the output's dtype is not the reference's: allocate it with the input's dtype "
                           "(torch.empty_like(x) or at::empty_like(x)) and convert the result to it before storing",
    Diagnosis.NUMBER_WHERE_REFERENCE_IS_NAN: "the reference gives NaN there (an undefined result) and the kernel a "
                                             "number: compute that case as the reference does",
    Diagnosis.UNWRITTEN: "unwritten elements mean the grid does not cover the whole tensor (use ceil_div for the "
                         "number of blocks) or a loop stops early (the ragged tail)",
    Diagnosis.NAN_WHERE_REFERENCE_IS_NOT: ("the kernel wrote a NaN it computed (the element was written: it is not the "
                                           "poison): 0/0, inf - inf (x - max when both are -inf, as a running max that "
                                           "starts at -inf gives), sqrt or log of a negative number, arithmetic on a "
                                           "value read from outside its input, or (on the simulator) on shared memory "
                                           "read before anything wrote it: it starts each block as NaN, and an "
                                           "asynchronous copy's destination stays NaN until its wait. Print the "
                                           "intermediate values of the first failing element"),
    Diagnosis.INPUT_MODIFIED: "a kernel must not modify its inputs: write only to the output",
    Diagnosis.WRONG_VALUES: "wrong values: compare your formula and indexing with the reference on a tiny size first",
    Diagnosis.NOT_IMPLEMENTED: "something is not written yet (NotImplementedError): look for FILL ME IN in your files",
    Diagnosis.RAISED: RAISED_HINT,
    Diagnosis.INVALID_LAUNCH: RAISED_HINT,
    Diagnosis.INPUT_REFUSED: RAISED_HINT,
    Diagnosis.EXITED_LANE: RAISED_HINT,
    Diagnosis.MBARRIER: ("an mbarrier phase that never completes, or completes early: each use u of a barrier is its "
                         "phase of parity u % 2, the arrivals its init counted must all come, and the copies that "
                         "complete on it must be announced by expect_tx (the failing case names the waits and the "
                         "barriers' state)"),
    Diagnosis.WGMMA_IN_FLIGHT: ("a stage was overwritten while a wgmma still read it: hand a stage back (arrive on its "
                                "empty barrier) only after a wgmma.wait_group that covers the wgmma reading it"),
    Diagnosis.WGMMA_DESCRIPTOR: ("a wgmma descriptor reaches outside shared memory: check its start address (>> 4), "
                                 "its leading and stride byte offsets (>> 4) and its swizzle mode"),
    Diagnosis.CLUSTER_SYNC: ("the blocks of a cluster need not start or finish together (the simulator runs one of "
                             "them ahead of the others): synchronise the cluster (cluster.sync(), or barrier.cluster "
                             "arrive and wait) after every block has initialised its mbarriers and shared memory and "
                             "before any block touches another's (a multicast copy, a remote arrival, a store through "
                             "mapa or map_shared_rank), and again before a block whose memory others use exits"),
    Diagnosis.OUT_OF_BOUNDS: ("an access outside memory the kernel may use (the failing case names the line and how far "
                              "past which tensor): check every index against its bound (`if (i < n)`, not `i <= n`), "
                              "including the ragged edge of a tile"),
    Diagnosis.RACE: RACE_FOUND_HINT,
    Diagnosis.NOT_DETERMINISTIC: ("the same inputs gave other bits on a second run: float addition is not associative, "
                                  "so a sum must be added up in one fixed order. atomicAdd adds in whatever order the "
                                  "threads arrive; give each thread (or block) its own slot, and add the slots in a "
                                  "loop of a fixed order"),
    Diagnosis.ACCESS_PATTERN: ("the values are right, but the simulator's memory-access profile finds accesses the "
                               "exercise's design does not make: the failing case gives the counts next to the "
                               "solution's, and each line's loads and stores (as print(profile(op, *inputs)) shows them, "
                               "after `from kernels import profile`)"),
}


_race_check_elements: list[int | None] = [RACE_CHECK_ELEMENTS]  # the limit in force (see thorough)


@contextlib.contextmanager
def race_check_limit(elements: int | None):
    """Inside the block, the simulator's race and bounds check runs on the cases with at most `elements` input
    elements: None for every case (see thorough), 0 for none (its instrumented build is then not made)."""
    _race_check_elements.append(elements)
    try:
        yield
    finally:
        _race_check_elements.pop()


def race_check_on() -> bool:
    """Whether checks run now make the simulator's race and bounds check (not inside race_check_limit(0))."""
    return _race_check_elements[-1] != 0


def thorough():
    """Inside the block, every case gets the simulator's race and bounds check, whatever its size (make sanitize)."""
    return race_check_limit(None)


def check(fn: Callable, ref: Callable, inputs: Callable, *, out: Callable | None = None,
          out_names: Sequence[str] | None = None, sizes: Iterable = SIZES,
          dtypes: Sequence[torch.dtype] = (torch.float32,), tolerance: dict | None = None,
          name: str | None = None, backend: str | None = None, orders: Sequence[str] | None = None,
          raise_on_fail: bool = False, quiet: bool = False, seed: int | None = None,
          races: bool = True) -> Report:
    """Check `fn` against `ref` on every size and dtype; print and return the report.

    fn:      the kernel, called as fn(*inputs, *outputs) when `out` is given (an out-variant op),
             else fn(*inputs), returning a tensor or a tuple of tensors.
    ref:     the PyTorch reference, ref(*inputs) -> tensor or tuple of tensors, in the dtypes the
             outputs must have (they are compared as they are, never cast).
    inputs:  inputs(size, dtype, device) -> list of tensors, e.g. elementwise(2) or rows(1).
    out:     out(inputs) -> [(shape, dtype), ...] for an out-variant op, e.g. like(0).
    out_names: what the report calls the outputs, e.g. ("da", "db"); by default the names in the
             op's schema, else "output 0", "output 1", ...
    tolerance: {dtype: (rtol, atol)} overriding TOLERANCE; or {dtype: ((rtol, atol), ...)}, one pair per output
             (an output computed in float32 from half inputs, such as a log-sum-exp, held tighter than the rest).
    orders:  the simulator's thread orders each case runs in (default: forward, reverse, random).
    races:   on the simulator, run the cases with at most RACE_CHECK_ELEMENTS input elements (every case
             inside `thorough()`) with the race and bounds check in the first order (kernels/sim/racecheck.py);
             a data race or an access outside the call's memory fails the case, naming the line.
    """
    be = _backend.resolve(backend)
    device = _backend.device(be)
    tol = {**TOLERANCE, **(tolerance or {})}
    for dtype in dtypes:
        if dtype not in tol and (dtype.is_floating_point or dtype.is_complex):
            raise ValueError(f"no tolerance for {dtype}: pass tolerance={{{dtype}: (rtol, atol)}}")
    orders = tuple(orders) if orders is not None else (SIM_ORDERS if be == "sim" else ("forward",))
    report = Report(name or _name_of(fn))
    todo = [(size, dtype) for dtype in dtypes for size in sizes]
    gen_state = torch.random.get_rng_state()
    if seed is not None:
        torch.manual_seed(seed)
    lost = cuda_context_lost(None, be)  # broken by an earlier error: no case can run
    limit = _race_check_elements[-1]
    races = races and be == "sim" and limit != 0
    if races:
        from .sim.instrumented import prepare_for

        prepare_for(fn)  # its instrumented build, built (or found in the cache) before the first case
    for size, dtype in [] if lost else todo:
        case = Case(size, dtype)
        report.cases.append(case)
        # Run the orders until one fails; after a failure, go on only until one passes, to
        # tell a race (the result depends on the order) from a plain bug (wrong in every order).
        # The same inputs for every order, so that only the order differs between the runs.
        failure, passed_in = None, []
        raw = [t for t in inputs(size, dtype, device)]
        racecheck = races and (limit is None or sum(t.numel() for t in raw) <= limit)
        for k, order in enumerate(orders):
            outcome = _run_case(fn, ref, raw, out, out_names, device, tol.get(dtype, (0.0, 0.0)), be, order,
                                racecheck=racecheck and k == 0)
            if outcome.diagnosis in (Diagnosis.RACE, Diagnosis.OUT_OF_BOUNDS, Diagnosis.CLUSTER_SYNC) and not passed_in:
                failure = (order, outcome)  # the check named it: no other order can clear it
                break
            if outcome.ok:
                passed_in.append(order)
            elif failure is None:
                failure = (order, outcome)
            lost = outcome.lost
            if lost or (failure and passed_in):
                break
        if failure:
            order, outcome = failure
            case.passed, case.problem, case.detail = False, outcome.problem, outcome.detail
            case.diagnosis, case.part = outcome.diagnosis, outcome.part
            if passed_in:
                case.diagnosis = Diagnosis.RACE  # whatever went wrong, it went wrong in one order only
                case.detail = (case.detail + "\n" if case.detail else "") + (
                    f"(wrong with the threads of each block in {order} order, right in {passed_in[0]} "
                    "order: a race between threads)")
                report.hints.append(RACE_HINT)
            report.hints.append(HINTS.get(outcome.diagnosis, ""))
        if case.diagnosis is Diagnosis.OUT_OF_BOUNDS and not lost and (size, dtype) != todo[-1]:
            # on the CPU a larger case could write past its tensor into the process's own memory
            report.stopped = (f"the check stopped after case {len(report.cases)} of {len(todo)}: a kernel that reaches "
                              "outside its memory can corrupt the process in larger cases; fix this first")
            break
        if lost:
            break
    if lost:
        report.stopped = _restart_line(lost, len(report.cases), len(todo))
        if "illegal memory access" in lost or "misaligned address" in lost:
            report.hints.append("an illegal memory access means a thread read or wrote outside a tensor: check "
                                "every index against its bound (`if (i < n)`) and the pointer casts")
    if seed is not None:
        torch.random.set_rng_state(gen_state)
    report.hints = [h for h in report.hints if h]
    if not quiet:
        print(report)
    if raise_on_fail:
        report.raise_if_failed()
    return report


def check_deterministic(fn: Callable, inputs: Callable, size, *, parts: Sequence[str],
                        out_names: Sequence[str] | None = None, dtype: torch.dtype = torch.float32, why: str = "",
                        name: str | None = None, backend: str | None = None, quiet: bool = False) -> Report:
    """Run a functional op fn(*inputs) twice on the same inputs of one size, and require the outputs named in `parts`
    to come out the same bits both times (NaN the same NaN, -0.0 not 0.0).

    On the simulator the first run has the threads of each block in forward order and the blocks in order, the
    second the threads in reverse order and the blocks shuffled: a sum whose order follows the threads' (an atomicAdd
    of floats) changes its last bits. On a GPU the two runs go as they come. Empty memory holds NaN in both runs, as
    in check(), so an element read before it is written reads the same poison twice: whether the values are right
    is check()'s to say, not this. The report has one case, "<size> twice", its part "determinism" (what a lesson's
    Hint names); `why` ends its problem line.
    """
    be = _backend.resolve(backend)
    device = _backend.device(be)
    report = Report(name or _name_of(fn))
    shown = "x".join(map(str, size)) if isinstance(size, tuple) else str(size)
    case = Case(f"{shown} twice", dtype)
    report.cases.append(case)
    lost = cuda_context_lost(None, be)
    if lost:
        report.stopped = _restart_line(lost, 0, 1)
        case.passed, case.problem = False, "not run"
    raw = [] if lost else inputs(size, dtype, device)
    if be == "sim":
        from .sim import knobs

        runs = [knobs.set(order="forward", shuffle_blocks=False), knobs.set(order="reverse", shuffle_blocks=True)]
        how = ("the same inputs twice: the threads of each block in forward order and the blocks in order, then the "
               "threads in reverse order and the blocks shuffled")
    else:
        runs = [contextlib.nullcontext(), contextlib.nullcontext()]
        how = "the same inputs, run twice"
    results = []
    for ctx in [] if lost else runs:
        try:
            with ctx, _poison_empty():
                results.append(_as_list(fn(*[t.clone() for t in raw])))
            if device.type == "cuda":
                torch.cuda.synchronize()
        except Exception as e:  # the report shows the message, as check() does
            diagnosis = diagnose_error(e)
            msg = str(e).strip().splitlines()
            where = where_raised(e)
            case.passed, case.problem, case.diagnosis = False, error_problem(e, diagnosis), diagnosis
            case.detail = "\n".join(msg[:6] + ([f"at {where}"] if where else []))
            report.hints.append(HINTS.get(diagnosis, ""))
            lost = cuda_context_lost(e, be)
            if lost:
                report.stopped = _restart_line(lost, 1, 1)
            break
    if len(results) == 2:
        names = _output_names(fn, out_names, len(raw), len(results[0]))
        for label in parts:
            i = names.index(label)
            first, second = (r[i].detach().cpu() if isinstance(r[i], torch.Tensor) else r[i] for r in results)
            if not isinstance(first, torch.Tensor) or not isinstance(second, torch.Tensor) or _identical(first, second):
                continue  # not a tensor: check() says so
            case.passed, case.diagnosis, case.part = False, Diagnosis.NOT_DETERMINISTIC, "determinism"
            case.problem = f"{label} differs bit for bit between two runs" + (f": {why}" if why else "")
            if first.shape == second.shape and first.dtype == second.dtype:
                a, b = first.reshape(-1), second.reshape(-1)
                width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
                differ = (a.contiguous().view(width) != b.contiguous().view(width)).nonzero().flatten()
                j = int(differ[0])
                case.detail = (f"{len(differ)} of {a.numel()} elements differ; first at flat index {j}: "
                               f"{a[j].item():.9g} in the first run, {b[j].item():.9g} in the second\n")
            case.detail += f"({how})"
            report.hints.append(HINTS[Diagnosis.NOT_DETERMINISTIC])
            break
    report.hints = [h for h in report.hints if h]
    if not quiet:
        print(report)
    return report


@dataclass
class _Outcome:
    """One run of one case: whether it passed, why not, and whether it broke the CUDA context."""

    ok: bool
    problem: str = ""
    detail: str = ""
    lost: str = ""  # why the CUDA context is unusable after this run; "" when it is fine
    diagnosis: Diagnosis | None = None
    part: str = ""  # the output the failure is in, where the op has several or they are named


def error_problem(error: BaseException, diagnosis: Diagnosis) -> str:
    """The failing case's one-line problem for a raised error: what the simulator's race and bounds check
    found ("data race on global memory", "wrote out of bounds: 1 element of 4 bytes past the end of out"), what a
    block of a cluster did too early or too late, else "raised <type>"."""
    text = str(error).strip()
    if diagnosis is Diagnosis.RACE:
        found = re.search(r"\bdata race on ([^:]+):", text)
        if found:
            return f"data race on {found.group(1)}"
    if diagnosis is Diagnosis.OUT_OF_BOUNDS:
        found = re.search(r"\bout-of-bounds (read|write) at .*?: the thread \w+ \d+ bytes at \S+, (.*?)\. On a GPU", text, re.S)
        if found:
            where = found.group(2).split(": ")[-1]  # "outside every tensor ...: 1 element of 4 bytes past the end of `x` (33 float32)"
            return f"{'wrote' if found.group(1) == 'write' else 'read'} out of bounds: {where}"
    if diagnosis is Diagnosis.CLUSTER_SYNC:
        if re.search(r"has not started yet|before that block started", text):
            return "a block of the cluster reached another's shared memory before that block started"
        if "exited" in text:
            return "a block of the cluster reached another's shared memory after that block exited"
        return "a block of the cluster used another's mbarrier before that block initialised it"
    return "raised " + type(error).__name__


def _failed(diagnosis: Diagnosis, problem: str, detail: str = "", part: str = "", lost: str = "") -> _Outcome:
    return _Outcome(False, problem, detail, lost, diagnosis, part)


def _run_case(fn, ref, raw, out, out_names, device, tol, be, order, racecheck: bool = False) -> _Outcome:
    # inputs live inside canary-guarded buffers; a pristine copy checks they are unchanged
    guarded_in = [guarded(tuple(t.shape), t.dtype, device, t) for t in raw]
    ins = [g.view for g in guarded_in]
    pristine = [t.clone() for t in raw]
    want = _as_list(ref(*[t.clone() for t in raw]))
    outs, out_bufs = [], []
    if out is not None:
        for shape, odt in out(ins):
            g = guarded(shape, odt, device, float("nan") if odt.is_floating_point else -1)
            outs.append(g.view)
            out_bufs.append(g)
    try:
        ctx = sim_order(order) if be == "sim" else contextlib.nullcontext()
        with ctx, _poison_empty():
            if racecheck:  # the simulator's race and bounds check, its messages naming the tensors as the report does
                from .sim import racecheck as rc

                names_out = _output_names(fn, out_names, len(ins), len(outs)) if outs else []
                labels = {v.data_ptr(): rc.tensor_label(f"input {i}", v) for i, v in enumerate(ins) if v.numel()}
                labels.update({v.data_ptr(): rc.tensor_label(label, v) for v, label in zip(outs, names_out) if v.numel()})
                # a small overshoot lands in the canary margins and is reported from them, as on a GPU
                spans = {g.view.data_ptr(): (g.buffer.data_ptr(), g.buffer.numel() * g.buffer.element_size())
                         for g in [*guarded_in, *out_bufs] if g.view.numel()}
                labels = {ptr: f"{label} with its canary margins" for ptr, label in labels.items()}
                result = rc.checked(fn, *ins, *outs, labels=labels, spans=spans)
            else:
                result = fn(*ins, *outs)
        if device.type == "cuda":
            torch.cuda.synchronize()
    except Exception as e:  # the report shows the message; the notebook keeps running
        msg = str(e).strip().splitlines()
        where = where_raised(e)
        detail = "\n".join(msg[:6] + ([f"at {where}"] if where else []))
        diagnosis = diagnose_error(e)
        return _failed(diagnosis, error_problem(e, diagnosis), detail, lost=cuda_context_lost(e, be))
    got = outs if out is not None else _as_list(result)
    if len(got) != len(want):
        return _failed(Diagnosis.WRONG_OUTPUTS, f"returned {len(got)} outputs, expected {len(want)}")
    names = _output_names(fn, out_names, len(ins), len(got))
    named = out_names is not None or len(got) > 1
    for b, label in zip(out_bufs, names):
        diagnosis, why = b.margins_intact()
        if diagnosis:
            return _failed(diagnosis, why + (f" of {label}" if named else ""), part=label)
    for i, (g, p) in enumerate(zip(guarded_in, pristine)):
        diagnosis, why = g.margins_intact()
        if diagnosis:
            return _failed(diagnosis, why + f" of input {i}", part=f"input {i}")
        if not _identical(g.view, p):
            return _failed(Diagnosis.INPUT_MODIFIED, f"input {i} was modified", _first_change(g.view, p), f"input {i}")
    per_output = list(tol) if isinstance(tol[0], tuple) else [tol] * len(got)  # one (rtol, atol) or one per output
    if len(per_output) != len(got):
        raise ValueError(f"{len(per_output)} tolerances for {len(got)} outputs: "
                         "give one (rtol, atol) or one per output")
    for g, w, label, (rtol, atol) in zip(got, want, names, per_output):
        diagnosis, problem, detail = diagnose_output(g, w, rtol, atol)
        if diagnosis:
            return _failed(diagnosis, problem + (f" in {label}" if named else ""), detail, label)
    return _Outcome(True)


@contextlib.contextmanager
def _poison_empty():
    """Make torch.empty (also at::empty inside a kernel's wrapper) return NaN-filled memory.

    PyTorch fills uninitialized memory when deterministic algorithms are on; that poisons the
    outputs of functional ops that allocate their own result.
    """
    old = torch.are_deterministic_algorithms_enabled()
    old_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    old_fill = torch.utils.deterministic.fill_uninitialized_memory
    _deterministic(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        _deterministic(old, warn_only=old_warn)
        torch.utils.deterministic.fill_uninitialized_memory = old_fill


def _deterministic(mode: bool, warn_only: bool) -> None:
    """torch.use_deterministic_algorithms, without importing torch.compile's machinery where it is not loaded:
    the public call also sets inductor's `deterministic` option, and its first call imports torch._inductor
    and dynamo for that, 3-4 s of every process that checks a kernel and never compiles one. A process that
    has loaded inductor gets the public call."""
    if "torch._inductor.config" in sys.modules:
        torch.use_deterministic_algorithms(mode, warn_only=warn_only)
    else:
        torch._C._set_deterministic_algorithms(mode, warn_only=warn_only)
