"""Lesson 02 on the GPU: the first kernels (vector add, square) against PyTorch, in one run.

A Python loop over 2^20 floats on the CPU sets the scale; then add1 (32-bit index, default
stream), add2 (64-bit index, current stream) and add4 (templated, one instance per dtype) on 2^26
floats (768 MiB moved per call in fp32), add4 and square5 in half precision, and a block-size
sweep of add3. GB/s count 12 bytes per fp32 element for an add (read x and y, write out).
"""
from __future__ import annotations

import time
from pathlib import Path

import torch

from ..bench import Row, bench, copy_bandwidth, table, time_ms, write_csv
from ..build import load

N = 2**26
BLOCKS = (32, 64, 128, 256, 512, 1024)


def python_loop_row(copy: float) -> Row:
    """The same addition as a Python loop over 2^20 floats: the baseline the lesson starts from."""
    n = 2**20
    xs, ys = torch.randn(n).tolist(), torch.randn(n).tolist()
    t0 = time.perf_counter()
    _ = [a + b for a, b in zip(xs, ys)]
    ms = (time.perf_counter() - t0) * 1e3
    gbps = 12 * n / ms / 1e6
    return Row("add, Python loop on the CPU (2^20 floats)", "python loop", ms, gbps, None, gbps / copy, None, None)


def run(out_dir: Path) -> list[Row]:
    ext = load("02", "cuda")
    copy = copy_bandwidth()
    csv_path = out_dir / "lesson02.csv"
    rows = [python_loop_row(copy)]
    write_csv(rows, csv_path, copy)

    x, y = torch.randn(N, device="cuda"), torch.randn(N, device="cuda")
    out = torch.empty_like(x)
    want = x + y

    def adds_still_correct() -> bool:
        results = []
        for f in (ext.add1, ext.add2, ext.add4):
            out.fill_(float("nan"))
            f(x, y, out)
            results.append(torch.equal(out, want))
        return all(results)

    rows += bench(f"add, {N} floats fp32 (768 MiB moved)",
                  {"add1": lambda: ext.add1(x, y, out), "add2": lambda: ext.add2(x, y, out),
                   "add4": lambda: ext.add4(x, y, out)},
                  bytes=12 * N, torch_fn=torch.add, args=(x, y), copy_gbps=copy, check=adds_still_correct,
                  csv_path=csv_path, plot_path=out_dir / "lesson02_add.png", show=False)

    xh, yh = x.half(), y.half()
    oh = torch.empty_like(xh)

    def half_still_correct() -> bool:
        oh.fill_(float("nan"))
        ext.add4(xh, yh, oh)
        ok = torch.equal(oh, xh + yh)
        oh.fill_(float("nan"))
        ext.square5(xh, oh)
        return ok and torch.equal(oh, xh * xh)

    rows += bench(f"add, {N} halves fp16 (384 MiB moved)", {"add4 (half)": lambda: ext.add4(xh, yh, oh)},
                  bytes=6 * N, torch_fn=torch.add, args=(xh, yh), copy_gbps=copy, check=half_still_correct,
                  csv_path=csv_path, show=False)
    rows += bench(f"square, {N} halves fp16 (256 MiB moved)", {"square5 (half)": lambda: ext.square5(xh, oh)},
                  bytes=4 * N, torch_fn=torch.square, args=(xh,), copy_gbps=copy, check=half_still_correct,
                  csv_path=csv_path, show=False)

    sweep = []
    for b in BLOCKS:
        ms = time_ms(lambda: ext.add3(x, y, out, b))
        gbps = 12 * N / ms / 1e6
        sweep.append(Row("add3, block size", f"block {b}", ms, gbps, None, gbps / copy, None, None))
    write_csv(sweep, csv_path, copy)
    for part in (rows[:1], rows[1:], sweep):
        print(table(part, copy))
    return rows + sweep
