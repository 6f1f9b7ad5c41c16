"""The mbarrier trace of kernels on the simulator: `kernels.barrier_trace(fn, *args, blocks=1, **kwargs)`.

    ext = load("13", "sim")
    print(barrier_trace(ext.matmul13_3, a, b, c))

`fn` is an op of a file loaded with the `sim` backend, or any Python callable that calls such ops. While it runs,
the simulator records what the first `blocks` blocks of every launch do with mbarriers
(kernels/sim/include/cudasim_trace.h): per warp, each wait (the barrier, the phase waited for, whether it blocked
and for how many steps), each arrival, expect_tx and copy, and when each phase completed. A barrier is named by the
line of its mbarrier.init (the line that called a helper wrapping the asm statement). The report prints, per block,
the barriers, a table with a row per warp, barrier, line and operation, and a timeline of each warp: the barrier it
waited on, step by step.

A step is a round of the simulator's scheduler: every thread that could run when the round began runs once, until
it waits, polls or ends. Steps order events and show which warps waited while others worked; they are not time (a
wgmma and an add fit in one turn). For a given thread order (CUDASIM_ORDER, forward unless set; kernels.sim.knobs)
the report is the same at every run. A call that raises (a deadlock) carries the trace up to the error in the
exception's `barrier_trace` attribute.
"""
from __future__ import annotations

import ctypes
import dataclasses
import os
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

from ..build import SourceSet, loaded_extensions
from ..tables import text_table
from .profile import _calls, _function_name

KINDS = ("init", "wait", "arrive", "expect_tx", "copy", "land", "complete", "exit")  # cudasim_trace.h's Kind
OPS = ("wait", "arrive", "arrive.expect_tx", "expect_tx", "copy")  # a table row's operation, in the table's order
_FRAMES = 12  # cudasim_trace.h's kFrames


class _EventC(ctypes.Structure):  # cudasim::trace::Event
    _fields_ = [("kind", ctypes.c_int), ("block", ctypes.c_int), ("warp", ctypes.c_int), ("site", ctypes.c_int),
                ("bar", ctypes.c_ulonglong), ("phase", ctypes.c_longlong), ("first", ctypes.c_longlong),
                ("start", ctypes.c_longlong), ("end", ctypes.c_longlong), ("lanes", ctypes.c_uint),
                ("blocked", ctypes.c_uint), ("ended", ctypes.c_uint), ("parity", ctypes.c_uint),
                ("count", ctypes.c_ulonglong), ("bytes", ctypes.c_ulonglong), ("file", ctypes.c_char_p),
                ("line", ctypes.c_int), ("stmt_line", ctypes.c_int)]


class _SiteC(ctypes.Structure):  # cudasim::trace::Site
    _fields_ = [("file", ctypes.c_char_p), ("line", ctypes.c_int), ("stmt_line", ctypes.c_int),
                ("depth", ctypes.c_int), ("pcs", ctypes.c_ulonglong * _FRAMES), ("launch_file", ctypes.c_char_p),
                ("launch_line", ctypes.c_int)]


class _BlockC(ctypes.Structure):  # cudasim::trace::Block
    _fields_ = [("kernel", ctypes.c_char_p), ("launch", ctypes.c_ulonglong), ("x", ctypes.c_uint),
                ("y", ctypes.c_uint), ("z", ctypes.c_uint), ("threads", ctypes.c_int), ("steps", ctypes.c_longlong)]


