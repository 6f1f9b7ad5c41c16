"""Nsight Compute on one kernel of a lesson: `make profile LESSON=04 KERNEL=scale_add4` on a GPU.

KERNEL names a variant (an op) of the lesson's reference file, kernels/reference/NN_*.cu. A child
process builds inputs of a realistic size and calls that op WARMUP + 1 times; `ncu` watches it,
profiles only the file's own kernels (--kernel-name regex of the kernels defined in the file, so
PyTorch's kernels that make the inputs are left out), skips the warm-up launches (the first pays
for loading the module, cold caches and clocks) and profiles one launch with the SpeedOfLight,
Occupancy and LaunchStats sections. The report is kept as build/profile/NN_KERNEL.ncu-rep (open
it with `ncu-ui`), and a short summary is read back from it with `ncu --import --csv --page details`.
Times under ncu differ from a timeline: ncu runs one kernel at a time, replays it once per pass
with caches flushed, and locks the clocks.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import os
import re
import subprocess
import sys
from pathlib import Path

from ..build.toolchain import child_env, find_cuda_tool
from ..gates import shortfall
from ..paths import BUILD, ROOT, reference_file

WARMUP = 3
SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats")
_UNITS = {"byte": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "kibyte": 2**10, "mibyte": 2**20,
          "nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0,
          # the short forms newer ncu versions print (an H100 run with CUDA 13.0 gave Duration in "us")
          "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "kib": 2**10, "mib": 2**20, "ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


# ---------------------------------------------------------------------------------------------
# Workloads: the variants each lesson declares (kernels/lessons/lessonNN.py), at the lesson's GPU_SIZE.

def workloads(lesson: str) -> dict[str, object]:
    """The variants Nsight Compute can profile in a lesson, by name ({} for a lesson that declares none)."""
    from .. import lessons

    try:
        return {v.name: v for v in lessons.variants(lesson)}
    except (KeyError, ValueError):
        return {}


def workload_args(lesson: str, kernel: str, device: str, size=None) -> tuple:
    """The arguments the profiled child passes to the variant: fresh inputs at the lesson's GPU_SIZE (or
    `size`), in the variant's first dtype."""
    from .. import lessons

    v = workloads(lesson)[kernel]
    return v.args(lessons.module(lesson).GPU_SIZE if size is None else size, v.dtype, device)


_GLOBAL = re.compile(r"__global__\s+(?:void\s+)?(?:__launch_bounds__\s*\([^()]*(?:\([^()]*\)[^()]*)*\)\s*)?"
                     r"(?:void\s+)?(\w+)\s*\(")


def kernel_names(source: str) -> list[str]:
    """The names of the __global__ functions defined in a .cu file's text, in order, once each."""
    return list(dict.fromkeys(_GLOBAL.findall(source)))


def kernel_regex(names: list[str]) -> str:
    """ncu's --kernel-name filter for these kernels (a template kernel's name goes on with <...>)."""
    return "regex:^(" + "|".join(re.escape(n) for n in names) + r")(<|$|\()"


def check_request(lesson: str, kernel: str) -> str | None:
    """Why `make profile LESSON=lesson KERNEL=kernel` cannot run (None when it can)."""
    from .. import lessons

    ops = workloads(lesson)
    if not ops:
        return (f"KERNEL= profiles a variant of lessons {', '.join(lessons.with_variants())} with Nsight Compute; "
                f"lesson {lesson} has no workload for it")
    if kernel not in ops:
        return f"lesson {lesson} has no variant {kernel!r}; KERNEL= is one of: {', '.join(ops)}"
    line = shortfall(kernel, ops[kernel].needs, ops[kernel].dtype)
    if line:
        return line + ": Nsight Compute can profile it only on a GPU that has it"
    return None


def find_ncu() -> str | None:
    """The ncu executable: in $CUDA_HOME/bin, else on PATH."""
    return find_cuda_tool("ncu")


def report_path(lesson: str, kernel: str) -> Path:
    return BUILD / "profile" / f"{lesson}_{kernel}.ncu-rep"


def ncu_command(ncu: str, lesson: str, kernel: str, regex: str, report: Path) -> list[str]:
    """The ncu command line that profiles one launch of the op after the warm-up ones."""
    sections = [a for s in SECTIONS for a in ("--section", s)]
    return [ncu, "--kernel-name", regex, "--launch-skip", str(WARMUP), "--launch-count", "1", *sections,
            "--export", str(report.with_suffix("")), "--force-overwrite",
            sys.executable, "-m", "kernels.tools.nsight", "--workload", lesson, kernel]


# ---------------------------------------------------------------------------------------------
# Reading the report back.

@dataclasses.dataclass
class Summary:
    """The figures `make profile` prints for one profiled launch (None where the report lacks one)."""

    kernel: str
    grid: str = ""
    block: str = ""
    duration_s: float | None = None
    dram_pct: float | None = None         # DRAM throughput, % of peak
    memory_pct: float | None = None       # the busiest memory unit, % of peak
    compute_pct: float | None = None      # SM throughput, % of peak
    achieved_occupancy: float | None = None
    theoretical_occupancy: float | None = None
    registers: float | None = None
    static_smem: float | None = None      # bytes per block
    dynamic_smem: float | None = None

    def __str__(self) -> str:
        def pct(v):
            return "?" if v is None else f"{v:.1f} %"

        def size(v):
            return "?" if v is None else (f"{v / 1024:.1f} KiB" if v >= 1024 else f"{v:.0f} B")

        dur = "?" if self.duration_s is None else (f"{self.duration_s * 1e3:.3f} ms" if self.duration_s >= 1e-3
                                                    else f"{self.duration_s * 1e6:.1f} us")
        return "\n".join([
            f"{self.kernel}  grid {self.grid}  block {self.block}",
            f"  duration                  {dur}",
            f"  DRAM throughput           {pct(self.dram_pct)} of peak   (memory {pct(self.memory_pct)}, "
            f"compute {pct(self.compute_pct)})",
            f"  achieved occupancy        {pct(self.achieved_occupancy)}   (theoretical {pct(self.theoretical_occupancy)})",
            f"  registers per thread      {'?' if self.registers is None else f'{self.registers:.0f}'}",
            f"  shared memory per block   {size(self.static_smem)} static + {size(self.dynamic_smem)} dynamic"])


