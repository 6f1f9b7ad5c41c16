"""Lesson 11's CuPy route: the kernels of kernels/reference/11_other_routes.cu launched by CuPy on PyTorch's tensors.

    from kernels import cupy_route
    out = cupy_route.bias_gelu(x, bias)             # zero copy: CuPy works in the tensors' own memory
    out = cupy_route.bias_gelu_round_trip(x, bias)  # the common published pattern: to the CPU and back

CuPy compiles CUDA C++ at run time with NVRTC (RawKernel). NVRTC has no PyTorch headers, so it gets
only the file's "Kernels" section, which is written to need none. Tensors go to CuPy through DLPack
(`cupy.from_dlpack`): the array points at the tensor's memory, nothing is copied. Kernels are launched
on PyTorch's current stream (cupy.cuda.ExternalStream), so they are ordered with PyTorch's own work.
CuPy is optional and needs a GPU: `missing()` says why it cannot run, and nothing here imports CuPy
before it is used.
"""
from __future__ import annotations

import contextlib
import functools
import re

import torch

from ..paths import REFERENCE

SOURCE = REFERENCE / "11_other_routes.cu"
THREADS = 256  # threads per block, as the file's launchers use


def missing() -> str:
    """Why the CuPy route cannot run here ('' when it can): no GPU, or no CuPy."""
    if not torch.cuda.is_available():
        return "CuPy runs kernels on an NVIDIA GPU, and PyTorch sees none here: the CuPy cells and tests are skipped"
    try:
        import cupy  # noqa: F401
    except ImportError:
        return ("CuPy is not installed (it is optional: `pip install cupy-cuda12x`, matching your CUDA): "
                "the CuPy cells and tests are skipped")
    return ""


def kernel_source(path=SOURCE) -> str:
    """The "Kernels" section of a .cu file: from its ruler to the next one (the text CuPy compiles)."""
    text = path.read_text()
    m = re.search(r"^// -{20,}\n// Kernels\b.*?(?=^// -{20,}\n)", text, re.S | re.M)
    if not m:
        raise ValueError(f"{path.name} has no '// Kernels' section between rulers")
    return m.group(0)


@functools.cache
def raw_kernel(name: str):
    """The kernel `name` of the file's Kernels section as a cupy.RawKernel (compiled on first launch, then cached)."""
    import cupy

    return cupy.RawKernel(kernel_source(), name, options=("-std=c++17",))


def as_cupy(t: torch.Tensor):
    """A CuPy array over the tensor's memory (DLPack): no copy, the same data pointer. (Detached first:
    PyTorch refuses to export a tensor that requires grad, as inside an autograd.Function's forward.)"""
    import cupy

    return cupy.from_dlpack(t.detach())


@contextlib.contextmanager
def torch_stream():
    """Make PyTorch's current CUDA stream CuPy's current stream for the block: CuPy's launches and
    copies are then ordered with PyTorch's kernels, as the CUDA launchers' are."""
    import cupy

    with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
        yield


def _check(x: torch.Tensor, bias: torch.Tensor) -> None:
    """Refuse what the kernels do not handle, saying what was expected."""
    for name, t in (("x", x), ("bias", bias)):
        if t.device.type != "cuda" or t.dtype != torch.float32 or not t.is_contiguous():
            raise ValueError(f"{name} must be a contiguous float32 CUDA tensor, got {t.dtype} on {t.device}"
                             + ("" if t.is_contiguous() else " (not contiguous)"))
    if x.dim() < 1 or bias.shape != x.shape[-1:]:
        raise ValueError(f"bias must have shape [{x.shape[-1] if x.dim() else '?'}] (one value per column of x), "
                         f"got {list(bias.shape)}")


def launch(name: str, n: int, *args) -> None:
    """Launch a kernel of the file with one thread per element of n, on PyTorch's current stream; `args` in
    the kernel's order, tensors passed as CuPy arrays over their memory, scalars as NumPy scalars of the
    kernel's own types (np.int64 for long long, np.int32 for int)."""
    if n == 0:
        return
    with torch_stream():
        raw_kernel(name)(((n + THREADS - 1) // THREADS,), (THREADS,),
                         tuple(as_cupy(a) if isinstance(a, torch.Tensor) else a for a in args))


def bias_gelu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """gelu(x + bias) (tanh approximation) by CuPy in the tensors' own memory; returns a new tensor."""
    import numpy as np

    _check(x, bias)
    out = torch.empty_like(x)
    launch("bias_gelu_kernel1", x.numel(), x, bias, out, np.int64(x.numel()), np.int32(x.shape[-1]))
    return out


def bias_gelu_round_trip(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """The same kernel the way many published examples call it: copy to the CPU, then into a new CuPy array,
    launch, copy back to the CPU with .get(), then to the GPU again. Four copies and two synchronisations."""
    import cupy
    import numpy as np

    _check(x, bias)
    xc, bc = cupy.asarray(x.detach().cpu().numpy()), cupy.asarray(bias.detach().cpu().numpy())
    out = cupy.empty_like(xc)
    n = x.numel()
    if n:
        raw_kernel("bias_gelu_kernel1")(((n + THREADS - 1) // THREADS,), (THREADS,),
                                        (xc, bc, out, np.int64(n), np.int32(x.shape[-1])))
    return torch.from_numpy(out.get()).to(x.device)