@dataclasses.dataclass(frozen=True)
class Event:
    """What one warp did once with one barrier (its lanes that did the same, for the same phase, are one event),
    or a copy landing, a phase completing. Steps are the scheduler's rounds in the block, from 1."""

    kind: str                 # one of KINDS
    warp: int                 # threadIdx (linear) / 32 of the lanes; for land and complete, the warp whose poll did it
    barrier: str              # the barrier's name: "file.cu:NN" of its mbarrier.init ("" when not seen in this block)
    address: int              # the barrier's shared-memory address
    line: str                 # "file.cu:NN" of the operation ("" for land, complete, exit)
    phase: int                # the phase it belongs to; for a wait, the phase waited for (-1: the one before the first)
    step: int                 # the step of its first lane
    lanes: int                # lanes that took part
    blocked_lanes: int = 0    # a wait: lanes whose first poll found the phase incomplete
    blocked_from: int | None = None  # a wait that blocked: the step its first lane blocked
    end: int | None = None    # a wait that blocked: the step its last blocked lane went on (None: never); land and
                              # complete: the step of the last; exit: the step the warp's last thread ended
    count: int = 0            # init: arrivals a phase; arrive: arrivals made; copy and land: copies
    bytes: int = 0            # transaction bytes (arrive with expect_tx, expect_tx, copy, land)
    parity: bool = False      # a wait on a phase parity (not on a state token)

    @property
    def blocked(self) -> bool:
        return self.blocked_lanes > 0

    @property
    def steps_blocked(self) -> int | None:
        """How long a blocked wait blocked (from its first lane's first poll to its last lane going on); None for a
        wait that never ended; 0 for one that did not block."""
        if not self.blocked:
            return 0
        return None if self.end is None else self.end - self.blocked_from


@dataclasses.dataclass(frozen=True)
class Barrier:
    """One mbarrier of a block, as its events show it."""

    name: str          # "file.cu:NN" of its mbarrier.init: the barriers initialised on one line share it
    index: int         # its place among them, in the order they were initialised
    address: int
    arrivals: int      # arrivals a phase (mbarrier.init's count)
    phases: int        # phases completed in the block
    bytes: int         # bytes of copies that landed on it


@dataclasses.dataclass(frozen=True)
class Row:
    """What one warp did with the barriers of one name at one line: a row of the report's table."""

    warp: int
    barrier: str
    line: str
    op: str             # one of OPS
    times: int          # operations of the warp (its lanes that made one together count once); copies: each copy
    lanes: float        # lanes per operation
    blocked: int        # waits that blocked
    steps_blocked: int  # steps those waits blocked, in all (waits that never ended count up to the block's end)
    arrivals: int       # arrivals made (arrive, arrive.expect_tx)
    bytes: int          # transaction bytes announced (expect_tx) or copied (copy)


