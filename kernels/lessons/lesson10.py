"""Lesson 10's exercise: the Python glue that makes lesson 07's softmax7 (fused scale + causal mask + softmax)
a differentiable torch.library op that torch.compile can trace.

The learner's file is Python (attention_softmax.py, its `register(ext, name)`), so the self-check gets
its path instead of a built extension. It checks, each with its own pass/fail lines: that the file
registers, torch.library.opcheck (the fake kernel and the derivative as PyTorch traces them), the
forward values and the gradients against the eager formula of lessons/10_model/gpt.py (float32 and
bfloat16), a gradient that arrives strided, and one transformer block with the op against the eager
block (the gradients of every parameter).
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import math
import sys
from pathlib import Path

import torch

from ..backend import device
from ..build import load
from ..paths import ROOT
from ..check import Diagnosis, Report, check, merge
from . import Exercise, Hint
from .lesson03 import _not_run, _one_case

LESSON = ROOT / "lessons" / "10_model"
# (batch * heads, sequence) of the attention scores: a (batch * heads * sequence, sequence) matrix
SHAPES = ((1, 1), (3, 7), (2, 33), (4, 64))
# A block's parameter gradients go through two matmuls and a layernorm after the softmax: float32 sums
# of a few hundred terms in another order than eager's land within 1e-5 of each other; 1e-4 leaves room.
BLOCK_TOLERANCE = 1e-4


@functools.cache
def lesson_module(name: str):
    """lessons/10_model/<name>.py (gpt, step_profile), which the notebook, the self-check and the benchmark share,
    imported once."""
    spec = importlib.util.spec_from_file_location(f"lesson10_{name}", LESSON / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def gpt_module():
    """lessons/10_model/gpt.py: the model."""
    return lesson_module("gpt")


def causal_softmax_ref(scores: torch.Tensor, scale: float, q_len: int) -> torch.Tensor:
    """The eager formula in float64, returned in scores' dtype."""
    return gpt_module().causal_softmax_eager(scores.double(), scale, q_len).to(scores.dtype)


def _scores(size, dtype, device) -> torch.Tensor:
    bh, t = size
    return (3 * torch.randn(bh * t, t, device=device)).to(dtype)  # spread wide enough that the scale matters


