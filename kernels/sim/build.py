"""How the simulator builds a file: translate it (translate.py), then compile it as C++ for the CPU with
torch's cpp_extension and ninja, with the simulator's headers first on the include path.

What makes a sim build take seconds instead of half a minute lives here: precompiled headers (the
common headers every lesson file includes, once per machine), the simulator's runtime compiled once
into an object that every build links (`runtime_object`), a faster linker where one is installed,
and the light stand-ins for torch/extension.h and torch/all.h (with a record of the files they do
not fit, which then go straight to the real header). The loader (kernels/build) calls `compile_sim` for a sim build and adds
`key_files()` to its cache key; nothing on the nvcc path imports this module.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from filelock import FileLock

from ..build.errors import BuildError, display_path
from ..build.sources import SYSTEM_INCLUDE_RE, SourceSet, code_mask, is_directive
from ..build.toolchain import compiler_for, cxx, cxx_version
from ..paths import INCLUDE, SIM, SIM_INCLUDE, build_root

# -g1: line tables only, so that a fault in a kernel thread can name its source line (cudasim.h).
# -fno-strict-aliasing: CUDA code reads values through pointers of another type (bf16 pairs packed through an
# int*, `*(float4*)&x[i]`), which nvcc compiles as written; under C++'s strict aliasing rules the host compiler
# may reorder or drop such accesses and give a wrong answer.
# The half and bfloat16 switches are PyTorch's: its extension builds pass them to nvcc (cpp_extension), nvcc itself
# does not, so the compiler driver (nvcc.py: whole programs, objects, libraries) leaves them out.
TORCH_DEFINES = ["-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__", "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
                 "-D__CUDA_NO_HALF2_OPERATORS__"]
NVCC_FLAGS = ["-O2", "-fno-strict-aliasing", "-g1", "-fvisibility=hidden", "-fvisibility-inlines-hidden",
              "-Wno-unused-variable"]  # what nvcc.py compiles with
FLAGS = [*NVCC_FLAGS, *TORCH_DEFINES]  # what load's builds compile with
PCH_SWITCH = "KERNELS_SIM_PCH"  # =0 turns the precompiled headers off


def instrumented_flags() -> list[str]:
    """What an instrumented build (the access profiler's and the race and bounds check's: cudasim_instrument.h)
    adds to FLAGS: the hooks' switch; the thread sanitizer's instrumentation (compiled in, never linked: no
    sanitizer runtime is needed) without the calls at every function entry and exit (a third of the cost, and
    not needed); no tail calls (a simulator function called last in a kernel, such as an atomic, must see its
    caller's return address); and a suffix for the op namespaces the file names itself, so that the build
    loads beside the plain one (kernels.build's namespace suffix)."""
    from ..build import NAMESPACE_SUFFIX_FLAG

    # clang also leaves out the read of a read-modify-write (x[i] += v) unless told: the profiler counts it, and
    # the race check reports a race on it as a read, as with g++
    no_entry_exit = (["-mllvm", "-tsan-instrument-func-entry-exit=0", "-mllvm", "-tsan-instrument-read-before-write=1"]
                     if "clang" in cxx_version("sim") else ["--param=tsan-instrument-func-entry-exit=0"])
    return ["-DCUDASIM_INSTRUMENTED", "-fsanitize=thread", *no_entry_exit, "-fno-optimize-sibling-calls",
            f"{NAMESPACE_SUFFIX_FLAG}_instrumented"]


def simulator_files() -> list[Path]:
    """What a sim build's output depends on besides the file: the simulator's Python source (the
    translator, this strategy) and every header of the simulator."""
    return sorted(SIM.glob("*.py")) + sorted(f for f in SIM_INCLUDE.rglob("*") if f.is_file())


def key_files() -> list[tuple[str, Path]]:
    """(label, file) of everything a sim build depends on besides the learner's sources, for the cache key."""
    return [(f.relative_to(SIM.parent).as_posix(), f) for f in simulator_files()]


def _pch_enabled() -> bool:
    return os.environ.get(PCH_SWITCH, "1") != "0"


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
def _helpers_includes() -> list[str]:
    """The <...> headers helpers.cuh includes itself (what every lesson file gets through it), in its order."""
    text = (INCLUDE / "helpers.cuh").read_text()
    mask = code_mask(text)
    return [m.group(1).strip() for m in SYSTEM_INCLUDE_RE.finditer(text) if is_directive(text, mask, m)]


PCH_HEADERS = ["cudasim.h", *_helpers_includes()]

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
LIGHT_TORCH_OPS_PCH_HEADERS = PCH_HEADERS + [LIGHT_TORCH_OPS]
LIGHT_TORCH_PYBIND_PCH_HEADERS = PCH_HEADERS + [LIGHT_TORCH_PYBIND]


def light_torch_map(sources: SourceSet) -> dict[str, str]:
    """The simulator's light stand-ins that these files get: for torch/extension.h, with pybind11 where
    they use it (or Python's C API), without it where they do not; for torch/all.h (libtorch's C++ API
    without pybind11, as PyTorch's extension examples include it) and torch/types.h (torch::'s names
    for at::, which the light header gives itself), without."""
    return {"torch/extension.h": LIGHT_TORCH_PYBIND if sources.uses_python else LIGHT_TORCH_OPS,
            "torch/all.h": LIGHT_TORCH_OPS, "torch/types.h": LIGHT_TORCH_OPS}


def pch_headers(sources: SourceSet, light_torch: bool = True) -> list[str]:
    """The headers of the precompiled header for a build of these files, with or without a light
    torch/extension.h (light_torch_map)."""
    reached = sources.system_includes if light_torch else set()
    if "torch/extension.h" in reached:
        return PCH_HEADERS + [light_torch_map(sources)["torch/extension.h"]]
    return PCH_HEADERS + [LIGHT_TORCH_OPS] if reached & {"torch/all.h", "torch/types.h"} else PCH_HEADERS


def _torch_header_marks() -> list[Path]:
    """Files whose times change whenever torch's headers are installed again: its include folder and version."""
    import torch

    root = Path(torch.__file__).parent
    return [p for p in (root / "include", root / "version.py") if p.exists()]


def pch_path(flags: list[str], headers: list[str] = PCH_HEADERS) -> Path:
    """Where the precompiled header of these headers for these flags lives (it may not exist yet)."""
    # the headers' folders too: clang's #pragma once goes by file, so a PCH made from another copy of the
    # headers (the repository's, for an installed copy) would define everything twice; and the simulator's
    # files' times: clang refuses a PCH (a fatal error) when a header's time changed, content or not (a git
    # checkout to another branch and back), where gcc parses the headers instead
    # torch's headers likewise: a reinstall of the same torch (a new venv) gives them new times
    times = " ".join(str(f.stat().st_mtime_ns) for f in simulator_files() + _torch_header_marks())
    # resolved: the PCH records its header's path, which must outlive a linked folder (a test's build folder
    # that shares these, then is deleted, left a PCH naming a header that no longer existed: a fatal error)
    where = (build_root() / "sim-pch").resolve()
    return where / _digest(flags, " ".join(headers), str(INCLUDE), times) / "sim_pch.h"


def _digest(flags: list[str], *more: str) -> str:
    """A hash of what a sim build's compiled parts depend on: torch, Python, the flags, the compiler, the
    simulator's folder and files, and `more`."""
    import torch

    h = hashlib.sha256()
    for part in (torch.__version__, torch.__file__, sys.version, " ".join(flags), cxx_version("sim"), str(SIM_INCLUDE),
                 *more):
        h.update(part.encode())
    for f in simulator_files():
        h.update(f.read_bytes())
    return h.hexdigest()[:12]


def runtime_object(flags: list[str]) -> Path:
    """Where the simulator's runtime object for these flags lives (it may not exist yet): cudasim.h's CUDASIM_RT
    functions (the scheduler, warp operations, the check's and the profiler's bookkeeping) compiled once, and
    linked into every sim build whose precompiled header says so (about a second less of each build's compile,
    two in an instrumented one)."""
    return (build_root() / "sim-runtime").resolve() / _digest(flags) / "cudasim_runtime.o"


PREBUILT_LINE = "#define CUDASIM_PREBUILT_RUNTIME  // link the runtime object\n"


def prebuilt_runtime(header: Path) -> bool:
    """Whether the precompiled header `header` was made for builds that link the runtime object."""
    try:
        return header.read_text().find(PREBUILT_LINE) >= 0
    except OSError:
        return False


def make_runtime(obj: Path, cxx: list[str], flags: list[str]) -> bool:
    """Compile the runtime object with a finished sim build's compiler and flags; never fatal.
    Returns whether it is there now."""
    obj.parent.mkdir(parents=True, exist_ok=True)
    failed = obj.with_suffix(".failed")
    with FileLock(obj.parent / "lock"):
        if obj.exists() or failed.exists():
            return obj.exists()
        src = obj.with_suffix(".cpp")
        src.write_text("// The simulator's runtime, compiled once for these flags (kernels/sim/build.py).\n"
                       "#define CUDASIM_RUNTIME_OBJECT\n#include <cudasim.h>\n#include <cudasim_ptx.h>\n")
        return _compile_into(obj, failed, [*cxx, *flags, "-c", str(src)])


def _compile_into(out: Path, failed: Path, command: list[str]) -> bool:
    """Run the compiler `command` with `-o` a temporary file beside `out`, and move it to `out` when it succeeded;
    else keep what the compiler said in `failed`. Returns whether `out` is there now."""
    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
    run = subprocess.run([*command, "-o", str(tmp)], capture_output=True, text=True)
    if run.returncode == 0:
        tmp.replace(out)
    else:
        tmp.unlink(missing_ok=True)
        failed.write_text(run.stderr[-4000:])
    return out.exists()


@functools.cache
def fast_linker() -> list[str]:
    """The flag that makes the sim compiler link with lld or gold where one is installed and works (Linux): GNU
    ld takes about 0.4 s to link a sim build against torch's libraries, gold about 0.15 s. [] otherwise."""
    if not sys.platform.startswith("linux"):
        return []
    for tool, flag in (("ld.lld", "-fuse-ld=lld"), ("ld.gold", "-fuse-ld=gold")):
        if not shutil.which(tool):
            continue
        with tempfile.TemporaryDirectory() as d:
            src = Path(d) / "probe.cpp"
            src.write_text("int probe() { return 0; }\n")
            try:
                run = subprocess.run([cxx("sim"), flag, "-shared", "-fPIC", str(src), "-o", str(Path(d) / "probe.so")],
                                     capture_output=True, timeout=60)
            except (OSError, subprocess.SubprocessError):
                continue
        if run.returncode == 0:
            return [flag]
    return []


def pch_file(header: Path) -> Path:
    """The precompiled form of `header` that `-include header` picks up: header.gch for gcc, header.pch for clang."""
    return header.with_suffix(".h.pch" if "clang" in cxx_version("sim") else ".h.gch")


def ninja_command(ninja_file: Path) -> dict | None:
    """The compiler and flags of a finished sim build, read from its ninja file (None where it has none)."""
    if not ninja_file.exists():
        return None
    text = ninja_file.read_text()
    cxx = re.search(r"^cxx = (.+)$", text, re.M)
    cflags = re.search(r"^cflags = (.+)$", text, re.M)
    if not cxx or not cflags:
        return None
    flags = [f for f in shlex.split(cflags.group(1)) if not f.startswith("-DTORCH_EXTENSION_NAME=")]
    return {"cxx": shlex.split(cxx.group(1)), "flags": flags}


def make_pch(header: Path, headers: list[str], command: dict | None, runtime: Path | None = None) -> bool:
    """Precompile `headers` with `command`, the compiler and flags of a finished sim build (ninja_command) or
    the ones another precompiled header was made with (pch_command); never fatal. With `runtime`, the runtime
    object is made first (make_runtime), and the header, when it is, tells builds to link it.
    Returns whether a precompiled header is there now."""
    if not _pch_enabled() or command is None:
        return False
    compiler, flags = command["cxx"], command["flags"]
    prebuilt = runtime is not None and make_runtime(runtime, compiler, flags)
    header.parent.mkdir(parents=True, exist_ok=True)
    gch, failed = pch_file(header), header.with_suffix(".failed")
    with FileLock(header.parent / "lock"):  # parallel builds: one precompiles, the others wait and reuse it
        if gch.exists() or failed.exists():
            return gch.exists()
        header.write_text("// Headers that sim builds include, precompiled once (kernels/sim/build.py).\n"
                          + (PREBUILT_LINE if prebuilt else "") + "".join(f"#include <{h}>\n" for h in headers))
        instantiate = ["-fpch-instantiate-templates"] if "clang" in cxx_version("sim") else []  # compiled once
        made = _compile_into(gch, failed, [*compiler, *flags, *instantiate, "-x", "c++-header", str(header)])
        if made:
            (header.parent / PCH_COMMAND).write_text(json.dumps(command))
        return made


PCH_COMMAND = "command.json"  # beside a precompiled header: the compiler and flags it was made with


def pch_command(flags: list[str]) -> dict | None:
    """The compiler and flags that the common precompiled header for these flags was made with (None before one
    is made): a build that needs a precompiled header with a light torch/extension.h for the same flags makes it
    with them before it compiles, instead of compiling without one first (an instrumented pybind11 file, the
    only one of its kind in a run, took 31 s without; the header takes ~15 s once, then a build ~8 s)."""
    try:
        return json.loads((pch_path(flags).parent / PCH_COMMAND).read_text())
    except (OSError, ValueError):
        return None


def instrumented_pch_command(flags: list[str]) -> dict | None:
    """For the first instrumented build (flags: FLAGS + instrumented_flags()) once the plain builds' common
    precompiled header exists: that header's recorded command with the instrumented flags added, so that this build
    makes its own common precompiled header first and includes it, instead of compiling without one (the first
    race check's build of a small file took 19 s without it, 5 s with it) and precompiling after. None otherwise."""
    extra = instrumented_flags()
    plain = pch_command(FLAGS) if flags == FLAGS + extra else None
    return None if plain is None else {"cxx": plain["cxx"], "flags": [*plain["flags"], *extra]}


# A file that the light torch/extension.h does not fit would compile twice at every edit (the light
# attempt, then the real header). After a failed light attempt, build_root()/light-torch-misfits/
# keeps, per file path, the hash of the file's sources, the names the compiler could not find (from
# "'nn' is not a member of 'torch'" and the like) and the log. A later build of the same file goes
# straight to the real header when its sources are unchanged, or when they still use one of those
# names; an edit that drops them, or a change of the light header, tries the light header again.
_MISSING_NAME_RE = re.compile(  # gcc quotes with ' or, in a UTF-8 locale, with ‘ and ’; then clang's wording
    r"error: (?:[‘']([\w:]+)[’'] (?:is not a member of|was not declared in this scope|has not been declared)"
    r"|[^\n]*?[‘']([\w:]+)[’'] (?:in namespace [‘'][\w:]+[’'] )?does not name a (?:type|template type)"
    r"|(?:no (?:member|type|template) named|use of undeclared identifier|unknown type name) '([\w:]+)')")


def _light_torch_record(entry: Path) -> Path:
    """Where the note that the light torch/extension.h does not fit this file lives (it may not exist)."""
    return build_root() / "light-torch-misfits" / f"{hashlib.sha256(str(entry).encode()).hexdigest()[:16]}.json"


def _light_header_hash() -> str:
    """A hash of the light torch/extension.h: a change to it may make it fit files it did not."""
    h = hashlib.sha256()
    for light in LIGHT_TORCH_HEADERS:
        h.update(light.encode())
        h.update((SIM_INCLUDE / light).read_bytes())
    return h.hexdigest()


def missing_names(log: str) -> list[str]:
    """The names a failed compile could not find, last part only (`torch::nn` gives `nn`), in order."""
    found = (next(g for g in groups if g) for groups in _MISSING_NAME_RE.findall(log))
    return list(dict.fromkeys(name.rsplit("::", 1)[-1] for name in found))


# What in an error line may be the light header's doing rather than the file's: a name of PyTorch's
# or pybind11's, or a type the light header leaves incomplete.
_TORCH_IN_ERROR_RE = re.compile(r"error:.*(?:\b(?:torch|at|c10|pybind11|py)::|incomplete type)")


def own_error(log: str) -> bool:
    """Whether a failed build with the light torch header failed on the file's own mistake: its first
    error (the cause; later ones often follow from it) is a syntax or type error that names nothing of
    PyTorch's and no missing name, which the real header would only repeat, more slowly. Then it is
    reported at once instead of compiling the file again."""
    first = next((line for line in log.splitlines() if "error:" in line), "")
    return bool(first) and not missing_names(first) and not _TORCH_IN_ERROR_RE.search(first)


def _remember_light_torch_misfit(sources: SourceSet, log: str) -> None:
    """Note that the light torch/extension.h failed for this file (see light_torch_misfit); never fatal."""
    record = _light_torch_record(sources.entry)
    note = {"sources": sources.digest(), "light": _light_header_hash(), "names": missing_names(log), "log": log}
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        tmp = record.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(note))
        tmp.replace(record)
    except OSError:
        pass


def light_torch_misfit(sources: SourceSet) -> str | None:
    """The log of the light torch/extension.h's last failure on this file when it would fail again: the
    same sources, or sources that still use a name it could not find; else None (try the light header)."""
    try:
        note = json.loads(_light_torch_record(sources.entry).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(note, dict) or note.get("light") != _light_header_hash():
        return None
    if note.get("sources") == sources.digest():
        return note.get("log", "")
    names = note.get("names") or []
    if any(sources.uses(rf"\b{re.escape(name)}\b") for name in names):
        return note.get("log", "")
    return None


class _LightTorchFailed(Exception):
    """A sim build with the light torch/extension.h failed to compile; `log` is what the compiler said."""

    def __init__(self, log: str):
        super().__init__("the light torch/extension.h build failed")
        self.log = log


def sim_link_options(link) -> dict:
    """A load's LinkOptions (kernels/build/link.py) for a sim build: extra_cuda_cflags mapped as the driver maps
    nvcc's flags, -lcublas and the like dropped (the stand-ins are headers), objects checked to be simulated
    code. Returns cpp_extension's extra_cflags, extra_include_paths and extra_ldflags additions."""
    from .nvcc import DriverError, host_flags, link_flags, nvcc_object

    if link is None or link.empty:
        return {"cflags": [], "include_paths": [], "ldflags": []}
    try:
        cflags = host_flags(link.cuda_cflags)
        ldflags = link_flags(link.ldflags)
    except DriverError as e:
        raise BuildError(f"on the simulator: {e}") from None
    for obj in link.objects:
        if nvcc_object(Path(obj)):
            raise BuildError(f"extra_objects: {display_path(Path(obj))} was compiled by nvcc for the GPU; the simulator "
                             "links objects made by its own driver (kernels/sim/nvcc-sim -c ...)")
    return {"cflags": cflags, "include_paths": list(link.include_paths), "ldflags": ldflags + list(link.objects)}


def compile_sim(cpp, sources: SourceSet, flags: list[str], out: Path, kwargs: dict, quiet: bool, forget, link=None):
    """Translate the file and compile it for the simulator, with the light torch/extension.h where the
    file includes it and with the real one if that fails (or failed for this file before: see
    light_torch_misfit); returns what precompiles the headers afterwards when this build had no
    precompiled header to use, else None. `forget()` makes cpp_extension build again in this process.
    `link`: the load's LinkOptions (sim_link_options)."""
    extra = sim_link_options(link)
    known = light_torch_misfit(sources)
    if known is not None:
        (out / "light_torch.log").write_text(known)
        if not quiet:
            print(" with the full torch/extension.h (the light one lacked what this file uses last time) ...",
                  end="", flush=True)
        return _compile_translated(cpp, sources, flags, out, kwargs, quiet, extra, forget, light_torch=False)
    try:
        return _compile_translated(cpp, sources, flags, out, kwargs, quiet, extra, forget, light_torch=True)
    except _LightTorchFailed as e:
        log = e.log
        if own_error(log):
            raise RuntimeError(log) from None  # the loader reports the compiler's errors
        (out / "light_torch.log").write_text(log)
        if not quiet:
            print(" the simulator's light torch/extension.h lacks what this file uses: building it with the full "
                  "header ...", end="", flush=True)
    forget()
    after = _compile_translated(cpp, sources, flags, out, kwargs, quiet, extra, forget, light_torch=False)
    _remember_light_torch_misfit(sources, log)  # only once the real header built it: the file itself was fine
    return after


# clang's fatal error for a precompiled header one of whose headers changed time after this build chose it
STALE_PCH = "has been modified since the precompiled header"


def _compile_translated(cpp, sources: SourceSet, flags: list[str], out: Path, kwargs: dict, quiet: bool, extra: dict,
                        forget, *, light_torch: bool):
    """One attempt of compile_sim; raises _LightTorchFailed when the light header was used and the
    compiler failed."""
    from ..build import namespace_suffix
    from .translate import TranslateError, translate_tree

    entry = sources.entry
    try:
        main = translate_tree(sources, out / "sim_src", display_path, light_torch_map(sources) if light_torch else None,
                              namespace_suffix(flags))
    except TranslateError as e:
        raise BuildError(f"the simulator cannot translate {display_path(entry)}:\n{e}") from None
    headers = pch_headers(sources, light_torch)
    pch = pch_path(flags, headers)
    # a build's own -D and -U flags (LeetCUDA's -U__CUDA_NO_HALF_OPERATORS__ and friends) change what the headers
    # mean: the precompiled headers, made with PyTorch's macros, do not fit it (clang refuses them), so it parses them
    own_macros = any(f.startswith(("-D", "-U")) for f in extra["cflags"])
    if _pch_enabled() and not own_macros and not pch_file(pch).exists():
        command = pch_command(flags) if headers != PCH_HEADERS else instrumented_pch_command(flags)
        if command is not None:
            make_pch(pch, headers, command, runtime_object(flags))
    use_pch = ["-include", str(pch)] if _pch_enabled() and not own_macros and pch_file(pch).exists() else []
    runtime = runtime_object(flags)
    with_runtime = use_pch and prebuilt_runtime(pch)
    if with_runtime and not runtime.exists():  # the object was removed: parse the headers instead
        use_pch, with_runtime = [], False

    def build(use_pch: list[str], with_runtime: bool):
        link = fast_linker() + ([str(runtime)] if with_runtime else []) + extra["ldflags"]
        with compiler_for("sim"):
            cpp.load(sources=[str(main)],
                     extra_include_paths=[str(SIM_INCLUDE), str(INCLUDE), str(entry.parent), *extra["include_paths"]],
                     extra_cflags=flags + use_pch + extra["cflags"], extra_ldflags=link, **kwargs)

    try:
        try:
            build(use_pch, with_runtime)
        except RuntimeError as e:
            if not (use_pch and STALE_PCH in str(e)):
                raise
            # a header's time changed after this build chose its precompiled header: the simulator's (another
            # process touched it, a checkout ran meanwhile), or one the header's key does not cover (torch's,
            # the system's). This build parses the headers instead; a precompiled header that is stale under the
            # key it was chosen by is removed, so that the next build makes a fresh one instead of failing too.
            # (With load(verbose=True) the compiler's words go to the terminal, not the error, and this is missed.)
            if pch_path(flags, headers) == pch:
                pch_file(pch).unlink(missing_ok=True)
            if not quiet:
                print(" its precompiled header is older than a header it includes: parsing the headers ...",
                      end="", flush=True)
            forget()
            build([], False)
            return None
    except RuntimeError as e:
        if headers != PCH_HEADERS and str(e).startswith("Error building extension"):
            raise _LightTorchFailed(str(e)) from None
        raise
    if use_pch or own_macros or not _pch_enabled() or flags not in (FLAGS, FLAGS + instrumented_flags()):
        return None

    def precompile():
        t0 = time.perf_counter()
        if not quiet:
            print("precompiling the common headers once, so later sim builds take seconds ...", end="", flush=True)
        made = make_pch(pch, headers, ninja_command(out / "build.ninja"), runtime)
        if not quiet:
            print(f" {time.perf_counter() - t0:.1f} s" if made else " skipped", flush=True)
    return precompile
