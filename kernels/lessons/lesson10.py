"""Lesson 10's exercise: the Python glue that makes lesson 07's softmax7 (fused scale + causal mask + softmax)
a differentiable torch.library op that torch.compile can trace.

The learner's file is Python (attention_softmax.py, its `register(ext, name)`), so the self-check gets
its path instead of a built extension. It checks, each with its own pass/fail lines: that the file
registers; the fake kernel's result against the op's (shape, dtype, device) and torch.library.opcheck
(the fake kernel and the derivative as PyTorch traces them), on float32 and bfloat16 scores, with and
without requires_grad; the forward values and the gradients against the eager formula of
lessons/10_model/gpt.py (float32 and bfloat16) at scales other than 1, and what a gradient off by the
scale says about it; a gradient that arrives strided; that the op's output is freed with its graph
(no reference cycle through ctx); a bfloat16 attention step through the op compiled as one graph,
forward and backward; and one transformer block with the op against the eager block (the gradients
of every parameter).
"""
from __future__ import annotations

import functools
import gc
import hashlib
import importlib.util
import math
import sys
import weakref
from pathlib import Path

import torch

from ..backend import device
from ..build import load
from ..paths import ROOT
from ..check import Diagnosis, Report, check, merge
from . import Exercise, Hint
from .lesson03 import Mistake, _cases, _not_run, _one_case

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

    def opcheck(dtype, requires_grad):
        s = _scores((2, 8), dtype, dev).requires_grad_(requires_grad)
        _fake_like_real(op, s, _scale(8), 8)
        torch.library.opcheck(op, (s, _scale(8), 8))

    # as PyTorch's custom-op tutorial advises: every dtype the model runs in, with and without requires_grad
    opchecks = _cases("causal_softmax opcheck", "opcheck", [
        ("opcheck grad" if grad else "opcheck", dtype, functools.partial(opcheck, dtype, grad))
        for dtype in (torch.float32, torch.bfloat16) for grad in (False, True)],
        "opcheck runs the op on fake tensors (the fake kernel must return an empty tensor of the result's shape, "
        "dtype and device, whatever the scores' dtype) and checks the derivative registered with register_autograd",
        stub=stub)
    parts = [registration, opchecks]

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
    parts.append(_one_case("causal_softmax scale", "scale 0.5", torch.float32, lambda: _scale_in_gradient(op, dev),
                           "the op computes softmax(scores * scale) for any scale, though the model passes 1: by the "
                           "chain rule its gradient carries the scale once", stub=stub))
    parts.append(_one_case("causal_softmax strided gradient", "y.sum()", torch.float32,
                           lambda: _strided_gradient(op, dev),
                           "the gradient of y.sum() reaches backward as an expanded tensor (stride 0), and the "
                           "kernels take only contiguous tensors: pass grad.contiguous()", stub=stub))
    parts.append(_one_case("causal_softmax output freed", "del y", torch.float32, lambda: _output_freed(op, dev),
                           "backward's tensors belong in the graph's saved tensors, which autograd frees with the "
                           "graph", stub=stub))
    if opchecks.passed:
        parts.append(_one_case("causal_softmax compiled", "compile", torch.bfloat16, lambda: _compiled_step(op, dev),
                               "torch.compile traces the op through its fake kernel and its derivative: read the "
                               "error above", stub=stub))
    else:
        parts.append(_not_run("causal_softmax compiled", "not run until opcheck passes: torch.compile traces the "
                              "op through the same fake kernel and derivative"))
    parts.append(_one_case("one transformer block", "block", torch.float32, lambda: _block_against_eager(op, dev),
                           "the block's gradients differ from the eager block's: check the forward and the "
                           "gradient lines above first", stub=stub))
    return merge("attention_softmax", parts)