def _scale(t: int) -> float:
    return 1.0 / math.sqrt(max(t // 2, 1))  # the model's 1 / sqrt(head width), for a head width near t / 2


GLUE = ROOT / "solutions" / "10_model" / "attention_softmax.py"  # the worked answer, which the lesson's model uses
_glued: dict[tuple[str, str], object] = {}


def register_glue(path: str | Path = GLUE, backend: str | None = None):
    """Import a glue file and register its op over lesson 07's extension, once per distinct text and backend
    (an op's name can be defined once per process): the name is lesson10_<digest of the text>_<backend>."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"expected the causal-softmax glue file (attention_softmax.py), got {path}")
    text = path.read_bytes()
    digest = hashlib.sha1(text).hexdigest()[:10]
    ext = load("07", backend, quiet=True)
    key = (digest, ext.backend)
    if key not in _glued:
        from .lesson07 import register_softmax

        register_softmax(ext)  # the fake kernel of softmax_backward, which the glue's backward calls
        spec = importlib.util.spec_from_file_location(f"attention_softmax_{digest}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _glued[key] = module.register(ext, f"lesson10_{digest}_{ext.backend}::causal_softmax")
    return _glued[key]


def run_attention_softmax(path, backend) -> Report:
    """Check the glue file at `path` (or the module check_exercise imported from it); print a report per
    part and return them merged."""
    path = Path(getattr(path, "__file__", path))
    dev = device(backend)
    stub = "attention_softmax.py"
    ops = []
    registration = _one_case("causal_softmax registration", "register", torch.float32,
                             lambda: ops.append(register_glue(path, backend)),
                             "register raised: read its message above; the op's name and the call to "
                             "softmax7 are given, so the error is in a part you wrote", stub=stub)
    if not registration.passed:
        return merge("attention_softmax", [registration, _not_run(
            "causal_softmax op", "not run until register(ext, name) works: fix the registration first")])
    op = ops[0]

    def opcheck():
        s = _scores((2, 8), torch.float32, dev).requires_grad_()
        torch.library.opcheck(op, (s, _scale(8), 8))

    parts = [registration, _one_case(
        "causal_softmax opcheck", "opcheck", torch.float32, opcheck,
        "opcheck runs the op on fake tensors (the fake kernel must return an empty tensor of the result's shape "
        "and dtype) and checks the derivative registered with register_autograd", stub=stub)]

    def forward(s):
        return op(s, _scale(s.shape[1]), s.shape[1])

    def ref_forward(s):
        return causal_softmax_ref(s, _scale(s.shape[1]), s.shape[1])

    def grads(g, s):
        s = s.detach().requires_grad_()
        return torch.autograd.grad(forward(s), s, g)

    def ref_grads(g, s):
        s = s.detach().double().requires_grad_()
        (d,) = torch.autograd.grad(causal_softmax_ref(s, _scale(s.shape[1]), s.shape[1]), s, g.double())
        return d.to(g.dtype)

    def backward_inputs(size, dtype, device):
        s = _scores(size, dtype, device)
        return [torch.randn(s.shape, device=device).to(dtype), s]

    dtypes = (torch.float32, torch.bfloat16)
    parts.append(check(forward, ref_forward, lambda size, dtype, device: [_scores(size, dtype, device)],
                       sizes=SHAPES, dtypes=dtypes, name="causal_softmax forward", backend=backend,
                       orders=("forward",), quiet=True))
    print(parts[-1])
    grad_report = check(grads, ref_grads, backward_inputs, sizes=SHAPES, dtypes=dtypes, out_names=("grad of scores",),
                        name="causal_softmax backward", backend=backend, orders=("forward",), quiet=True)
    if not grad_report.passed:
        grad_report.hints.append("the op computes softmax(scores * scale): by the chain rule its gradient is "
                                 "scale times softmax_backward(y, grad), with y the op's output")
    print(grad_report)
    parts.append(grad_report)
    parts.append(_one_case("causal_softmax strided gradient", "y.sum()", torch.float32,
                           lambda: _strided_gradient(op, dev),
                           "the gradient of y.sum() reaches backward as an expanded tensor (stride 0), and the "
                           "kernels take only contiguous tensors: pass grad.contiguous()", stub=stub))
    parts.append(_one_case("one transformer block", "block", torch.float32, lambda: _block_against_eager(op, dev),
                           "the block's gradients differ from the eager block's: check the forward and the "
                           "gradient lines above first", stub=stub))
    return merge("attention_softmax", parts)


def _strided_gradient(op, dev) -> None:
    """op(s).sum() backward equals the eager formula's; raises AssertionError saying what differs."""
    s = _scores((2, 8), torch.float32, dev).requires_grad_()
    op(s, _scale(8), 8).sum().backward()
    ref = s.detach().double().requires_grad_()
    causal_softmax_ref(ref, _scale(8), 8).sum().backward()
    torch.testing.assert_close(s.grad, ref.grad.float(), rtol=1e-5, atol=1e-6)


def _block_against_eager(op, dev) -> None:
    """One Block with the op against the eager Block: same output and parameter gradients, or AssertionError."""
    gpt = gpt_module()
    cfg = gpt.Config(d_model=16, n_head=2, n_layer=1, seq_len=8)
    kernels = gpt.Kernels("exercise", gpt.EAGER.layernorm, gpt.fused_attention(op), gpt.EAGER.bias_gelu)
    eager = gpt.Block(cfg, gpt.EAGER).to(dev)
    ours = gpt.Block(cfg, kernels).to(dev)
    ours.load_state_dict(eager.state_dict())
    x = torch.randn(2, cfg.seq_len, cfg.d_model, device=dev)
    g = torch.randn_like(x)
    for block in (eager, ours):
        block(x).backward(g)
    for (name, a), (_, b) in zip(ours.named_parameters(), eager.named_parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=BLOCK_TOLERANCE, atol=BLOCK_TOLERANCE,
                                   msg=lambda m, name=name: f"gradient of {name}: {m}")


EXERCISES = [
    Exercise("10", "attention_softmax", "attention_softmax.py", run_attention_softmax, hints=[
        Hint("A fake kernel runs no kernel: it returns an empty tensor of the shape and dtype the op returns "
             "(torch.empty_like(scores)). opcheck and torch.compile call it with tensors that hold no data.",
             answers=(Diagnosis.NOT_IMPLEMENTED,), parts=("opcheck",)),
        Hint("setup_context(ctx, inputs, output): inputs is (scores, scale, q_len). A softmax's derivative needs "
             "its output y, not the scores: ctx.save_for_backward(output); keep the float in ctx.scale (only "
             "tensors go through save_for_backward).", parts=("grad of scores", "y.sum()")),
        Hint("backward(ctx, grad) returns one gradient per input: the scores' gradient, then None for scale and "
             "None for q_len. The softmax's backward is ops.softmax_backward(y, dy); the op computed "
             "softmax(scores * scale), so multiply by scale (chain rule). The masked entries have y = 0, so their "
             "gradient comes out 0 by itself.", parts=("grad of scores", "y.sum()", "block")),
        "`return torch.empty_like(scores)`; `ctx.save_for_backward(output); ctx.scale = inputs[1]`; "
        "`(y,) = ctx.saved_tensors; dx = ops.softmax_backward(y, grad.contiguous()); return (dx if ctx.scale == 1.0 "
        "else dx * ctx.scale), None, None` (with scale 1, as the model calls it, the multiply is a pass to skip).",
    ]),
]
