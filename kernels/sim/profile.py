"""Memory-access profiles of kernels on the simulator: `kernels.profile(fn, *args, **kwargs)`.

    ext = load("04_memory_bound", "sim")
    print(profile(ext.scale_add3, 2.0, x, y, out, 32))

`fn` is an op of a file loaded with the `sim` backend, or any Python callable that calls such ops.
Every such op runs instead from a profiling build of the same file (a separate cached build:
compiled with the thread-sanitizer's instrumentation, whose hooks kernels/sim/include/
cudasim_profile.h supplies, so every load and store of a kernel is seen with its call site).
The report has one row per kernel, source line and kind of access: how many warp-level requests
ran it, the distinct 32-byte sectors a global request touched, the bank ways of a shared request
(1: no conflict) and the lanes that were active. `make profile LESSON=04` (kernels/tools/profile.py)
prints the tables of a lesson's variants.
"""
from __future__ import annotations

import ctypes
import dataclasses
import functools
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..build import Extension, SourceSet, load, loaded_extensions
from ..build.toolchain import cxx, cxx_version
from ..tables import text_table

KINDS = ("global load", "global store", "shared load", "shared store", "atomic")
_WRITE, _SHARED, _ATOMIC = 1, 2, 8  # the flags of cudasim_profile.h
_SIM_HEADERS = ("cudasim.h", "cudasim_profile.h", "cudasim_instrument.h", "cudasim_check.h", "cuda_fp16.h", "cuda_bf16.h", "cooperative_groups.h")
# Simulator functions that are themselves an access of the caller's line (the rest of the
# simulator's code is its own business and is left out).
# addr2line -C names them as `float atomicAdd<float, float>(float*, float)`.
_ACCESS_FUNCTIONS = re.compile(r"(?:^|\s)(__ldg|__ldcs|__ldcg|__ldca|__ldlu|__ldcv|__stcs|__stcg|__stwb|__stwt"
                               r"|atomic[A-Z]\w*)\s*[<(]")


@dataclasses.dataclass(frozen=True)
class Row:
    """One kernel's accesses of one kind at one source line, averaged over its warp requests."""

    kernel: str
    line: str                          # "file.cu:NN" in the learner's file
    kind: str                          # one of KINDS
    requests: int                      # warp-level instructions that made this access
    sectors_per_request: float | None  # distinct 32-byte sectors per request (global memory)
    bank_ways: float | None            # most distinct 4-byte words wanted from one bank (shared memory)
    active_lanes: float                # lanes active per request


@dataclasses.dataclass
class Report:
    """What `profile` returns: `rows` (a list of Row); printing it gives a table."""

    rows: list[Row]

    def __str__(self) -> str:
        head = ("kernel", "line", "kind", "requests", "sectors/req", "bank ways", "active lanes")
        body = [(r.kernel, r.line, r.kind, str(r.requests), _fmt(r.sectors_per_request), _fmt(r.bank_ways),
                 _fmt(r.active_lanes)) for r in self.rows]
        if not body:
            return "no memory accesses inside kernels"
        return text_table(head, body, align="lllrrrr", rule=True)

    def _repr_pretty_(self, p, cycle) -> None:  # Jupyter shows the table
        p.text(str(self))


def _fmt(v: float | None) -> str:
    return "" if v is None else f"{v:.2f}".rstrip("0").rstrip(".")


class _RowC(ctypes.Structure):  # cudasim::prof::Row
    _fields_ = [("kernel", ctypes.c_char_p), ("pc_offset", ctypes.c_ulonglong), ("flags", ctypes.c_ulonglong),
                ("requests", ctypes.c_ulonglong), ("sectors", ctypes.c_ulonglong), ("ways", ctypes.c_ulonglong),
                ("lanes", ctypes.c_ulonglong)]


def profile_flags() -> list[str]:
    """What an instrumented build (the profiler's and the race check's) adds to the simulator's flags: the
    hooks' switch, the instrumentation (compiled in, never linked: no thread-sanitizer runtime is needed)
    without the calls at every function entry and exit (a third of the cost, and not needed), no tail calls
    (a simulator function called last in a kernel, such as an atomic, must see its caller's return
    address), and line tables for addr2line."""
    no_entry_exit = (["-mllvm", "-tsan-instrument-func-entry-exit=0"] if "clang" in cxx_version()
                     else ["--param=tsan-instrument-func-entry-exit=0"])
    return ["-DCUDASIM_INSTRUMENTED", "-fsanitize=thread", *no_entry_exit, "-fno-optimize-sibling-calls", "-g1"]


