"""What DDP's buckets buy: one training step of each route on two GPUs, seen through the profiler's trace.

    ranks = run_ranks(trace_rank, 2, args=(cfg, 16), backend="nccl")   # every rank's {route: [Span, ...]}
    spans = least_waiting(ranks, "peer to peer")   # each route from the rank that waited least in its collectives
    for route, s in spans.items():
        print(describe(route, s))      # step, backward and all-reduce times, and how much of it the step waits for
    plot(spans)                        # the timeline: compute and communication, one pair of lanes per route

A step has three parts on the GPU: the forward, the backward (its kernels are launched by autograd's own thread,
which is how the trace tells them apart) and what comes after the backward (the optimizer). The gradients must
be summed over the ranks before the optimizer runs. The three routes traced:

    AFTER   every gradient in one flat tensor, one NCCL all-reduce after the backward: the simplest way, and the
            whole all-reduce adds to the step
    BUCKETS DDP: the gradients in buckets of 25 MB, each all-reduced (by NCCL, on a stream of its own) as soon as
            the backward has produced all of its gradients, while the backward goes on with the earlier layers;
            only the last bucket's all-reduce (the first layers' gradients, produced last) is left after it
    OURS    the same DDP with the lesson's all_reduce2 kernel as its communication hook, on a side stream

"exposed" is the time in which a communication kernel runs and no compute kernel does: the part of the
communication the step waits for (DDP's last kernels, which copy the averaged buckets back into the gradients, are
launched by autograd's thread too, and wait for the all-reduce: "the end of the backward" would hide it). How much there is to hide depends on the link: the benchmark traces the
steps twice, peer to peer (NVLink on the recording's machine) and with NCCL told not to use it
(NCCL_P2P_DISABLE=1: through the host's memory, as between GPUs without a direct link). Compute kernels that follow
one another within GAP_US count as one busy span, so that the gaps of launching one kernel after another are not
counted as exposed. On the simulator there is no GPU trace to take; the notebook shows the one
recorded on two GPUs (kernels/benchmarks/recorded/lesson14_overlap.csv).
"""
from __future__ import annotations

import csv
import json
import tempfile
from pathlib import Path
from typing import NamedTuple

import torch

AFTER, BUCKETS, OURS = "all-reduce after the backward", "DDP, 25 MB buckets", "DDP, all_reduce2 hook"
ROUTES = (AFTER, BUCKETS, OURS)
FORWARD, BACKWARD, OPTIMIZER, COMM = "forward", "backward", "after the backward", "all-reduce"
GPU_WORK = ("kernel", "gpu_memcpy", "gpu_memset")  # a trace's categories of work on the GPU
LAUNCHES = ("cuda_runtime", "cuda_driver")          # and of the CPU calls that queued it
FIELDS = ("route", "phase", "start_us", "end_us", "name")
CSV = "lesson14_overlap.csv"  # the benchmark's file of spans, in its output folder and among the recorded figures


class Span(NamedTuple):
    phase: str       # FORWARD, BACKWARD, OPTIMIZER (compute) or COMM
    start_us: float  # from the step's first kernel
    end_us: float
    name: str = ""   # a communication kernel's name; compute spans are merged and nameless


def is_comm(name: str) -> bool:
    """Whether a kernel sums over the ranks: NCCL's kernels and the lesson's all-reduce kernels."""
    return "nccl" in name.lower() or "all_reduce_kernel" in name


def spans_from_trace(events: list[dict]) -> list[Span]:
    """The GPU's work in a Chrome trace's events (one step): every communication kernel as a span, the compute
    merged into spans per phase. A compute kernel's phase is found from the CPU thread that launched it (the
    trace links a launch and its kernel by a correlation number): autograd's thread launches the backward, the
    thread that launched the step's first kernel the forward and, once the backward has begun, what follows it."""
    work = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") in GPU_WORK and "dur" in e),
                  key=lambda e: e["ts"])
    if not work:
        raise ValueError("the trace has no GPU work: expected a trace taken with ProfilerActivity.CUDA on a GPU")
    thread = {e["args"]["correlation"]: e["tid"] for e in events
              if e.get("cat") in LAUNCHES and "correlation" in e.get("args", {})}
    main = next((thread[c] for e in work if (c := e.get("args", {}).get("correlation")) in thread), None)
    t0, spans, started = work[0]["ts"], [], False
    for e in work:
        start, end = e["ts"] - t0, e["ts"] + e["dur"] - t0
        if is_comm(e["name"]):
            spans.append(Span(COMM, start, end, e["name"].split("(")[0].split("<")[0].removeprefix("void ")))
            continue
        by = thread.get(e.get("args", {}).get("correlation"))
        phase = BACKWARD if by is not None and by != main else OPTIMIZER if started else FORWARD
        started |= phase == BACKWARD
        spans.append(Span(phase, start, end))
    return merged(spans)


