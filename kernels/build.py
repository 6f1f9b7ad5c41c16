"""Build and load a .cu file on a backend: `load("04_memory_bound")` or `load("my_kernel.cu")`.

Both backends compile the file through torch.utils.cpp_extension with ninja: `cuda` hands it to
nvcc unchanged; `sim` translates it (kernels/sim/translate.py) and compiles it as C++ for the
CPU simulator. Builds are cached under build/ by a hash of everything that changes the library
(see _key). A cached library is loaded only when the stamp written after its build and load
still matches it, and processes that build the same file at once take turns (see _build_lock).
Sim builds also share a precompiled header (see _sim_pch), which cuts a build from about 11 s
to about 4.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from . import backend as _backend

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = Path(__file__).resolve().parent
INCLUDE = PACKAGE / "include"
REFERENCE = PACKAGE / "reference"
SIM_INCLUDE = PACKAGE / "sim" / "include"

# The flags PyTorch's own CUDA build uses are added by cpp_extension; these are ours.
CUDA_FLAGS = ["-O3", "-lineinfo"]
# -g1: line tables only, so that a fault in a kernel thread can name its source line (cudasim.h).
SIM_FLAGS = ["-O2", "-g1", "-fvisibility=hidden", "-fvisibility-inlines-hidden", "-Wno-unused-variable",
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


def _simulator_files() -> list[Path]:
    """What a sim build's output depends on besides the file: the translator's Python source and every
    header of the simulator."""
    sim = PACKAGE / "sim"
    return sorted(sim.glob("*.py")) + sorted(f for f in SIM_INCLUDE.rglob("*") if f.is_file())


@functools.cache
def _tool_version(tool: str) -> str:
    """What `tool --version` prints ('' when the tool is missing), asked once per process."""
    exe = shutil.which(tool)
    if not exe:
        return ""
    try:
        return subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def cxx_version() -> str:
    """The version text of the C++ compiler that cpp_extension runs ($CXX, else c++)."""
    return _tool_version(os.environ.get("CXX") or "c++")


def nvcc_version() -> str:
    """The version text of the CUDA toolkit's nvcc ('' without a toolkit)."""
    home = cuda_home()
    return _tool_version(str(Path(home) / "bin" / "nvcc")) if home else ""


@functools.cache
def _visible_gpu_archs() -> tuple[tuple[int, int], ...]:
    """The compute capabilities of the GPUs this process sees, clamped to the newest torch supports."""
    import torch

    if not _backend.gpu_available():
        return ()
    newest = [int(re.sub(r"\D", "", a.split("_", 1)[1])) for a in torch.cuda.get_arch_list() if a.startswith("sm_")]
    top = divmod(max(newest), 10) if newest else (99, 9)
    return tuple(sorted({min(torch.cuda.get_device_capability(i), top) for i in range(torch.cuda.device_count())}))


def cuda_arch_flags() -> list[str]:
    """nvcc's -gencode flags for the GPUs this process sees (sm_90 without a GPU).

    Settled before the cache key is computed, so a library built for one GPU is never loaded on
    another. Empty when $TORCH_CUDA_ARCH_LIST names the architectures: cpp_extension then reads it,
    and the key includes it.
    """
    if (os.environ.get("TORCH_CUDA_ARCH_LIST") or "native") != "native":
        return []
    archs = _visible_gpu_archs()
    flags = [f"-gencode=arch=compute_{a}{b},code=sm_{a}{b}" for a, b in archs or [(9, 0)]]
    if archs:  # PTX for the newest, as cpp_extension does, so a newer GPU can still JIT it
        a, b = archs[-1]
        flags.append(f"-gencode=arch=compute_{a}{b},code=compute_{a}{b}")
    return flags


def compile_flags(backend: str, extra_cflags: list[str] | None = None, optimise: bool = True) -> list[str]:
    """The compiler flags of a build: ours, the target GPU architectures (cuda), the caller's.
    Without `optimise` (a compile check: only validity matters) host code builds unoptimised, much faster."""
    flags = (CUDA_FLAGS + cuda_arch_flags() if backend == "cuda" else SIM_FLAGS) + list(extra_cflags or [])
    return flags if optimise else ["-O0" if f == "-O3" else f for f in flags]


