"""Lesson 11 (other routes to the GPU): the references the routes are checked against, the "spot the bugs"
exercise on a CuPy kernel inside autograd (lessons/11_other_routes/cupy_autograd.py), and the route of a CUDA
library a team already has (lessons/11_other_routes/cuda_library: built by its own Makefile, then linked).

The exercise's self-check runs in three parts. The launch configuration and the scalar arguments'
types are plain Python and are checked everywhere. The autograd wiring is checked everywhere too:
without CuPy or a GPU the module's two kernel functions are replaced, for the check only, by PyTorch
versions of the same math, so what is tested is the Function around them. The kernels themselves run
through the checker only where CuPy and a GPU are; elsewhere that part says it was skipped and why.
A failing case says what is wrong and for which input (what launch_config returned for n, which gradient
differs); it never says how to fix it: spotting the line is the exercise, and the hints are there for it.
"""
from __future__ import annotations

import contextlib
import importlib.util
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import torch
import torch.nn.functional as F

from . import lesson11_cupy as cupy_route
from .. import backend as _backend
from ..build import BuildError, load
from ..check import ROWS, Case, Report, check, elementwise, like, merge, random_tensor
from ..paths import CUDA_LIBRARY, SIM, build_root
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


def _elements(n: int) -> str:
    return f"{n} element{'s' if n != 1 else ''}"


def _launch_config_case(module) -> Case:
    """launch_config(n) must give a grid of whole blocks that covers n, and a block a GPU can run. A failure says
    what launch_config returned and what goes wrong with it, not which line to change: finding that is the
    exercise (the hints say more)."""
    for n in (2**20 + 3, 1000, 256, 255, 1):  # the largest first: where a wrong configuration fails outright
        try:
            grid, block = module.launch_config(n)
            g, b = int(grid[0]), int(block[0])
        except Exception as e:  # noqa: BLE001 (the report shows it)
            return _case("launch config", f"launch_config({n}) raised {type(e).__name__}", str(e))
        returned = f"launch_config({n}) returns grid {tuple(grid)}, block {tuple(block)}"
        if b > MAX_BLOCK:
            return _case("launch config", returned,
                         f"blocks of {b} threads for {_elements(n)}: a block holds at most {MAX_BLOCK} threads, "
                         "so this launch fails on a GPU")
        if b < 32 or b % 32:
            return _case("launch config", returned,
                         f"blocks of {b} thread{'s' if b != 1 else ''} for {_elements(n)}: a block's threads run as "
                         f"warps of 32, so the last warp of every block has {-b % 32} of its 32 lanes idle")
        if g * b < n:
            return _case("launch config", returned,
                         f"{g} blocks of {b} threads are {g * b} threads for {_elements(n)}: element"
                         + (f" {g * b} is" if n - g * b == 1 else f"s {g * b} to {n - 1} are") + " never computed")
        if (g - 1) * b >= n:
            extra = g - (n + b - 1) // b
            return _case("launch config", returned,
                         f"{g} blocks of {b} threads for {_elements(n)}: {extra} whole block{'s' if extra > 1 else ''} "
                         "with no element to compute")
    return _case("launch config")


def _typed(value) -> str:
    """A value with its type as a report names it: "Python int 7", "NumPy int32 7"."""
    module = type(value).__module__
    kind = "Python" if module == "builtins" else "NumPy" if module.startswith("numpy") else module
    return f"{kind} {type(value).__name__} {value}"


def _scalar_args_case(module) -> Case:
    """scalar_args(n, C) must hold NumPy scalars of the kernel's types: int64 for long long n, int32 for int C.
    A failure says what scalar_args returned against the kernel's parameter list, not how to build the values."""
    import numpy as np

    declared = "the kernels' last two parameters are declared `long long n, int C`"
    try:
        args = tuple(module.scalar_args(3000000000, 7))  # n past 2^31: a tensor of 12 GB of float32
    except Exception as e:  # noqa: BLE001
        return _case("scalar types", f"scalar_args(3000000000, 7) raised {type(e).__name__}",
                     f"{e}\n{declared}, and n = 3000000000 is a valid element count (a float32 tensor of 12 GB)")
    returned = f"scalar_args(3000000000, 7) returns {', '.join(map(_typed, args)) or 'nothing'}"
    if len(args) != 2 or any(type(a) is not w for a, w in zip(args, (np.int64, np.int32))):
        return _case("scalar types", returned, f"{declared}, and these values are not of those types, in that order")
    if [int(a) for a in args] != [3000000000, 7]:
        return _case("scalar types", returned, f"{declared}, and these values are not n = 3000000000 and C = 7")
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


def _wrong_grads(got, want) -> list[str]:
    """The names of the gradients (dx, dbias) of `got` that differ from `want`."""
    return [n for n, u, v in zip(("dx", "dbias"), got, want) if not torch.allclose(u, v, rtol=1e-5, atol=1e-5)]


