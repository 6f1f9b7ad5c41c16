"""Lesson 04 on the GPU: copy and scale-add (out = a*x + y), every variant against PyTorch, in one run.

GB/s count the fewest bytes each op must move: 8 per element for a copy (read 4, write 4), 12 for
scale-add (read x and y, write out), so every figure can be set against the copy bandwidth
measured in the same run. The eager reference for scale-add is torch.add(y, x, alpha=a): one
kernel that does the same work. `a * x + y` in eager is two kernels (a temporary for a * x, then
the add: 20 bytes per element), and is timed as its own bar so the difference shows.
"""
from __future__ import annotations

from pathlib import Path

import torch

from ..bench import Row, bench, copy_bandwidth, time_ms, write_csv
from ..check import close
from ..build import load

N = 2**26   # floats per tensor: 256 MiB each; scale-add touches 3 of them (768 MiB)
A = 1.5
STRIDES = (1, 2, 4, 8, 16, 32)
BLOCKS = (32, 64, 128, 256, 512, 1024)


def _sweep_plot(title: str, xlabel: str, xs, gbps, copy: float, path=None, show: bool = True):
    """GB/s against a parameter (log2 axis), with the copy bandwidth as a line."""
    import matplotlib

    if not show:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    ax.plot(xs, gbps, "o-", color="#3b7dd8")
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(xs), [str(v) for v in xs])
    ax.axhline(copy, color="#d83b3b", linestyle="--", linewidth=1)
    ax.text(xs[-1], copy, f"copy {copy:.0f} GB/s ", color="#d83b3b", va="bottom", ha="right")
    ax.set_ylim(0, copy * 1.15)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("GB/s (12 bytes per element)")
    ax.set_title(f"{title} ({torch.cuda.get_device_name()})", fontsize=10)
    fig.tight_layout()
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120)
    if show:
        plt.show()
    plt.close(fig)


def _sweep(title: str, label: str, values, call, copy: float) -> list[Row]:
    """Time call(v) for each v: one Row per value, GB/s at 12 bytes per element."""
    rows = []
    for v in values:
        ms = time_ms(lambda: call(v))
        gbps = 12 * N / ms / 1e6
        rows.append(Row(title, f"{label} {v}", ms, gbps, None, gbps / copy, None, None))
    return rows


def stride_sweep(ext, x, y, out, copy: float, path=None, show: bool = True) -> list[Row]:
    """scale_add3 at each stride: what uncoalesced access costs."""
    rows = _sweep("scale-add, strided access", "stride", STRIDES, lambda s: ext.scale_add3(A, x, y, out, s), copy)
    _sweep_plot("scale_add3: neighbouring threads `stride` floats apart", "stride (floats between neighbouring threads)",
                STRIDES, [r.gbps for r in rows], copy, path, show)
    return rows


def block_sweep(ext, x, y, out, copy: float, path=None, show: bool = True) -> list[Row]:
    """scale_add1 at each block size: how many threads per block."""
    rows = _sweep("scale-add, block size", "block", BLOCKS, lambda b: ext.scale_add1(A, x, y, out, b), copy)
    _sweep_plot("scale_add1: one element per thread", "threads per block", BLOCKS, [r.gbps for r in rows], copy,
                path, show)
    return rows


def run(out_dir: Path) -> list[Row]:
    """Copy and scale-add on 2^26 floats, every variant, the sweeps; CSV and plots into out_dir."""
    ext = load("04", "cuda")
    copy = copy_bandwidth()
    csv_path = out_dir / "lesson04.csv"

    x = torch.randn(N, device="cuda")
    y = torch.randn(N, device="cuda")
    out = torch.empty_like(x)

    def copies_still_correct() -> bool:
        results = []
        for f in (ext.copy1, ext.copy5):
            out.fill_(float("nan"))
            f(x, out)
            results.append(torch.equal(out, x))
        return all(results)

    rows = bench(f"copy {N} floats (256 MiB)",
                 {"torch out.copy_(x)": lambda: out.copy_(x), "copy1": lambda: ext.copy1(x, out),
                  "copy5": lambda: ext.copy5(x, out)},
                 bytes=8 * N, torch_fn=torch.clone, args=(x,), copy_gbps=copy, check=copies_still_correct,
                 csv_path=csv_path, plot_path=out_dir / "lesson04_copy.png", show=False)

    want = torch.add(y, x, alpha=A)

    def scale_adds_still_correct() -> bool:
        results = []
        for name in ("scale_add1", "scale_add2", "scale_add4", "scale_add5"):
            out.fill_(float("nan"))
            getattr(ext, name)(A, x, y, out)
            results.append(close(out, want))
        for s in (1, 32):
            out.fill_(float("nan"))
            ext.scale_add3(A, x, y, out, s)
            results.append(close(out, want))
        return all(results)

    variants = {
        "eager a*x+y (2 kernels)": lambda: A * x + y,
        "scale_add1": lambda: ext.scale_add1(A, x, y, out),
        "scale_add2": lambda: ext.scale_add2(A, x, y, out),
        "scale_add3 stride 1": lambda: ext.scale_add3(A, x, y, out, 1),
        "scale_add3 stride 32": lambda: ext.scale_add3(A, x, y, out, 32),
        "scale_add4": lambda: ext.scale_add4(A, x, y, out),
        "scale_add5": lambda: ext.scale_add5(A, x, y, out),
    }
    rows += bench(f"scale-add a*x+y, {N} floats (768 MiB moved)", variants, bytes=12 * N,
                  torch_fn=lambda x, y: torch.add(y, x, alpha=A), args=(x, y), copy_gbps=copy,
                  check=scale_adds_still_correct, csv_path=csv_path, plot_path=out_dir / "lesson04_scale_add.png",
                  show=False)

    sweeps = stride_sweep(ext, x, y, out, copy, out_dir / "lesson04_stride.png", show=False)
    sweeps += block_sweep(ext, x, y, out, copy, out_dir / "lesson04_block.png", show=False)
    write_csv(sweeps, csv_path, copy)
    from ..bench import table

    print(table(rows, copy))
    print(table(sweeps, copy))
    return rows + sweeps
