"""Where a training step's time goes: torch.profiler over a few steps, its ops grouped into what the lesson swaps.

    prof = profile_steps(step, trace="../../build/lesson10/eager.json")
    ms = time_by_part(prof, on_gpu)        # {"matmul": 1.9, "attention: scale, mask, softmax": 0.8, ...} per step
    print(amdahl(ms_eager, ms_custom))     # the end-to-end speed-up the profiles predict

On a GPU an op's time is the device time of the kernels it launched; on the simulator it is the op's own
CPU time (a simulated kernel runs on the CPU, so its figures say nothing about a GPU).

The swappable parts are found by the profiler ranges gpt.py opens around them ("part: <part>"): an op
belongs to the innermost range it ran in, and an op of the backward to the range that ran the forward op
whose gradient it computes (autograd links the two by a sequence number). Only what ran outside every range
is grouped by its name (matmul, optimizer, other).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile, schedule

RANGE = "part: "  # the prefix of gpt.py's ranges around the swappable parts
SWAPPED = ("attention: scale, mask, softmax", "layernorm", "bias + GELU")  # what the custom ops replace
# The parts of a step outside every range, by words in an op's name (the first part whose word occurs wins).
PARTS = tuple((p, ()) for p in SWAPPED) + (
    ("matmul", ("aten::mm", "aten::addmm", "aten::bmm")),
    ("optimizer", ("adam", "_foreach")),
)
OTHER = "other (adds, copies, embedding, loss)"
BACKWARD = "autograd::engine::evaluate_function: "  # the event of one backward node, its ops under it
WAIT, WARMUP, ACTIVE = 1, 1, 3  # the profiler's schedule, in steps


def profile_steps(step: Callable[[], object], on_gpu: bool, trace: str | Path | None = None) -> profile:
    """Run step() WAIT + WARMUP + ACTIVE times under torch.profiler, recording only the ACTIVE ones; the first
    steps (the wait and the warm-up) absorb one-time costs. With `trace`, a Chrome/Perfetto trace goes there."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])

    def save(p):
        if trace is not None:
            Path(trace).parent.mkdir(parents=True, exist_ok=True)
            p.export_chrome_trace(str(trace))

    with profile(activities=activities, schedule=schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE),
                 on_trace_ready=save) as prof:
        for _ in range(WAIT + WARMUP + ACTIVE):
            step()
            prof.step()
    if on_gpu:
        torch.cuda.synchronize()
    return prof


def part_of(name: str) -> str:
    """The part of the step an op outside every range belongs to, by its name."""
    lower = name.lower()
    for part, words in PARTS:
        if any(w in lower for w in words):
            return part
    return OTHER


def _named_part(e) -> str:
    """The part named by event e or its innermost ancestor that names one (an optimizer's adds run under
    Optimizer.step, a matmul's bias copy under aten::addmm), else OTHER."""
    while e is not None:
        if (part := part_of(e.name)) != OTHER:
            return part
        e = e.cpu_parent
    return OTHER


def _ops(prof: profile) -> list:
    """The recorded steps' CPU events (ops, ranges, backward nodes), without the ProfilerStep markers."""
    return [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CPU
            and not e.name.startswith("ProfilerStep")]


def _range_of(e) -> str | None:
    """The part of the innermost "part: " range around event e (e itself included), or None."""
    while e is not None:
        if e.name.startswith(RANGE):
            return e.name[len(RANGE):]
        e = e.cpu_parent
    return None


def parts_of_events(prof: profile) -> list[tuple[object, str]]:
    """(event, part) for every recorded CPU event: its innermost range; in the backward, the range of the
    forward op that made the backward node it runs under; outside both, by its name or its caller's
    (_named_part)."""
    ops = _ops(prof)
    # A forward op records the sequence number of the autograd node it makes; an op that makes none records the
    # next one's. So a node belongs to the last op (in time) that recorded its number.
    last: dict[tuple[int, int], object] = {}
    for e in sorted(ops, key=lambda e: e.time_range.start):
        if e.sequence_nr >= 0 and not e.name.startswith(BACKWARD) and _backward_node(e) is None:
            last[(e.thread, e.sequence_nr)] = e
    node_part = {k: _range_of(e) for k, e in last.items()}
    parts = []
    for e in ops:
        part = _range_of(e)
        node = _backward_node(e)
        if part is None and node is not None:
            part = node_part.get((node.fwd_thread, node.sequence_nr))
        parts.append((e, part or _named_part(e)))
    return parts


def _backward_node(e):
    """The backward-node event that event e runs under (e itself included), or None in the forward."""
    while e is not None:
        if e.name.startswith(BACKWARD):
            return e
        e = e.cpu_parent
    return None


def _own_us(e, on_gpu: bool) -> float:
    """Event e's own time in microseconds: on a GPU the kernels it launched itself (not the GPU-side copy of a
    range, which carries the range's own name and spans the kernels of the ops inside it), on the simulator
    its CPU time less its children's."""
    if not on_gpu:
        return e.self_cpu_time_total
    return sum(k.duration for k in e.kernels if k.name != e.name)


