"""Benchmarks on the GPU: every variant against eager PyTorch and torch.compile, in one run.

    rows = bench("copy 256 MiB", {"copy1": lambda: ext.copy1(x, y)}, bytes=2 * x.nbytes,
                 torch_fn=lambda x: x.clone(), args=(x,))

Times are medians of many runs (triton.testing.do_bench when Triton is there, CUDA events
otherwise) with the L2 cache flushed before each run. The device-to-device copy bandwidth is
measured in the same run, so every GB/s figure can be read as a fraction of what the memory
can do; a figure above it is flagged, because it means the byte count or the timing is wrong.
On the simulator there are no GPU timings, and bench says so.
"""
from __future__ import annotations

import csv
import itertools
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Collection

import torch

from . import backend as _backend

NO_GPU = ("No GPU timings: the simulator runs kernels on the CPU, where time says nothing about a GPU. "
          "On a machine with an NVIDIA GPU this cell prints a table and a chart.")


@dataclass
class Row:
    """One timed variant."""

    bench: str
    variant: str
    ms: float
    gbps: float | None
    tflops: float | None
    of_copy: float | None
    vs_eager: float | None
    vs_compile: float | None
    note: str = ""


def _flush_buffer() -> torch.Tensor:
    return torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")


def time_ms(fn: Callable[[], object], warmup_ms: float = 25, rep_ms: float = 200) -> float:
    """Median time of fn() in milliseconds, L2 flushed before each run."""
    try:
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))
    except ImportError:
        pass
    cache = _flush_buffer()
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    n = max(5, min(1000, int(rep_ms / max(start.elapsed_time(end), 1e-3))))
    times = []
    for _ in range(n):
        cache.zero_()
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


_copy_cache: dict[int, float] = {}


