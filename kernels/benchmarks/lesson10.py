"""Lesson 10 on the GPU: the GPT block stack with the lessons' kernels against eager PyTorch and torch.compile.

One model size, GPT-2 small's width: d_model 768, 12 heads, 1024 tokens, batch 8, LAYERS blocks, bfloat16
weights and activations. Six ways to run it, side by side in one run: the eager model (nanoGPT's
non-flash attention), torch.compile of it, the model with the custom ops (lessons 05, 07, 08), torch.compile
of that, and nanoGPT's default attention, F.scaled_dot_product_attention(is_causal=True) (SDPA), eager and
compiled. Two benchmarks: a training step (forward, backward and a fused AdamW step) and an inference forward
under torch.no_grad. The CSV has ms per step and the TFLOP/s of the model's matmuls (SDPA's counted as if it
computed the masked half too); vs eager and vs compile are speed-ups. Before timing, the custom and the SDPA
models' loss and gradients are checked against the eager model's (bf16 tolerance).

Three more groups of rows, milliseconds alone, for the lesson's notebook to show without a GPU: where a
training step's time goes by torch.profiler (PARTS rows, eager and custom, the swappable parts found by the
profiler ranges of gpt.py), how long the CPU takes to queue a step against the GPU time of its kernels (QUEUE
rows, eager and custom, from the same run; the timed figures with the range of their middle 80% of steps: a
model whose CPU side takes longer than its kernels is CPU-bound), and the measuring pitfalls (PITFALLS rows): the
first step against a steady one, a step timed without synchronising (the eager QUEUE row's figure), and a loss
read with .item() every step. The profile of the custom model's step is also drawn as a timeline (TRACE_PNG:
CPU ops on one lane, GPU kernels on the other), which --record keeps with the CSV.
"""
from __future__ import annotations

import dataclasses
import statistics
import time
from pathlib import Path
from typing import Callable

import torch

from ..bench import Row, bench, copy_bandwidth, device_name, plot, table, time_ms, write_csv
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
QUEUE = "CPU queue time against GPU time, train step"  # rows "<model>: <what>", QUEUED, KERNELS and STEP
QUEUED, KERNELS, STEP = "CPU queues one step", "GPU kernels of one step (profile)", "one step, synchronised"
PITFALLS = "pitfalls, eager train step"
SDPA = "torch SDPA"  # a name that starts with "torch": the README's table of the lessons' kernels leaves it out
QUEUE_REPEATS = 21  # the queue rows are medians of this many steps (a CPU-bound step varies from step to step)
LOW, HIGH = "10th percentile", "90th percentile"  # QUEUED and STEP rows also give their spread: "<what>, <LOW>"
TRACE_PNG = "lesson10_custom_trace.png"
RECORD_FILES = (TRACE_PNG,)  # copied beside the recorded CSV by --record


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


def sdpa_model(eager):
    """The eager model's twin with nanoGPT's default attention, F.scaled_dot_product_attention(is_causal=True)."""
    gpt = gpt_module()
    return gpt.twin(eager, gpt.SDPA)


def _sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


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


def parity(eager, custom, name: str = "custom") -> bool:
    """The custom (or another) model's loss and gradients match the eager model's within the bf16 tolerance."""
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
    print(f"parity: loss {le:.4f} eager, {lc:.4f} {name}; largest relative gradient difference {rel:.1e} "
          f"({'within' if ok else 'OUTSIDE'} the bf16 tolerance)")
    return ok


