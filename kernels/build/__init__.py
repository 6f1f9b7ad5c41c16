"""Build and load a .cu file on a backend: `load("04_memory_bound")` or `load("my_kernel.cu")`.

Both backends compile the file through torch.utils.cpp_extension with ninja: `cuda` hands it to
nvcc unchanged; `sim` hands it to the simulator's build (kernels/sim/build.py), which translates it
and compiles it as C++ for the CPU. What the build reads is walked and scanned once (sources.py);
builds are cached under build/ext by a hash of everything that changes the library (cache.py),
loaded only when the stamp written after their build and load still matches, and processes that
build the same file at once take turns. The nvcc path imports nothing from kernels.sim.

    sources.py    the file and its local headers, their code masks, the TORCH_LIBRARY and pybind11 scans
    cache.py      the cache key, the stamp, the build lock
    toolchain.py  cpp_extension, the CUDA toolkit and its tools, compiler versions, GPU architectures
    extension.py  a loaded file's ops, and the op namespaces this process has
    errors.py     BuildError and the compiler's errors in the learner's terms
"""
from __future__ import annotations

import hashlib
import os
import re
import time
from pathlib import Path
from typing import Sequence

from .. import backend as _backend
from ..paths import INCLUDE, REFERENCE, build_root
from . import cache
from .errors import BuildError, compiler_errors, demangle, display_path, load_error, relative
from .extension import Extension, import_library, namespace_clash, remember_namespaces
from .link import LinkOptions
from .sources import SourceSet
from .toolchain import (cpp_extension, cuda_arch_flags, cuda_home, cuda_link_flags, missing_toolkit_headers,
                        quiet_cpp_extension)

__all__ = ["load", "load_inline", "compile_only", "BuildError", "Extension", "SourceSet", "find_source",
           "display_path", "build_root", "cuda_home", "demangle"]

# The flags PyTorch's own CUDA build uses are added by cpp_extension; these are ours.
CUDA_FLAGS = ["-O3", "-lineinfo"]

_loaded: dict[str, object] = {}


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


def compile_flags(backend: str, extra_cflags: list[str] | None = None, optimise: bool = True,
                  archs: Sequence[str] = (), sm90a: bool = False) -> list[str]:
    """The compiler flags of a build: ours, the target GPU architectures (cuda: `archs`, such as "75" or "90a",
    else those of the GPUs this process sees, sm_90a for a 9.0 GPU where the file has code for it: `sm90a`,
    SourceSet.needs_sm90a), the caller's. Without `optimise` (a compile check: only validity matters) host code
    builds unoptimised, much faster."""
    if backend == "sim":
        from ..sim.build import FLAGS as base
    else:
        base = CUDA_FLAGS + cuda_arch_flags(archs, sm90a)
    flags = base + list(extra_cflags or [])
    return flags if optimise else ["-O0" if f == "-O3" else f for f in flags]


def loaded_extensions() -> list[object]:
    """Every library this process has loaded through `load`, in order."""
    return list(_loaded.values())


def load(source: str | os.PathLike, backend: str | None = None, *, verbose: bool = False,
         extra_cflags: list[str] | None = None, quiet: bool = False, python_module: bool | None = None,
         extra_cuda_cflags: list[str] | None = None, extra_ldflags: list[str] | None = None,
         extra_include_paths: list[str | os.PathLike] | None = None,
         extra_objects: list[str | os.PathLike] | None = None):
    """Build (or find in the cache) and load a .cu file; returns the module or its ops.

    `source` is a path, or a reference file's name such as '04'. `backend` is `cuda` or `sim`
    (default: $KERNELS_BACKEND, else cuda with a GPU, else sim). A file with PYBIND11_MODULE returns
    the Python module; a file with TORCH_LIBRARY returns an object whose attributes are its ops.
    `python_module=False` loads a file with PYBIND11_MODULE as a library all the same (one whose
    module is not named after the file: the compile check's combined files). Every failure to
    compile or to load is a BuildError. On a GPU below a gate that the file's lesson declares (a variant
    or exercise that needs compute capability 8.0, say), what the GPU lacks runs on the simulator
    instead, after a line that says so (kernels/gates.py).

    As PyTorch's cpp_extension.load: `extra_cflags` and `extra_cuda_cflags` are compiler flags of the file
    (nvcc's on cuda; on sim the second are mapped as kernels/sim/nvcc.py maps nvcc's: GPU-only ones dropped),
    `extra_include_paths` folders to search for headers, `extra_ldflags` linker flags (`-lcublas`,
    `-lcublasLt`: on sim the simulator's stand-ins, nothing to link) and `extra_objects` objects or static
    libraries to link (on sim, made by the simulator's driver kernels/sim/nvcc-sim). All are part of the
    build cache's key, with the contents of the objects and of the library files named.
    """
    link = LinkOptions.of(extra_cuda_cflags, extra_ldflags, extra_include_paths, extra_objects)
    entry, be = find_source(source), _backend.resolve(backend)

    def build(backend: str):
        return _load(entry, backend, verbose=verbose, extra_cflags=extra_cflags, quiet=quiet,
                     python_module=python_module, optimise=True, link=link)

    if be == "cuda":  # what the GPU lacks runs on the simulator (the gates the file's lesson declares)
        from ..gates import guarded

        return guarded(entry, build)
    return build(be)


