"""Lesson 10 on the GPU: the GPT block stack with the lessons' kernels against eager PyTorch and torch.compile.

One model size, GPT-2 small's width: d_model 768, 12 heads, 1024 tokens, batch 8, LAYERS blocks, bfloat16
weights and activations. Four ways to run it, side by side in one run: the eager model (nanoGPT's
non-flash attention), torch.compile of it, the model with the custom ops (lessons 05, 07, 08) and
torch.compile of that. Two benchmarks: a training step (forward, backward and a fused AdamW step) and an
inference forward under torch.no_grad. The CSV has ms per step and the TFLOP/s of the model's matmuls; vs eager
and vs compile are speed-ups. Before timing, the custom model's loss and gradients are checked against the
eager model's (bf16 tolerance).

Two more groups of rows, milliseconds alone, for the lesson's notebook to show without a GPU: where a training
step's time goes by torch.profiler (PART rows, eager and custom), and the measuring pitfalls (PITFALLS rows):
the first step against a steady one, a step timed without synchronising, and a loss read with .item() every step.
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Callable

import torch

from ..bench import Row, bench, copy_bandwidth, plot, table, time_ms, write_csv
from ..lessons.lesson10 import gpt_module, lesson_module

LAYERS = 6
BATCH = 8
CONFIG = dict(d_model=768, n_head=12, n_layer=LAYERS, seq_len=1024)
DTYPE = torch.bfloat16
DEVICE, BACKEND = "cuda", "cuda"  # a test runs the pieces tiny on the simulator ("cpu", "sim")
# bf16 keeps 8 bits of mantissa: two models that round in different places differ by a few 1e-3 in the loss
# and by a few percent in a gradient's entries; a wrong op differs by far more (the loss of a random model is 5.5).
LOSS_TOLERANCE = 2e-2
GRAD_TOLERANCE = 5e-2  # the norm of the difference against the norm of the eager gradient, per parameter
PARTS = "where a train step's time goes"  # the bench name of the profile rows: "<model>: <part>"
PITFALLS = "pitfalls, eager train step"


def forward_flops() -> int:
    """The matmul FLOPs of one forward: per block qkv, proj and the MLP (12 d^2 per token), q k^T and att v
    (computed whole, masked or not), and the head over 256 bytes."""
    d, t, b = CONFIG["d_model"], CONFIG["seq_len"], BATCH
    per_block = 2 * b * t * 12 * d * d + 2 * 2 * b * t * t * d
    return LAYERS * per_block + 2 * b * t * d * 256


def models():
    """(eager model, custom-op model) with the same weights, bf16, on the GPU."""
    gpt = gpt_module()
    torch.manual_seed(0)
    eager = gpt.GPT(gpt.Config(**CONFIG)).to(device=DEVICE, dtype=DTYPE)
    return eager, gpt.twin(eager, gpt.custom_kernels(backend=BACKEND))


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    gpt = gpt_module()
    return next(gpt.batches(gpt.text_bytes(DEVICE), BATCH, CONFIG["seq_len"], 1))


def train_step(model, forward: Callable) -> Callable[[], None]:
    """One training step: forward (through `forward`, e.g. torch.compile(model)), backward, fused AdamW."""
    gpt = gpt_module()
    x, y = _batch()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=DEVICE == "cuda")

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
        grads.append((float(loss.detach()), [p.grad.float() for p in model.parameters()]))
        model.zero_grad(set_to_none=True)
    (le, ge), (lc, gc) = grads
    rel = max(float((a - b).norm() / b.norm().clamp_min(1e-12)) for a, b in zip(gc, ge))
    ok = abs(le - lc) <= LOSS_TOLERANCE and rel <= GRAD_TOLERANCE
    print(f"parity: loss {le:.4f} eager, {lc:.4f} custom; largest relative gradient difference {rel:.1e} "
          f"({'within' if ok else 'OUTSIDE'} the bf16 tolerance)")
    return ok


def _profile_rows(eager, custom) -> list[Row]:
    """ms per training step in each part of the step, by torch.profiler, for both models."""
    sp = lesson_module("step_profile")
    rows = []
    for name, model in (("eager", eager), ("custom ops", custom)):
        parts = sp.time_by_part(sp.profile_steps(train_step(model, model), on_gpu=True), on_gpu=True)
        rows += [Row(PARTS, f"{name}: {part}", ms, None, None, None, None, None) for part, ms in parts.items()]
    return rows


def _wall_ms(fn: Callable[[], object], sync: bool) -> float:
    t0 = time.perf_counter()
    fn()
    if sync:
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def _pitfall_rows() -> list[Row]:
    """The first step against a steady one; a step timed without waiting for the GPU; .item() every step.
    On an eager model of its own, so that the steps train no weight of the compared models."""
    gpt = gpt_module()
    model = gpt.GPT(gpt.Config(**CONFIG)).to(device=DEVICE, dtype=DTYPE)
    step = train_step(model, model)
    first = _wall_ms(step, sync=True)  # cuBLAS handles, the allocator's first blocks, lazy module loading
    steady = time_ms(step)
    unsynced = sorted(_wall_ms(step, sync=False) for _ in range(5))[2]  # returns once the kernels are queued
    torch.cuda.synchronize()
    x, y = _batch()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

    def steps(n: int, read_loss: bool) -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            loss = gpt.loss_of(model, x, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if read_loss:
                loss.item()  # waits for the GPU: the CPU cannot queue the next step meanwhile
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3 / n

    steps(3, False)
    quiet, logged = steps(20, False), steps(20, True)
    named = {"first step (cold)": first, "steady step (median, synchronised)": steady,
             "one step timed without synchronising": unsynced, "20 steps, one sync at the end (per step)": quiet,
             "20 steps, loss.item() each step (per step)": logged}
    return [Row(PITFALLS, k, v, None, None, None, None, None) for k, v in named.items()]


def run(out_dir: Path) -> list[Row]:
    """The training step and the inference forward, four ways each, the profiles and the pitfalls; CSV and plots
    into out_dir."""
    pitfalls = _pitfall_rows()  # first: the cold step must be the process's first training step
    eager, custom = models()
    ok = parity(eager, custom)
    copy = copy_bandwidth()
    csv = out_dir / "lesson10.csv"
    shape = f"{LAYERS} blocks, d 768, T 1024, B {BATCH} bf16"
    compiled_eager, compiled_custom = torch.compile(eager), torch.compile(custom)
    rows = []
    # The steps train the weights a little as they are timed, which changes no timing. The parity check ran
    # before; a failed one marks every row.
    for label, make, flops in (("train step", train_step, 3 * forward_flops()), ("inference", None, forward_flops())):
        def timed(model, forward):
            return make(model, forward) if make else inference(forward)

        variants = {"torch.compile": timed(eager, compiled_eager), "custom ops": timed(custom, custom),
                    "custom ops + compile": timed(custom, compiled_custom)}
        rows += bench(f"{label}, {shape}", variants, flops=flops, torch_fn=timed(eager, eager), args=(),
                      compile=False, copy_gbps=copy, check=lambda: ok, csv_path=csv,
                      plot_path=out_dir / f"lesson10_{label.replace(' ', '_')}.png", show=False)
    labelled = [dataclasses.replace(r, variant=f"{r.bench.split(',')[0]}: {r.variant}") for r in rows]
    plot(labelled, copy, out_dir / "lesson10_all.png", show=False)
    extra = pitfalls + _profile_rows(eager, custom)
    write_csv(extra, csv, copy)
    print(table(rows + extra, copy))
    return rows + extra
