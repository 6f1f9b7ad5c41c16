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
import re
import subprocess
from pathlib import Path

from ..build import Extension, SourceSet, loaded_extensions
from ..tables import text_table
from .instrumented import Twin, compiler_problem, redirected, twin_function

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


def _collect(twin: Twin, totals: dict) -> None:
    """Add the counts of the run that just stopped to the twin's totals."""
    n = twin.lib.cudasim_profile_rows(None, 0)
    buf = (_RowC * n)()
    twin.lib.cudasim_profile_rows(buf, n)
    mine = totals.setdefault(twin.so, (twin, {}))[1]
    for r in buf:
        t = mine.setdefault((r.kernel.decode(), r.pc_offset, r.flags), [0, 0, 0, 0])
        for i, v in enumerate((r.requests, r.sectors, r.ways, r.lanes)):
            t[i] += v


def profile(fn, *args, **kwargs) -> Report:
    """Run `fn(*args, **kwargs)` with the ops (and pybind11 functions) of sim-loaded files taken from their
    instrumented builds; returns the Report of every memory access their kernels made."""
    if not callable(fn):
        raise TypeError(f"profile expects an op (ext.name) or a callable that calls ops, got {type(fn).__name__}")
    for ext in loaded_extensions():
        if getattr(ext, "backend", "sim") != "sim" and _calls(fn, ext):
            raise RuntimeError(f"{getattr(fn, '__name__', fn)} was loaded for the {ext.backend} backend; the profile is "
                               f"a simulator feature: load {ext.path.name} with backend='sim' (tensors on the CPU) and "
                               "profile that")
    totals: dict = {}

    def around(twin: Twin, call, name, args, kwargs):
        twin.lib.cudasim_profile_rows.restype = ctypes.c_size_t
        twin.lib.cudasim_profile_rows.argtypes = [ctypes.POINTER(_RowC), ctypes.c_size_t]
        twin.lib.cudasim_profile_start()
        try:
            return call()
        finally:
            twin.lib.cudasim_profile_stop()
            _collect(twin, totals)

    direct = twin_function(fn, around)
    with redirected(around):
        (direct or fn)(*args, **kwargs)
    if not totals:
        raise ValueError("profile ran the function, but it called no op or function of a file loaded with the sim "
                         "backend: pass an op (ext = load(file, 'sim'); profile(ext.name, *inputs)) or a function that "
                         "calls one")
    rows = []
    for twin, counts in totals.values():
        rows += _rows(twin, counts)
    return Report(rows)


def _calls(fn, ext) -> bool:
    """Whether `fn` is an op or a function of this loaded library."""
    qualified = getattr(fn, "_qualified_op_name", "") or getattr(getattr(fn, "default", None), "name", lambda: "")()
    if isinstance(ext, Extension):
        return bool(qualified) and qualified.split("::")[0] == ext.ns
    return getattr(ext, getattr(fn, "__name__", ""), None) is fn


def _rows(twin: Twin, counts: dict) -> list[Row]:
    """A twin's counts as report rows: call sites mapped to lines of the learner's files, merged
    by (kernel, line, kind)."""
    own = {p.name for p in SourceSet.of(twin.loaded.path).files}
    where = _lines(twin.so, sorted({pc for _, pc, _ in counts}), own)
    merged: dict[tuple[str, str, str], list[int]] = {}
    for (kernel, pc, flags), t in counts.items():
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
                named = [f for f, n, _ in chain[depth:] if n in own and "lambda" not in f and "operator()" not in f
                         and not _function_name(f).startswith("cudasim::")]  # the launch's call of the kernel
                kernel = _function_name(named[-1]) if named else ""
                out[pc] = (f"{name}:{num}", atomic, kernel)
                break
            if depth == 0 and name in _SIM_HEADERS:
                m = _ACCESS_FUNCTIONS.search(func)
                if not m:
                    break  # the simulator's own work
                atomic = m.group(1).startswith("atomic")
    return out
