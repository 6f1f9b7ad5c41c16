"""Lesson 10's model trained on several ranks at once: data parallelism, three ways.

    from kernels.ranks import run_ranks
    from kernels.lessons import lesson14_data_parallel as dp
    losses = run_ranks(dp.train_rank, 2, args=("ddp", "custom", dp.SMALL, 8, 10))   # every rank's loss curve
    alone = dp.train_alone("custom", dp.SMALL, 8, 10)                                # one process, the same batches

Every rank holds the whole model and takes `global_batch / world` rows of each global batch; after the
backward, the ranks' gradients are averaged (an all-reduce), so every rank applies the same update and the
weights stay equal: the loss curve is the one a single process would get from the whole batch. The routes:

    "ddp"       torch.nn.parallel.DistributedDataParallel: gradients in buckets, each all-reduced by NCCL (gloo
                on CPUs) while the backward still runs for the layers before it
    "ddp-ours"  the same DDP with its communication hook replaced by the lesson's own all-reduce kernel over
                symmetric memory (symmetric_hook): the kernel inside the training loop
    "fsdp"      FSDP2's fully_shard: each rank keeps 1/world of every parameter, gathers a block's weights just
                before using them and reduce-scatters their gradients (less memory, the same curve)
    "ddp-compiled"  DDP under torch.compile with the backward compiled too (compiled autograd): DDP's Python reducer
                puts each gradient's all-reduce into the backward's graph, and the compiler groups them into
                buckets; without compiled autograd, torch.compile splits the forward's graph at the buckets' edges
                (DDPOptimizer) and autograd runs the backward's pieces with DDP's hooks between them

`kernels` is "eager" (lesson 10's plain PyTorch) or "custom" (the lessons' kernels as torch.library ops, which
need nothing more to run under DDP: they are ordinary differentiable ops, and the averaging happens on the
gradients of the parameters, which they never see).
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator

import torch
import torch.distributed as dist

from .lesson10 import gpt_module

ROUTES = ("ddp", "ddp-ours", "fsdp", "ddp-compiled")
SMALL = dict(d_model=32, n_head=2, n_layer=2, seq_len=16)  # seconds on the simulator
LR = 3e-3


def model_for(kernels: str, cfg: dict, device, dtype=torch.float32, seed: int = 0):
    """Lesson 10's GPT with `kernels` ("eager" or "custom"), the same weights from `seed` in every process."""
    gpt = gpt_module()
    table = gpt.EAGER if kernels == "eager" else gpt.custom_kernels(backend="cuda" if device.type == "cuda" else "sim")
    torch.manual_seed(seed)
    return gpt.GPT(gpt.Config(**cfg), table).to(device=device, dtype=dtype)


def global_batches(cfg: dict, global_batch: int, steps: int, device, seed: int = 0):
    """The (inputs, targets) of every step, the same in every process: lesson 10's random windows of its text."""
    gpt = gpt_module()
    return gpt.batches(gpt.text_bytes(device), global_batch, cfg["seq_len"], steps, seed)


def symmetric_hook(ext, buffer) -> Callable:
    """A DDP communication hook that averages each bucket of gradients with the lesson's all_reduce2 kernel over
    `buffer` (a kernels.distributed.SymmetricBuffer) instead of NCCL.

    On a GPU the kernel runs on a stream of its own, as NCCL's do: the backward goes on computing the gradients of
    the earlier layers while a bucket is summed (on the backward's stream, the kernel would wait for it, and it for
    the kernel, and each bucket's barrier between the ranks would stall both). The side stream first waits for the
    backward's stream (the bucket's gradients are written there), and the future is a CUDA future: set on the side
    stream, it makes whoever waits for it (DDP, before the optimizer) wait for that stream, not for the CPU."""
    side = torch.cuda.Stream(device=buffer.buffer.device) if buffer.buffer.is_cuda else None

    def reduce(grads: torch.Tensor) -> torch.Tensor:
        # a bucket larger than the buffer (DDP's first one can hold every parameter) goes in slices of the buffer's
        # size, each a multiple of 16 bytes so that every slice stays 16-byte aligned
        cap = buffer.buffer.numel() // grads.element_size() // 16 * 16
        for start in range(0, grads.numel(), cap):
            part = grads[start:start + cap]
            ext.all_reduce2(part, part, *buffer.args())
        return grads.div_(buffer.world_size)

    def hook(state, bucket):  # no annotations: DDP compares them with dist.GradBucket and refuses a string
        grads = bucket.buffer()
        if side is None:
            fut = torch.futures.Future()
            fut.set_result(reduce(grads))
            return fut
        side.wait_stream(torch.cuda.current_stream(grads.device))
        with torch.cuda.stream(side):
            fut = torch.futures.Future(devices=[grads.device])
            fut.set_result(reduce(grads))
        return fut
    return hook