def _key(entry: Path, backend: str, flags: list[str]) -> str:
    """A hash of everything that changes the built library: the file and its local headers, the
    flags (for cuda they include the target architectures), the backend, torch, Python, the
    C++ compiler, and nvcc (cuda) or the translator and the simulator's headers (sim)."""
    import torch

    h = hashlib.sha256()
    h.update(f"{backend}|{torch.__version__}|{sys.version_info[:2]}|{' '.join(flags)}".encode())
    h.update(os.environ.get("TORCH_CUDA_ARCH_LIST", "").encode())
    h.update(cxx_version().encode())
    files = [(f.name, f) for f in _sources(entry)]
    if backend == "sim":
        files += [(f.relative_to(PACKAGE).as_posix(), f) for f in _simulator_files()]
    else:
        h.update(nvcc_version().encode())
    for label, f in files:
        h.update(label.encode())
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


def _relative(text: str) -> str:
    """Text with the machine's paths to the working directory and the repository made relative."""
    for base in (Path.cwd(), ROOT):
        text = text.replace(str(base) + os.sep, "")
    return text


def _compiler_errors(log: str, limit: int = 25) -> str:
    """The compiler's error lines (with a little context), the most useful part of a failed build's log."""
    lines = log.splitlines()
    keep: list[str] = []
    for i, line in enumerate(lines):
        if re.search(r"(:\d+(:\d+)?:|\(\d+\):) (fatal )?error", line):
            keep.extend(lines[i:i + 3])
        if len(keep) >= limit:
            break
    return _relative("\n".join(dict.fromkeys(keep)) or "\n".join(lines[-limit:]))


def demangle(symbol: str) -> str:
    """A C++ symbol as source code writes it: `_ZN6helper5scaleEi` -> `helper::scale(int)`.

    Uses c++filt; without it, only the name (namespaces included) is recovered, not the parameters."""
    exe = shutil.which("c++filt")
    if exe:
        try:
            out = subprocess.run([exe, symbol], capture_output=True, text=True, timeout=10).stdout.strip()
            if out:
                return out
        except (OSError, subprocess.SubprocessError):
            pass
    m = re.match(r"_Z(N?)(.*)", symbol)
    if not m:
        return symbol
    nested, rest, parts = m.group(1), m.group(2), []
    while n := re.match(r"\d+", rest):  # <length><identifier>, repeated inside N...E
        size = int(n.group())
        parts.append(rest[n.end():n.end() + size])
        rest = rest[n.end() + size:]
        if not nested:
            break
    return "::".join(parts) + "(...)" if parts else symbol


def _load_error(e: BaseException, entry: Path, backend: str, so: Path) -> BuildError:
    """A failed load (the file compiled and linked) as a BuildError whose first line is the cause."""
    said = _relative(str(e.__cause__ or e))
    m = re.search(r"undefined symbol: (\S+)", said)
    n = re.search(r"(\S+): cannot open shared object file", said)
    if m:
        cause = (f"undefined symbol {demangle(m.group(1))}: the code calls it, but nothing that was built or "
                 "linked defines it (a declaration without a definition, a name or signature that differs "
                 "from the definition, or a __device__ function called from host code)")
    elif n:
        cause = f"a library it needs was not found when loading: {n.group(1)} (linked at build time, missing now)"
    else:
        cause = said.splitlines()[0] if said else type(e).__name__
    return BuildError(f"{cause}\n{display_path(entry)} compiled for {backend}, but loading the built library "
                      f"{display_path(so)} failed. The loader said:\n{said}")


def _import_so(name: str, so: Path, pybind: bool, entry: Path, backend: str):
    import torch

    if pybind:
        spec = importlib.util.spec_from_file_location(name, so)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.backend, module.path = backend, entry
        return module
    torch.ops.load_library(str(so))
    return Extension(_op_namespace(_sources(entry), name), entry, backend, so)


# A TORCH_LIBRARY, or with `fragment` a TORCH_LIBRARY_FRAGMENT, block (_EXPAND forms too): the
# namespace is group 3, the module variable group 4, and the block's body starts at the match's end.
_BLOCK_RE = {fragment: re.compile(rf"\bTORCH_LIBRARY({'_FRAGMENT' if fragment else ''})(_EXPAND)?\s*\(\s*(\w+)"
                                  r"\s*,\s*(\w+)\s*\)\s*\{") for fragment in (False, True)}
