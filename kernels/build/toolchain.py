"""The toolchain builds use: torch's cpp_extension, the CUDA toolkit, the compilers' versions, the GPU
architectures to compile for, the CUDA tools (ncu, compute-sanitizer), and the environment of a child
process that imports this package."""
from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from .. import backend as _backend
from ..paths import ROOT, build_root


@functools.cache
def tool_version(tool: str) -> str:
    """What `tool --version` prints ('' when the tool is missing), asked once per process."""
    exe = shutil.which(tool)
    if not exe:
        return ""
    try:
        return subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


SIM_CXX = "KERNELS_SIM_CXX"  # the compiler of simulator builds, when set


def cxx(backend: str = "cuda") -> str:
    """The C++ compiler that cpp_extension runs for a build of `backend`: $CXX, else c++. For the simulator,
    $KERNELS_SIM_CXX first, and clang++ before c++ where it is installed: with its precompiled header holding
    the headers' template instantiations too, a sim build takes about half the time g++'s does."""
    if backend == "sim":
        return os.environ.get(SIM_CXX) or os.environ.get("CXX") or ("clang++" if shutil.which("clang++") else "c++")
    return os.environ.get("CXX") or "c++"


def cxx_version(backend: str = "cuda") -> str:
    """The version text of the C++ compiler that cpp_extension runs for a build of `backend`."""
    return tool_version(cxx(backend))


@contextlib.contextmanager
def compiler_for(backend: str):
    """cpp_extension runs cxx(backend) inside the block (it reads $CXX when it writes the build file)."""
    before = os.environ.get("CXX")
    os.environ["CXX"] = cxx(backend)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("CXX", None)
        else:
            os.environ["CXX"] = before


def nvcc_version() -> str:
    """The version text of the CUDA toolkit's nvcc ('' without a toolkit)."""
    home = cuda_home()
    return tool_version(str(Path(home) / "bin" / "nvcc")) if home else ""


@contextlib.contextmanager
def quiet_cpp_extension():
    """cpp_extension's warnings (such as "No CUDA runtime is found") silenced while it runs here, and
    the logger's level restored afterwards."""
    logger = logging.getLogger("torch.utils.cpp_extension")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def cpp_extension():
    """torch.utils.cpp_extension, imported so that it finds the CUDA toolkit in /usr/local/cuda when
    neither $CUDA_HOME nor $CUDA_PATH names one (from nvcc on PATH alone it can guess a folder
    without libcudart). The module reads the variable once, at import; it is restored afterwards."""
    if "torch.utils.cpp_extension" in sys.modules:
        return sys.modules["torch.utils.cpp_extension"]
    default = ("/usr/local/cuda" if not (os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH"))
               and Path("/usr/local/cuda/bin/nvcc").exists() else None)
    with quiet_cpp_extension():
        if default is None:
            import torch.utils.cpp_extension as cpp
            return cpp
        os.environ["CUDA_HOME"] = default
        try:
            import torch.utils.cpp_extension as cpp
        finally:
            del os.environ["CUDA_HOME"]
    return cpp


def cuda_home() -> str | None:
    """The CUDA toolkit that builds use (None when there is none)."""
    return cpp_extension().CUDA_HOME


def find_cuda_tool(name: str) -> str | None:
    """A CUDA toolkit program (ncu, compute-sanitizer, nvcc): in $CUDA_HOME/bin, else on PATH."""
    home = cuda_home()
    if home and (Path(home) / "bin" / name).exists():
        return str(Path(home) / "bin" / name)
    return shutil.which(name)


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child Python that must import this repository's `kernels` (the repository
    first on PYTHONPATH), with `extra` added."""
    path = os.pathsep.join(p for p in [str(ROOT), os.environ.get("PYTHONPATH", "")] if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


@functools.cache
def _visible_gpu_archs() -> tuple[tuple[int, int], ...]:
    """The compute capabilities of the GPUs this process sees, clamped to the newest torch supports."""
    import torch

    if not _backend.gpu_available():
        return ()
    newest = [int(re.sub(r"\D", "", a.split("_", 1)[1])) for a in torch.cuda.get_arch_list() if a.startswith("sm_")]
    top = divmod(max(newest), 10) if newest else (99, 9)
    return tuple(sorted({min(torch.cuda.get_device_capability(i), top) for i in range(torch.cuda.device_count())}))


def gencode(arch: str) -> str:
    """nvcc's flag that compiles device code for one architecture ("75", "90a") to its machine code."""
    if not re.fullmatch(r"\d{2,3}a?", arch):
        raise ValueError(f"expected an architecture such as 75 or 90a, got {arch!r}")
    return f"-gencode=arch=compute_{arch},code=sm_{arch}"