GAP_US = 5.0  # compute kernels of one phase closer than this are kept as one span (the plot cannot show less)


def merged(spans: list[Span], gap_us: float = GAP_US) -> list[Span]:
    """The spans with each phase's compute kernels that follow one another within gap_us joined into one span;
    communication spans kept one by one. The step's length and its backward's do not change; the exposed time can
    only shrink, by less than gap_us per gap that a communication kernel falls in."""
    out: list[Span] = []
    latest: dict[str, int] = {}  # phase -> index in out of its latest compute span
    for s in sorted(spans, key=lambda s: s.start_us):
        i = latest.get(s.phase)
        if s.phase != COMM and i is not None and s.start_us <= out[i].end_us + gap_us:
            out[i] = out[i]._replace(end_us=max(out[i].end_us, s.end_us))
            continue
        if s.phase != COMM:
            latest[s.phase] = len(out)
        out.append(s)
    return out


def _busy(spans: list[Span]) -> list[tuple[float, float]]:
    """When some compute kernel ran: the compute spans' union, as (start, end) in order."""
    out: list[list[float]] = []
    for s in sorted((s for s in spans if s.phase != COMM), key=lambda s: s.start_us):
        if out and s.start_us <= out[-1][1]:
            out[-1][1] = max(out[-1][1], s.end_us)
        else:
            out.append([s.start_us, s.end_us])
    return [(a, b) for a, b in out]


def exposed_us(spans: list[Span]) -> float:
    """The microseconds in which a communication kernel ran and no compute kernel did: the communication that the
    step waits for (counted once where two communication kernels overlap)."""
    busy = _busy(spans)
    comm = _busy([s._replace(phase=FORWARD) for s in spans if s.phase == COMM])  # the union of the communication
    alone = 0.0
    for a, b in comm:
        covered = sum(max(0.0, min(b, y) - max(a, x)) for x, y in busy)
        alone += (b - a) - covered
    return alone


def summary(spans: list[Span]) -> dict[str, float]:
    """Milliseconds of one step: its length, the backward's (first to last backward kernel), the all-reduce
    kernels' (added up), and the exposed part (exposed_us: communication while no compute kernel runs)."""
    backward = [s for s in spans if s.phase == BACKWARD]
    comm = [s for s in spans if s.phase == COMM]
    if not backward:
        raise ValueError("no backward kernels in these spans: expected one step of an eager backward, whose kernels "
                         "autograd's own thread launches (compiled autograd launches them from the calling thread)")
    bw_end = max(s.end_us for s in backward)
    return {"step": max(s.end_us for s in spans) / 1e3,
            "backward": (bw_end - min(s.start_us for s in backward)) / 1e3,
            "all-reduce": sum(s.end_us - s.start_us for s in comm) / 1e3,
            "all-reduce calls": float(len(comm)),
            "exposed": exposed_us(spans) / 1e3}


def describe(route: str, spans: list[Span]) -> str:
    s = summary(spans)
    return (f"{route}: step {s['step']:.1f} ms, backward {s['backward']:.1f} ms, {s['all-reduce calls']:.0f} "
            f"all-reduce kernel(s) {s['all-reduce']:.2f} ms, exposed (no compute beside it) {s['exposed']:.2f} ms")