def copy_bandwidth(nbytes: int = 1 << 30) -> float:
    """Device-to-device copy bandwidth in GB/s (bytes read plus bytes written), measured now."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src))
    del src, dst
    return 2 * nbytes / ms / 1e6


_compiles = itertools.count()


def compile_static(fn: Callable, **options) -> Callable:
    """torch.compile(fn) as a first compile makes it: specialised to the shapes it is called with.
    torch.compile keeps what it compiled per code object, so compiling the same function again after it
    ran at other shapes gives kernels for dynamic shapes ("automatic dynamic"), which can be several
    times slower than the specialised ones (a compiled softmax at 65536x1024 bf16: 0.5 ms against 0.1 ms
    on an H100), and a benchmark would compare its kernels against those. So fn is called from a wrapper
    with a code object of its own, compiled with dynamic=False. `options` go to torch.compile."""
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    name = f"compiled_{getattr(fn, '__name__', 'fn').strip('<>')}_{next(_compiles)}"
    wrapper.__code__ = wrapper.__code__.replace(co_name=name)
    return torch.compile(wrapper, dynamic=False, **options)


# The note of a row that times another route beside the lesson's kernels (bench's `routes`).
OTHER_ROUTE = "another route than the lesson's kernels"
# How a row's note says that its variant gave a wrong answer, or that it was not timed as the bar's comparison
# assumes (no bar passes on such a row, nor against one: benchmarks.bar_report).
FAILED_CHECK = "FAILED the check"
NOT_COMPARABLE = "NOT COMPARABLE"


def bench(name: str, variants: dict[str, Callable[[], object]], *, bytes: int | None = None,
          flops: int | None = None, torch_fn: Callable | None = None, args: tuple = (),
          compile: bool = True, copy_gbps: float | None = None, check: Callable[[], bool] | None = None,
          csv_path: str | os.PathLike | None = None, plot_path: str | os.PathLike | None = None,
          show: bool = True, backend: str | None = None, routes: Collection[str] = ()) -> list[Row]:
    """Time each variant, eager `torch_fn(*args)` and torch.compile of it; print a table, plot, write CSV.

    bytes: the fewest bytes one call must move (each input read once, each output written once).
    flops: the floating-point operations of one call (for compute-bound kernels).
    check: run after timing (a second correctness check); a False result marks the rows.
    routes: the variants that are another route set beside the lesson's kernels (a library, another language):
    their rows' note says so (OTHER_ROUTE), and the README's table does not count them as the lesson's kernels.
    """
    if _backend.resolve(backend) != "cuda":
        print(NO_GPU)
        return []
    copy = copy_gbps or copy_bandwidth()
    timed: dict[str, float] = {}
    if torch_fn is not None:
        timed["eager"] = time_ms(lambda: torch_fn(*args))
        if compile:
            compiled = compile_static(torch_fn)
            compiled(*args)
            timed["torch.compile"] = time_ms(lambda: compiled(*args))
    for label, fn in variants.items():
        timed[label] = time_ms(fn)
    ok = check() if check is not None else True
    rows = []
    for label, ms in timed.items():
        gbps = bytes / ms / 1e6 if bytes else None
        tflops = flops / ms / 1e9 if flops else None
        note = OTHER_ROUTE if label in routes else ""
        # Reads alone can run a few percent faster than a copy (which also writes), so only a
        # figure well above it is flagged.
        if gbps and gbps > 1.10 * copy:
            note = (note + "; " if note else "") + "10% ABOVE COPY BANDWIDTH: the byte count or the timing is wrong"
        if not ok:
            note = (note + "; " if note else "") + FAILED_CHECK + " after timing"
        rows.append(Row(name, label, ms, gbps, tflops, gbps / copy if gbps else None,
                        timed["eager"] / ms if "eager" in timed else None,
                        timed["torch.compile"] / ms if "torch.compile" in timed else None, note))
    if show:
        print(table(rows, copy))
    if csv_path:
        write_csv(rows, csv_path, copy)
    if plot_path or show:
        plot(rows, copy, plot_path, show=show)
    return rows


def device_name() -> str:
    """The GPU this process times on, by the name its CSVs, tables and charts give it ("" without a GPU)."""
    return torch.cuda.get_device_name() if torch.cuda.is_available() else ""


def _fmt(v: float | None, spec: str) -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def _ratio(v: float | None) -> str:
    """A speed-up as "1.62x"; blank where there is none (no torch.compile row to compare with)."""
    text = _fmt(v, ".2f")
    return text and text + "x"


def _time_unit(ms: float) -> tuple[str, float, str]:
    """The unit that times up to `ms` milliseconds read best in: its name, the factor from milliseconds, the
    format of a value."""
    if ms >= 1000:
        return "s", 1e-3, ".2f"
    if ms >= 1:
        return "ms", 1.0, ".2f"
    return "us", 1e3, ".1f"


def _times_alone(rows: list[Row]) -> bool:
    """Rows that hold a time and nothing to compare it with (build times, the steps of a pitfall)."""
    return bool(rows) and all(r.gbps is None and r.tflops is None and r.vs_eager is None and r.vs_compile is None
                              for r in rows)


def table(rows: list[Row], copy_gbps: float, device: str | None = None) -> str:
    """A plain-text table of the rows, headed by the GPU that measured them (device; by default the one this process
    runs on) and the copy bandwidth they are measured against. Rows of times alone get a column of times in one unit
    (us, ms or s, by the longest), and no columns of rates."""
    device = device_name() if device is None else device
    width = max([22] + [len(r.variant) + 2 for r in rows])  # a long name never runs into its time
    if _times_alone(rows):
        unit, per_ms, spec = _time_unit(max(r.ms for r in rows))
        lines = [rows[0].bench + (f"   ({device})" if device else ""), f"{'variant':<{width}}{'time':>10}"]
        lines += [f"{r.variant:<{width}}{format(r.ms * per_ms, spec):>10} {unit}" + (f"  {r.note}" if r.note else "")
                  for r in rows]
        return "\n".join(lines)
    lines = [f"{rows[0].bench if rows else ''}   ({device + ', ' if device else ''}device copy: {copy_gbps:.0f} GB/s)",
             f"{'variant':<{width}}{'time':>11}{'GB/s':>9}{'TFLOP/s':>9}{'% copy':>8}{'vs eager':>10}{'vs compile':>11}"]
    for r in rows:
        lines.append(f"{r.variant:<{width}}{r.ms * 1000:>9.1f}us{_fmt(r.gbps, '.0f'):>9}{_fmt(r.tflops, '.1f'):>9}"
                     f"{_fmt(r.of_copy and 100 * r.of_copy, '.0f'):>8}{_ratio(r.vs_eager):>10}{_ratio(r.vs_compile):>11}"
                     + (f"  {r.note}" if r.note else ""))
    return "\n".join(lines)


def write_csv(rows: list[Row], path: str | os.PathLike, copy_gbps: float) -> None:
    """Append rows to a CSV file (with a header when the file is new)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists()
    with path.open("a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[*asdict(rows[0]).keys(), "copy_gbps", "device"])
        if new:
            w.writeheader()
        for r in rows:
            w.writerow({**asdict(r), "copy_gbps": round(copy_gbps, 1), "device": device_name()})


def plot(rows: list[Row], copy_gbps: float, path: str | os.PathLike | None = None, show: bool = True,
         device: str | None = None):
    """A bar chart of GB/s (or TFLOP/s) per variant, with the copy bandwidth as a line, titled with the benchmark
    and the GPU that measured it (device; by default the one this process runs on)."""
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    use_bw = any(r.gbps for r in rows)
    vals = [(r.gbps if use_bw else r.tflops) or 0 for r in rows]
    size = (max(5, 0.9 * len(rows) + 2), 3.2)
    fig = plt.figure(figsize=size) if show else Figure(figsize=size)  # a file alone: the notebook's backend stays
    ax = fig.subplots()
    colors = ["#999999" if r.variant in ("eager", "torch.compile") else "#3b7dd8" for r in rows]
    ax.bar([r.variant for r in rows], vals, color=colors)
    if use_bw:
        ax.axhline(copy_gbps, color="#d83b3b", linestyle="--", linewidth=1)
        ax.text(len(rows) - 0.5, copy_gbps, f" copy {copy_gbps:.0f} GB/s", color="#d83b3b", va="bottom", ha="right")
    ax.set_ylabel("GB/s" if use_bw else "TFLOP/s")
    device = device_name() if device is None else device
    ax.set_title("\n".join(t for t in (rows[0].bench if rows else "", device) if t))
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right")
    fig.tight_layout()
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120)
    if show:
        plt.show()
        plt.close(fig)
    return fig