def cuda_arch_flags(archs: Sequence[str] = (), sm90a: bool = False) -> list[str]:
    """nvcc's -gencode flags for `archs` ("75", "90a"; the compile check's targets), else for the GPUs
    this process sees (sm_90 without a GPU).

    Settled before the cache key is computed, so a library built for one GPU is never loaded on
    another. Without `archs`, empty when $TORCH_CUDA_ARCH_LIST names the architectures: cpp_extension
    then reads it, and the key includes it (given flags that name an architecture, it reads nothing).
    `sm90a`: the file has code for sm_90a's own instructions (SourceSet.needs_sm90a), so a 9.0 GPU gets machine
    code for sm_90a instead of sm_90 (it runs there only; the PTX for newer GPUs stays compute_90's, since
    arch-specific PTX runs on no other GPU).
    """
    if archs:
        return [gencode(a) for a in archs]
    if (os.environ.get("TORCH_CUDA_ARCH_LIST") or "native") != "native":
        return []
    archs = _visible_gpu_archs()
    flags = [gencode(f"{a}{b}{'a' if sm90a and (a, b) == (9, 0) else ''}") for a, b in archs or [(9, 0)]]
    if archs:  # PTX for the newest, as cpp_extension does, so a newer GPU can still JIT it
        a, b = archs[-1]
        flags.append(f"-gencode=arch=compute_{a}{b},code=compute_{a}{b}")
    return flags


def missing_toolkit_headers() -> list[str]:
    """An include folder for CUDA library headers (cusparse.h, ...) the toolkit lacks but torch ships.

    A minimal toolkit (nvcc and the runtime only) has no cuSPARSE/cuBLAS headers, which
    ATen/cuda/CUDAContext.h includes; a CUDA build of torch from pip carries them in its
    nvidia/cuXX/include folder. Only the headers the toolkit is missing are linked in, so the
    toolkit's own headers always win.
    """
    import torch

    home = cuda_home()
    if not home:
        return []
    have = Path(home) / "include"
    site = Path(torch.__file__).resolve().parent.parent / "nvidia"
    shipped = [d for d in sorted(site.glob("cu*/include")) + sorted(site.glob("*/include")) if d.is_dir()]
    missing = {}
    for d in shipped:
        for h in d.iterdir():
            if h.suffix in (".h", ".hpp") and not (have / h.name).exists():
                missing.setdefault(h.name, h)
    if not missing:
        return []
    out = build_root() / "cuda-extra-include"
    out.mkdir(parents=True, exist_ok=True)
    for name, h in missing.items():
        link = out / name
        if not link.exists():
            try:
                link.symlink_to(h)
            except FileExistsError:  # another build process made it first
                pass
    return [str(out)]


def cuda_link_flags(ldflags: list[str]) -> list[str]:
    """A cuda build's linker flags with the CUDA libraries found: the toolkit's lib64 searched first (cpp_extension
    puts its own -L after the caller's flags), and a -lNAME that the toolkit lacks but torch's wheel bundles
    (nvidia/*/lib/libNAME.so.13, with no unversioned name for the linker to find) linked by that file: the
    library torch itself loads, so the extension shares it."""
    libs = [f[2:] for f in ldflags if f.startswith("-l")]
    if not libs:
        return ldflags
    home = cuda_home()
    dirs = [Path(home) / d for d in ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib")] if home else []
    dirs = [d for d in dirs if d.is_dir()]
    out = [f"-L{d}" for d in dirs[:1]]
    import torch

    bundled = sorted(Path(torch.__file__).parent.parent.glob("nvidia/*/lib"))
    for f in ldflags:
        name = f[2:] if f.startswith("-l") else None
        if name and not any((d / f"lib{name}.so").exists() or (d / f"lib{name}.a").exists() for d in dirs):
            found = [p for d in bundled for p in sorted(d.glob(f"lib{name}.so.*")) if re.fullmatch(rf"lib{name}\.so\.\d+", p.name)]
            if found:
                out.append(str(found[0]))
                continue
        out.append(f)
    return out