def _autograd_cases(module, device) -> list[Case]:
    """Gradients through the Function match autograd's, and changing x, or bias, in place after the forward
    makes the backward refuse, as autograd's own ops do."""
    x, b, g = (random_tensor(s, torch.float32, device) for s in ((5, 7), (7,), (5, 7)))
    inputs = "for x of shape (5, 7) and bias of shape (7,)"
    try:
        wrong = _wrong_grads(grads_of(module.bias_gelu)(x, b, g), bias_gelu_grads_ref(x, b, g))
        gradients = _case("gradients", f"{' and '.join(wrong)} differ from autograd's {inputs}" if wrong else "")
    except Exception as e:  # noqa: BLE001
        gradients = _case("gradients", f"the backward raised {type(e).__name__} {inputs}", str(e).splitlines()[0])
    return [gradients, _changed_in_place(module, "x", x, b, g), _changed_in_place(module, "bias", x, b, g)]


def _changed_in_place(module, name: str, x, b, g) -> Case:
    """Input `name` ("x" or "bias") changed in place between the forward and the backward, as an optimizer step
    or an in-place op would change it: the backward must refuse, as autograd refuses for its own ops. A backward
    that runs anyway is told by its gradients: the new values', or the forward's (a copy was kept). A failure
    says what happened, not which line of the Function to change."""
    label = f"{name} changed in place"
    what = (f"{name} was multiplied by 2 in place between the forward and the backward; autograd's own ops "
            "refuse such a backward with an error (\"... modified by an inplace operation\")")
    xg, bg = x.clone().requires_grad_(), b.clone().requires_grad_()
    y = module.bias_gelu(xg, bg)
    with torch.no_grad():
        (xg if name == "x" else bg).mul_(2.0)
    try:
        y.backward(g)
    except RuntimeError as e:
        ok = "modified by an inplace operation" in str(e)
        return _case(label, "" if ok else "the backward raised another error", str(e)[:200])
    got = (xg.grad, bg.grad)
    if not _wrong_grads(got, bias_gelu_grads_ref(xg.detach(), bg.detach(), g)):
        return _case(label, f"the backward ran with {name} changed after the forward",
                     f"{what}; this one ran without an error and returned the gradients at the new {name}, not at "
                     f"the {name} the forward computed with")
    if not _wrong_grads(got, bias_gelu_grads_ref(x, b, g)):
        # Right gradients, at a price a kernel engineer does not pay: x is an activation as large as the layer's
        # output, and training keeps every layer's saved tensors from the forward to the backward.
        return _case(label, f"the backward kept its own copy of {name}",
                     f"the gradients are right (those at the {name} the forward computed with), but the backward ran "
                     f"without an error, and a second tensor of {name}'s size was held from the forward to the "
                     f"backward, with a copy kernel every step;\n{what}")
    return _case(label, f"the backward ran with {name} changed after the forward, and its gradients are wrong",
                 f"{what}; this one ran without an error, and its gradients are neither those at the {name} the "
                 f"forward computed with nor those at the new {name}")


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


# ---------------------------------------------------------------------------------------------
# A CUDA library you already have: lessons/11_other_routes/cuda_library, built by its Makefile (nvcc, or the
# simulator's driver nvcc-sim) and linked into an extension (setup.py on a GPU, load(extra_objects=...) on sim).

LIBRARY_NAMES = ("add_gpu", "add_gpu_out")  # the functions Python calls


@dataclass(frozen=True)
class LibraryBug:
    """One of the seed's bugs, planted in a copy of the library: `old` replaced by `new` in `file`."""

    name: str
    file: str
    old: str
    new: str


LIBRARY_FILES = ("Makefile", "binding.cpp", "setup.py", "vector_add.cu", "vector_add.h")
LIBRARY_BUGS = (
    LibraryBug("off_by_one", "vector_add.cu", "i < n; i += stride", "i <= n; i += stride"),
    LibraryBug("capped_grid", "vector_add.cu",
               "for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += stride)",
               "if (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n)"),
    LibraryBug("four_floats", "binding.cpp", "torch::empty_like(a, torch::MemoryFormat::Contiguous)",
               "torch::empty({4}, a.options())"),
    LibraryBug("wrong_name", "binding.cpp", 'm.def("add_gpu",', 'm.def("AddGPU",'),
)


def planted_library(bug: LibraryBug) -> Path:
    """A copy of the library with `bug` planted (build/ext/cuda_library/planted/<name>); its unchanged files
    are rewritten only when they differ, so make and the build cache reuse what they built before."""
    dest = build_root() / "cuda_library" / "planted" / bug.name
    dest.mkdir(parents=True, exist_ok=True)
    for src in (CUDA_LIBRARY / name for name in LIBRARY_FILES):  # not what a build left there (a .so, build/)
        text = src.read_text()
        if src.name == bug.file:
            if text.count(bug.old) != 1:
                raise ValueError(f"{src.name} holds {bug.old!r} {text.count(bug.old)} times, not once: update "
                                 f"the planted bug {bug.name}")
            text = text.replace(bug.old, bug.new)
        if not (dest / src.name).exists() or (dest / src.name).read_text() != text:
            (dest / src.name).write_text(text)
    return dest


