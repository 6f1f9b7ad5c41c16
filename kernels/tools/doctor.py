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


def driver_cuda_version() -> str | None:
    """The newest CUDA the installed NVIDIA driver supports ("13.0"), from libcuda; None without a driver."""
    import ctypes

    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll", "libcuda.dylib"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        v = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(v)) == 0 and v.value > 0:
            return f"{v.value // 1000}.{v.value % 1000 // 10}"
    return None


def _major_minor(v: str) -> tuple[int, int]:
    parts = (v.split(".") + ["0"])[:2]
    return int(parts[0]), int(parts[1])


def cuda_versions(driver: str | None, torch_cuda: str | None, nvcc: str | None) -> list[tuple[str, str]]:
    """Rows saying whether the driver's CUDA, torch's CUDA and nvcc's fit together, and what breaks
    when they do not (each argument "12.4" or None when absent)."""
    rows = []
    if driver is None:
        rows.append(("driver", "no NVIDIA driver found (libcuda): the cuda backend cannot run here; the sim backend can"))
    elif torch_cuda and _major_minor(driver)[0] < _major_minor(torch_cuda)[0]:
        rows.append(("driver", f"supports CUDA up to {driver}, OLDER THAN torch's CUDA {torch_cuda}: torch sees no GPU "
                               "(\"CUDA driver version is insufficient for CUDA runtime version\"): update the driver, "
                               f"or install a torch built for CUDA {_major_minor(driver)[0]}"))
    elif torch_cuda and _major_minor(driver) < _major_minor(torch_cuda):
        rows.append(("driver", f"supports CUDA up to {driver}, torch's CUDA is {torch_cuda}: runs through minor-version "
                               "compatibility; PTX built by a newer nvcc cannot be JIT-compiled by this driver"))
    else:
        rows.append(("driver", f"supports CUDA up to {driver}" + (f", enough for torch's CUDA {torch_cuda}" if torch_cuda else "")))
    if nvcc and driver and _major_minor(nvcc)[0] > _major_minor(driver)[0]:
        rows.append(("nvcc vs driver", f"nvcc {nvcc} is a newer major version than the driver's CUDA {driver}: what it "
                                       "builds cannot run on this driver: update the driver, or use an nvcc of CUDA "
                                       f"{_major_minor(driver)[0]}"))
    elif nvcc and driver and _major_minor(nvcc) > _major_minor(driver):
        rows.append(("nvcc vs driver", f"nvcc {nvcc} is newer than the driver's CUDA {driver}: machine code for this GPU "
                                       "runs (minor-version compatibility), but PTX fails with \"the provided PTX was "
                                       "compiled with an unsupported toolchain\": update the driver"))
    return rows


def arch_list(value: str | None, capability: tuple[int, int] | None) -> str:
    """What $TORCH_CUDA_ARCH_LIST means for builds on this GPU (capability (9, 0) for an H100)."""
    if not value or value.strip() == "native":
        return "unset: kernels.build compiles for the GPUs this process sees (and PTX for the newest)"
    archs = [a.strip() for a in re.split(r"[;\s]+", value) if a.strip()]
    if capability is None:
        return f"TORCH_CUDA_ARCH_LIST={value}: builds target these architectures"
    cc = f"{capability[0]}.{capability[1]}"
    # "9.0a" (and "10.0f") are 9.0's machine code with the architecture-specific features: they run on a 9.0 GPU
    if any(re.sub(r"(?<=\d)[af]$", "", a.removesuffix("+PTX")) == cc for a in archs):
        return f"TORCH_CUDA_ARCH_LIST={value}: includes this GPU's {cc}"
    ptx = [a.removesuffix("+PTX") for a in archs if a.endswith("+PTX")]
    if ptx and all(_major_minor(p) <= capability for p in ptx):
        return f"TORCH_CUDA_ARCH_LIST={value}: no {cc} machine code, but PTX the driver compiles for it at first launch"
    return (f"TORCH_CUDA_ARCH_LIST={value} DOES NOT INCLUDE this GPU's {cc}: every kernel built so fails with "
            f"\"no kernel image is available for execution on the device\"; unset it, or add {cc}")


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
    from ..build.toolchain import cuda_home, nvcc_version
    from ..paths import build_root

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
    rows += cuda_versions(driver_cuda_version(), torch.version.cuda, m.group(1) if m else None)
    capability = torch.cuda.get_device_capability(0) if torch.cuda.is_available() else None
    rows.append(("arch list", arch_list(os.environ.get("TORCH_CUDA_ARCH_LIST"), capability)))
    try:
        import ninja  # noqa: F401

        rows.append(("ninja", _run([shutil.which("ninja") or "ninja", "--version"]) or "installed"))
    except ImportError:
        rows.append(("ninja", "NOT INSTALLED: torch needs it to build extensions (pip install ninja)"))
    cxx = os.environ.get("CXX", "c++")
    first = _run([cxx, "--version"]).splitlines()
    rows.append(("C++ compiler", first[0] if first else f"{cxx} NOT FOUND: install g++ or clang++"))
    from ..sim.profile import compiler_problem

    problem = compiler_problem()
    rows.append(("profiler", f"NOT AVAILABLE: {problem}" if problem else
                 "available (kernels.profile: the C++ compiler accepts -fsanitize=thread, addr2line found)"))
    from ..backend import reason

    rows.append(("backend", reason()))
    rows.append(("build cache", os.path.relpath(build_root())))
    clash = kernels_clash()
    rows.append(("`kernels` name", clash or "no clash: no other package named kernels is installed"))
    return rows


def main(argv: list[str] | None = None) -> int:
    """`python -m kernels.tools.doctor` (make doctor)."""
    import argparse

    argparse.ArgumentParser(prog="python -m kernels.tools.doctor",
                            description="What to paste into a bug report: Python, torch, the GPU, nvcc, the driver, "
                                        "the architecture list, ninja, the C++ compiler, the backend and why.").parse_args(argv)
    for k, v in report():
        print(f"{k:>15}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
