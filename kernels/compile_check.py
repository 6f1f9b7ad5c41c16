"""`make compile-check`: build every .cu of the repository as the real CUDA extension with nvcc.

Nothing runs: this proves that the files the simulator executes are also valid CUDA for nvcc.
It needs nvcc and a CUDA build of torch, GPU or not; without them it says so and skips.
"""
from __future__ import annotations

import multiprocessing
import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from .build import ROOT, BuildError, _cuda_home, compile_only, display_path

FOLDERS = ("kernels", "lessons", "solutions", "tests")
SKIP_MARK = "compile-check: skip"  # for test files that are broken on purpose


def files() -> list[Path]:
    out = []
    for folder in FOLDERS:
        out += sorted(p for p in (ROOT / folder).rglob("*.cu") if SKIP_MARK not in p.read_text())
    return out


def why_not() -> str | None:
    """The reason compile checking is impossible here, or None when it can run."""
    import torch

    _cuda_home()
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU build (it has no CUDA headers)"
    from torch.utils.cpp_extension import CUDA_HOME

    if not CUDA_HOME or not shutil.which("nvcc", path=f"{CUDA_HOME}/bin"):
        return "nvcc was not found (set CUDA_HOME to the CUDA toolkit)"
    return None


def _compile(path: Path) -> tuple[Path, float, str]:
    t0 = time.perf_counter()
    try:
        compile_only(path)
        return path, time.perf_counter() - t0, ""
    except BuildError as e:
        return path, time.perf_counter() - t0, str(e)


def main() -> int:
    reason = why_not()
    if reason:
        print(f"compile check SKIPPED: {reason}. The simulator tests still ran every kernel.")
        return 0
    todo = files()
    jobs = max(1, min(len(todo), os.cpu_count() or 1))
    print(f"compile check: {len(todo)} .cu files with nvcc, {jobs} at a time")
    failed = []
    # nvcc compiles one file on one core: run one file per core, each in its own process
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        for i, (path, secs, err) in enumerate(pool.map(_compile, todo), 1):
            print(f"[{i}/{len(todo)}] {display_path(path)} {'ok' if not err else 'FAILED'} ({secs:.0f} s)", flush=True)
            if err:
                print(err)
                failed.append(path)
    print(f"{len(todo) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
