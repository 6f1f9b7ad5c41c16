"""The Python glue that makes lesson 07's fused scale + causal mask + softmax a differentiable PyTorch op.

    op = register(load("07"), "mylib::causal_softmax"); y = op(scores, scale, q_len)

scores is 2-D and contiguous: the attention scores of q_len queries against scores.shape[1] keys,
for every (batch, head) block stacked along the rows. y = softmax(scores * scale) with key j > query i
masked (row r is query r % q_len). softmax7 is an out-variant; the op here returns a new tensor.
The self-check (`check_exercise("10")`) imports this file and compares the op with the eager formula.
Fill in the three places marked FILL ME IN.
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
        # FILL ME IN (roughly 1 line): an empty tensor like the op's result; no kernel runs here
        raise NotImplementedError("the fake kernel of causal_softmax is not written yet")

    def setup_context(ctx, inputs, output):
        # FILL ME IN (roughly 2 lines): save what backward needs (inputs = (scores, scale, q_len))
        pass

    def backward(ctx, grad):
        # FILL ME IN (roughly 2 lines): the gradient of scores through ops.softmax_backward(y, dy);
        # return one gradient per input (None for scale and q_len). grad may be strided.
        raise NotImplementedError("the backward of causal_softmax is not written yet")

    causal_softmax.register_autograd(backward, setup_context=setup_context)
    return causal_softmax