def _fake_like_real(op, scores: torch.Tensor, scale: float, q_len: int) -> None:
    """The fake kernel's result has the shape, dtype and device of the op's real result, or Mistake naming
    what differs (opcheck finds it too, in words that do not say which side is the fake one)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    scores = scores.detach()
    real = op(scores, scale, q_len)
    with FakeTensorMode() as mode:
        fake = op(mode.from_tensor(scores), scale, q_len)
    differ = [(what, getattr(fake, what), getattr(real, what)) for what in ("shape", "dtype", "device")
              if getattr(fake, what) != getattr(real, what)]
    if differ:
        def shown(v):
            return str(tuple(v)) if isinstance(v, torch.Size) else str(v).replace("torch.", "")

        what = differ[0][0]
        raise Mistake(
            f"the fake kernel's result has another {what} than the op's",
            f"for {shown(scores.dtype)} scores of shape {shown(scores.shape)} on {scores.device}, the fake kernel "
            "returns " + ", ".join(f"{w} {shown(f)}" for w, f, _ in differ) + " and the op "
            + ", ".join(f"{w} {shown(r)}" for w, _, r in differ) + ":\ntorch.compile plans the whole graph with "
            "the fake kernel's result, so it must match the real one for every input dtype and device",
            {"shape": Diagnosis.WRONG_SHAPE, "dtype": Diagnosis.WRONG_DTYPE}.get(what, Diagnosis.WRONG_OUTPUTS))


def _scale_in_gradient(op, dev, scale: float = 0.5) -> None:
    """The gradient at a scale other than 1 is autograd's of the eager formula, or Mistake: one that is off by
    exactly 1 / scale or scale says the backward leaves the scale out or applies it twice."""
    s, t = _scores((2, 8), torch.float32, dev), 8
    g = torch.randn_like(s)
    x = s.clone().requires_grad_()
    (got,) = torch.autograd.grad(op(x, scale, t), x, g)
    ref = s.double().requires_grad_()
    (want,) = torch.autograd.grad(causal_softmax_ref(ref, scale, t), ref, g.double())
    want = want.float()
    if torch.allclose(got, want, rtol=1e-5, atol=1e-6):
        return
    for factor, slip in ((1 / scale, "the backward leaves the scale out"),
                         (scale, "the backward multiplies by the scale twice")):
        if torch.allclose(got, want * factor, rtol=1e-5, atol=1e-6):
            raise Mistake(f"the gradient at scale {scale} is {factor:g} times autograd's: {slip}",
                          "the op computes softmax(scores * scale); the model calls it with scale 1, where this "
                          "cannot show, but the op is defined for any scale", Diagnosis.WRONG_VALUES)
    raise Mistake(f"the gradient at scale {scale} differs from autograd's, and not by a factor of the scale",
                  "see the causal_softmax backward lines above", Diagnosis.WRONG_VALUES, part="grad of scores")


def _output_freed(op, dev) -> None:
    """The op's output is freed as soon as the last reference to it goes (no garbage collection needed), or
    Mistake: an output kept as an attribute of ctx makes a cycle, output -> its graph node -> ctx -> output."""
    s = _scores((2, 8), torch.float32, dev).requires_grad_()
    op(s, _scale(8), 8)  # a process's first custom-op call imports lazily: the import's frames hold its result
    collecting = gc.isenabled()
    gc.disable()  # a collection between the two lines below would break a cycle and hide it
    try:
        y = op(s, _scale(8), 8)
        alive = weakref.ref(y)
        del y
        kept = alive() is not None
    finally:
        if collecting:
            gc.enable()
    if kept:
        raise Mistake("the op's output is kept alive after the graph is freed",
                      "save tensors with ctx.save_for_backward, not as ctx attributes: an attribute of ctx that holds "
                      "the output makes a reference cycle\n(output -> graph -> ctx -> output) that only Python's "
                      "garbage collector breaks, later: a model keeps every step's attention probabilities until "
                      "then,\nand autograd no longer checks that the output was not changed in place before backward")


def _compiled_step(op, dev) -> None:
    """A bfloat16 attention step through the op (probabilities times values, then backward), compiled as one
    graph, gives what the op gives eagerly; raises what dynamo or AOT autograd raised, or AssertionError."""
    bh, t, d, scale = 2, 8, 4, 0.5
    scores = _scores((bh, t), torch.bfloat16, dev)
    v, g = (torch.randn(bh, t, d, device=dev).to(torch.bfloat16) for _ in range(2))

    def step(scores, v):
        return op(scores, scale, t).view(bh, t, t) @ v

    # aot_eager: dynamo and AOT autograd trace the op through its fake kernel and derivative as the default
    # backend does, without generating code (inductor's C++ on a CPU takes a minute)
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")

    def run(fn):
        s, w = scores.clone().requires_grad_(), v.clone().requires_grad_()
        out = fn(s, w)
        out.backward(g)
        return out, s.grad, w.grad

    try:
        got = run(compiled)
    finally:
        # each glue is an op of its own (a learner edits the file many times in one session): without this,
        # dynamo's cache of step's code would reach its recompile limit, which fullgraph=True makes an error
        torch._dynamo.reset_code(step.__code__)
    for name, a, b in zip(("output", "gradient of the scores", "gradient of v"), got, run(step)):
        torch.testing.assert_close(a, b, msg=lambda m, name=name: f"compiled step, {name}: {m}")


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
        Hint("A fake kernel runs no kernel: it returns an empty tensor of the shape, dtype and device the op "
             "returns (torch.empty_like(scores)), for float32 and bfloat16 scores alike. opcheck and torch.compile "
             "call it with tensors that hold no data.",
             answers=(Diagnosis.NOT_IMPLEMENTED,), parts=("opcheck", "compile")),
        Hint("setup_context(ctx, inputs, output): inputs is (scores, scale, q_len). A softmax's derivative needs "
             "its output y, not the scores: ctx.save_for_backward(output); keep the float in ctx.scale (only "
             "tensors go through save_for_backward, and a tensor kept as an attribute of ctx outlives the graph).",
             parts=("grad of scores", "y.sum()", "del y")),
        Hint("backward(ctx, grad) returns one gradient per input: the scores' gradient, then None for scale and "
             "None for q_len. The softmax's backward is ops.softmax_backward(y, dy); the op computed "
             "softmax(scores * scale), so multiply by scale (chain rule). The masked entries have y = 0, so their "
             "gradient comes out 0 by itself.", parts=("grad of scores", "scale 0.5", "y.sum()", "block")),
        "`return torch.empty_like(scores)`; `ctx.save_for_backward(output); ctx.scale = inputs[1]`; "
        "`(y,) = ctx.saved_tensors; dx = ops.softmax_backward(y, grad.contiguous()); return (dx if ctx.scale == 1.0 "
        "else dx * ctx.scale), None, None` (with scale 1, as the model calls it, the multiply is a pass to skip).",
    ]),
]
