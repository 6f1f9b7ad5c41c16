"""`make compile-check`: build every .cu of the repository as the real CUDA extension with nvcc.

Nothing runs: this proves that the files the simulator executes are also valid CUDA for nvcc.
It needs nvcc and a CUDA build of torch, GPU or not; without them it says so and skips.
"""
from __future__ import annotations

import shutil
import sys
import time
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


def main() -> int:
    reason = why_not()
    if reason:
        print(f"compile check SKIPPED: {reason}. The simulator tests still ran every kernel.")
        return 0
    todo = files()
    print(f"compile check: {len(todo)} .cu files with nvcc")
    failed = []
    for i, f in enumerate(todo, 1):
        print(f"[{i}/{len(todo)}] {display_path(f)} ...", end="", flush=True)
        t0 = time.perf_counter()
        try:
            compile_only(f)
            print(f" ok ({time.perf_counter() - t0:.0f} s)", flush=True)
        except BuildError as e:
            print(" FAILED")
            print(str(e))
            failed.append(f)
    print(f"{len(todo) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