def time_by_part(prof: profile, on_gpu: bool) -> dict[str, float]:
    """Milliseconds per step in each part: each event's own device time on a GPU (the kernels it launched
    itself), its own CPU time on the simulator, so that nested events are not counted twice."""
    ms: dict[str, float] = {p: 0.0 for p, _ in PARTS} | {OTHER: 0.0}
    for e, part in parts_of_events(prof):
        ms[part] += _own_us(e, on_gpu) / 1000 / ACTIVE
    return ms


def total_ms(prof: profile, on_gpu: bool) -> float:
    """Milliseconds per step that time_by_part's parts must add up to, counted another way: on a GPU every
    kernel, copy and fill on the device (not the ranges' GPU-side copies), on the simulator every op's own CPU
    time (key_averages's sums)."""
    if on_gpu:
        us = sum(e.self_device_time_total for e in prof.events()
                 if e.device_type != torch.autograd.DeviceType.CPU and not e.is_user_annotation)
    else:
        us = sum(e.self_cpu_time_total for e in prof.key_averages() if not e.key.startswith("ProfilerStep"))
    return us / 1000 / ACTIVE


def amdahl(before: dict[str, float], after: dict[str, float], swapped=SWAPPED) -> float:
    """The end-to-end speed-up predicted from two profiles: only the swapped parts change, the rest stays."""
    total = sum(before.values())
    changed = sum(before[p] for p in swapped) - sum(after[p] for p in swapped)
    return total / (total - changed)


def plot_parts(profiles: dict[str, dict[str, float]], unit: str, path: str | Path | None = None):
    """Stacked horizontal bars, one per profile, of the milliseconds per step in each part."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 0.6 + 0.5 * len(profiles)))
    names = list(profiles)
    left = [0.0] * len(names)
    for part in [p for p, _ in PARTS] + [OTHER]:
        widths = [profiles[n][part] for n in names]
        ax.barh(names, widths, left=left, label=part)
        left = [a + b for a, b in zip(left, widths)]
    ax.set_xlabel(f"ms per training step ({unit})")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=3, fontsize=8, frameon=False)
    ax.invert_yaxis()
    fig.tight_layout()
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120, bbox_inches="tight")
    return fig


CPU_LANE = ("cpu_op", "cuda_runtime", "cuda_driver")  # trace categories drawn on the CPU lane
GPU_LANE = ("kernel", "gpu_memcpy", "gpu_memset")  # and on the GPU lane


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Overlapping (start, end) spans merged: the time something ran, each moment once."""
    merged: list[list[float]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


def plot_trace(trace: str | Path, path: str | Path | None = None, title: str = ""):
    """A timeline of a trace that profile_steps exported: the time the CPU spent in ops (and CUDA calls) on one
    lane, the time the GPU ran kernels on the other, the recorded steps' boundaries as dotted lines. Where the
    GPU lane has gaps while the CPU lane is busy, the GPU waits for the CPU to queue its work."""
    import json

    import matplotlib.pyplot as plt

    events = [e for e in json.loads(Path(trace).read_text())["traceEvents"] if e.get("ph") == "X" and "dur" in e]
    steps: dict[str, float] = {}  # a step's marker is in the trace once per lane it has events on: the earliest
    for e in events:
        if e.get("name", "").startswith("ProfilerStep"):
            steps[e["name"]] = min(steps.get(e["name"], e["ts"]), e["ts"])
    lanes = {"CPU": _union([(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") in CPU_LANE]),
             "GPU": _union([(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") in GPU_LANE])}
    if not lanes["CPU"]:
        raise ValueError(f"{trace} has no CPU ops: expected a trace that profile_steps exported")
    t0 = min(a for spans in lanes.values() for a, _ in spans)
    t1 = max(b for spans in lanes.values() for _, b in spans)
    fig, ax = plt.subplots(figsize=(9, 1.9))
    for y, (lane, colour) in enumerate((("CPU", "tab:blue"), ("GPU", "tab:green"))):
        spans = lanes[lane]
        ax.broken_barh([((a - t0) / 1e3, (b - a) / 1e3) for a, b in spans], (y - 0.35, 0.7), color=colour,
                       linewidth=0)
        busy = sum(b - a for a, b in spans) / (t1 - t0)
        ax.text(1.005, y, f"busy {busy:.0%}", transform=ax.get_yaxis_transform(), va="center", fontsize=8)
    for ts in steps.values():
        ax.axvline((ts - t0) / 1e3, color="grey", linestyle=":", linewidth=0.8)
    ax.set_yticks([0, 1], ["CPU: ops", "GPU: kernels"])
    ax.set_ylim(-0.6, 1.6)
    ax.set_xlim(0, (t1 - t0) / 1e3)
    ax.invert_yaxis()
    ax.set_xlabel(f"ms ({len(steps)} recorded steps, dotted lines where each begins)")
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=100)
    return fig


def count_ops(prof: profile, name: str) -> int:
    """How many times an op ran per recorded step (e.g. aten::item, the call that waits for the GPU)."""
    return sum(e.count for e in prof.key_averages() if e.key == name) // ACTIVE
