"""Lesson 10 on the GPU: the GPT block stack with the lessons' kernels against eager PyTorch and torch.compile.

One model size, GPT-2 small's width: d_model 768, 12 heads, 1024 tokens, batch 8, LAYERS blocks, bfloat16
weights and activations. Four ways to run it, side by side in one run: the eager model (nanoGPT's
non-flash attention), torch.compile of it, the model with the custom ops (lessons 05, 07, 08) and
torch.compile of that. Two benchmarks: a training step (forward, backward and a fused AdamW step) and an
inference forward under torch.no_grad. The CSV has ms per step; vs eager and vs compile are speed-ups.
Before timing, the custom model's loss and gradients are checked against the eager model's (bf16 tolerance).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

import torch

from ..bench import Row, bench, copy_bandwidth, plot, table
from ..exercises.lesson10 import gpt_module

LAYERS = 6
BATCH = 8
CONFIG = dict(d_model=768, n_head=12, n_layer=LAYERS, seq_len=1024)
DTYPE = torch.bfloat16
# bf16 keeps 8 bits of mantissa: two models that round in different places differ by a few 1e-3 in the loss
# and by a few percent in a gradient's entries; a wrong op differs by far more (the loss of a random model is 5.5).
LOSS_TOLERANCE = 2e-2
GRAD_TOLERANCE = 5e-2  # the norm of the difference against the norm of the eager gradient, per parameter


def models():
    """(eager model, custom-op model) with the same weights, bf16, on the GPU."""
    gpt = gpt_module()
    torch.manual_seed(0)
    eager = gpt.GPT(gpt.Config(**CONFIG)).to(device="cuda", dtype=DTYPE)
    return eager, gpt.twin(eager, gpt.custom_kernels(backend="cuda"))


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    gpt = gpt_module()
    return next(gpt.batches(gpt.text_bytes("cuda"), BATCH, CONFIG["seq_len"], 1))


def train_step(model, forward: Callable) -> Callable[[], None]:
    """One training step: forward (through `forward`, e.g. torch.compile(model)), backward, fused AdamW."""
    gpt = gpt_module()
    x, y = _batch()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

    def step():
        loss = gpt.loss_of(forward, x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def inference(forward: Callable) -> Callable[[], object]:
    """One forward pass of the batch without autograd."""
    x, _ = _batch()

    def run():
        with torch.no_grad():
            return forward(x)
    return run


def parity(eager, custom) -> bool:
    """The custom model's loss and gradients match the eager model's within the bf16 tolerance."""
    gpt = gpt_module()
    x, y = _batch()
    grads = []
    for model in (eager, custom):
        model.zero_grad(set_to_none=True)
        loss = gpt.loss_of(model, x, y)
        loss.backward()
        grads.append((float(loss), [p.grad.float() for p in model.parameters()]))
        model.zero_grad(set_to_none=True)
    (le, ge), (lc, gc) = grads
    rel = max(float((a - b).norm() / b.norm().clamp_min(1e-12)) for a, b in zip(gc, ge))
    ok = abs(le - lc) <= LOSS_TOLERANCE and rel <= GRAD_TOLERANCE
    print(f"parity: loss {le:.4f} eager, {lc:.4f} custom; largest relative gradient difference {rel:.1e} "
          f"({'within' if ok else 'OUTSIDE'} the bf16 tolerance)")
    return ok


def run(out_dir: Path) -> list[Row]:
    """The training step and the inference forward, four ways each; CSV and plots into out_dir."""
    eager, custom = models()
    ok = parity(eager, custom)
    copy = copy_bandwidth()
    csv = out_dir / "lesson10.csv"
    shape = f"{LAYERS} blocks, d 768, T 1024, B {BATCH} bf16"
    compiled_eager, compiled_custom = torch.compile(eager), torch.compile(custom)
    rows = []
    # each step's own optimizer: compiled and eager copies share the parameters of their model, so the
    # steps train the weights a little as they are timed, which changes no timing
    for label, make in (("train step", train_step), ("inference", None)):
        def timed(model, forward):
            return make(model, forward) if make else inference(forward)

        variants = {"torch.compile": timed(eager, compiled_eager), "custom ops": timed(custom, custom),
                    "custom ops + compile": timed(custom, compiled_custom)}
        rows += bench(f"{label}, {shape}", variants, torch_fn=timed(eager, eager), args=(), compile=False,
                      copy_gbps=copy, check=lambda: ok, csv_path=csv,
                      plot_path=out_dir / f"lesson10_{label.replace(' ', '_')}.png", show=False)
    labelled = [dataclasses.replace(r, variant=f"{r.bench.split(',')[0]}: {r.variant}") for r in rows]
    plot(labelled, copy, out_dir / "lesson10_all.png", show=False)
    print(table(labelled, copy))
    return rows