def write_csv(spans: dict[str, list[Span]], path: str | Path, device: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow([*FIELDS, "device"])
        for route, ss in spans.items():
            w.writerows([route, s.phase, f"{s.start_us:.2f}", f"{s.end_us:.2f}", s.name, device] for s in ss)


def read_csv(path: str | Path) -> tuple[dict[str, list[Span]], str]:
    """The spans of every route in a CSV that write_csv wrote, and the GPU that made them."""
    spans: dict[str, list[Span]] = {}
    device = ""
    with Path(path).open(newline="") as fh:
        for r in csv.DictReader(fh):
            spans.setdefault(r["route"], []).append(Span(r["phase"], float(r["start_us"]), float(r["end_us"]),
                                                         r["name"]))
            device = r["device"]
    return spans, device


COLOURS = {FORWARD: "tab:blue", BACKWARD: "tab:orange", OPTIMIZER: "tab:green", COMM: "tab:red"}


def plot(spans: dict[str, list[Span]], path: str | Path | None = None, show: bool = True, device: str = ""):
    """Two lanes per route, one step each from its first kernel: the compute kernels coloured by phase, and the
    all-reduce kernels; a line at the end of the backward, and the exposed time written beside it."""
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    size = (10, 0.9 + 0.8 * len(spans))
    fig = plt.figure(figsize=size) if show else Figure(figsize=size)  # a file alone: no backend switched
    ax = fig.subplots()
    ticks, labels = [], []
    for i, (route, ss) in enumerate(spans.items()):
        y = 2.5 * i
        for lane, phases in ((0, (FORWARD, BACKWARD, OPTIMIZER)), (1, (COMM,))):
            for phase in phases:
                ax.broken_barh([(s.start_us / 1e3, (s.end_us - s.start_us) / 1e3) for s in ss if s.phase == phase],
                               (y + lane - 0.4, 0.8), color=COLOURS[phase], linewidth=0)
        s = summary(ss)
        bw_end = max(x.end_us for x in ss if x.phase == BACKWARD) / 1e3
        ax.plot([bw_end, bw_end], [y - 0.5, y + 1.5], color="black", linewidth=0.8, linestyle=":")
        ax.text(s["step"], y + 1, f"  exposed {s['exposed']:.2f} ms", va="center", fontsize=8)
        ticks += [y, y + 1]
        labels += [f"{route}: compute", "all-reduce"]
    ax.set_yticks(ticks, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ms from the step's first kernel (dotted: the end of the backward)")
    ax.set_title("One training step of two ranks" + (f", {device}" if device else ""), fontsize=9)
    ax.legend(handles=[Patch(color=c, label=p) for p, c in COLOURS.items()], loc="lower center",
              bbox_to_anchor=(0.5, -0.55 if len(spans) < 3 else -0.35), ncol=4, fontsize=8, frameon=False)
    fig.tight_layout()
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110, bbox_inches="tight")
    if show:
        plt.show()
        plt.close(fig)
    return fig


def show_recorded(folder: str | Path | None = None, show: bool = True) -> dict[str, list[Span]]:
    """The recorded trace's summaries and timeline (for learners without two GPUs), or those the benchmark wrote
    into `folder` (its output folder, build/bench)."""
    from ..benchmarks import RECORDED

    spans, device = read_csv(Path(folder or RECORDED) / CSV)
    print(f"one training step, two ranks, {'measured' if folder else 'recorded'} on {device}:")
    for route, ss in spans.items():
        print("  " + describe(route, ss))
    plot(spans, show=show, device=device)
    return spans


def _all_reduce_after(model, world: int):
    """Sum the gradients over the ranks after the backward: all of them in one flat tensor, one all-reduce."""
    import torch.distributed as dist

    grads = [p.grad for p in model.parameters()]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat.div_(world)
    torch._foreach_copy_(grads, [v.view_as(g) for v, g in zip(flat.split([g.numel() for g in grads]), grads)])


def least_waiting(ranks: list[dict[str, list[Span]]], link: str) -> dict[str, list[Span]]:
    """Each route's spans from the rank whose communication kernels took least time, labelled "<link>: <route>
    (rank r)". A collective's kernel starts when its own rank gets there and ends when every rank has: on a rank
    that arrived early, it includes the wait for the others, and only the last to arrive shows the transfer."""
    out = {}
    for route in ranks[0]:
        r = min(range(len(ranks)), key=lambda r: summary(ranks[r][route])["all-reduce"])
        out[f"{link}: {route} (rank {r})"] = ranks[r][route]
    return out


def trace_rank(rank: int, world: int, cfg: dict, per_gpu_batch: int, routes: tuple[str, ...] = ROUTES,
               bucket_mb: float = 25.0, dtype=torch.bfloat16) -> dict[str, list[Span]]:
    """One profiled training step of each route (after three unprofiled ones), in every rank on GPU `rank`:
    {route: spans}. The model is lesson 10's with eager PyTorch, trained by AdamW."""
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    from . import lesson14_data_parallel as dp

    gpt, device = dp.gpt_module(), torch.device("cuda", rank)
    data = list(dp.global_batches(cfg, per_gpu_batch * world, 4, device))
    rows = slice(rank * per_gpu_batch, (rank + 1) * per_gpu_batch)
    out = {}
    for route in routes:
        model = dp.model_for("eager", cfg, device, dtype)
        wrapped, buffer = (model, None) if route == AFTER else \
            dp.wrap("ddp" if route == BUCKETS else "ddp-ours", model, device, bucket_mb)
        opt = torch.optim.AdamW(model.parameters(), lr=dp.LR, fused=True)

        def step(x, y):
            loss = gpt.loss_of(wrapped, x[rows], y[rows])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if route == AFTER:
                _all_reduce_after(model, world)
            opt.step()
        for x, y in data[:3]:
            step(x, y)
        torch.cuda.synchronize()
        dist.barrier()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            step(*data[3])
            torch.cuda.synchronize()
        with tempfile.TemporaryDirectory() as tmp:
            trace = Path(tmp) / "trace.json"
            prof.export_chrome_trace(str(trace))
            out[route] = spans_from_trace(json.loads(trace.read_text())["traceEvents"])
        dist.barrier()
        if buffer is not None:
            buffer.close()
        del model, wrapped, opt
    return out
