"""mulop: elementwise multiply as a PyTorch op, `torch.ops.mulop.mul`, differentiable and compilable.

    import mulop
    out = mulop.mul(x, y)   # x, y: CUDA tensors of one shape, float32 or float64

Importing the package loads the compiled library (its TORCH_LIBRARY blocks register the op
with PyTorch's dispatcher), then adds the Python half: a fake kernel and the derivative.
"""
import importlib.util

import torch

# _C is a shared library with no Python module inside (no PYBIND11_MODULE): find the file the
# build made and let PyTorch load it, which runs its registrations.
torch.ops.load_library(importlib.util.find_spec(f"{__name__}._C").origin)


@torch.library.register_fake("mulop::mul")
def _(x, y):
    return torch.empty_like(x)


@torch.library.register_fake("mulop::mul_backward")
def _(grad, x, y):
    return torch.empty_like(x), torch.empty_like(y)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(ctx, grad):
    x, y = ctx.saved_tensors
    return tuple(torch.ops.mulop.mul_backward(grad.contiguous(), x, y))


torch.library.register_autograd("mulop::mul", _backward, setup_context=_setup_context)


def mul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x * y by the package's CUDA kernel (float32 or float64, same shape, contiguous)."""
    return torch.ops.mulop.mul(x, y)
