"""Build and load a .cu file on a backend: `load("04_memory_bound")` or `load("my_kernel.cu")`.

Both backends compile the file through torch.utils.cpp_extension with ninja: `cuda` hands it to
nvcc unchanged; `sim` translates it (kernels/sim/translate.py) and compiles it as C++ for the
CPU simulator. Builds are cached under build/ by a hash of the sources (the file and every
local header it includes), the flags, the backend and the torch version. Sim builds also share
one precompiled header (see _sim_pch), which cuts a build from about 11 s to about 4.
"""
from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import re
import sys
import time
from pathlib import Path
from types import ModuleType

from . import backend as _backend

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = Path(__file__).resolve().parent
INCLUDE = PACKAGE / "include"
REFERENCE = PACKAGE / "reference"
SIM_INCLUDE = PACKAGE / "sim" / "include"

# The flags PyTorch's own CUDA build uses are added by cpp_extension; these are ours.
CUDA_FLAGS = ["-O3", "-lineinfo"]
SIM_FLAGS = ["-O2", "-fvisibility=hidden", "-fvisibility-inlines-hidden", "-Wno-unused-variable",
             "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
             "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__"]

_loaded: dict[str, object] = {}


class BuildError(RuntimeError):
    """A failed build: the compiler's errors first, then where the full log is."""


def build_root() -> Path:
    """Where builds are cached: $KERNELS_BUILD_DIR, else build/ at the repository root."""
    return Path(os.environ.get("KERNELS_BUILD_DIR") or ROOT / "build" / "ext").resolve()


def find_source(source: str | os.PathLike) -> Path:
    """A path to a .cu file, or the name of a reference file in kernels/reference ('04' or '04_memory_bound')."""
    p = Path(source)
    if p.suffix and p.is_file():
        return p.resolve()
    if p.suffix or os.sep in str(source):
        raise FileNotFoundError(f"no such .cu file: {source} (looked from {Path.cwd().name}/)")
    matches = sorted(REFERENCE.glob(f"{source}*.cu"))
    if len(matches) == 1:
        return matches[0]
    names = ", ".join(m.stem for m in sorted(REFERENCE.glob("*.cu"))) or "none yet"
    if not matches:
        raise FileNotFoundError(f"no reference kernel file matches {source!r}; the reference files are: {names}")
    raise FileNotFoundError(f"{source!r} matches several reference files ({', '.join(m.stem for m in matches)}): be more precise")


def display_path(p: Path) -> str:
    """A path for messages: relative to the working directory or the repository when possible."""
    for base in (Path.cwd(), ROOT):
        if p.is_relative_to(base):
            return os.path.relpath(p, base)
    return str(p)


def _sources(entry: Path) -> list[Path]:
    """The file and every local header it includes, in a stable order."""
    from .sim.translate import local_includes

    seen: list[Path] = []
    todo = [entry]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.append(p)
        todo.extend(local_includes(p, [INCLUDE]).values())
    return seen


def _key(entry: Path, backend: str, flags: list[str]) -> str:
    import torch

    from .sim.translate import TRANSLATOR_VERSION

    h = hashlib.sha256()
    h.update(f"{backend}|{torch.__version__}|{sys.version_info[:2]}|{' '.join(flags)}".encode())
    h.update(os.environ.get("TORCH_CUDA_ARCH_LIST", "").encode())
    files = _sources(entry)
    if backend == "sim":
        h.update(TRANSLATOR_VERSION.encode())
        files += sorted(SIM_INCLUDE.rglob("*.h"))
    for f in files:
        h.update(str(f.name).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:10]


def _ext_name(entry: Path, backend: str, key: str) -> str:
    stem = re.sub(r"\W", "_", entry.stem)
    if not stem[:1].isalpha():
        stem = "k" + stem
    return f"{stem}_{backend}_{key}"


def _is_pybind(entry: Path) -> bool:
    from .sim.translate import code_mask

    src = entry.read_text()
    mask = code_mask(src)
    return any(mask[m.start()] for m in re.finditer(r"\bPYBIND11_MODULE\b", src))


class Extension:
    """A loaded file whose ops are registered with TORCH_LIBRARY: `ext.op(x)` calls `torch.ops.<ns>.op`."""

    def __init__(self, ns: str, path: Path, backend: str, so: Path):
        self.ns, self.path, self.backend, self.so = ns, path, backend, so

    def __getattr__(self, op: str):
        import torch

        if op.startswith("__"):
            raise AttributeError(op)
        try:
            return getattr(getattr(torch.ops, self.ns), op)
        except (AttributeError, RuntimeError):
            raise AttributeError(f"{self.path.name} defines no op {op!r}; it defines: {', '.join(self.ops()) or 'none'}") from None

    def ops(self) -> list[str]:
        """The names of the ops the file registers."""
        import torch

        prefix = self.ns + "::"
        return sorted({n[len(prefix):].split(".")[0] for n in torch._C._dispatch_get_all_op_names() if n.startswith(prefix)})

    def __dir__(self):
        return [*super().__dir__(), *self.ops()]

    def __repr__(self):
        return f"<kernels from {self.path.name} on {self.backend}: {', '.join(self.ops())}>"


