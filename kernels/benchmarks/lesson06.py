"""Lesson 06 on the GPU: every full-vector sum and every row reduction against torch.sum, in one run.

GB/s count the bytes read (a reduction writes one float per row, or one in all), so they can be
set against the copy bandwidth measured in the same run. sum2_noatomic and sum3_noatomic, timed
beside sum2 and sum3, show what those two kernels' atomics cost (atomic_cost reads them back).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from ..bench import Row, bench, copy_bandwidth, plot, table
from ..check import close
from ..lessons import lesson06
from ..lessons.lesson06 import sum_tolerance
from ..build import load

N = 2**28                # floats in the full-vector sum: 1 GiB
N_SMALL = 2**26          # and 256 MiB, where a launch and its ramp weigh more
ROWS, COLS = 8192, 8192  # the row reductions: 256 MiB
SUMS = [s for s in lesson06.SUMS if "_" not in s]  # sum1-7, as the lesson declares them
# the 1 GiB benchmark: every sum, with the control variants without atomics beside sum2 and sum3
SUMS_1G = ["sum1", "sum2", "sum2_noatomic", "sum3", "sum3_noatomic", *SUMS[3:]]
assert sorted(SUMS_1G) == sorted(lesson06.SUMS), "the 1 GiB benchmark times every sum lesson 06 declares"
BENCH_1G = "sum of 2^28 floats (1 GiB)"


def _sum_close(got: float, want: float, x: torch.Tensor) -> bool:
    """Within the lesson's tolerance for a float32 sum: 2 eps sqrt(n) ||x||."""
    return abs(got - want) <= 2 * torch.finfo(torch.float32).eps * x.numel() ** 0.5 * x.double().norm().item()


def run(out_dir: Path) -> list[Row]:
    """Time sum1..sum7 on 1 GiB (sum4..sum7 on 256 MiB too) and the row reductions on 8192x8192."""
    ext = load("06", "cuda")
    copy = copy_bandwidth()
    csv_path = out_dir / "lesson06.csv"

    x = torch.randn(N, device="cuda")
    out = torch.empty((), device="cuda")
    want = x.double().sum().item()

    def sums_still_correct() -> bool:
        results = []
        for name in SUMS_1G:
            getattr(ext, name)(x, out)
            results.append(_sum_close(out.item(), want, x))
        return all(results)

    variants = {name: (lambda f=getattr(ext, name): f(x, out)) for name in SUMS_1G}
    rows = bench(BENCH_1G, variants, bytes=x.nbytes, torch_fn=torch.sum, args=(x,),
                 copy_gbps=copy, check=sums_still_correct, csv_path=csv_path,
                 plot_path=out_dir / "lesson06_sum.png", show=False)
    del x

    xs = torch.randn(N_SMALL, device="cuda")
    rows += bench("sum of 2^26 floats (256 MiB)", {name: (lambda f=getattr(ext, name): f(xs, out)) for name in SUMS[3:]},
                  bytes=xs.nbytes, torch_fn=torch.sum, args=(xs,), copy_gbps=copy, csv_path=csv_path,
                  plot_path=out_dir / "lesson06_sum_256mib.png", show=False)
    del xs

    m = torch.randn(ROWS, COLS, device="cuda")
    rout = torch.empty(ROWS, device="cuda")

    def rows_still_correct() -> bool:
        ext.row_sum1(m, rout)
        ok = close(rout, m.sum(dim=-1), sum_tolerance(COLS))
        ext.row_sum2(m, rout)
        ok &= close(rout, m.sum(dim=-1), sum_tolerance(COLS))
        ext.row_max2(m, rout)
        return ok and torch.equal(rout, m.amax(dim=-1))

    rows += bench(f"row sum {ROWS}x{COLS}", {"row_sum1": lambda: ext.row_sum1(m, rout),
                                             "row_sum2": lambda: ext.row_sum2(m, rout)},
                  bytes=m.nbytes, torch_fn=lambda t: t.sum(dim=-1), args=(m,), copy_gbps=copy,
                  check=rows_still_correct, csv_path=csv_path, plot_path=out_dir / "lesson06_row_sum.png", show=False)
    rows += bench(f"row max {ROWS}x{COLS}", {"row_max2": lambda: ext.row_max2(m, rout)},
                  bytes=m.nbytes, torch_fn=lambda t: t.amax(dim=-1), args=(m,), copy_gbps=copy,
                  check=rows_still_correct, csv_path=csv_path, plot_path=out_dir / "lesson06_row_max.png", show=False)

    # every variant in one chart: the benchmark's name in front of each bar
    short = {BENCH_1G: "sum 1G", "sum of 2^26 floats (256 MiB)": "sum 256M",
             f"row sum {ROWS}x{COLS}": "row sum", f"row max {ROWS}x{COLS}": "row max"}
    labelled = [dataclasses.replace(r, variant=f"{short[r.bench]}: {r.variant}") for r in rows]
    plot(labelled, copy, out_dir / "lesson06_all.png", show=False)
    print(table(labelled, copy))
    return rows


def atomic_cost(rows: list[Row]) -> None:
    """Print what the atomics cost sum2 and sum3 on 1 GiB: each against its _noatomic twin, from timed rows."""
    ms = {r.variant: r.ms for r in rows if r.bench == BENCH_1G}
    needed = ["sum2", "sum2_noatomic", "sum3", "sum3_noatomic"]
    if not all(v in ms for v in needed):
        print(f"no timings of {', '.join(needed)} on 1 GiB in these figures")
        return
    for k in ("sum2", "sum3"):
        print(f"{k}: {ms[k]:.3f} ms with one atomic per block, {ms[k + '_noatomic']:.3f} ms without "
              f"({ms[k + '_noatomic'] / ms[k]:.2f} of the time)")
    print(f"sum3 vs sum2: {ms['sum2'] / ms['sum3']:.2f}x faster with the atomics, "
          f"{ms['sum2_noatomic'] / ms['sum3_noatomic']:.2f}x without")