def roofline(points: dict[str, tuple[float, float]], peak_tflops: float, bandwidth_gbps: float,
             path: str | os.PathLike | None = None, show: bool = True, device: str | None = None):
    """A roofline: points are name -> (FLOP per byte, achieved TFLOP/s); the roof is min(peak, AI x bandwidth).
    Titled with the GPU that measured them (device; by default the one this process runs on)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    ridge = peak_tflops * 1e3 / bandwidth_gbps
    ai = [2.0 ** -6, ridge, 2.0 ** 10]  # the roof is straight on a log-log plot but for its corner at the ridge
    ax.loglog(ai, [min(peak_tflops, a * bandwidth_gbps / 1e3) for a in ai], color="#333333")
    ax.axvline(ridge, color="#999999", linestyle=":", linewidth=1)
    ax.text(ridge, peak_tflops / 300, f" ridge: {ridge:.0f} FLOP/B", color="#666666")
    # points of one intensity (matmul5 to matmul8 all load 32 FLOP per byte) stand close one above another: each
    # label goes beside its point, in its colour, pushed up just enough to clear the labels placed before it
    dots = {label: ax.plot([x], [y], "o")[0] for label, (x, y) in points.items()}
    ax.autoscale_view()
    ax.set_ylim(top=peak_tflops * 4)  # room above the roof for labels pushed up
    per_point = 72 / fig.dpi  # display pixels to typographic points
    placed: list[tuple[float, float, float]] = []  # each label's left, right and middle height, in points
    for label, (x, y) in sorted(points.items(), key=lambda item: item[1][1]):
        px, py = (v * per_point for v in ax.transData.transform((x, y)))
        left, right, middle = px + 8, px + 8 + 5.5 * len(label), py - 4
        while any(left < r and l < right and abs(middle - m) < 11 for l, r, m in placed):
            middle += 1
        placed.append((left, right, middle))
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(8, middle - py),
                    color=dots[label].get_color(), fontsize=9, va="center")
    ax.set_xlabel("arithmetic intensity (FLOP per byte of memory traffic)")
    ax.set_ylabel("TFLOP/s")
    device = device_name() if device is None else device
    ax.set_title(f"roofline ({device})" if device else "roofline")
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=120)
    if show:
        plt.show()
    plt.close(fig)
    return fig
