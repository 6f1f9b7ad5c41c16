"""Spot the bugs: bias + GELU from CuPy inside autograd (lesson 11's exercise).

The kernels are lesson 11's bias_gelu_kernel1 and bias_gelu_backward_kernel1 (the "Kernels" section of
kernels/reference/11_other_routes.cu), compiled and launched by CuPy on PyTorch's tensors, and wrapped in
a torch.autograd.Function. Check it with `check_exercise("11")` (a notebook) or `make check LESSON=11`.
The launch configuration, the argument types and the autograd wiring are checked everywhere; the
kernels themselves only where CuPy and a GPU are.
"""
import numpy as np
import torch

from kernels import cupy_route

THREADS = 256  # threads per block


def launch_config(n: int) -> tuple[tuple[int], tuple[int]]:
    """(grid, block) for n elements, one thread each: CuPy's RawKernel is called as kernel(grid, block, args)."""
    blocks = (n + THREADS - 1) // THREADS
    return (blocks,), (THREADS,)


def scalar_args(n: int, C: int) -> tuple:
    """The kernels' last two parameters, `long long n` and `int C`, in exactly those types: CuPy passes
    a Python int as a 64-bit integer whatever the kernel declares."""
    return np.int64(n), np.int32(C)


def _launch(name: str, n: int, *args) -> None:
    grid, block = launch_config(n)
    with cupy_route.torch_stream():  # on PyTorch's current stream, ordered with its kernels
        cupy_route.raw_kernel(name)(grid, block, tuple(cupy_route.as_cupy(a) if isinstance(a, torch.Tensor) else a
                                                       for a in args))


def forward_kernel(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """gelu(x + bias) by the CuPy kernel, into a new tensor."""
    out = torch.empty_like(x)
    if x.numel():
        _launch("bias_gelu_kernel1", x.numel(), x, bias, out, *scalar_args(x.numel(), x.shape[-1]))
    return out


def backward_kernel(grad: torch.Tensor, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """dx = grad * gelu'(x + bias) by the CuPy kernel, into a new tensor."""
    dx = torch.empty_like(x)
    if x.numel():
        _launch("bias_gelu_backward_kernel1", x.numel(), grad, x, bias, dx, *scalar_args(x.numel(), x.shape[-1]))
    return dx


class BiasGelu(torch.autograd.Function):
    """gelu(x + bias) with its derivative: dx from the backward kernel, dbias = dx summed over rows."""

    @staticmethod
    def forward(ctx, x, bias):
        ctx.save_for_backward(x, bias)  # autograd checks they are unchanged when the backward runs
        return forward_kernel(x, bias)

    @staticmethod
    def backward(ctx, grad):
        x, bias = ctx.saved_tensors
        dx = backward_kernel(grad.contiguous(), x, bias)
        return dx, dx.reshape(-1, dx.shape[-1]).sum(0)


def bias_gelu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """gelu(x + bias), tanh approximation, differentiable in x and bias."""
    return BiasGelu.apply(x, bias)