def _profile_rows(eager, custom, out_dir: Path) -> list[Row]:
    """ms per training step in each part of the step, by torch.profiler, for both models; and per model the CPU
    time to queue a step (from an idle GPU, not waiting for it), the device time of the step's kernels (the
    profile's parts added up) and the synchronised step, the two timed ones with their spread (_spread). The custom model's profile is drawn to TRACE_PNG."""
    sp = lesson_module("step_profile")
    on_gpu = DEVICE == "cuda"
    rows, queue = [], []
    for name, model in (("eager", eager), ("custom ops", custom)):
        step = train_step(model, model)
        queued, synced = _from_idle(step, QUEUE_REPEATS)  # before the profiler, so nothing it leaves is timed
        trace = out_dir / TRACE_PNG.replace(".png", ".json") if model is custom else None
        prof = sp.profile_steps(step, on_gpu=on_gpu, trace=trace)
        parts, total = sp.time_by_part(prof, on_gpu=on_gpu), sp.total_ms(prof, on_gpu=on_gpu)
        verdict = "agree" if abs(sum(parts.values()) - total) <= 0.01 * total else \
            "DIFFER: a part counts some time twice or misses some"
        print(f"profile of the {name} step: its parts add up to {sum(parts.values()):.3f} ms, its "
              f"{'kernels' if on_gpu else 'ops'} to {total:.3f} ms ({verdict})")
        rows += [Row(PARTS, f"{name}: {part}", ms, None, None, None, None, None) for part, ms in parts.items()]
        if trace is not None:
            sp.plot_trace(trace, out_dir / TRACE_PNG, f"{sp.ACTIVE} profiled training steps of the custom-op model "
                                                      f"({_shape()}, {device_name()})")
        figures = {**_spread(QUEUED, queued), KERNELS: sum(parts.values()), **_spread(STEP, synced)}
        queue += [Row(QUEUE, f"{name}: {what}", ms, None, None, None, None, None) for what, ms in figures.items()]
    return rows + queue


def _from_idle(step: Callable[[], None], n: int) -> tuple[list[float], list[float]]:
    """n steps, each started from an idle GPU and timed twice: ms until the CPU has queued it (not waiting for
    the GPU), then ms of another step with a synchronisation at its end."""
    queued, synced = [], []
    for _ in range(n):
        _sync()
        queued.append(_wall_ms(step, sync=False))  # returns once the step's kernels are queued
        _sync()
        synced.append(_wall_ms(step, sync=True))
    return queued, synced


def _spread(what: str, samples: list[float]) -> dict[str, float]:
    """The median of the samples and the edges of their middle 80% (the 10th and 90th percentiles; with fewer than
    ten samples, the fastest and the slowest): {what, "<what>, LOW", "<what>, HIGH"}."""
    ordered = sorted(samples)
    edge = len(ordered) // 10  # the fastest and the slowest tenth are left out of the range
    return {what: statistics.median(ordered), f"{what}, {LOW}": ordered[edge], f"{what}, {HIGH}": ordered[-1 - edge]}


def queue_verdict(figures: dict[str, float], model: str) -> str:
    """One line on whether a model's step waits for the CPU, from its QUEUE rows ({variant: ms}): CPU-bound only
    when even the fast end of its queueing spread takes longer than its kernels, GPU-bound only when even the
    slow end takes less, and undecided when the kernels' time falls inside the spread."""
    cpu, gpu, step = (figures[f"{model}: {what}"] for what in (QUEUED, KERNELS, STEP))
    if f"{model}: {QUEUED}, {LOW}" not in figures:  # a CSV recorded before the spread was
        return (f"{model}: the CPU queues a step in {cpu:.2f} ms, its kernels take {gpu:.2f} ms, the step {step:.2f} "
                f"ms: no spread recorded with these figures, so no verdict (`make bench LESSON=10 RECORD=1` on a GPU "
                f"records it)")
    low, high, step_low, step_high = (figures[f"{model}: {what}, {end}"] for what in (QUEUED, STEP)
                                      for end in (LOW, HIGH))
    if low > gpu:
        verdict = "queueing takes longer than the kernels: the GPU waits for the CPU (CPU-bound)"
    elif high < gpu:
        verdict = "queueing takes less than the kernels: the CPU keeps ahead of the GPU"
    else:
        verdict = "the kernels' time falls inside the queueing's spread: too close to call from these figures"
    return (f"{model}: the CPU queues a step in {cpu:.2f} ms ({low:.2f}-{high:.2f}), its kernels take {gpu:.2f} ms, "
            f"the step {step:.2f} ms ({step_low:.2f}-{step_high:.2f}): {verdict}")


