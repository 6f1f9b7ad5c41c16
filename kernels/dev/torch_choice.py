"""Which torch `make setup` installs, and why: one line for the Makefile to act on and print.

    python kernels/dev/torch_choice.py [cpu|cuda|] [--venv DIR]   ->  "cpu<TAB>torch: the CPU-only build (why; ...)"

Run as a file, with only the standard library (torch is not installed yet). `cpu` means PyTorch's CPU-only wheels
(a few hundred MB), `cuda` the default torch, which on Linux x86-64 is the CUDA build (about 5 GB with its CUDA
libraries), `keep` a torch that the interpreter already has. Without a choice (TORCH= on the make line), a Linux
x86-64 machine with neither an NVIDIA driver nor nvcc gets the CPU-only build: nothing there could use the CUDA
libraries (nvcc needs the CUDA build for `make compile-check`, so a machine with nvcc keeps it). Elsewhere
(macOS, arm64 Linux) the default torch has no CUDA libraries to spare.

With --venv, the disks that will hold the venv, pip's downloads in the temporary folder and pip's cache must have room
for the choice, or it stops with exit 3 and says how much it needs: pip would otherwise fail minutes into the download
with "No space left on device" and leave a half-installed venv. SPACE_CHECK=0 in the environment skips this.
"""
from __future__ import annotations

import importlib.util
import os
import platform
import shutil
import sys
import tempfile
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


# What pip needs while it installs, in GB: (what the packages unpack to, in the venv; the wheels it downloads). pip
# keeps the downloads in a temporary folder until the install ends and, unless its cache is off, a copy in its cache.
# The CUDA build's wheels come to about 3.5 GB and unpack to about 5.5; the CPU build's about 0.3 and 1; the notebook
# and test packages add about 0.2 and 0.3.
NEEDS_GB = {"cuda": (5.8, 3.7), "cpu": (1.3, 0.5), "keep": (0.3, 0.2)}


def existing(path: Path) -> Path:
    """path or the nearest of its parents that exists (the venv's directory may not exist yet)."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def pip_cache() -> Path | None:
    """Where pip keeps its downloads (PIP_CACHE_DIR, else the user's cache directory); None when PIP_NO_CACHE_DIR
    turns the cache off (pip takes any value of it as off, as its own --no-cache-dir)."""
    if os.environ.get("PIP_NO_CACHE_DIR"):
        return None
    if os.environ.get("PIP_CACHE_DIR"):
        return Path(os.environ["PIP_CACHE_DIR"])
    if platform.system() == "Darwin":
        return Path.home() / "Library" / "Caches" / "pip"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pip"


def space_problem(choice: str, venv: Path, cache: Path | None, temp: Path, free=lambda p: shutil.disk_usage(p).free,
                  disk=lambda p: p.stat().st_dev) -> str:
    """'' when each disk has room for what the install puts there (the venv's packages; the wheels in the temporary
    folder and in pip's cache, or no cache), else what is short, in words. A path that cannot be read is left out."""
    unpacked, wheels = (gb * 2**30 for gb in NEEDS_GB[choice])
    wants = [(venv, unpacked, "the venv"), (temp, wheels, "the temporary folder")]
    if cache is not None:
        wants.append((cache, wheels, "pip's cache"))
    disks: dict[object, list] = {}  # disk -> [a path on it, bytes wanted, what goes there]
    try:
        for path, want, what in wants:
            at = existing(path)
            entry = disks.setdefault(disk(at), [at, 0, []])
            entry[1] += want
            entry[2].append(what)
        short = [(at, want, whats, free(at)) for at, want, whats in disks.values() if free(at) < want]
    except OSError:
        return ""
    if not short:
        return ""
    at, want, whats, have = short[0]
    smaller = "" if choice != "cuda" else f"; {OTHER['cuda']}"
    return (f"not enough disk space for the install: {at} has {have / 2**30:.1f} GB free, and "
            f"{'the CUDA build of torch' if choice == 'cuda' else 'the packages'} need about {want / 2**30:.1f} GB "
            f"there while pip installs ({', '.join(whats)}){smaller}; free some space, or run with SPACE_CHECK=0 "
            f"to try anyway")


def main(argv: list[str]) -> int:
    venv = None
    if "--venv" in argv:
        at = argv.index("--venv")
        if at + 1 >= len(argv):
            print("--venv needs the venv's directory", file=sys.stderr)
            return 2
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
        problem = space_problem(choice, venv, pip_cache(), Path(tempfile.gettempdir()))
        if problem:
            print(problem, file=sys.stderr)
            return 3
    print(f"{choice}\ttorch: {what} ({why}{hint})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
