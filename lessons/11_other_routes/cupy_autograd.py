"""Spot the bugs: bias + GELU from CuPy inside autograd (lesson 11's exercise).

The kernels are lesson 11's bias_gelu_kernel1 and bias_gelu_backward_kernel1 (the "Kernels" section of
kernels/reference/11_other_routes.cu), compiled and launched by CuPy on PyTorch's tensors, and wrapped in
a torch.autograd.Function. It runs, and on small tensors it even gives the right numbers, but three
bugs hide in it: one in the launch, one in the arguments, one in the autograd wiring. Find and fix
them (no FILL ME IN marks them: reading is the exercise), then check it with `check_exercise("11")`
(a notebook) or `make check LESSON=11`.
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
    return (THREADS,), (blocks,)


def scalar_args(n: int, C: int) -> tuple:
    """The kernels' last two parameters, `long long n` and `int C`."""
    return n, C


def _launch(name: str, n: int, *args) -> None:
    grid, block = launch_config(n)
    with cupy_route.torch_stream():
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
        ctx.x, ctx.bias = x, bias
        return forward_kernel(x, bias)

    @staticmethod
    def backward(ctx, grad):
        dx = backward_kernel(grad.contiguous(), ctx.x, ctx.bias)
        return dx, dx.reshape(-1, dx.shape[-1]).sum(0)


def bias_gelu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """gelu(x + bias), tanh approximation, differentiable in x and bias."""
    return BiasGelu.apply(x, bias)