_namespaces: dict[str, Path] = {}  # op namespace -> the file whose library registered it in this process


def _library_blocks(files: list[Path], name: str, fragment: bool):
    """(namespace, module variable, source, mask, body start) for each TORCH_LIBRARY block of the files (the
    FRAGMENT blocks with `fragment`) in code, not in a comment or a #define; TORCH_EXTENSION_NAME is `name`."""
    from .sim.translate import code_mask

    for f in files:
        src = f.read_text()
        mask = code_mask(src)
        for m in _BLOCK_RE[fragment].finditer(src):
            line = src[src.rfind("\n", 0, m.start()) + 1:m.start()]
            if mask[m.start()] and not line.lstrip().startswith("#"):  # a use, not a #define
                # TORCH_LIBRARY quotes its argument before expanding it; the _EXPAND form expands it
                ns = name if m.group(2) and m.group(3) == "TORCH_EXTENSION_NAME" else m.group(3)
                yield ns, m.group(4), src, mask, m.end()


def _fixed_namespaces(files: list[Path], name: str) -> set[str]:
    """The op namespaces that TORCH_LIBRARY blocks in these files register (TORCH_EXTENSION_NAME is `name`)."""
    return {ns for ns, *_ in _library_blocks(files, name, fragment=False)}


def _op_namespace(files: list[Path], name: str) -> str:
    """The namespace whose ops an Extension shows: the one namespace that the files' TORCH_LIBRARY and
    TORCH_LIBRARY_FRAGMENT blocks define ops in, else TORCH_EXTENSION_NAME (`name`)."""
    found = _fixed_namespaces(files, name) | {ns for ns, *_ in _library_blocks(files, name, fragment=True)}
    return found.pop() if len(found) == 1 else name


def _namespace_taken(ns: str) -> bool:
    """Whether a TORCH_LIBRARY for `ns` exists in this process, with ops or without: asks the dispatcher
    for a library of that namespace (refused when one exists) and releases it at once."""
    import torch

    try:
        probe = torch._C._dispatch_library("DEF", ns, "", "kernels.build", 0)
    except RuntimeError:
        return True
    probe.reset()
    return False


def _namespace_clash(entry: Path, name: str, backend: str) -> BuildError | None:
    """An error when the file registers an op namespace this process already has (even one without
    ops): loading a second TORCH_LIBRARY for a namespace aborts the process (a C++ exception during
    dlopen), so it is refused."""
    for ns in sorted(_fixed_namespaces(_sources(entry), name)):
        if not _namespace_taken(ns):
            continue
        by = _namespaces.get(ns)
        where = f"by {display_path(by)}" if by else "by another library or torch.library"
        return BuildError(
            f"the op namespace {ns!r} is already registered in this process ({where}); {display_path(entry)} "
            f"registers it again with TORCH_LIBRARY, and PyTorch allows one TORCH_LIBRARY per namespace per "
            f"process. Restart the Python process (in Jupyter: Kernel > Restart) before loading it for {backend}, "
            "or give the file a namespace of its own (TORCH_EXTENSION_NAME).")
    import torch

    have = set(torch._C._dispatch_get_all_op_names())
    for ns, op in _fragment_defs(_sources(entry), name):
        if f"{ns}::{op}" in have:
            return BuildError(
                f"the op {ns}::{op} is already defined in this process; {display_path(entry)} defines it again "
                f"in a TORCH_LIBRARY_FRAGMENT, and PyTorch allows one definition of an op per process (an edited "
                f"copy of a source loaded before defines it a second time). Restart the Python process (in "
                f"Jupyter: Kernel > Restart) before loading it for {backend}, or give the file a namespace of its "
                "own (TORCH_LIBRARY_FRAGMENT_EXPAND(TORCH_EXTENSION_NAME, m): each build gets its own).")
    return None


