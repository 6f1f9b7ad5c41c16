"""Which torch `make setup` installs, and why: one line for the Makefile to act on and print.

    python kernels/dev/torch_choice.py [cpu|cuda|] [--venv DIR]   ->  "cpu<TAB>torch: the CPU-only build (why; ...)"

Run as a file, with only the standard library (torch is not installed yet). `cpu` means PyTorch's CPU-only wheels
(a few hundred MB), `cuda` the default torch, which on Linux x86-64 is the CUDA build (about 5 GB with its CUDA
libraries), `keep` a torch that the interpreter already has. Without a choice (TORCH= on the make line), a Linux
x86-64 machine with neither an NVIDIA driver nor nvcc gets the CPU-only build: nothing there could use the CUDA
libraries (nvcc needs the CUDA build for `make compile-check`, so a machine with nvcc keeps it). Elsewhere
(macOS, arm64 Linux) the default torch has no CUDA libraries to spare.

With --venv, the disk that will hold the venv (and pip's download cache, if that is another disk) must have room for
the choice, or it stops with exit 3 and says how much it needs: pip would otherwise fail minutes into the download
with "No space left on device" and leave a half-installed venv. SPACE_CHECK=0 in the environment skips this.
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


# What pip needs free while it installs, in GB: the wheels it downloads (held until the end of the install) and what
# they unpack to. The CUDA build's wheels come to about 3.5 GB and unpack to about 5.5 GB; the CPU build's about 0.3
# and 1; notebook and test packages about 0.3 GB more in every case.
NEEDS_GB = {"cuda": 9.5, "cpu": 1.8, "keep": 0.5}


def existing(path: Path) -> Path:
    """path or the nearest of its parents that exists (the venv's directory may not exist yet)."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def pip_cache() -> Path:
    """Where pip keeps its downloads by default (PIP_CACHE_DIR, else the user's cache directory)."""
    if os.environ.get("PIP_CACHE_DIR"):
        return Path(os.environ["PIP_CACHE_DIR"])
    if platform.system() == "Darwin":
        return Path.home() / "Library" / "Caches" / "pip"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pip"


def space_problem(choice: str, venv: Path, cache: Path, free=lambda p: shutil.disk_usage(p).free) -> str:
    """'' when the venv's disk (and the cache's, if another) has room for the install, else what is short, in words."""
    need = NEEDS_GB[choice] * 2**30
    places = {existing(venv): need}
    cache_at = existing(cache)
    if cache_at.stat().st_dev != next(iter(places)).stat().st_dev:  # the downloads land on another disk
        places = {existing(venv): need * 0.6, cache_at: need * 0.4}
    short = [(where, want, free(where)) for where, want in places.items() if free(where) < want]
    if not short:
        return ""
    where, want, have = short[0]
    smaller = "" if choice != "cuda" else f"; {OTHER['cuda']}"
    return (f"not enough disk space for the install: {where} has {have / 2**30:.1f} GB free, and installing "
            f"{'the CUDA build of torch' if choice == 'cuda' else 'the packages'} needs about {want / 2**30:.1f} GB "
            f"there{smaller}; free some space, or run with SPACE_CHECK=0 to try anyway")


def main(argv: list[str]) -> int:
    venv = None
    if "--venv" in argv:
        at = argv.index("--venv")
        venv, argv = Path(argv[at + 1]), argv[:at] + argv[at + 2:]
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
    if venv is not None and os.environ.get("SPACE_CHECK", "1") != "0":
        problem = space_problem(choice, venv, pip_cache())
        if problem:
            print(problem, file=sys.stderr)
            return 3
    print(f"{choice}\ttorch: {what} ({why}{hint})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