@contextlib.contextmanager
def compiled_autograd() -> Iterator[Callable[[torch.Tensor], None]]:
    """Inside: DDP models built (by wrap) and compiled use DDP's Python reducer, and the backward function this
    yields runs loss.backward() with compiled autograd (the backward's graph compiled, its all-reduces in it).
    On leaving, the settings it and DDP's Python reducer change are put back (dynamo's optimize_ddp, inductor's
    _fuse_ddp_communication and _fuse_ddp_bucket_size); DDP's module stays on dynamo's list of modules to inline."""
    import torch._inductor.config as inductor
    from torch._dynamo import compiled_autograd as ca

    before = (torch._dynamo.config.optimize_ddp, inductor._fuse_ddp_communication, inductor._fuse_ddp_bucket_size)
    torch._dynamo.config.optimize_ddp = "python_reducer"  # read when DDP is built and when dynamo compiles it

    def backward(loss: torch.Tensor) -> None:
        with ca._enable(lambda graph: torch.compile(graph, fullgraph=True)):
            loss.backward()
    try:
        yield backward
    finally:
        torch._dynamo.config.optimize_ddp = before[0]
        inductor._fuse_ddp_communication, inductor._fuse_ddp_bucket_size = before[1:]
        torch._dynamo.reset()


def wrap(route: str, model, device, bucket_mb: float):
    """The model as `route` trains it, and the symmetric buffer it holds (None for NCCL's and gloo's routes).
    "ddp-compiled" is built inside compiled_autograd(), whose backward it needs."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    ids = [device.index] if device.type == "cuda" else None
    if route == "ddp":
        return DDP(model, device_ids=ids, bucket_cap_mb=bucket_mb), None
    if route == "ddp-compiled":
        if torch._dynamo.config.optimize_ddp != "python_reducer":
            raise RuntimeError('the "ddp-compiled" route is built inside lesson14_data_parallel.compiled_autograd()')
        return torch.compile(DDP(model, device_ids=ids, bucket_cap_mb=bucket_mb)), None
    if route == "ddp-ours":
        from ..build import load
        from ..distributed import SymmetricBuffer

        ddp = DDP(model, device_ids=ids, bucket_cap_mb=bucket_mb)
        # a bucket holds at least one parameter whole: the buffer must take the largest parameter too
        largest = max(p.numel() * p.element_size() for p in model.parameters())
        buffer = SymmetricBuffer(max(int(bucket_mb * 2**20), largest) + 2**20)
        ext = load("14", "cuda" if device.type == "cuda" else "sim", quiet=True)
        ddp.register_comm_hook(None, symmetric_hook(ext, buffer))
        return ddp, buffer
    if route == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for block in model.blocks:
            fully_shard(block)
        return fully_shard(model), None
    raise ValueError(f"unknown route {route!r}: expected one of {', '.join(ROUTES)}")


def train_rank(rank: int, world: int, route: str, kernels: str, cfg: dict, global_batch: int, steps: int,
               bucket_mb: float = 25.0) -> list[float]:
    """One rank's part of `steps` data-parallel steps (run in every rank at once, torch.distributed initialised):
    the mean loss over the whole global batch at every step, the same list on every rank."""
    if global_batch % world:
        raise ValueError(f"the global batch ({global_batch}) must split evenly over {world} ranks")
    device = torch.device("cuda", rank) if dist.get_backend() == "nccl" else torch.device("cpu")
    gpt, rows = gpt_module(), global_batch // world
    losses = []
    with compiled_autograd() if route == "ddp-compiled" else contextlib.nullcontext(torch.Tensor.backward) as backward:
        model = model_for(kernels, cfg, device)
        wrapped, buffer = wrap(route, model, device, bucket_mb)
        opt = torch.optim.AdamW(wrapped.parameters(), lr=LR, weight_decay=0.1)
        for x, y in global_batches(cfg, global_batch, steps, device):
            mine = slice(rank * rows, (rank + 1) * rows)
            loss = gpt.loss_of(wrapped, x[mine], y[mine])
            opt.zero_grad(set_to_none=True)
            backward(loss)  # DDP averages the gradients over the ranks here
            opt.step()
            total = loss.detach().clone()
            dist.all_reduce(total)  # the global batch's mean loss, for the curve (every rank's rows count alike)
            losses.append(total / world)
    if buffer is not None:
        dist.barrier()
        buffer.close()
    return [float(v) for v in torch.stack(losses).cpu()]


def train_alone(kernels: str, cfg: dict, global_batch: int, steps: int, device=None) -> list[float]:
    """The same steps in one process on the whole global batch: the curve the ranks together must reproduce."""
    device = torch.device(device or "cpu")
    model = model_for(kernels, cfg, device)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.1)
    gpt, losses = gpt_module(), []
    for x, y in global_batches(cfg, global_batch, steps, device):
        loss = gpt.loss_of(model, x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return [float(v) for v in torch.stack(losses).cpu()]
