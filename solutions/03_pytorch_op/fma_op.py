"""The Python half of the fma op: what PyTorch needs besides the kernels in fma.cu.

    ext = load("fma.cu"); fma_op.register(ext.ns); ext.fma(x, y, z)

register_fake says what the op returns (shapes and dtypes) without running it: torch.compile
and opcheck trace the op with "fake" tensors that hold no data. register_autograd says how to
differentiate it: backward(grads of the outputs) -> grads of the inputs.
"""
from __future__ import annotations

import torch


def register(ns: str) -> None:
    """Register the fake kernels and the derivative of the ops `ns`::fma and `ns`::fma_backward."""
    ops = getattr(torch.ops, ns)

    @torch.library.register_fake(f"{ns}::fma")
    def _(x, y, z):
        return torch.empty_like(x)

    @torch.library.register_fake(f"{ns}::fma_backward")
    def _(grad, x, y):
        return torch.empty_like(x), torch.empty_like(y)

    def setup_context(ctx, inputs, output):
        x, y, z = inputs
        ctx.save_for_backward(x, y)  # the backward needs x and y, not z

    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        grad_x, grad_y = ops.fma_backward(grad.contiguous(), x, y)  # autograd may pass a strided grad
        return grad_x, grad_y, grad  # d(x*y+z)/dz = 1: grad_z is grad itself

    torch.library.register_autograd(f"{ns}::fma", backward, setup_context=setup_context)
