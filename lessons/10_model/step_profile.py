"""Where a training step's time goes: torch.profiler over a few steps, its ops grouped into what the lesson swaps.

    prof = profile_steps(step, trace="../../build/lesson10/eager.json")
    ms = time_by_part(prof, on_gpu)        # {"matmul": 1.9, "attention: scale, mask, softmax": 0.8, ...} per step
    print(amdahl(ms_eager, ms_custom))     # the end-to-end speed-up the profiles predict

On a GPU an op's time is the device time of the kernels it launched; on the simulator it is the op's own
CPU time (a simulated kernel runs on the CPU, so its figures say nothing about a GPU).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile, schedule

# The parts of a step, by words in an op's name (the first part whose word occurs wins).
PARTS = (
    ("attention: scale, mask, softmax", ("softmax", "masked_fill")),
    ("layernorm", ("layer_norm", "layernorm")),
    ("bias + GELU", ("gelu",)),
    ("matmul", ("aten::mm", "aten::addmm", "aten::bmm")),
    ("optimizer", ("adam", "_foreach")),
)
OTHER = "other (adds, copies, embedding, loss)"
SWAPPED = ("attention: scale, mask, softmax", "layernorm", "bias + GELU")  # what the custom ops replace
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
    """The part of the step an op belongs to, by its name."""
    lower = name.lower()
    for part, words in PARTS:
        if any(w in lower for w in words):
            return part
    return OTHER


def time_by_part(prof: profile, on_gpu: bool) -> dict[str, float]:
    """Milliseconds per step in each part: the ops' own device time on a GPU (their own CPU time on the
    simulator), so that nested ops are not counted twice."""
    ms: dict[str, float] = {p: 0.0 for p, _ in PARTS} | {OTHER: 0.0}
    for e in prof.key_averages():
        if e.device_type != torch.autograd.DeviceType.CPU or e.key.startswith("ProfilerStep"):
            continue  # ops only: a GPU kernel's time is counted in the op that launched it
        own_us = e.self_device_time_total if on_gpu else e.self_cpu_time_total
        ms[part_of(e.key)] += own_us / 1000 / ACTIVE
    return ms


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


def count_ops(prof: profile, name: str) -> int:
    """How many times an op ran per recorded step (e.g. aten::item, the call that waits for the GPU)."""
    return sum(e.count for e in prof.key_averages() if e.key == name) // ACTIVE