def _fragment_defs(files: list[Path], name: str) -> list[tuple[str, str]]:
    """(namespace, op) for each op that a TORCH_LIBRARY_FRAGMENT block of the files defines (m.def("op...")),
    fragments of TORCH_EXTENSION_NAME included (a namespace of `name`)."""
    found = []
    for ns, var, src, mask, start in _library_blocks(files, name, fragment=True):
        depth, end = 1, start
        while end < len(src) and depth:  # the block's body: to the brace that closes it
            if mask[end]:
                depth += {"{": 1, "}": -1}.get(src[end], 0)
            end += 1
        defs = re.finditer(rf"\b{var}\s*\.\s*def\s*\(\s*(R\"\(|\")\s*(\w+)", src[start:end])
        found += [(ns, d.group(2)) for d in defs]
    return found


def _stamp(so: Path) -> str:
    """What the stamp of a good library holds: its size and content hash."""
    data = so.read_bytes()
    return f"{len(data)} {hashlib.sha256(data).hexdigest()}\n"


def _cached_library(out: Path, name: str) -> Path | None:
    """The cached library when its stamp (written after a successful build and load) matches it.

    Otherwise the leftovers of an interrupted or failed build (library, stamp, objects) are removed,
    so that the build that follows starts from its sources and cannot reuse a truncated file."""
    so, ok = out / f"{name}.so", out / f"{name}.ok"
    try:
        if ok.read_text() == _stamp(so):
            return so
    except OSError:
        pass
    for f in [so, ok, *out.glob("*.o")]:
        f.unlink(missing_ok=True)
    return None


@contextlib.contextmanager
def _build_lock(out: Path, name: str):
    """Hold an exclusive lock on one extension's build folder: the check of the cache, the build and
    the load happen under it, so a second process building the same file waits and then loads the
    first one's library. The kernel releases the lock if its holder dies. (cpp_extension keeps its
    own lock file, named `lock`, in the same folder; this one has another name.)"""
    import fcntl

    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"{name}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def build(source: str | os.PathLike, backend: str | None = None, *, verbose: bool = False,
          extra_cflags: list[str] | None = None, quiet: bool = False, python_module: bool | None = None):
    """Build (or find in the cache) and load a .cu file; returns the module or its ops.

    `backend` is `cuda` or `sim` (default: $KERNELS_BACKEND, else cuda with a GPU, else sim).
    A file with PYBIND11_MODULE returns the Python module; a file with TORCH_LIBRARY returns an
    object whose attributes are its ops. `python_module=False` loads a file with PYBIND11_MODULE as
    a library all the same (one whose module is not named after the file: the compile check's
    combined files). Every failure to compile or to load is a BuildError.
    """
    entry = find_source(source)
    be = _backend.resolve(backend) if backend != "cuda-compile" else "cuda"
    flags = compile_flags(be, extra_cflags, optimise=backend != "cuda-compile")
    key = _key(entry, be, flags)
    name = _ext_name(entry, be, key)
    if name in _loaded:
        return _loaded[name]
    clash = _namespace_clash(entry, name, be)
    if clash:
        raise clash
    out = build_root() / name
    pybind = _is_pybind(entry) if python_module is None else python_module
    after = None
    with _build_lock(out, name):
        so = _cached_library(out, name)
        if so is None:
            so, after = _compile(entry, be, flags, out, name, pybind, verbose=verbose, quiet=quiet)
        try:
            loaded = _import_so(name, so, pybind, entry, be)
        except (OSError, ImportError, RuntimeError) as e:
            raise _load_error(e, entry, be, so) from None
        (out / f"{name}.ok").write_text(_stamp(so))
    for ns in _fixed_namespaces(_sources(entry), name):
        _namespaces.setdefault(ns, entry)
    _loaded[name] = loaded
    if after:
        after()
    return loaded