def _shape() -> str:
    return f"{CONFIG['n_layer']} blocks, d {CONFIG['d_model']}, T {CONFIG['seq_len']}, B {BATCH} " \
           f"{str(DTYPE).replace('torch.bfloat16', 'bf16').replace('torch.', '')}"


def _wall_ms(fn: Callable[[], object], sync: bool) -> float:
    t0 = time.perf_counter()
    fn()
    if sync:
        _sync()
    return (time.perf_counter() - t0) * 1e3


def _pitfall_rows() -> list[Row]:
    """The first step against a steady one; a step timed without waiting for the GPU; .item() every step.
    On an eager model of its own, so that the steps train no weight of the compared models."""
    gpt = gpt_module()
    model = gpt.GPT(gpt.Config(**CONFIG)).to(device=DEVICE, dtype=DTYPE)
    step = train_step(model, model)
    first = _wall_ms(step, sync=True)  # cuBLAS handles, the allocator's first blocks, lazy module loading
    steady = time_ms(step)

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
             "20 steps, one sync at the end (per step)": quiet, "20 steps, loss.item() each step (per step)": logged}
    return [Row(PITFALLS, k, v, None, None, None, None, None) for k, v in named.items()]


UNSYNCED = "one step timed without synchronising"  # a PITFALLS row: the eager model's QUEUED figure, not re-timed


def _with_unsynced(pitfalls: list[Row], queue: list[Row]) -> list[Row]:
    """The pitfall rows with the unsynchronised step after the steady one: the eager model's queueing time
    from the QUEUE rows (the same measurement; timing it twice in one run gave two different figures)."""
    eager = next(r for r in queue if r.bench == QUEUE and r.variant == f"eager: {QUEUED}")
    return pitfalls[:2] + [dataclasses.replace(eager, bench=PITFALLS, variant=UNSYNCED)] + pitfalls[2:]


def run(out_dir: Path) -> list[Row]:
    """The training step and the inference forward, six ways each, the profiles, the queue times and the
    pitfalls; CSV, plots and the custom model's step timeline into out_dir."""
    pitfalls = _pitfall_rows()  # first: the cold step must be the process's first training step
    eager, custom = models()
    sdpa = sdpa_model(eager)
    ok = parity(eager, custom) & parity(eager, sdpa, "SDPA")
    copy = copy_bandwidth()
    csv = out_dir / "lesson10.csv"
    shape = _shape()
    compiled_eager, compiled_custom, compiled_sdpa = torch.compile(eager), torch.compile(custom), torch.compile(sdpa)
    rows = []
    # The steps train the weights a little as they are timed, which changes no timing. The parity check ran
    # before; a failed one marks every row.
    for label, make, flops in (("train step", train_step, 3 * forward_flops()), ("inference", None, forward_flops())):
        def timed(model, forward):
            return make(model, forward) if make else inference(forward)

        variants = {"torch.compile": timed(eager, compiled_eager), "custom ops": timed(custom, custom),
                    "custom ops + compile": timed(custom, compiled_custom), SDPA: timed(sdpa, sdpa),
                    f"{SDPA} + compile": timed(sdpa, compiled_sdpa)}
        rows += bench(f"{label}, {shape}", variants, flops=flops, torch_fn=timed(eager, eager), args=(),
                      compile=False, copy_gbps=copy, check=lambda: ok, csv_path=csv,
                      plot_path=out_dir / f"lesson10_{label.replace(' ', '_')}.png", show=False)
    labelled = [dataclasses.replace(r, variant=f"{r.bench.split(',')[0]}: {r.variant}") for r in rows]
    plot(labelled, copy, out_dir / "lesson10_all.png", show=False)
    profiles = _profile_rows(eager, custom, out_dir)
    extra = _with_unsynced(pitfalls, profiles) + profiles
    write_csv(extra, csv, copy)
    for name in dict.fromkeys(r.bench for r in rows + extra):  # a table per benchmark: times alone read as times
        print(table([r for r in rows + extra if r.bench == name], copy), end="\n\n")
    return rows + extra
