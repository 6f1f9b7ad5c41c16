"""The Python half of the fma op: what PyTorch needs besides the kernels in fma.cu.

    ext = load("fma.cu"); fma_op.register(ext.ns); ext.fma(x, y, z)

register_fake says what the op returns (shapes and dtypes) without running it: torch.compile
and opcheck trace the op with "fake" tensors that hold no data. register_autograd says how to
differentiate it: backward(grads of the outputs) -> grads of the inputs.
Fill in the four places marked FILL ME IN; the self-check imports this file from next to fma.cu.
"""
from __future__ import annotations

import torch


def register(ns: str) -> None:
    """Register the fake kernels and the derivative of the ops `ns`::fma and `ns`::fma_backward."""
    ops = getattr(torch.ops, ns)

    @torch.library.register_fake(f"{ns}::fma")
    def _(x, y, z):
        # FILL ME IN (roughly 1 line): return an empty tensor like the result of fma
        raise NotImplementedError("the fake kernel of fma is not written yet")

    @torch.library.register_fake(f"{ns}::fma_backward")
    def _(grad, x, y):
        # FILL ME IN (roughly 1 line): return two empty tensors like fma_backward's results
        raise NotImplementedError("the fake kernel of fma_backward is not written yet")

    def setup_context(ctx, inputs, output):
        # FILL ME IN (roughly 2 lines): unpack inputs and save what backward needs
        pass

    def backward(ctx, grad):
        # FILL ME IN (roughly 3 lines): call ops.fma_backward and return (grad_x, grad_y, grad_z).
        # grad may be strided (see Step 1 in the notebook); grad_z may be grad itself, no copy needed.
        raise NotImplementedError("the backward of fma is not written yet")

    torch.library.register_autograd(f"{ns}::fma", backward, setup_context=setup_context)