def _compile(entry: Path, be: str, flags: list[str], out: Path, name: str, pybind: bool, *,
             verbose: bool, quiet: bool):
    """Compile and link the file into out/ (cpp_extension also loads it); returns the library and
    a follow-up to run once the build lock is released (precompiling headers), or None."""
    cpp = _cpp_extension()
    _forget_in_process(cpp, name)
    if not quiet:
        print(f"building {entry.stem} for {be} ...", end="", flush=True)
    t0 = time.perf_counter()
    kwargs = dict(name=name, build_directory=str(out), verbose=verbose, is_python_module=pybind)
    after = None
    try:
        with _quiet_cpp_extension():
            if be == "sim":
                after = _compile_sim(cpp, entry, flags, out, kwargs, quiet)
            else:
                cpp.load(sources=[str(entry)], extra_include_paths=[str(INCLUDE)] + _missing_toolkit_headers(),
                         extra_cuda_cflags=flags,
                         extra_cflags=["-O0" if "-O0" in flags else "-O2"], **kwargs)
    except BuildError:
        if not quiet:
            print(" failed")
        raise
    except RuntimeError as e:
        if not str(e).startswith("Error building extension"):  # it compiled; loading it failed
            if not quiet:
                print(" failed")
            raise _load_error(e, entry, be, out / f"{name}.so") from None
        if not quiet:
            print(" failed")
        log = str(e)
        (out / "build.log").write_text(log)
        raise BuildError(
            f"building {display_path(entry)} for {be} failed. The compiler said:\n\n{_compiler_errors(log)}\n\n"
            f"(full log: {display_path(out / 'build.log')})") from None
    except (OSError, ImportError) as e:
        if not quiet:
            print(" failed")
        raise _load_error(e, entry, be, out / f"{name}.so") from None
    if not quiet:
        print(f" {time.perf_counter() - t0:.1f} s", flush=True)
    so = out / f"{name}.so"
    if not so.exists():  # cpp_extension names the library after the extension
        cands = list(out.glob(f"{name}*.so"))
        so = cands[0] if cands else so
    return so, after


def _compile_sim(cpp, entry: Path, flags: list[str], out: Path, kwargs: dict, quiet: bool):
    """Translate the file and compile it for the simulator, with the light torch/extension.h where the
    file includes it and with the real one if that fails (or failed for this file before: see
    light_torch_misfit); returns what precompiles the headers afterwards when this build had no
    precompiled header to use, else None."""
    known = light_torch_misfit(entry)
    if known is not None:
        (out / "light_torch.log").write_text(known)
        if not quiet:
            print(" with the full torch/extension.h (the light one lacked what this file uses last time) ...",
                  end="", flush=True)
        return _compile_translated(cpp, entry, flags, out, kwargs, quiet, light_torch=False)
    try:
        return _compile_translated(cpp, entry, flags, out, kwargs, quiet, light_torch=True)
    except _LightTorchFailed as e:
        log = e.log
        (out / "light_torch.log").write_text(log)
        if not quiet:
            print(" the simulator's light torch/extension.h lacks what this file uses: building it with the full "
                  "header ...", end="", flush=True)
    _forget_in_process(cpp, kwargs["name"])
    after = _compile_translated(cpp, entry, flags, out, kwargs, quiet, light_torch=False)
    _remember_light_torch_misfit(entry, log)  # only once the real header built it: the file itself was fine
    return after


# A file that the light torch/extension.h does not fit would compile twice at every edit (the light
# attempt, then the real header). After a failed light attempt, build_root()/light-torch-misfits/
# keeps, per file path, the hash of the file's sources, the names the compiler could not find (from
# "'nn' is not a member of 'torch'" and the like) and the log. A later build of the same file goes
# straight to the real header when its sources are unchanged, or when they still use one of those
# names; an edit that drops them, or a change of the light header, tries the light header again.
_MISSING_NAME_RE = re.compile(  # gcc quotes with ' or, in a UTF-8 locale, with ‘ and ’
    r"error: (?:[‘']([\w:]+)[’'] (?:is not a member of|was not declared in this scope|has not been declared)"
    r"|[^\n]*?[‘']([\w:]+)[’'] (?:in namespace [‘'][\w:]+[’'] )?does not name a (?:type|template type))")


def _light_torch_record(entry: Path) -> Path:
    """Where the note that the light torch/extension.h does not fit this file lives (it may not exist)."""
    return build_root() / "light-torch-misfits" / f"{hashlib.sha256(str(entry).encode()).hexdigest()[:16]}.json"


def _files_hash(files: list[Path]) -> str:
    """A hash of these files' names and contents."""
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def _light_header_hash() -> str:
    """A hash of the light torch/extension.h: a change to it may make it fit files it did not."""
    return _files_hash([SIM_INCLUDE / light for light in LIGHT_TORCH_HEADERS])


