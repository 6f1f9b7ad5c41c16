"""`make doctor`: what to paste into a bug report about building or running the kernels."""
from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
import sys


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def kernels_clash() -> str | None:
    """A warning when PyPI's unrelated `kernels` package is installed next to this toolkit."""
    try:
        dist = importlib.metadata.distribution("kernels")
    except importlib.metadata.PackageNotFoundError:
        return None
    return (f"the unrelated PyPI package 'kernels' {dist.version} is installed in this environment. This "
            "repository's toolkit is also imported as `kernels`; the Makefile puts the repository first on "
            "PYTHONPATH and the notebooks insert it at sys.path[0], so ours wins there, but a plain `python` "
            "elsewhere may import the other one. `pip uninstall kernels` removes the clash.")


def report() -> list[tuple[str, str]]:
    rows = [("python", f"{sys.version.split()[0]} ({sys.executable if os.environ.get('DOCTOR_PATHS') else platform.python_implementation()})"),
            ("platform", f"{platform.system()} {platform.machine()}")]
    try:
        import torch
    except ImportError:
        rows.append(("torch", "NOT INSTALLED: run `make setup`"))
        return rows
    rows.append(("torch", f"{torch.__version__} (CUDA {torch.version.cuda or 'none: a CPU build'})"))
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        rows.append(("GPU", f"{p.name}, compute capability {p.major}.{p.minor}, {p.multi_processor_count} SMs, "
                            f"{p.total_memory / 2**30:.0f} GiB"))
    else:
        rows.append(("GPU", "no GPU visible to torch"))
    from .build import build_root, cuda_home, nvcc_version

    out = nvcc_version() if cuda_home() else _run([shutil.which("nvcc") or "nvcc", "--version"])
    m = re.search(r"release (\d+\.\d+)", out)
    if m:
        match = ""
        if torch.version.cuda:
            same = m.group(1).split(".")[0] == torch.version.cuda.split(".")[0]
            match = ("matches torch's CUDA major version" if same else
                     f"DOES NOT MATCH torch's CUDA {torch.version.cuda}: builds may fail; install a torch for CUDA {m.group(1)}")
        rows.append(("nvcc", f"{m.group(1)} ({match or 'torch is a CPU build: the cuda backend cannot build'})"))
    else:
        rows.append(("nvcc", "not found (needed only for the cuda backend and make compile-check)"))
    try:
        import ninja  # noqa: F401

        rows.append(("ninja", _run([shutil.which("ninja") or "ninja", "--version"]) or "installed"))
    except ImportError:
        rows.append(("ninja", "NOT INSTALLED: torch needs it to build extensions (pip install ninja)"))
    cxx = os.environ.get("CXX", "c++")
    first = _run([cxx, "--version"]).splitlines()
    rows.append(("C++ compiler", first[0] if first else f"{cxx} NOT FOUND: install g++ or clang++"))
    from .profiling import compiler_problem

    problem = compiler_problem()
    rows.append(("profiler", f"NOT AVAILABLE: {problem}" if problem else
                 "available (kernels.profile: the C++ compiler accepts -fsanitize=thread, addr2line found)"))
    from .backend import reason

    rows.append(("backend", reason()))
    rows.append(("build cache", os.path.relpath(build_root())))
    clash = kernels_clash()
    rows.append(("`kernels` name", clash or "no clash: no other package named kernels is installed"))
    return rows


def main() -> int:
    for k, v in report():
        print(f"{k:>15}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