def compile_only(source: str | os.PathLike, python_module: bool | None = None,
                 extra_cflags: list[str] | None = None, archs: Sequence[str] = (), **link_options) -> Path:
    """Compile a .cu file as the real CUDA extension with nvcc, GPU or not, host code unoptimised (only
    validity matters); returns the built library (loaded; `python_module`, `extra_cflags` and the link options,
    extra_cuda_cflags, extra_ldflags, extra_include_paths and extra_objects, as for `load`). `archs`: the GPU
    architectures to compile for ("75", "90a"; default: those of the GPUs this process sees, sm_90 without one)."""
    ext = _load(find_source(source), "cuda", verbose=False, extra_cflags=extra_cflags, quiet=True,
                python_module=python_module, optimise=False, link=LinkOptions.of(**link_options), archs=archs)
    return Path(getattr(ext, "so", None) or ext.__file__)


def is_cached(source: str | os.PathLike, backend: str | None = None, extra_cflags: list[str] | None = None,
              **link_options) -> bool:
    """Whether `load(source, backend, extra_cflags=..., **link_options)` would find its build in the cache (no
    build needed; link_options: load's extra_cuda_cflags, extra_ldflags, extra_include_paths, extra_objects)."""
    entry, be = find_source(source), _backend.resolve(backend)
    link = LinkOptions.of(**link_options)
    sources = SourceSet.of(entry, link.search())
    flags = compile_flags(be, extra_cflags, sm90a=sources.needs_sm90a)
    name = cache.ext_name(entry, be, key_of(sources, be, flags, link))
    out = build_root() / name
    try:  # read only (cached_library also clears an unfinished build, which another process may be making)
        return name in _loaded or (out / f"{name}.ok").read_text() == cache.stamp(out / f"{name}.so")
    except OSError:
        return False


def key_of(sources: SourceSet, backend: str, flags: list[str], link: LinkOptions | None = None) -> str:
    """The cache key of a build of these sources for a backend with these flags and link options (see
    cache.key); a sim build's also covers the simulator's own files."""
    if backend == "sim":
        from ..sim.build import key_files
        backend_files = key_files()
    else:
        backend_files = []
    if link and not link.empty:
        flags = flags + link.key_parts()
        backend_files = backend_files + [(f"linked {f}", f) for f in link.linked_files()] + \
            [(f"included {f}", f) for f in link.angle_included_files(sources)]
    return cache.key(sources, backend, flags, backend_files)


# A build of a file that must load beside its plain build in one process (the simulator's instrumented
# twin, kernels/sim/instrumented.py) appends a suffix to the op namespaces the file names itself, through
# this define among its flags: the simulator's translator renames them (TORCH_EXTENSION_NAME is new at
# every build anyway).
NAMESPACE_SUFFIX_FLAG = "-DKERNELS_NAMESPACE_SUFFIX="


def namespace_suffix(flags: list[str]) -> str:
    """The suffix a build's flags ask for (see NAMESPACE_SUFFIX_FLAG), or ""."""
    found = [f[len(NAMESPACE_SUFFIX_FLAG):] for f in flags if f.startswith(NAMESPACE_SUFFIX_FLAG)]
    return found[-1] if found else ""


def _load(entry: Path, be: str, *, verbose: bool, extra_cflags: list[str] | None, quiet: bool,
          python_module: bool | None, optimise: bool, link: LinkOptions | None = None, archs: Sequence[str] = ()):
    """load() for a resolved file and backend."""
    if be == "sim":
        _backend.settle_torch_threads()
    link = link or LinkOptions()
    sources = SourceSet.of(entry, link.search())
    flags = compile_flags(be, extra_cflags, optimise=optimise, archs=archs, sm90a=sources.needs_sm90a)
    suffix = namespace_suffix(flags)
    name = cache.ext_name(entry, be, key_of(sources, be, flags, link))
    if name in _loaded:
        return _loaded[name]
    clash = namespace_clash(sources, name, be, suffix)
    if clash:
        raise clash
    out = build_root() / name
    pybind = sources.is_pybind if python_module is None else python_module
    after = None
    with cache.build_lock(out, name):
        so = cache.cached_library(out, name)
        if so is None:
            so, after = _compile(sources, be, flags, out, name, pybind, verbose=verbose, quiet=quiet, link=link)
        try:
            loaded = import_library(name, so, pybind, sources, be, suffix)
        except (OSError, ImportError, RuntimeError) as e:
            raise load_error(e, entry, be, so) from None
        (out / f"{name}.ok").write_text(cache.stamp(so))
    loaded.extra_cflags = list(extra_cflags or [])  # the simulator's instrumented twin is built with them too
    loaded.link_options = link.as_load_options()  # and with the same link options
    remember_namespaces(sources, name, suffix)
    _loaded[name] = loaded
    if after:
        after()
    return loaded


