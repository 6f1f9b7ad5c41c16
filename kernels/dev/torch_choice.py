"""Which torch `make setup` installs, and why: one line for the Makefile to act on and print.

    python kernels/dev/torch_choice.py [cpu|cuda|]      ->  "cpu<TAB>torch: the CPU-only build (why; ...)"

Run as a file, with only the standard library (torch is not installed yet). `cpu` means PyTorch's CPU-only wheels
(a few hundred MB), `cuda` the default torch, which on Linux x86-64 is the CUDA build (about 5 GB with its CUDA
libraries), `keep` a torch that the interpreter already has. Without a choice (TORCH= on the make line), a Linux
x86-64 machine with neither an NVIDIA driver nor nvcc gets the CPU-only build: nothing there could use the CUDA
libraries (nvcc needs the CUDA build for `make compile-check`, so a machine with nvcc keeps it). Elsewhere
(macOS, arm64 Linux) the default torch has no CUDA libraries to spare.
"""
from __future__ import annotations

import importlib.util
import os
import platform
import shutil
import sys
from pathlib import Path

CHOICES = ("cpu", "cuda")
OTHER = {"cpu": "`make setup TORCH=cuda` installs the CUDA build (about 5 GB)",
         "cuda": "`make setup TORCH=cpu` installs the CPU-only build (a few hundred MB)"}


def nvidia_driver() -> str:
    """What shows an NVIDIA driver here ('' if nothing does): Linux's driver file, WSL2's libcuda, nvidia-smi."""
    for path in ("/proc/driver/nvidia/version", "/usr/lib/wsl/lib/libcuda.so.1"):
        if Path(path).exists():
            return path
    return shutil.which("nvidia-smi") or ""


def nvcc() -> str:
    """The nvcc found on PATH, in $CUDA_HOME or in /usr/local/cuda ('' if none)."""
    homes = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"]
    found = [shutil.which("nvcc") or ""] + [str(Path(h) / "bin" / "nvcc") for h in homes if h]
    return next((p for p in found if p and Path(p).is_file()), "")


def choose(asked: str, has_torch: bool, system: str, machine: str, driver: str, compiler: str) -> tuple[str, str]:
    """(cpu | cuda | keep, the reason in words) from what was asked for and what this machine has."""
    if asked:
        if asked not in CHOICES:
            raise ValueError(f"TORCH={asked}: expected TORCH=cpu (the CPU-only torch), TORCH=cuda (the CUDA build) "
                             f"or no TORCH (chosen from this machine)")
        if has_torch:  # pip would keep it whatever was asked
            return "keep", f"TORCH={asked} was asked for, but this Python already has torch: to switch, rm -rf .venv first"
        return asked, f"TORCH={asked} asked for it"
    if has_torch:
        return "keep", "this Python already has torch"
    if system != "Linux" or machine not in ("x86_64", "AMD64"):
        return "cuda", f"the default torch of {system} {machine}, which has no CUDA libraries to spare"
    if driver:
        return "cuda", f"an NVIDIA driver is here ({driver})"
    if compiler:
        return "cuda", f"nvcc is here ({compiler}), and the nvcc compile check needs the CUDA build"
    return "cpu", "no NVIDIA driver and no nvcc here: kernels run on the simulator"


def main(argv: list[str]) -> int:
    asked = (argv[0] if argv else "").strip().lower()
    try:
        choice, why = choose(asked, importlib.util.find_spec("torch") is not None, platform.system(),
                             platform.machine(), nvidia_driver(), nvcc())
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    linux_x86 = platform.system() == "Linux" and platform.machine() in ("x86_64", "AMD64")
    what = {"cpu": "the CPU-only build", "cuda": "the CUDA build, PyPI's default" if linux_x86 else "PyPI's default build",
            "keep": "the one already installed"}[choice]
    hint = "" if choice == "keep" else f"; {OTHER[choice]}"
    print(f"{choice}\ttorch: {what} ({why}{hint})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