@dataclasses.dataclass
class BlockTrace:
    """The mbarrier events of one recorded block."""

    kernel: str
    launch: int                 # which launch of the traced call, from 1
    block: tuple[int, int, int]
    threads: int
    steps: int                  # the block's rounds in all
    barriers: list[Barrier]
    events: list[Event]         # in the order their first lane made them
    sources: dict[str, str]     # "file.cu:NN" -> the text of that line, for the barriers' names

    def waits(self, warp: int | None = None) -> list[Event]:
        """The waits (of one warp)."""
        return [e for e in self.events if e.kind == "wait" and (warp is None or e.warp == warp)]

    def warps(self) -> list[int]:
        """The warps that used a barrier (waited, arrived, announced bytes or copied)."""
        return sorted({e.warp for e in self.events if e.kind in ("init", "wait", "arrive", "expect_tx", "copy")})

    @property
    def rows(self) -> list[Row]:
        order = {b.name: i for i, b in enumerate(self._families())}
        groups: dict[tuple, list[Event]] = defaultdict(list)
        for e in self.events:
            op = "arrive.expect_tx" if e.kind == "arrive" and e.bytes else e.kind
            if op in OPS:
                groups[(e.warp, e.barrier, e.line, op)].append(e)
        rows = []
        for (warp, barrier, line, op), es in groups.items():
            waits = [e for e in es if e.blocked]
            blocked = sum((self.steps if e.end is None else e.end) - e.blocked_from for e in waits)
            rows.append(Row(warp, barrier, line, op, sum(e.count for e in es) if op == "copy" else len(es),
                            sum(e.lanes for e in es) / len(es), len(waits), blocked,
                            sum(e.count for e in es) if op.startswith("arrive") else 0, sum(e.bytes for e in es)))
        return sorted(rows, key=lambda r: (r.warp, order.get(r.barrier, len(order)), OPS.index(r.op), _line_no(r.line)))

    def _families(self) -> list[Barrier]:
        """The first barrier of each name, in the order of their first init."""
        seen: dict[str, Barrier] = {}
        for b in self.barriers:
            seen.setdefault(b.name, b)
        return list(seen.values())

    def legend(self) -> dict[str, str]:
        """The timeline's character for each barrier name: A, B, C, ... in the order they were initialised."""
        return {b.name: chr(ord("A") + i) if i < 26 else "#" for i, b in enumerate(self._families())}

    def timeline(self, width: int = 64) -> str:
        """A line per warp that used a barrier, time going right, a character per bucket of steps: the letter of the
        barrier (legend) the warp waited on for at least half the bucket, '.' when it ran, ' ' once all its threads
        had ended. Consecutive warps with the same line share it."""
        if not self.steps:
            return ""
        per = -(-self.steps // max(1, width))  # steps a character
        legend = self.legend()
        ends = {e.warp: e.end for e in self.events if e.kind == "exit"}
        lines = []
        for warp in self.warps():
            spans = [(e.blocked_from, self.steps + 1 if e.end is None else e.end, legend.get(e.barrier, "?"))
                     for e in self.waits(warp) if e.blocked]
            chars = []
            for lo in range(1, self.steps + 1, per):
                hi = min(lo + per, self.steps + 1)
                held: dict[str, int] = defaultdict(int)
                for a, b, ch in spans:
                    held[ch] += max(0, min(b, hi) - max(a, lo))
                best = max(sorted(held), key=held.__getitem__, default=None)
                if best is not None and 2 * held[best] >= hi - lo:
                    chars.append(best)
                else:
                    chars.append(" " if warp in ends and ends[warp] < lo else ".")
            lines.append((warp, "".join(chars)))
        merged = _merged(lines)
        label = max(len(w) for w, _ in merged)
        each = f"{per} steps" if per > 1 else "step"
        return (f"timeline: steps 1 to {self.steps}, a character per {each} ({', '.join(legend.values())}: waiting on "
                "that barrier; '.' running; ' ' ended)\n"
                + "\n".join(f"  warp {w.ljust(label)} |{text}|" for w, text in merged))

    def __str__(self) -> str:
        x, y, z = self.block
        head = f"{self.kernel}, block ({x},{y},{z}) of launch {self.launch}: {self.threads} threads, {self.steps} steps"
        if not self.barriers and not any(e.kind in OPS for e in self.events):
            return head + "\n  no mbarrier operations"
        legend = self.legend()
        fams = []
        for fam in self._families():
            mine = [b for b in self.barriers if b.name == fam.name]
            landed = sum(b.bytes for b in mine)
            phases = sum(b.phases for b in mine)
            fams.append((legend[fam.name], fam.name, str(len(mine)), str(fam.arrivals), str(phases),
                         str(landed) if landed else "", self.sources.get(fam.name, "")))
        barriers = text_table(("", "barrier (init line)", "how many", "arrivals a phase", "phases completed",
                               "bytes landed", "initialised by"), fams, align="llrrrrl", rule=True)
        per_warp: dict[int, list[tuple]] = defaultdict(list)
        for r in self.rows:
            per_warp[r.warp].append((f"{legend.get(r.barrier, '?')} {r.barrier}", r.line, r.op, str(r.times),
                                     _fmt(r.lanes), str(r.blocked) if r.op == "wait" else "",
                                     str(r.steps_blocked) if r.op == "wait" else "",
                                     str(r.arrivals) if r.op.startswith("arrive") else "",
                                     str(r.bytes) if r.bytes else ""))
        body = [(w, *row) for w, rows in _merged([(w, tuple(rows)) for w, rows in per_warp.items()]) for row in rows]
        table = text_table(("warp", "barrier", "line", "op", "times", "lanes", "blocked", "steps blocked", "arrivals",
                            "bytes"), body, align="llllrrrrrr", rule=True)
        ranges = list(dict.fromkeys(row[0] for row in body if "-" in row[0]))
        if ranges:
            table += f"\n(warps {', '.join(ranges)}: each of those warps did what the rows say)"
        never = [e for e in self.waits() if e.blocked and e.end is None]
        notes = (f"\n{len(never)} blocked wait(s) never ended: " +
                 ", ".join(f"warp {e.warp} at {e.line} on {e.barrier} (phase {e.phase})" for e in never[:5])
                 if never else "")
        return "\n".join((head, barriers, "", table, "", self.timeline())) + notes


def _merged(items: list[tuple[int, object]]) -> list[tuple[str, object]]:
    """(warp, what) in warp order, runs of consecutive warps with the same `what` as one ("4-11", what)."""
    out: list[tuple[str, object]] = []
    first = last = None
    for warp, what in sorted(items, key=lambda i: i[0]):
        if first is not None and warp == last + 1 and what == out[-1][1]:
            last = warp
            out[-1] = (f"{first}-{last}", what)
            continue
        first = last = warp
        out.append((str(warp), what))
    return out


@dataclasses.dataclass
class BarrierTrace:
    """What `barrier_trace` returns: `blocks` (a BlockTrace per recorded block); printing it gives the report."""

    blocks: list[BlockTrace]
    dropped: int = 0  # events past the simulator's limit, not recorded

    def __str__(self) -> str:
        text = "\n\n".join(str(b) for b in self.blocks) or "no block was recorded"
        if self.blocks and not llvm_addr2line():
            text += ("\n(barriers are named by the asm line that initialised them, inside a helper if that is where it "
                     "is: install LLVM's llvm-addr2line to name them by the lines that called the helper)")
        if self.dropped:
            text += f"\n({self.dropped} events past the trace's limit were not recorded)"
        return text

    def _repr_pretty_(self, p, cycle) -> None:  # Jupyter shows the report
        p.text(str(self))


def _fmt(v: float) -> str:
    return f"{v:.2f}".rstrip("0").rstrip(".")


def _line_no(line: str) -> int:
    return int(line.rsplit(":", 1)[1]) if ":" in line else 0


def barrier_trace(fn, *args, blocks: int = 1, **kwargs) -> BarrierTrace:
    """Run `fn(*args, **kwargs)` with the simulator recording the mbarrier operations of the first `blocks` blocks
    of every launch; returns their BarrierTrace. `fn` is an op of a file loaded with the sim backend, or a
    callable that calls such ops."""
    if not callable(fn):
        raise TypeError(f"barrier_trace expects an op (ext.name) or a callable that calls ops, got {type(fn).__name__}")
    if isinstance(blocks, bool) or not isinstance(blocks, int) or blocks < 1:
        raise ValueError(f"blocks must be a whole number from 1 up (how many blocks of each launch to record), "
                         f"got {blocks!r}")
    libraries = []
    for ext in loaded_extensions():
        backend = getattr(ext, "backend", "sim")
        if backend != "sim" and _calls(fn, ext):
            raise RuntimeError(f"{getattr(fn, '__name__', fn)} was loaded for the {backend} backend; the barrier trace "
                               f"is a simulator feature: load {ext.path.name} with backend='sim' (tensors on the CPU) "
                               "and trace that")
        if backend == "sim" and not getattr(ext, "instrumented", False):
            lib = _library(ext)
            if lib is not None:
                libraries.append((ext, lib))
    for _, lib in libraries:
        lib.cudasim_trace_start(blocks)
    try:
        try:
            fn(*args, **kwargs)
        except Exception as err:  # a deadlock, say: the trace up to it says who waited on what
            try:
                err.barrier_trace = _report(libraries)
                err.add_note("barrier_trace: the trace up to this error is the exception's barrier_trace attribute")
            except Exception:  # noqa: BLE001 - the kernel's error is the one to report
                pass
            raise
        out = _report(libraries)
    finally:
        for _, lib in libraries:
            lib.cudasim_trace_start(0)  # recording off, and the record's memory freed
    if not out.blocks:
        raise ValueError("barrier_trace ran the function, but it launched no kernel of a file loaded with the sim "
                         "backend: pass an op (ext = load(file, 'sim'); barrier_trace(ext.name, *inputs)) or a "
                         "function that calls one")
    return out


def _report(libraries: list) -> BarrierTrace:
    """What the libraries recorded; their recording stops."""
    out = BarrierTrace([])
    for ext, lib in libraries:
        lib.cudasim_trace_stop()
        traced, dropped = _collect(ext, lib)
        out.blocks += traced
        out.dropped += dropped
    return out


_libraries: dict[str, ctypes.CDLL | None] = {}


def _library(ext) -> ctypes.CDLL | None:
    """The trace's C functions in a loaded sim library (None for a library built without them)."""
    so = str(getattr(ext, "so", None) or getattr(ext, "__file__", ""))
    if so not in _libraries:
        lib = ctypes.CDLL(so) if so else None
        if lib is not None and not hasattr(lib, "cudasim_trace_start"):
            lib = None
        if lib is not None:
            lib.cudasim_trace_start.argtypes = [ctypes.c_uint]
            lib.cudasim_trace_base.restype = ctypes.c_ulonglong
            lib.cudasim_trace_dropped.restype = ctypes.c_ulonglong
            for name, row in (("blocks", _BlockC), ("events", _EventC), ("sites", _SiteC)):
                f = getattr(lib, f"cudasim_trace_{name}")
                f.restype = ctypes.c_size_t
                f.argtypes = [ctypes.POINTER(row), ctypes.c_size_t]
        _libraries[so] = lib
    return _libraries[so]


def _read(lib, name: str, row):
    f = getattr(lib, f"cudasim_trace_{name}")
    n = f(None, 0)
    buf = (row * n)()
    f(buf, n)
    return list(buf)


def _collect(ext, lib) -> tuple[list[BlockTrace], int]:
    """The blocks a library recorded, as BlockTraces."""
    raw_blocks, raw_events, raw_sites = _read(lib, "blocks", _BlockC), _read(lib, "events", _EventC), \
        _read(lib, "sites", _SiteC)
    sources = SourceSet.of(ext.path) if getattr(ext, "path", None) else None
    own = {p.name: p for p in sources.files} if sources else {}
    lines, kernels = _site_lines(Path(getattr(ext, "so", None) or ext.__file__), lib.cudasim_trace_base(), raw_sites,
                                 own)
    per_block: list[list] = [[] for _ in raw_blocks]
    for e in raw_events:
        per_block[e.block].append(e)
    out = []
    for b, events in zip(raw_blocks, per_block):
        names: dict[int, str] = {}
        for e in events:  # a barrier's name: the line of its (first) init
            if KINDS[e.kind] == "init":
                names.setdefault(e.bar, lines[e.site])
        traced = []
        for e in events:
            kind = KINDS[e.kind]
            blocked = bin(e.blocked).count("1")
            traced.append(Event(
                kind, e.warp, names.get(e.bar, "") if kind != "exit" else "", e.bar if kind != "exit" else 0,
                lines[e.site] if e.site >= 0 else "", e.phase, e.first if kind != "exit" else e.end,
                bin(e.lanes).count("1"), blocked, e.start if blocked else None,
                e.end if (kind == "wait" and blocked and e.ended == e.blocked) or kind in ("land", "complete", "exit")
                else None, e.count, e.bytes, bool(e.parity)))
        barriers, index = [], defaultdict(int)
        for e in traced:
            if e.kind == "init" and not any(x.address == e.address for x in barriers):
                mine = [x for x in traced if x.address == e.address]
                barriers.append(Barrier(e.barrier, index[e.barrier], e.address, e.count,
                                        sum(x.kind == "complete" for x in mine),
                                        sum(x.bytes for x in mine if x.kind == "land")))
                index[e.barrier] += 1
        text = {}
        for bar in barriers:
            name, _, num = bar.name.rpartition(":")
            if name in own and num.isdigit():
                text[bar.name] = _source_line(sources, own[name], int(num))
        kernel = next((kernels[e.site] for e in events if e.site >= 0 and kernels[e.site]), b.kernel.decode())
        out.append(BlockTrace(kernel, b.launch, (b.x, b.y, b.z), b.threads, b.steps, barriers, traced, text))
    return out, lib.cudasim_trace_dropped()


def _source_line(sources: SourceSet, path: Path, num: int) -> str:
    text = sources.texts[path].text.splitlines()
    line = text[num - 1] if 0 < num <= len(text) else ""
    return line.split("//")[0].strip() if "//" in line else line.strip()


def _site_lines(so: Path, base: int, sites: list, own: dict[str, Path]) -> tuple[list[str], list[str]]:
    """Each site as "file.cu:NN" and the kernel it is in. The line: the first line of the learner's own files on its
    stack that is not the asm statement itself (so, for an asm statement in a helper, the line that called the
    helper), or the asm statement's line when there is none. The kernel: the outermost function of the learner's
    files on the stack below the launch."""
    pcs = sorted({s.pcs[i] - base for s in sites for i in range(s.depth) if s.pcs[i] > base})
    chains = _addr2line(so, pcs)
    lines, kernels = [], []
    for s in sites:
        name = Path(s.file.decode()).name if s.file else "?"
        asm = {f"{name}:{s.line}", f"{name}:{s.stmt_line}"}
        launch = f"{Path(s.launch_file.decode()).name}:{s.launch_line}" if s.launch_file else ""
        found, kernel = "", ""
        stack = [entry for i in range(s.depth) for entry in chains.get(s.pcs[i] - base, [])]
        for function, here in stack:
            if here == launch:
                break
            if here.rpartition(":")[0] not in own:
                continue
            if not found and here not in asm:
                found = here
            if "lambda" not in function and "operator()" not in function and not function.startswith("cudasim::"):
                kernel = _function_name(function)
        lines.append(found or f"{name}:{s.line}")
        kernels.append(kernel)
    return lines, kernels


def llvm_addr2line() -> str | None:
    """LLVM's addr2line (llvm-addr2line, or a versioned llvm-addr2line-NN as Debian's LLVM packages install it), or
    None. GNU addr2line (2.40) leaves out some of the inlined calls that clang's line tables hold (a helper's caller),
    so without LLVM's a barrier is named by the asm line in the helper that initialised it."""
    found = shutil.which("llvm-addr2line")
    if found:
        return found
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        versions = sorted(Path(folder).glob("llvm-addr2line-[0-9]*"), key=lambda p: p.name) if folder else []
        if versions:
            return str(versions[-1])
    return None


def _addr2line(so: Path, pcs: list[int]) -> dict[int, list[tuple[str, str]]]:
    """For each offset of a return address in the library: its chain of inlined calls, innermost first, as
    (function, "file:NN") with file names only; {} when no tool answers (then lines are the asm statements' own)."""
    tool = llvm_addr2line() or shutil.which("addr2line")
    if not pcs or not tool:
        return {}
    try:
        run = subprocess.run([tool, "-a", "-i", "-f", "-C", "-e", str(so), *[hex(pc - 1) for pc in pcs]],
                             capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return {}
    chains: dict[int, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = []
    it = iter(pcs)
    out = run.stdout.splitlines()
    i = 0
    while i < len(out):
        if out[i].startswith("0x"):
            current = chains.setdefault(next(it), [])
            i += 1
            continue
        function, loc = out[i], out[i + 1].split(" (discriminator")[0].strip() if i + 1 < len(out) else "??:0"
        path, _, num = loc.rpartition(":")
        if num.isdigit() and num != "0":
            current.append((function, f"{Path(path).name}:{num}"))
        i += 2
    return chains