@functools.cache
def compiler_problem() -> str | None:
    """Why this machine cannot make a profiling build (None when it can): the C++ compiler that
    builds use must accept -fsanitize=thread (gcc and clang do) and addr2line must be there."""
    compiler = cxx()
    install = ("install g++ (Debian/Ubuntu: apt-get install g++ binutils; macOS: xcode-select --install) "
               "or clang++, and make sure $CXX (or c++) names it")
    if not shutil.which(compiler):
        return f"profiling needs a C++ compiler, and {compiler} was not found: {install}"
    if not shutil.which("addr2line"):
        return ("profiling maps instructions to source lines with addr2line, which was not found: install "
                "binutils (apt-get install binutils) or LLVM's llvm-addr2line as addr2line")
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "probe.cpp"
        src.write_text("int probe(int* p) { return *p; }\n")
        run = subprocess.run([compiler, *profile_flags(), "-fPIC", "-O2", "-c", str(src), "-o", str(Path(d) / "p.o")],
                             capture_output=True, text=True)
    if run.returncode != 0:
        said = (run.stderr.strip().splitlines() or ["no message"])[0]
        return (f"profiling builds with -fsanitize=thread, which {compiler} refused ({said}): {install}")
    return None


def _profiling_build(ext):
    """The profiling build of the file an extension was loaded from (built once, then cached)."""
    problem = compiler_problem()
    if problem:
        raise RuntimeError(problem)
    return load(ext.path, "sim", extra_cflags=profile_flags())


class _Twin:
    """A profiling build in use: its library's control functions and what it has counted so far."""

    def __init__(self, ext):
        self.source = ext.path
        self.ext = _profiling_build(ext)
        lib = ctypes.CDLL(str(self.ext.so))
        self.start, self.stop, self._rows = lib.cudasim_profile_start, lib.cudasim_profile_stop, lib.cudasim_profile_rows
        self._rows.restype = ctypes.c_size_t
        self._rows.argtypes = [ctypes.POINTER(_RowC), ctypes.c_size_t]
        self.totals: dict[tuple[str, int, int], list[int]] = {}

    def collect(self) -> None:
        """Add the counts of the run that just stopped to the totals."""
        n = self._rows(None, 0)
        buf = (_RowC * n)()
        self._rows(buf, n)
        for r in buf:
            t = self.totals.setdefault((r.kernel.decode(), r.pc_offset, r.flags), [0, 0, 0, 0])
            for i, v in enumerate((r.requests, r.sectors, r.ways, r.lanes)):
                t[i] += v


def _extension_of(namespace: str):
    """The loaded Extension whose ops live in this namespace, or None."""
    for ext in loaded_extensions():
        if isinstance(ext, Extension) and ext.ns == namespace:
            return ext
    return None


