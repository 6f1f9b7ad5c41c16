"""Where things are: the repository, the package's folders, and the build cache (one module for every path)."""
from __future__ import annotations

import os
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
ROOT = PACKAGE.parent                        # the repository (in an installed copy: the folder holding the package)
INCLUDE = PACKAGE / "include"                # helpers.cuh, the one shared header of the lessons' kernels
REFERENCE = PACKAGE / "reference"            # the lessons' reference .cu files, NN_topic.cu
SIM = PACKAGE / "sim"
SIM_INCLUDE = SIM / "include"                # the simulator's headers (cudasim.h and the CUDA headers it stands in for)
RECORDED = PACKAGE / "benchmarks" / "recorded"  # GPU figures `make bench RECORD=1` committed
LESSONS = ROOT / "lessons"
SOLUTIONS = ROOT / "solutions"
CUDA_LIBRARY = LESSONS / "11_other_routes" / "cuda_library"  # lesson 11's library built by its own Makefile
BUILD = ROOT / "build"                       # everything generated: caches, logs, executed notebooks, plots


def build_root() -> Path:
    """Where builds are cached: $KERNELS_BUILD_DIR, else build/ext at the repository root."""
    return Path(os.environ.get("KERNELS_BUILD_DIR") or BUILD / "ext").resolve()


def reference_file(lesson: str) -> Path:
    """kernels/reference/NN_topic.cu of a lesson ("09")."""
    found = sorted(REFERENCE.glob(f"{lesson}_*.cu"))
    if not found:
        raise FileNotFoundError(f"no reference file for lesson {lesson} in kernels/reference/")
    return found[0]