# Metric names of the details page -> Summary field
_DETAILS = {"Duration": "duration_s", "DRAM Throughput": "dram_pct", "Memory Throughput": "memory_pct",
            "Compute (SM) Throughput": "compute_pct", "Achieved Occupancy": "achieved_occupancy",
            "Theoretical Occupancy": "theoretical_occupancy", "Registers Per Thread": "registers",
            "Static Shared Memory Per Block": "static_smem", "Dynamic Shared Memory Per Block": "dynamic_smem"}


def _value(text: str, unit: str) -> float | None:
    """A details-page value in base units (bytes, seconds); percentages and counts as they are."""
    try:
        v = float(text.replace(",", "").strip())
    except ValueError:
        return None
    return v * _UNITS.get(unit.strip().lower().split("/")[0], 1.0)  # "Kbyte/block" scales as Kbyte


def parse_details(text: str) -> list[Summary]:
    """`ncu --import R --csv --page details` output: one Summary per profiled launch, in order.
    Lines before the CSV header (ncu's ==PROF== notes, the program's output) are skipped."""
    start = text.find('"ID"')
    if start < 0:
        return []
    out: dict[str, Summary] = {}
    for row in csv.DictReader(io.StringIO(text[start:])):
        launch = row.get("ID")
        if launch is None or not row.get("Kernel Name"):
            continue
        s = out.setdefault(launch, Summary(row["Kernel Name"], row.get("Grid Size", ""), row.get("Block Size", "")))
        field = _DETAILS.get((row.get("Metric Name") or "").strip())
        if field and getattr(s, field) is None:
            setattr(s, field, _value(row.get("Metric Value", ""), row.get("Metric Unit", "")))
    return [out[k] for k in sorted(out, key=lambda k: int(k) if k.isdigit() else 0)]


# ---------------------------------------------------------------------------------------------
# Running it.

def run_workload(lesson: str, kernel: str) -> None:
    """The child process that ncu watches: the op WARMUP + 1 times on its inputs."""
    import torch

    from ..build import load

    ext = load(reference_file(lesson), "cuda", quiet=True)
    args = workload_args(lesson, kernel, "cuda")
    op = getattr(ext, kernel)
    torch.cuda.synchronize()
    for _ in range(WARMUP + 1):
        op(*args)
    torch.cuda.synchronize()


def profile_kernel(lesson: str, kernel: str) -> int:
    """`make profile LESSON=NN KERNEL=name` on a GPU: run ncu, keep the report, print the summary."""
    problem = check_request(lesson, kernel)
    if problem:
        print(problem)
        return 2
    ncu = find_ncu()
    if not ncu:
        print("ncu (Nsight Compute) was not found in $CUDA_HOME/bin or on PATH: it ships with the CUDA toolkit "
              "(or install the nsight-compute package); put its folder on PATH")
        return 1
    from ..build import load

    src = reference_file(lesson)
    load(src, "cuda", quiet=True)  # build here, so that the profiled child only loads the library
    report = report_path(lesson, kernel)
    report.parent.mkdir(parents=True, exist_ok=True)
    cmd = ncu_command(ncu, lesson, kernel, kernel_regex(kernel_names(src.read_text())), report)
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=child_env())
    if done.returncode != 0 or not report.exists():
        print(f"ncu failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        if "ERR_NVGPUCTRPERM" in done.stdout + done.stderr:
            print("This user may not read the GPU's performance counters: run as root, or allow it "
                  "(NVreg_RestrictProfilingToAdminUsers=0; see NVIDIA's ERR_NVGPUCTRPERM page)")
        return 1
    details = subprocess.run([ncu, "--import", str(report), "--csv", "--page", "details"], capture_output=True,
                             text=True)
    found = parse_details(details.stdout)
    if not found:
        print(f"the report {os.path.relpath(report)} holds no kernel launch: did {kernel} launch a kernel of "
              f"{src.name} more than {WARMUP} times?\n{done.stdout[-2000:]}")
        return 1
    print(f"Nsight Compute, {kernel} of lesson {lesson} (launch {WARMUP + 1}; ncu serialises kernels and locks clocks)")
    for s in found:
        print(s)
    print(f"report: {os.path.relpath(report)}  (open with ncu-ui, or ncu --import {os.path.relpath(report)} --page details)")
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m kernels.tools.nsight --workload NN KERNEL`: the process ncu watches (make profile runs it)."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m kernels.tools.nsight",
                                description="The process Nsight Compute watches: a lesson's variant run WARMUP + 1 "
                                            "times. Run `make profile LESSON=NN KERNEL=name` instead.")
    p.add_argument("--workload", nargs=2, metavar=("LESSON", "KERNEL"), required=True)
    lesson, kernel = p.parse_args(argv).workload
    problem = check_request(lesson, kernel)
    if problem:
        print(problem)
        return 2
    run_workload(lesson, kernel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