def profile(fn, *args, **kwargs) -> Report:
    """Run `fn(*args, **kwargs)` with the ops of sim-loaded files taken from their profiling builds;
    returns the Report of every memory access their kernels made."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    if not callable(fn):
        raise TypeError(f"profile expects an op (ext.name) or a callable that calls ops, got {type(fn).__name__}")
    twins: dict[str, _Twin] = {}

    class Redirect(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            ext = _extension_of(func.namespace)
            if ext is None:
                return func(*args, **(kwargs or {}))
            if ext.backend != "sim":
                raise RuntimeError(f"{func.namespace}::{func._opname} was loaded for the {ext.backend} backend; the "
                                   f"profile is a simulator feature: load {ext.path.name} with backend='sim' "
                                   "(tensors on the CPU) and profile that")
            twin = twins.get(func.namespace) or twins.setdefault(func.namespace, _Twin(ext))
            op = getattr(getattr(getattr(torch.ops, twin.ext.ns), func._opname), func._overloadname)
            twin.start()
            try:
                return op(*args, **(kwargs or {}))
            finally:
                twin.stop()
                twin.collect()

    with Redirect():
        fn(*args, **kwargs)
    if not twins:
        raise ValueError("profile ran the function, but it called no op of a file loaded with the sim backend: "
                         "pass an op (ext = load(file, 'sim'); profile(ext.name, *inputs)) or a function that calls one "
                         "(functions of a PYBIND11_MODULE file are not seen: register them with TORCH_LIBRARY)")
    rows = []
    for twin in twins.values():
        rows += _rows(twin)
    return Report(rows)


def _rows(twin: _Twin) -> list[Row]:
    """The twin's totals as report rows: call sites mapped to lines of the learner's files, merged
    by (kernel, line, kind)."""
    own = {p.name for p in SourceSet.of(twin.source).files}
    where = _lines(twin.ext.so, sorted({pc for _, pc, _ in twin.totals}), own)
    merged: dict[tuple[str, str, str], list[int]] = {}
    for (kernel, pc, flags), t in twin.totals.items():
        found = where.get(pc)
        if not found:
            continue  # the simulator's own code
        line, atomic, function = found
        atomic = atomic or bool(flags & _ATOMIC)  # an atomic reports itself at the learner's call of it
        kernel = function or kernel  # the launch names it as written: `Kernel<<<...>>>` for a template parameter
        if atomic and flags & _WRITE:
            continue  # an atomic's read-modify-write counts once, as its read
        space = "shared" if flags & _SHARED else "global"
        kind = "atomic" if atomic else f"{space} {'store' if flags & _WRITE else 'load'}"
        key = (kernel, line, kind + ("|shared" if atomic and space == "shared" else ""))
        m = merged.setdefault(key, [0, 0, 0, 0])
        for i in range(4):
            m[i] += t[i]
    rows = []
    for key in sorted(merged, key=lambda k: (k[0], _line_no(k[1]), KINDS.index(k[2].split("|")[0]))):
        kernel, line, kind = key
        requests, sectors, ways, lanes = merged[key]
        shared = kind.startswith("shared") or kind.endswith("|shared")
        rows.append(Row(kernel, line, kind.split("|")[0], requests,
                        None if shared else sectors / requests, ways / requests if shared else None, lanes / requests))
    return rows


def _line_no(line: str) -> int:
    return int(line.rsplit(":", 1)[1])


def _function_name(demangled: str) -> str:
    """`sum_kernel2<true>` from addr2line's `void sum_kernel2<true>(float const*, float*, long)`."""
    depth = 0
    for i, ch in enumerate(demangled):
        if ch in "<":
            depth += 1
        elif ch in ">":
            depth -= 1
        elif ch == "(" and depth == 0 and i > 0:
            demangled = demangled[:i]
            break
    depth, cut = 0, 0
    for i, ch in enumerate(demangled):  # drop a return type: the last space outside <...>
        depth += (ch == "<") - (ch == ">")
        if ch == " " and depth == 0:
            cut = i + 1
    return demangled[cut:]


def _lines(so: Path, pcs: list[int], own: set[str]) -> dict[int, tuple[str, bool, str]]:
    """For each call site (offset of a hook's return address in the library): the line of the
    learner's own files it belongs to, whether it is inside an atomic, and the kernel (or the
    function) it was compiled into; sites in the simulator's own code are left out. addr2line -i gives the chain of inlined calls, innermost first."""
    if not pcs:
        return {}
    run = subprocess.run(["addr2line", "-a", "-i", "-f", "-C", "-e", str(so), *[hex(pc - 1) for pc in pcs]],
                         capture_output=True, text=True, check=True)
    chains: list[list[tuple[str, str, int]]] = []
    lines = run.stdout.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("0x"):
            chains.append([])
            i += 1
            continue
        func, loc = lines[i], lines[i + 1] if i + 1 < len(lines) else "??:0"
        path, _, num = loc.partition(" ")[0].rpartition(":")
        chains[-1].append((func, Path(path).name, int(num) if num.isdigit() else 0))
        i += 2
    out = {}
    for pc, chain in zip(pcs, chains):
        atomic = False
        for depth, (func, name, num) in enumerate(chain):
            if name in own and num:
                # the kernel: the outermost function of the learner's files that the access was inlined
                # into (not the lambda that a translated launch wraps the kernel in)
                named = [f for f, n, _ in chain[depth:] if n in own and "lambda" not in f and "operator()" not in f]
                kernel = _function_name(named[-1]) if named else ""
                out[pc] = (f"{name}:{num}", atomic, kernel)
                break
            if depth == 0 and name in _SIM_HEADERS:
                m = _ACCESS_FUNCTIONS.search(func)
                if not m:
                    break  # the simulator's own work
                atomic = m.group(1).startswith("atomic")
    return out