def missing_names(log: str) -> list[str]:
    """The names a failed compile could not find, last part only (`torch::nn` gives `nn`), in order."""
    found = (a or b for a, b in _MISSING_NAME_RE.findall(log))
    return list(dict.fromkeys(name.rsplit("::", 1)[-1] for name in found))


def _remember_light_torch_misfit(entry: Path, log: str) -> None:
    """Note that the light torch/extension.h failed for this file (see light_torch_misfit); never fatal."""
    import json

    record = _light_torch_record(entry)
    note = {"sources": _files_hash(_sources(entry)), "light": _light_header_hash(),
            "names": missing_names(log), "log": log}
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        tmp = record.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(note))
        tmp.replace(record)
    except OSError:
        pass


def light_torch_misfit(entry: Path) -> str | None:
    """The log of the light torch/extension.h's last failure on this file when it would fail again: the
    same sources, or sources that still use a name it could not find; else None (try the light header)."""
    import json

    from .sim.translate import code_mask

    try:
        note = json.loads(_light_torch_record(entry).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(note, dict) or note.get("light") != _light_header_hash():
        return None
    if note.get("sources") == _files_hash(_sources(entry)):
        return note.get("log", "")
    names = note.get("names") or []
    for f in _sources(entry):
        src = f.read_text()
        mask = code_mask(src)
        if any(mask[m.start()] for name in names for m in re.finditer(rf"\b{re.escape(name)}\b", src)):
            return note.get("log", "")
    return None


class _LightTorchFailed(Exception):
    """A sim build with the light torch/extension.h failed to compile; `log` is what the compiler said."""

    def __init__(self, log: str):
        super().__init__("the light torch/extension.h build failed")
        self.log = log


def _compile_translated(cpp, entry: Path, flags: list[str], out: Path, kwargs: dict, quiet: bool, *,
                        light_torch: bool):
    """One attempt of _compile_sim; raises _LightTorchFailed when the light header was used and the
    compiler failed."""
    from .sim.translate import TranslateError, translate_tree

    try:
        main, originals = translate_tree(entry, out / "sim_src", [INCLUDE], lambda p: display_path(p),
                                         light_torch_map(_sources(entry)) if light_torch else None)
    except TranslateError as e:
        raise BuildError(f"the simulator cannot translate {display_path(entry)}:\n{e}") from None
    headers = pch_headers(originals, light_torch)
    pch = _sim_pch(flags, headers)
    enabled = os.environ.get("KERNELS_SIM_PCH", "1") != "0"
    use_pch = ["-include", str(pch)] if enabled and pch.with_suffix(".h.gch").exists() else []
    try:
        cpp.load(sources=[str(main)], extra_include_paths=[str(SIM_INCLUDE), str(INCLUDE), str(entry.parent)],
                 extra_cflags=flags + use_pch, **kwargs)
    except RuntimeError as e:
        if headers != SIM_PCH_HEADERS and str(e).startswith("Error building extension"):
            raise _LightTorchFailed(str(e)) from None
        raise
    if use_pch or not enabled or flags != SIM_FLAGS:
        return None

    def precompile():
        t0 = time.perf_counter()
        if not quiet:
            print("precompiling the common headers once, so later sim builds take seconds ...", end="", flush=True)
        made = _make_sim_pch(pch, headers, out / "build.ninja")
        if not quiet:
            print(f" {time.perf_counter() - t0:.1f} s" if made else " skipped", flush=True)
    return precompile


def _forget_in_process(cpp, name: str) -> None:
    """Make cpp_extension run the build even if this process built the same extension before (its
    in-process record would otherwise skip the build and load a library that was removed)."""
    versioner = getattr(cpp, "JIT_EXTENSION_VERSIONER", None)
    getattr(versioner, "entries", {}).pop(name, None)


# ---------------------------------------------------------------------------------------------
# A precompiled header for sim builds. Parsing ATen's and torch/library.h's headers takes about
# 7 of the 10 s that a one-op sim build takes on a small machine; gcc can load them precompiled
# instead. The first sim build on a machine compiles normally and then precompiles these headers
# with exactly the flags ninja used (read back from its build.ninja); later builds include the
# precompiled file first, and the headers' own include guards make the file's #includes no-ops.
# gcc checks that the precompiled file fits (same compiler, same flags) and otherwise ignores it
# and parses the headers as usual, so a stale one costs time, never correctness.
# KERNELS_SIM_PCH=0 turns it off.
# Three precompiled headers, since gcc uses one at most: the common one holds only what helpers.cuh
# (which every kernel file includes) includes itself, so that a file that forgets an #include
# fails on the simulator as it would with nvcc; files that include torch/extension.h get one that
# also holds the simulator's light stand-in for it, with or without pybind11 (LIGHT_TORCH_HEADERS).
SIM_PCH_HEADERS = ["cudasim.h", "ATen/core/Tensor.h", "c10/cuda/CUDAException.h", "c10/cuda/CUDAStream.h",
                   "cuda_bf16.h", "cuda_fp16.h", "cstdint", "cstring", "string", "torch/library.h"]
TORCH_API_HEADERS = ("torch/extension.h", "torch/all.h", "torch/python.h")

# torch/extension.h is all of libtorch's C++ API and pybind11: about 20 s of compiler time in every
# file that includes it, mostly template instantiation and code generation that no precompiled
# header saves (torch/all.h, the same without pybind11, about as much). Sim builds include a light
# stand-in instead: sim/include/cudasim_torch_all.h (tensors, ATen's functions, AT_DISPATCH, the op
# registry) for torch/all.h and for files that register their ops with TORCH_LIBRARY, and sim/include/cudasim_torch_extension.h, the same plus pybind11, for files that
# use pybind11 or Python's C API (pybind11 alone generates about 4 s of code in every file that
# includes it). Each has a precompiled header of its own. A file that uses more (torch::nn,
# autograd, ...) fails to compile with it and is built again with the real header and the common
# precompiled header. The simulator's README has the measurements, including why there is no
# precompiled header of the real torch/extension.h.
LIGHT_TORCH_OPS = "cudasim_torch_all.h"
LIGHT_TORCH_PYBIND = "cudasim_torch_extension.h"
LIGHT_TORCH_HEADERS = (LIGHT_TORCH_OPS, LIGHT_TORCH_PYBIND)
SIM_LIGHT_TORCH_OPS_PCH_HEADERS = SIM_PCH_HEADERS + [LIGHT_TORCH_OPS]
SIM_LIGHT_TORCH_PCH_HEADERS = SIM_PCH_HEADERS + [LIGHT_TORCH_PYBIND]

# What in code (not in comments or strings) needs pybind11 or Python's C API: PYBIND11_MODULE and
# the other macros, py:: and pybind11::, PyObject, PyInit_..., PyModule_..., THPVariable_...
_PYTHON_USE_RE = re.compile(r"\b(?:PYBIND11_\w+|pybind11\b|py::|Py[A-Z_]\w*|THP\w+)")


def uses_python(files: list[Path]) -> bool:
    """Whether these files (a file and its local headers) use pybind11 or Python's C API in code."""
    from .sim.translate import code_mask, masked_text

    for f in files:
        src = f.read_text()
        if _PYTHON_USE_RE.search(masked_text(src, code_mask(src))):
            return True
    return False


def light_torch_map(files: list[Path]) -> dict[str, str]:
    """The simulator's light stand-ins that these files get: for torch/extension.h, with pybind11 where
    they use it (or Python's C API), without it where they do not; for torch/all.h (libtorch's C++ API
    without pybind11, as PyTorch's extension examples include it), without."""
    return {"torch/extension.h": LIGHT_TORCH_PYBIND if uses_python(files) else LIGHT_TORCH_OPS,
            "torch/all.h": LIGHT_TORCH_OPS}


def system_includes(files: list[Path]) -> set[str]:
    """The <...> headers these files include in code (not in comments or strings)."""
    from .sim.translate import SYSTEM_INCLUDE_RE, code_mask

    reached = set()
    for f in files:
        src = f.read_text()
        mask = code_mask(src)
        reached |= {m.group(1).strip() for m in SYSTEM_INCLUDE_RE.finditer(src) if mask[m.start(1)]}
    return reached


def pch_headers(files: list[Path], light_torch: bool = True) -> list[str]:
    """The headers of the precompiled header for a build of these files (the file and its local
    headers, as the learner wrote them), with or without a light torch/extension.h (light_torch_map)."""
    reached = system_includes(files) if light_torch else set()
    if "torch/extension.h" in reached:
        return SIM_PCH_HEADERS + [light_torch_map(files)["torch/extension.h"]]
    return SIM_PCH_HEADERS + [LIGHT_TORCH_OPS] if "torch/all.h" in reached else SIM_PCH_HEADERS


def _sim_pch(flags: list[str], headers: list[str] = SIM_PCH_HEADERS) -> Path:
    """Where the precompiled header of these headers for these flags lives (it may not exist yet)."""
    import torch

    h = hashlib.sha256()
    for part in (torch.__version__, torch.__file__, sys.version, " ".join(flags), " ".join(headers), cxx_version()):
        h.update(part.encode())
    for f in _simulator_files():
        h.update(f.read_bytes())
    return build_root() / "sim-pch" / h.hexdigest()[:12] / "sim_pch.h"


def _make_sim_pch(header: Path, headers: list[str], ninja_file: Path) -> bool:
    """Precompile `headers` with the flags of a finished sim build; never fatal.
    Returns whether a precompiled header is there now."""
    import fcntl
    import shlex

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
        header.write_text("// Headers that sim builds include, precompiled once (kernels/build.py).\n"
                          + "".join(f"#include <{h}>\n" for h in headers))
        tmp = gch.with_suffix(f".tmp{os.getpid()}")
        run = subprocess.run([*shlex.split(cxx.group(1)), *flags, "-x", "c++-header", str(header), "-o", str(tmp)],
                             capture_output=True, text=True)
        if run.returncode == 0:
            tmp.replace(gch)
        else:
            tmp.unlink(missing_ok=True)
            failed.write_text(run.stderr[-4000:])
        return gch.exists()


@contextlib.contextmanager
def _quiet_cpp_extension():
    """cpp_extension's warnings (such as "No CUDA runtime is found") silenced while it runs here, and
    the logger's level restored afterwards."""
    logger = logging.getLogger("torch.utils.cpp_extension")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _cpp_extension():
    """torch.utils.cpp_extension, imported so that it finds the CUDA toolkit in /usr/local/cuda when
    neither $CUDA_HOME nor $CUDA_PATH names one (from nvcc on PATH alone it can guess a folder
    without libcudart). The module reads the variable once, at import; it is restored afterwards."""
    if "torch.utils.cpp_extension" in sys.modules:
        return sys.modules["torch.utils.cpp_extension"]
    default = ("/usr/local/cuda" if not (os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH"))
               and Path("/usr/local/cuda/bin/nvcc").exists() else None)
    with _quiet_cpp_extension():
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
    return _cpp_extension().CUDA_HOME


def _missing_toolkit_headers() -> list[str]:
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


def load(source: str | os.PathLike, backend: str | None = None, **kwargs):
    """Build and load a .cu file (a path, or a reference name such as '04'); see `build`."""
    return build(source, backend, **kwargs)


def load_inline(name: str, cuda_src: str, backend: str | None = None, **kwargs):
    """Build and load CUDA source held in a Python string, on either backend, cached like a file.

    The string is written to build/inline/<name>-<hash of the string>/<name>.cu (once) and built
    by `build`, so the same string loads from the cache, on both backends, and a compiler error
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
        return build(path, backend, **kwargs)
    except BuildError as e:
        raise BuildError(_inline_lines(str(e), path, name)) from None


def _inline_lines(message: str, path: Path, name: str) -> str:
    """A build error's `file:12:5:` and `file(12):` locations as the string's lines (the file may be
    named absolutely, from the working directory or from the repository)."""
    names = {str(path), display_path(path), _relative(str(path))}
    where = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    message = re.sub(rf"(?:{where})(?::(\d+)(?::\d+)?:|\((\d+)\):?)",
                     lambda m: f"line {m.group(1) or m.group(2)} of the inline source {name!r}:", message)
    return re.sub(where, f"the inline source {name!r}", message)


def compile_only(source: str | os.PathLike, python_module: bool | None = None) -> Path:
    """Compile a .cu file as the real CUDA extension with nvcc, GPU or not; returns the built library
    (loaded; `python_module` as for `build`)."""
    ext = build(source, "cuda-compile", quiet=True, python_module=python_module)
    return Path(getattr(ext, "so", None) or ext.__file__)