def _compiler_errors(log: str, limit: int = 25) -> str:
    """The compiler's error lines (with a little context), the most useful part of a failed build's log."""
    lines = log.splitlines()
    keep: list[str] = []
    for i, line in enumerate(lines):
        if re.search(r"(:\d+(:\d+)?:|\(\d+\):) (fatal )?error", line):
            keep.extend(lines[i:i + 3])
        if len(keep) >= limit:
            break
    text = "\n".join(dict.fromkeys(keep)) or "\n".join(lines[-limit:])
    for base in (Path.cwd(), ROOT):  # the learner's paths, not the machine's
        text = text.replace(str(base) + os.sep, "")
    return text


def _import_so(name: str, so: Path, pybind: bool, entry: Path, backend: str):
    import torch

    if pybind:
        spec = importlib.util.spec_from_file_location(name, so)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.backend, module.path = backend, entry
        return module
    torch.ops.load_library(str(so))
    return Extension(name, entry, backend, so)


def build(source: str | os.PathLike, backend: str | None = None, *, verbose: bool = False,
          extra_cflags: list[str] | None = None, quiet: bool = False):
    """Build (or find in the cache) and load a .cu file; returns the module or its ops.

    `backend` is `cuda` or `sim` (default: $KERNELS_BACKEND, else cuda with a GPU, else sim).
    A file with PYBIND11_MODULE returns the Python module; a file with TORCH_LIBRARY returns an
    object whose attributes are its ops.
    """
    entry = find_source(source)
    be = _backend.resolve(backend) if backend != "cuda-compile" else "cuda"
    flags = (CUDA_FLAGS if be == "cuda" else SIM_FLAGS) + list(extra_cflags or [])
    if backend == "cuda-compile":  # only validity matters: unoptimised host code builds much faster
        flags = ["-O0" if f == "-O3" else f for f in flags]
    key = _key(entry, be, flags)
    name = _ext_name(entry, be, key)
    if name in _loaded:
        return _loaded[name]
    out = build_root() / name
    so = out / f"{name}.so"
    pybind = _is_pybind(entry)
    if so.exists():
        _loaded[name] = _import_so(name, so, pybind, entry, be)
        return _loaded[name]

    _cuda_home()
    import torch.utils.cpp_extension as cpp

    out.mkdir(parents=True, exist_ok=True)
    if not quiet:
        print(f"building {entry.stem} for {be} ...", end="", flush=True)
    t0 = time.perf_counter()
    kwargs = dict(name=name, build_directory=str(out), verbose=verbose, is_python_module=pybind)
    make_pch = False
    try:
        if be == "sim":
            from .sim.translate import TranslateError, translate_tree

            try:
                main, _ = translate_tree(entry, out / "sim_src", [INCLUDE], lambda p: display_path(p))
            except TranslateError as e:
                raise BuildError(f"the simulator cannot translate {display_path(entry)}:\n{e}") from None
            pch = _sim_pch(flags)
            use_pch = (["-include", str(pch)] if pch.with_suffix(".h.gch").exists()
                       and os.environ.get("KERNELS_SIM_PCH", "1") != "0" else [])
            cpp.load(sources=[str(main)], extra_include_paths=[str(SIM_INCLUDE), str(INCLUDE), str(entry.parent)],
                     extra_cflags=flags + use_pch, **kwargs)
            make_pch = not use_pch and flags == SIM_FLAGS
        else:
            _cuda_env()
            cpp.load(sources=[str(entry)], extra_include_paths=[str(INCLUDE)] + _missing_toolkit_headers(),
                     extra_cuda_cflags=flags,
                     extra_cflags=["-O0" if "-O0" in flags else "-O2"], **kwargs)
    except BuildError:
        if not quiet:
            print(" failed")
        raise
    except RuntimeError as e:
        if not quiet:
            print(" failed")
        log = str(e)
        (out / "build.log").write_text(log)
        raise BuildError(
            f"building {display_path(entry)} for {be} failed. The compiler said:\n\n{_compiler_errors(log)}\n\n"
            f"(full log: {display_path(out / 'build.log')})") from None
    if not quiet:
        print(f" {time.perf_counter() - t0:.1f} s", flush=True)
    if make_pch:
        t0 = time.perf_counter()
        if not quiet:
            print("precompiling the common headers once, so later sim builds take seconds ...", end="", flush=True)
        made = _make_sim_pch(pch, out / "build.ninja")
        if not quiet:
            print(f" {time.perf_counter() - t0:.1f} s" if made else " skipped", flush=True)
    if not so.exists():  # cpp_extension names the library after the extension
        cands = list(out.glob(f"{name}*.so"))
        so = cands[0] if cands else so
    _loaded[name] = _import_so(name, so, pybind, entry, be)
    return _loaded[name]


