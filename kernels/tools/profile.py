"""`make profile LESSON=NN [KERNEL=name]`: why one variant is faster than another.

Without KERNEL, on the simulator: the access table (kernels.profile) of each probe that the lesson
declares (kernels/lessons/lessonNN.py: its variants' probes, at its SIM_SIZE). With KERNEL on a machine
with a GPU: Nsight Compute on that variant (kernels/tools/nsight.py), at the lesson's GPU_SIZE.
"""
from __future__ import annotations

import argparse
import sys

from .. import lessons
from ..backend import gpu_available
from ..build import load
from ..paths import reference_file


def probes(lesson: str, device: str = "cpu", size=None) -> list[tuple[str, object]]:
    """(title, call) for each probe the lesson declares: the call runs the variant on fresh inputs
    (at the lesson's SIM_SIZE, or `size`), loaded for the simulator."""
    mod = lessons.module(lesson)
    ext = load(reference_file(mod.__name__[-2:]), "sim", quiet=True)
    size = mod.SIM_SIZE if size is None else size
    out = []
    for v in lessons.variants(lesson):
        for p in v.probes:
            args = (p.args or v.args)(size, v.dtype, device)
            out.append((p.title, lambda op=getattr(ext, v.name), args=args: op(*args)))
    return out


def main(argv: list[str] | None = None) -> int:
    """`python -m kernels.tools.profile NN [KERNEL]`."""
    p = argparse.ArgumentParser(prog="python -m kernels.tools.profile",
                                description="The simulator's access tables of a lesson's variants, or with KERNEL "
                                            "on a GPU, Nsight Compute on that variant (make profile LESSON=NN [KERNEL=name]).")
    p.add_argument("lesson", help="lesson number, such as 04")
    p.add_argument("kernel", nargs="?", default="", help="a variant of the lesson's reference file (GPU: Nsight Compute)")
    a = p.parse_args(argv)
    try:
        lesson = lessons.lesson_id(a.lesson)
    except ValueError as e:
        print(e)
        return 2
    simulated = lessons.with_probes()
    if a.kernel and gpu_available():
        from .nsight import profile_kernel

        return profile_kernel(lesson, a.kernel)
    if a.kernel:
        print(f"KERNEL={a.kernel} runs Nsight Compute, which needs an NVIDIA GPU, and PyTorch sees none here."
              + (f" The simulator's access tables of lesson {lesson} instead:" if lesson in simulated else ""))
    if lesson not in simulated:
        print(f"which lesson? make profile LESSON=NN, with NN one of {', '.join(simulated)} (on the simulator)")
        return 2
    from ..sim.profile import compiler_problem, profile

    problem = compiler_problem()
    if problem:
        print(problem)
        return 1
    for title, fn in probes(lesson):
        print(f"== {title}")
        print(profile(fn))
        print()
    if gpu_available():
        print("These are the simulator's figures. Nsight Compute on one variant: make profile LESSON=NN KERNEL=name; "
              "its counters for the same kernels side by side with these: python tests/toolkit/ncu_compare.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
