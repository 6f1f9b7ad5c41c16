"""The Python glue that makes lesson 07's fused scale + causal mask + softmax a differentiable PyTorch op.

    op = register(load("07"), "mylib::causal_softmax"); y = op(scores, scale, q_len)

scores is 2-D and contiguous: the attention scores of q_len queries against scores.shape[1] keys,
for every (batch, head) block stacked along the rows. y = softmax(scores * scale) with key j > query i
masked (row r is query r % q_len). softmax7 is an out-variant; the op here returns a new tensor.
The self-check (`check_exercise("10")`) imports this file and compares the op with the eager formula.
"""
from __future__ import annotations

import torch


def register(ext, name: str):
    """Define the custom op `name` over ext.softmax7 with its fake kernel and derivative; return the op."""
    ops = getattr(torch.ops, ext.ns)

    @torch.library.custom_op(name, mutates_args=())
    def causal_softmax(scores: torch.Tensor, scale: float, q_len: int) -> torch.Tensor:
        out = torch.empty_like(scores)
        ops.softmax7(scores, scale, q_len, out)
        return out

    @causal_softmax.register_fake
    def _(scores, scale, q_len):
        return torch.empty_like(scores)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)  # the derivative of a softmax needs y, not the scores
        ctx.scale = inputs[1]

    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        dx = ops.softmax_backward(y, grad.contiguous())  # autograd may pass a strided gradient
        # The op computed softmax(scores * scale): by the chain rule the scale multiplies the gradient once
        # more, a pass of its own, skipped when the scale is 1. Masked entries have y = 0: their gradient is 0.
        return (dx if ctx.scale == 1.0 else dx * ctx.scale), None, None

    causal_softmax.register_autograd(backward, setup_context=setup_context)
    return causal_softmax