# ---------------------------------------------------------------------------------------------
# A precompiled header for sim builds. Parsing ATen's and torch/library.h's headers takes about
# 7 of the 10 s that a one-op sim build takes on a small machine; gcc can load them precompiled
# instead. The first sim build on a machine compiles normally and then precompiles these headers
# with exactly the flags ninja used (read back from its build.ninja); later builds include the
# precompiled file first, and the headers' own include guards make the file's #includes no-ops.
# gcc checks that the precompiled file fits (same compiler, same flags) and otherwise ignores it
# and parses the headers as usual, so a stale one costs time, never correctness.
# KERNELS_SIM_PCH=0 turns it off.
# Only what helpers.cuh (which every kernel file includes) includes itself, so that a file that
# forgets an #include fails on the simulator as it would with nvcc.
SIM_PCH_HEADERS = ["cudasim.h", "ATen/core/Tensor.h", "c10/cuda/CUDAException.h", "c10/cuda/CUDAStream.h",
                   "cstdint", "string", "torch/library.h"]


def _sim_pch(flags: list[str]) -> Path:
    """Where the precompiled header for these flags lives (it may not exist yet)."""
    import torch

    h = hashlib.sha256()
    for part in (torch.__version__, torch.__file__, sys.version, " ".join(flags), " ".join(SIM_PCH_HEADERS)):
        h.update(part.encode())
    for f in sorted(SIM_INCLUDE.rglob("*.h")):
        h.update(f.read_bytes())
    return build_root() / "sim-pch" / h.hexdigest()[:12] / "sim_pch.h"


def _make_sim_pch(header: Path, ninja_file: Path) -> bool:
    """Precompile SIM_PCH_HEADERS with the flags of a finished sim build; never fatal.
    Returns whether a precompiled header is there now."""
    import fcntl
    import shlex
    import subprocess

    if os.environ.get("KERNELS_SIM_PCH", "1") == "0" or not ninja_file.exists():
        return False
    text = ninja_file.read_text()
    cxx = re.search(r"^cxx = (.+)$", text, re.M)
    cflags = re.search(r"^cflags = (.+)$", text, re.M)
    if not cxx or not cflags:
        return False
    flags = [f for f in shlex.split(cflags.group(1)) if not f.startswith("-DTORCH_EXTENSION_NAME=")]
    header.parent.mkdir(parents=True, exist_ok=True)
    gch, failed = header.with_suffix(".h.gch"), header.with_suffix(".failed")
    with open(header.parent / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel builds: one precompiles, the others wait and reuse it
        if gch.exists() or failed.exists():
            return gch.exists()
        header.write_text("// Headers every sim build includes, precompiled once (kernels/build.py).\n"
                          + "".join(f"#include <{h}>\n" for h in SIM_PCH_HEADERS))
        tmp = gch.with_suffix(f".tmp{os.getpid()}")
        run = subprocess.run([*shlex.split(cxx.group(1)), *flags, "-x", "c++-header", str(header), "-o", str(tmp)],
                             capture_output=True, text=True)
        if run.returncode == 0:
            tmp.replace(gch)
        else:
            tmp.unlink(missing_ok=True)
            failed.write_text(run.stderr[-4000:])
        return gch.exists()


def _cuda_home() -> None:
    """Point cpp_extension at the CUDA toolkit; without this it guesses from nvcc and can miss libcudart."""
    if not os.environ.get("CUDA_HOME") and not os.environ.get("CUDA_PATH") and Path("/usr/local/cuda/bin/nvcc").exists():
        os.environ["CUDA_HOME"] = "/usr/local/cuda"
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)  # no "No CUDA runtime" noise


def _missing_toolkit_headers() -> list[str]:
    """An include folder for CUDA library headers (cusparse.h, ...) the toolkit lacks but torch ships.

    A minimal toolkit (nvcc and the runtime only) has no cuSPARSE/cuBLAS headers, which
    ATen/cuda/CUDAContext.h includes; a CUDA build of torch from pip carries them in its
    nvidia/cuXX/include folder. Only the headers the toolkit is missing are linked in, so the
    toolkit's own headers always win.
    """
    from torch.utils.cpp_extension import CUDA_HOME
    import torch

    if not CUDA_HOME:
        return []
    have = Path(CUDA_HOME) / "include"
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


def _cuda_env() -> None:
    """Pick a GPU architecture to compile for when there is no GPU to ask."""
    if not os.environ.get("TORCH_CUDA_ARCH_LIST") and not _backend.gpu_available():
        os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0"


def load(source: str | os.PathLike, backend: str | None = None, **kwargs):
    """Build and load a .cu file (a path, or a reference name such as '04'); see `build`."""
    return build(source, backend, **kwargs)


def compile_only(source: str | os.PathLike) -> Path:
    """Compile a .cu file as the real CUDA extension with nvcc, GPU or not; returns the built library."""
    ext = build(source, "cuda-compile", quiet=True)
    return Path(getattr(ext, "so", None) or ext.__file__)