def _forget_in_process(cpp, name: str) -> None:
    """Make cpp_extension run the build even if this process built the same extension before (its
    in-process record would otherwise skip the build and load a library that was removed)."""
    versioner = getattr(cpp, "JIT_EXTENSION_VERSIONER", None)
    getattr(versioner, "entries", {}).pop(name, None)


def _compile(sources: SourceSet, be: str, flags: list[str], out: Path, name: str, pybind: bool, *,
             verbose: bool, quiet: bool, link: LinkOptions):
    """Compile and link the file into out/ (cpp_extension also loads it); returns the library and
    a follow-up to run once the build lock is released (precompiling headers), or None."""
    entry = sources.entry
    cpp = cpp_extension()
    _forget_in_process(cpp, name)
    if not quiet:
        print(f"building {entry.stem} for {be} ...", end="", flush=True)
    t0 = time.perf_counter()
    kwargs = dict(name=name, build_directory=str(out), verbose=verbose, is_python_module=pybind)
    after = None
    try:
        with quiet_cpp_extension():
            if be == "sim":
                from ..sim.build import compile_sim

                after = compile_sim(cpp, sources, flags, out, kwargs, quiet, lambda: _forget_in_process(cpp, name),
                                    link=link)
            else:
                cpp.load(sources=[str(entry)],
                         extra_include_paths=[str(INCLUDE)] + missing_toolkit_headers() + link.include_paths,
                         extra_cuda_cflags=flags + link.cuda_cflags,
                         extra_cflags=["-O0" if "-O0" in flags else "-O2"],
                         extra_ldflags=cuda_link_flags(link.ldflags) + link.objects, **kwargs)
    except BuildError:
        if not quiet:
            print(" failed")
        raise
    except RuntimeError as e:
        if not quiet:
            print(" failed")
        if not str(e).startswith("Error building extension"):  # it compiled; loading it failed
            raise load_error(e, entry, be, out / f"{name}.so") from None
        log = str(e)
        (out / "build.log").write_text(log)
        raise BuildError(
            f"building {display_path(entry)} for {be} failed. The compiler said:\n\n{compiler_errors(log)}\n\n"
            f"(full log: {display_path(out / 'build.log')})") from None
    except (OSError, ImportError) as e:
        if not quiet:
            print(" failed")
        raise load_error(e, entry, be, out / f"{name}.so") from None
    if not quiet:
        print(f" {time.perf_counter() - t0:.1f} s", flush=True)
    so = out / f"{name}.so"
    if not so.exists():  # cpp_extension names the library after the extension
        cands = list(out.glob(f"{name}*.so"))
        so = cands[0] if cands else so
    return so, after


def load_inline(name: str, cuda_src: str, backend: str | None = None, **kwargs):
    """Build and load CUDA source held in a Python string, on either backend, cached like a file.

    The string is written to build/inline/<name>-<hash of the string>/<name>.cu (once) and built
    by `load`, so the same string loads from the cache, on both backends, and a compiler error
    names the string's own line ("line 12 of the inline source 'gelu'"). Like a file it may
    include "helpers.cuh" and register ops with TORCH_LIBRARY_FRAGMENT (or TORCH_LIBRARY).
    """
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_]\w*", name):
        raise ValueError(f"load_inline's name must be an identifier (letters, digits, _), got {name!r}")
    if not isinstance(cuda_src, str) or not cuda_src.strip():
        raise ValueError(f"load_inline's cuda_src must be the CUDA source as a non-empty string, got {cuda_src!r:.60}")
    digest = hashlib.sha256(cuda_src.encode()).hexdigest()[:10]
    path = build_root() / "inline" / f"{name}-{digest}" / f"{name}.cu"
    if not path.exists() or path.read_text() != cuda_src:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(cuda_src)
        tmp.replace(path)  # atomic: a process building the same string at once never reads half a file
    try:
        return load(path, backend, **kwargs)
    except BuildError as e:
        raise BuildError(_inline_lines(str(e), path, name)) from None


def _inline_lines(message: str, path: Path, name: str) -> str:
    """A build error's `file:12:5:` and `file(12):` locations as the string's lines (the file may be
    named absolutely, from the working directory or from the repository)."""
    names = {str(path), display_path(path), relative(str(path))}
    where = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    message = re.sub(rf"(?:{where})(?::(\d+)(?::\d+)?:|\((\d+)\):?)",
                     lambda m: f"line {m.group(1) or m.group(2)} of the inline source {name!r}:", message)
    return re.sub(where, f"the inline source {name!r}", message)