def make_library(folder: Path, backend: str, out: Path) -> Path:
    """Run the library's Makefile into `out` with the backend's compiler (nvcc, or the simulator's driver on
    sim); returns the static library. A failed make is a BuildError with make's output."""
    from ..build.toolchain import cuda_arch_flags, find_cuda_tool

    if not shutil.which("make"):
        raise BuildError("the library's route needs `make` (apt install make, or Xcode's command line tools)")
    args = ["make", "-C", str(folder), f"BUILD={out}"]
    if backend == "sim":
        args.append(f"NVCC={SIM / 'nvcc-sim'}")
    else:
        args.append(f"NVCC={find_cuda_tool('nvcc') or 'nvcc'}")
        if cuda_arch_flags():  # the GPUs this process sees, as the toolkit's own builds target them
            args.append(f"ARCH={' '.join(cuda_arch_flags())}")
    run = subprocess.run(args, capture_output=True, text=True)
    if run.returncode != 0:
        raise BuildError(f"make in {folder.name}/ failed:\n{run.stdout}{run.stderr}".strip())
    return out / "libvector_add.a"


def _setup_py_module(folder: Path, out: Path):
    """The GPU route: setup.py builds binding.cpp and links the library in `out`; the module it made, imported."""
    from ..build.toolchain import child_env, cuda_home

    toolkit = {"CUDA_HOME": cuda_home()} if cuda_home() else {}  # the toolkit the toolkit's own builds use
    # a name per folder: with one name, a planted copy's module imported after the fixed library's behaved as the
    # fixed one on the GPU (its bug passed the check); a C identifier, as PYBIND11_MODULE needs
    name = "vector_add_ext_" + re.sub(r"\W", "_", folder.name)
    # --force: setuptools rebuilds an extension only when its sources are newer, and the library it links is
    # not one of them, so a library rebuilt by make would otherwise never reach the extension
    run = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--force", "--build-lib", str(out), "--build-temp",
                          str(out / "temp")], cwd=folder, capture_output=True, text=True,
                         env=child_env(BUILD=str(out), EXT_NAME=name, **toolkit))
    if run.returncode != 0:
        raise BuildError(f"setup.py in {folder.name}/ failed:\n{run.stdout}{run.stderr}".strip())
    so = next(out.glob(f"{name}.*so"), None)
    if so is None:
        raise BuildError(f"setup.py in {folder.name}/ made no {name}*.so in {out.name}/: does it take the module's "
                         "name from EXT_NAME?")
    spec = importlib.util.spec_from_file_location(name, so)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_cuda_library(folder: Path = CUDA_LIBRARY, backend: str | None = None, quiet: bool = True):
    """The library in `folder` built by its Makefile and linked into an extension; returns the extension's
    module. On cuda: make with nvcc, then setup.py (CUDAExtension, libraries=["vector_add"]). On sim: make with
    the simulator's driver, then load(binding.cpp, "sim", extra_objects=[the library]) (setup.py would need the
    simulator's headers and flags, which load supplies)."""
    be = _backend.resolve(backend)
    out = build_root() / "cuda_library" / f"{folder.name}-{be}"
    library = make_library(folder, be, out)
    if be == "cuda":
        return _setup_py_module(folder, out)
    return load(folder / "binding.cpp", "sim", quiet=quiet, extra_objects=[library])


def add_ref(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a + b


def check_cuda_library(module, backend: str | None = None, quiet: bool = False) -> Report:
    """The library's extension against a + b: the names Python calls, then add_gpu_out into a NaN-poisoned output
    between canaries (a write past the end, an element never written) and add_gpu (the output it allocates)."""
    report = Report("cuda library")
    defined = sorted(n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n)))
    for name in LIBRARY_NAMES:
        if not hasattr(module, name):
            report.cases.append(_case(f"name {name}", f"the extension has no function {name}",
                                      f"Python calls {name}; the extension defines {', '.join(defined) or 'nothing'}. "
                                      "The name in the binding's m.def(\"...\") is the one Python sees."))
    reports = [report]
    common = dict(sizes=(0, 1, 31, 1000, 2**20 + 3), backend=backend, orders=("forward",), races=False, quiet=True)
    if hasattr(module, "add_gpu_out"):
        reports.append(check(module.add_gpu_out, add_ref, elementwise(2), out=like(0), out_names=("out",),
                             name="add_gpu_out", **common))
    if hasattr(module, "add_gpu"):
        reports.append(check(module.add_gpu, add_ref, elementwise(2), name="add_gpu", **common))
    for r in reports[1:]:
        for c in r.cases:
            c.size = f"{r.name} " + ("x".join(map(str, c.size)) if isinstance(c.size, tuple) else str(c.size))
    merged = merge("cuda library", reports)
    if not quiet:
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
             "silently wrong gradients (and a saved output kept that way leaks memory through a cycle); a copy "
             "(ctx.x = x.clone()) gives right gradients but holds a second x until the backward.",
             parts=("x changed in place", "bias changed in place")),
        "The three fixed lines: `return (blocks,), (THREADS,)`; `return np.int64(n), np.int32(C)`; in forward "
        "`ctx.save_for_backward(x, bias)`, and in backward `x, bias = ctx.saved_tensors` passed to backward_kernel.",
    ]),
]
