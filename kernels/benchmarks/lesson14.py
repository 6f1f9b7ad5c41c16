"""Lesson 14 on two GPUs: the lesson's all-reduce kernels against NCCL, and data-parallel training.

Needs two GPUs of one machine (on one GPU it says so and measures nothing). Two ranks (kernels.ranks.run_ranks
with NCCL) run every measurement together, each call in lockstep: a fixed number of calls between two events,
the median of REPEATS such runs, after a barrier (a per-rank adaptive count, as do_bench picks, would leave one
rank waiting in a collective the other never calls).

All-reduce of bfloat16 tensors from 4 KB to 1 GB: NCCL's all_reduce ("eager": what PyTorch runs for
dist.all_reduce), the same through torch.compile (functional collectives), PyTorch's own symmetric-memory
one-shot kernel (another route), and the lesson's all_reduce1 (one-shot) and all_reduce2 (two-shot), each with
the input copied into the symmetric buffer by the kernel and with the input already there ("in place": a
gradient bucket allocated in symmetric memory). GB/s is the bus bandwidth, NCCL's measure: bytes x 2 (world -
1) / world per second, what each GPU's link carries; "of copy" is against a plain copy of the same bytes from
GPU 0 to GPU 1, measured in the same run.

Data parallel: lesson 10's model (GPT-2 small's width, 6 blocks, 1024 tokens, bf16) trained with AdamW at a batch
of 16 sequences per GPU (at 8 the model with the custom kernels is bound by the CPU): one GPU alone, then two under
DDP (NCCL's all-reduce, then the lesson's all_reduce2 as DDP's communication hook), eager and compiled, and FSDP2.
Rows: ms per step, and "vs eager" is tokens per second against one GPU running the same model (the scaling: 2.0x is perfect).
"compiled autograd" compiles the backward too (lesson14_data_parallel's "ddp-compiled" route).

Overlap (kernels/lessons/lesson14_overlap.py): one profiled step of the eager model with the gradients all-reduced
after the backward, under DDP's buckets and with the lesson's hook, over NVLink and through the host's memory;
the spans go to lesson14_overlap.csv, the timeline to lesson14_overlap.png.

Matmul + reduce-scatter (tensor parallelism's row-parallel layer, MATMUL_RS): the matmul then NCCL's
reduce-scatter, eager and compiled, against PyTorch's fused_matmul_reduce_scatter, which overlaps the two, and the
matmul alone (the floor); TFLOP/s count the matmul's flops on one rank.
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch

from ..bench import Row, device_name, plot, table, write_csv
from ..lessons import lesson14_overlap as overlap
from . import Bar

WORLD = 2
DTYPE = torch.bfloat16
SIZES = [4096 * 4**k for k in range(10)]  # bytes: 4 KB ... 1 GB
ONE_SHOT_MAX = 1 << 28  # the one-shot reads (world - 1) x the data from its peers (with two ranks as many bytes as
                        # the two-shot, from three on more): measured up to 256 MB
REPEATS = 7
BUFFER = (1 << 30) + (1 << 20)
FINAL_SMALL, FINAL_LARGE = "all_reduce1, in place", "all_reduce2, in place"
MODEL = dict(d_model=768, n_head=12, n_layer=6, seq_len=1024)
PER_GPU_BATCH = 16
STEPS = 10
# A row-parallel layer of tensor parallelism: each rank holds K/world of the inner dimension, multiplies its slice,
# and the partial products are summed and split by rows over the ranks (a reduce-scatter). (M, K, N, what it is.)
MATMUL_RS = ((16 * 1024, 3072, 768, "GPT-2 small's MLP down-projection, 16 x 1024 tokens"),
             (8 * 1024, 14336, 4096, "an 8B model's MLP down-projection, 8 x 1024 tokens"))
OVERLAP_PNG = "lesson14_overlap.png"
RECORD_FILES = (overlap.CSV,)  # copied beside the recorded CSV by --record (the notebook draws the timeline from it)


def size_name(nbytes: int) -> str:
    return f"all-reduce bf16 {nbytes >> 20} MB" if nbytes >= 1 << 20 else f"all-reduce bf16 {nbytes >> 10} KB"


BARS = ([Bar(size_name(s), FINAL_SMALL, "vs_eager", 1.3) for s in SIZES if s <= 1 << 18]
        + [Bar(size_name(s), FINAL_LARGE, "vs_eager", 0.9) for s in SIZES if s >= 1 << 26]
        + [Bar("data parallel, 2 GPUs", "DDP (NCCL), eager", "vs_eager", 1.85),
           Bar("data parallel, 2 GPUs", "DDP (NCCL), custom kernels", "vs_eager", 1.85)])


def _iters(nbytes: int) -> int:
    return 200 if nbytes <= 1 << 20 else 20 if nbytes <= 1 << 26 else 5


def timed_us(fn, iters: int, together: bool = True) -> float:
    """Median microseconds per call over REPEATS runs of `iters` calls, after a warm-up; with `together`, every rank
    starts after a barrier (a collective's calls must be in step), else this rank times on its own."""
    import torch.distributed as dist

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    if together:
        dist.barrier()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    runs = []
    for _ in range(REPEATS):
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        runs.append(start.elapsed_time(end) * 1000 / iters)
    return statistics.median(runs)


def _all_reduce_rank(rank: int, world: int) -> dict:
    """Every size's timings (microseconds per call), measured in every rank; rank 0's are kept."""
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    from ..build import load
    from ..distributed import SymmetricBuffer

    ext = load("14", "cuda", quiet=True)
    buf = SymmetricBuffer(BUFFER)
    group = dist.group.WORLD
    torch_one_shot = getattr(getattr(torch.ops, "symm_mem", None), "one_shot_all_reduce", None)
    compiled = torch.compile(lambda t: funcol.all_reduce(t, "sum", group), dynamic=False)
    times: dict[int, dict[str, float]] = {}
    for nbytes in SIZES:
        n, iters = nbytes // 2, _iters(nbytes)
        x = torch.randn(n, device="cuda").to(DTYPE)
        out = torch.empty_like(x)
        inside = buf.view(DTYPE, n)
        inside.copy_(x)
        t = {"eager": timed_us(lambda: dist.all_reduce(x), iters)}
        torch._dynamo.reset()
        t["torch.compile"] = timed_us(lambda: compiled(x), iters)
        if torch_one_shot is not None and nbytes <= 1 << 24:
            t["torch symm_mem one_shot_all_reduce"] = timed_us(lambda: torch_one_shot(inside, "sum", group.group_name),
                                                               iters)
        if nbytes <= ONE_SHOT_MAX:
            t["all_reduce1"] = timed_us(lambda: ext.all_reduce1(x, out, *buf.args()), iters)
            t[FINAL_SMALL] = timed_us(lambda: ext.all_reduce1(inside, out, *buf.args()), iters)
        t["all_reduce2"] = timed_us(lambda: ext.all_reduce2(x, out, *buf.args()), iters)
        t[FINAL_LARGE] = timed_us(lambda: ext.all_reduce2(inside, out, *buf.args()), iters)
        if rank == 1:  # the plain copy of the same bytes, GPU 0 to GPU 1, timed by rank 1 alone
            src = torch.empty(n, dtype=DTYPE, device="cuda:0")
            t["copy"] = timed_us(lambda: x.copy_(src), iters, together=False)
        times[nbytes] = t
        del x, out
    dist.barrier()
    buf.close()
    return times


def all_reduce_rows(times: dict[int, dict[str, float]], copy_us: dict[int, float]) -> list[Row]:
    rows = []
    for nbytes, t in times.items():
        bus = nbytes * 2 * (WORLD - 1) / WORLD
        for label, us in t.items():
            gbps = bus / us / 1e3
            copy = nbytes / copy_us[nbytes] / 1e3
            rows.append(Row(size_name(nbytes), label, us / 1000, gbps, None, gbps / copy, t["eager"] / us,
                            t["torch.compile"] / us, "another route than the lesson's kernels" if "symm_mem" in label
                            else ""))
    return rows


def matmul_rs_name(m: int, k: int, n: int) -> str:
    return f"matmul + reduce-scatter {m}x{k}x{n} bf16"


def _matmul_rs_rank(rank: int, world: int) -> dict:
    """Microseconds of each way to compute a row-parallel layer's output, per shape of MATMUL_RS: the matmul then
    NCCL's reduce-scatter, eager and compiled; PyTorch's fused_matmul_reduce_scatter (the matmul in chunks, each
    chunk's copy to its rank on another stream while the next chunk is computed); the matmul alone. And the
    difference of the fused result from the eager one, relative to its norm."""
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    from torch.distributed import _symmetric_memory as symm_mem

    group = dist.group.WORLD
    symm_mem.enable_symm_mem_for_group(group.group_name)
    fused = getattr(getattr(torch.ops, "symm_mem", None), "fused_matmul_reduce_scatter", None)

    def eager(a, b):
        y = a @ b
        out = y.new_empty(y.shape[0] // world, y.shape[1])
        dist.reduce_scatter_tensor(out, y)
        return out
    compiled = torch.compile(lambda a, b: funcol.wait_tensor(funcol.reduce_scatter_tensor(a @ b, "sum", 0, group)),
                             dynamic=False)
    out = {}
    for m, k, n, _ in MATMUL_RS:
        gen = torch.Generator(device="cuda").manual_seed(rank)
        a = torch.randn(m, k // world, device="cuda", generator=gen).to(DTYPE)
        b = (torch.randn(k // world, n, device="cuda", generator=gen) / (k ** 0.5)).to(DTYPE)
        t = {"eager": timed_us(lambda: eager(a, b), 20), "torch.compile": timed_us(lambda: compiled(a, b), 20)}
        if fused is not None:
            t["torch symm_mem fused_matmul_reduce_scatter"] = timed_us(
                lambda: fused(a, b, "sum", 0, group.group_name), 20)
            want = eager(a, b).float()
            t["difference"] = float((fused(a, b, "sum", 0, group.group_name).float() - want).norm() / want.norm())
        t["torch matmul alone (no communication)"] = timed_us(lambda: a @ b, 20, together=False)
        out[(m, k, n)] = t
        torch._dynamo.reset()
    dist.barrier()
    return out


def _same_as_eager(difference: float) -> str:
    return "result identical to eager's" if difference == 0 else \
        f"result within {difference:.0e} of eager's (relative norm)"


def matmul_rs_rows(times: dict) -> list[Row]:
    rows = []
    what = {s[:3]: s[3] for s in MATMUL_RS}
    for (m, k, n), t in times.items():
        flops = 2 * m * (k // WORLD) * n
        for label, us in t.items():
            if label == "difference":
                continue
            note = what.get((m, k, n), "") if label == "eager" else _same_as_eager(t["difference"]) if "fused" in label \
                else ""
            rows.append(Row(matmul_rs_name(m, k, n), label, us / 1000, None, flops / us / 1e6, None, t["eager"] / us,
                            t["torch.compile"] / us, note))
    return rows


def _train_rank(rank: int, world: int) -> dict[str, float]:
    """ms per training step of each route, measured in every rank (rank 0's kept); one GPU alone first."""
    import torch.distributed as dist

    from ..lessons import lesson14_data_parallel as dp

    gpt = dp.gpt_module()
    device = torch.device("cuda", rank)
    cfg = MODEL
    data = list(dp.global_batches(cfg, PER_GPU_BATCH * world, STEPS + 3, device))
    rows = slice(rank * PER_GPU_BATCH, (rank + 1) * PER_GPU_BATCH)

    def steps_ms(model, opt, together: bool = True) -> float:
        return _steps_ms(gpt, model, opt, data, rows, together)

    out: dict[str, float] = {}
    for kernels in ("eager", "custom"):
        for compiled in (False, True):
            tag = f"{kernels}{', compiled' if compiled else ''}"
            if rank == 0:  # one GPU alone: the same model and rows, no communication
                model = dp.model_for(kernels, cfg, device, DTYPE)
                fn = torch.compile(model) if compiled else model
                opt = torch.optim.AdamW(model.parameters(), lr=dp.LR, fused=True)
                out[f"1 GPU, {tag}"] = steps_ms(fn, opt, together=False)
                del model, fn, opt
            dist.barrier()
            for route in ("ddp", "ddp-ours") if not compiled else ("ddp",):
                model = dp.model_for(kernels, cfg, device, DTYPE)
                wrapped, buffer = dp.wrap(route, model, device, 25.0)
                fn = torch.compile(wrapped) if compiled else wrapped
                opt = torch.optim.AdamW(model.parameters(), lr=dp.LR, fused=True)
                label = "DDP (NCCL)" if route == "ddp" else "DDP (all_reduce2 hook)"
                out[f"{label}, {'custom kernels' if kernels == 'custom' else 'eager'}{', compiled' if compiled else ''}"] = \
                    steps_ms(fn, opt)
                if buffer is not None:
                    dist.barrier()
                    buffer.close()
                del model, wrapped, fn, opt
                torch._dynamo.reset()
    for kernels in ("eager", "custom"):
        out[f"DDP (NCCL), {'custom kernels' if kernels == 'custom' else 'eager'}, compiled autograd"] = \
            _compiled_autograd_ms(gpt, kernels, device, data, rows)
    model = dp.model_for("eager", cfg, device, DTYPE)
    wrapped, _ = dp.wrap("fsdp", model, device, 25.0)
    opt = torch.optim.AdamW(wrapped.parameters(), lr=dp.LR)
    out["FSDP2, eager"] = steps_ms(wrapped, opt)
    return out


def _compiled_autograd_ms(gpt, kernels: str, device, data, rows) -> float:
    """ms per step of DDP with the forward compiled and the backward too (lesson14_data_parallel's "ddp-compiled")."""
    from ..lessons import lesson14_data_parallel as dp

    with dp.compiled_autograd() as backward:
        model = dp.model_for(kernels, MODEL, device, DTYPE)
        wrapped, _ = dp.wrap("ddp-compiled", model, device, 25.0)
        opt = torch.optim.AdamW(model.parameters(), lr=dp.LR, fused=True)
        return _steps_ms(gpt, wrapped, opt, data, rows, True, backward)


def _steps_ms(gpt, model, opt, data, rows, together: bool, backward=torch.Tensor.backward) -> float:
    """ms per training step over data[3:] (after 3 warm-up steps), on this rank's `rows` of each global batch; with
    `together`, every rank starts after a barrier (DDP's all-reduces must be in step)."""
    import torch.distributed as dist

    def step(x, y):
        loss = gpt.loss_of(model, x[rows], y[rows])
        opt.zero_grad(set_to_none=True)
        backward(loss)
        opt.step()
    for x, y in data[:3]:
        step(x, y)
    torch.cuda.synchronize()
    if together:
        dist.barrier()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for x, y in data[3:]:
        step(x, y)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / STEPS


def train_rows(ms: dict[str, float]) -> list[Row]:
    tokens = PER_GPU_BATCH * MODEL["seq_len"]
    rows = []
    for label, t in ms.items():
        world = 1 if label.startswith("1 GPU") else WORLD
        alone = ms.get("1 GPU, " + ("custom" if "custom" in label else "eager") + (", compiled" if "compiled" in label else ""))
        speed = world * tokens / t
        base = tokens / alone if alone else None
        note = f"{speed * 1000:.0f} tokens/s" + (
            "; vs 1 GPU compiled without compiled autograd (its own gain counts in)" if "compiled autograd" in label
            else "")
        rows.append(Row(f"data parallel, {world} GPU{'s' if world > 1 else ''}", label, t, None, None, None,
                        speed / base if base else None, None, note))
    return rows


def _overlap(out_dir: Path) -> None:
    """One profiled step of each of lesson14_overlap's routes, peer to peer and through the host's memory (NCCL
    without peer-to-peer: the lesson's own kernel needs peer access, so it is traced peer to peer only); their
    summaries printed, their spans to lesson14_overlap.CSV and the timeline to OVERLAP_PNG."""
    from ..lessons import lesson14_overlap as ov
    from ..ranks import run_ranks

    spans = ov.least_waiting(run_ranks(ov.trace_rank, WORLD, args=(MODEL, PER_GPU_BATCH), backend="nccl",
                                       timeout=600), "peer to peer")  # NVLink, or PCIe with peer access
    host = run_ranks(ov.trace_rank, WORLD, args=(MODEL, PER_GPU_BATCH, (ov.AFTER, ov.BUCKETS)), backend="nccl",
                     timeout=600, env={"NCCL_P2P_DISABLE": "1"})  # NCCL through the host's memory
    spans |= ov.least_waiting(host, "through host memory")
    print(f"\nOne training step of each route ({MODEL['n_layer']} blocks, d {MODEL['d_model']}, T {MODEL['seq_len']}, "
          f"{PER_GPU_BATCH} sequences per GPU, eager PyTorch):")
    for route, ss in spans.items():
        print("  " + ov.describe(route, ss))
    ov.write_csv(spans, out_dir / ov.CSV, device_name())
    ov.plot(spans, out_dir / OVERLAP_PNG, show=False, device=device_name())


def run(out_dir: Path) -> list[Row]:
    from ..ranks import run_ranks

    if torch.cuda.device_count() < WORLD:
        print(f"lesson 14's benchmark needs {WORLD} GPUs of one machine (this one has {torch.cuda.device_count()}): "
              "nothing measured")
        return []
    from ..build import load

    from ..lessons.lesson10 import gpt_module

    load("14", "cuda", quiet=True)  # built once here, found in the cache by both ranks
    gpt_module().custom_kernels(backend="cuda")  # lessons 05, 07 and 08, for the model with the custom kernels
    times = run_ranks(_all_reduce_rank, WORLD, backend="nccl", timeout=900)
    copy_us = {n: times[1][n]["copy"] for n in SIZES}
    for t in times[0].values():
        t.pop("copy", None)
    rows = all_reduce_rows(times[0], copy_us)
    steps = run_ranks(_train_rank, WORLD, backend="nccl", timeout=900)
    rows += train_rows(steps[0])
    rows += matmul_rs_rows(run_ranks(_matmul_rs_rank, WORLD, backend="nccl", timeout=600)[0])
    _overlap(out_dir)
    copy = max(r.gbps / r.of_copy for r in rows if r.gbps and r.of_copy)
    for name in dict.fromkeys(r.bench for r in rows):
        part = [r for r in rows if r.bench == name]
        print(table(part, copy))
        write_csv(part, out_dir / "lesson14.csv", copy)
    plot([r for r in rows if r.bench == size_name(1 << 18)], copy, out_dir / "lesson14_256KB.png", show=False)
    plot([r for r in rows if r.bench == size_name(1 << 30)], copy, out_dir / "lesson14_1GB.png", show=False)
    from . import bar_report

    print(bar_report(rows, BARS))
    return rows


if __name__ == "__main__":
    from ..paths import BUILD

    run(BUILD / "bench")
    sys.exit(0)
