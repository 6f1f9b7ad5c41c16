"""Lesson 09 on the GPU: every matmul variant at 4096^3 against cuBLAS (torch.matmul) and torch.compile, in one run.

FLOPs are 2 M N K. fp32 runs with TF32 off, so torch.matmul is cuBLAS's fp32 SGEMM, like for like; the
`vs eager` column is then the fraction of cuBLAS. bf16 and fp16 compare matmul9, matmul10 and matmul12 with
cuBLAS in the same dtype, and matmul11 (TF32) with torch.matmul with TF32 on. Then a roofline of the
fp32 ladder, a chart of every variant as % of cuBLAS, and ptxas's registers and spills per kernel.

A quicker look while tuning, one line per variant and dtype (checked, then timed against cuBLAS):

    python -m kernels.benchmarks.lesson09 --quick matmul8 matmul10 matmul12 [--dtypes bf16 fp16] [--sweep]

--sweep also times each of matmul12's tile configurations (a build with MATMUL12_SWEEP defined).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
from pathlib import Path

import torch

from ..bench import Row, bench, copy_bandwidth, device_name, plot, roofline, table, time_ms
from ..build import load
from ..gates import runnable
from ..lessons import lesson09, op_gates
from ..paths import reference_file
from ..tools.ptxas import resource_table, resource_usage

SIZE = 4096
# the ladder as lesson 09 declares it (kernels/lessons/lesson09.py): fp32 variants, the tensor-core ones in bf16/fp16
FP32, HALF = lesson09.FP32, lesson09.HALF
NEEDS = op_gates(reference_file("09"))  # the variants a GPU below compute capability 8.0 lacks (lesson09.py)
# The fp32 variants' block tiles (BM, BN): each tile of A is loaded N / BN times and of B M / BM times,
# so a variant loads 4 M N K (1/BM + 1/BN) bytes for 2 M N K FLOPs. matmul1/2 load 8 bytes per FMA.
TILES = {"matmul3": (32, 32), "matmul4": (64, 64), "matmul5": (128, 128), "matmul6": (128, 128),
         "matmul7": (128, 128), "matmul8": (128, 128)}


def load_intensity(variant: str) -> float:
    """FLOPs per byte a variant loads from global memory (L2 or DRAM), as its tiling implies."""
    if variant not in TILES:
        return 2 / 8
    bm, bn = TILES[variant]
    return 2 / (4 * (1 / bm + 1 / bn))


def fp32_peak_tflops() -> float:
    """The GPU's fp32 (non-tensor) peak: SMs x 128 lanes x 2 FLOPs per FMA x the clock (Hopper and Ampere+)."""
    p = torch.cuda.get_device_properties(0)
    ghz = getattr(p, "clock_rate", 1_980_000) / 1e6  # kHz (an H100 SXM reports 1.98 GHz); that where torch does not say
    return p.multi_processor_count * 128 * 2 * ghz / 1e3


@contextlib.contextmanager
def tf32(enabled: bool):
    """torch.matmul with TF32 on or off inside the block; the caller's setting afterwards."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def _close(got: torch.Tensor, want: torch.Tensor, rtol: float) -> bool:
    return ((got.double() - want.double()).norm() / want.double().norm()).item() < rtol


def _bench_dtype(ext, names: list[str], dtype: torch.dtype, label: str, copy: float, out_dir: Path, rtol: float,
                 use_tf32: bool = False) -> list[Row]:
    names = runnable(names, NEEDS.get, dtype)  # what this GPU lacks is left out, with a line that says why
    if not names:
        return []
    a = torch.randn(SIZE, SIZE, device="cuda", dtype=dtype)
    b = torch.randn(SIZE, SIZE, device="cuda", dtype=dtype)
    c = torch.empty(SIZE, SIZE, device="cuda", dtype=dtype)
    with tf32(use_tf32):
        want = a.double() @ b.double()

        def all_correct() -> bool:
            results = []
            for name in names:
                getattr(ext, name)(a, b, c)
                results.append(_close(c, want, rtol))
            return all(results)

        variants = {name: (lambda f=getattr(ext, name): f(a, b, c)) for name in names}
        rows = bench(f"matmul {SIZE}^3 {label}", variants, flops=2 * SIZE**3, torch_fn=torch.matmul, args=(a, b),
                     copy_gbps=copy, check=all_correct, csv_path=out_dir / "lesson09.csv",
                     plot_path=out_dir / f"lesson09_{label}.png", show=False)
    del a, b, c, want
    torch.cuda.empty_cache()
    return rows


def percent_of_cublas_chart(rows: list[Row], path: Path | None = None, show: bool = True):
    """Every variant's TFLOP/s as % of cuBLAS in its own benchmark (the `eager` row), one bar each."""
    import matplotlib.pyplot as plt

    kernels = [r for r in rows if r.vs_eager is not None and r.variant != "eager"]
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(kernels) + 2), 3.4))
    ax.bar([f"{r.variant} ({r.bench.split()[-1]})" for r in kernels], [100 * r.vs_eager for r in kernels],
           color=["#999999" if r.variant == "torch.compile" else "#3b7dd8" for r in kernels])
    ax.axhline(100, color="#d83b3b", linestyle="--", linewidth=1)
    ax.set_ylabel("% of cuBLAS (same dtype)")
    ax.set_title(f"matmul {SIZE}^3 ({device_name()})")
    plt.setp(ax.get_xticklabels(), rotation=40, ha="right")
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=120)
    if show:
        plt.show()
    plt.close(fig)
    return fig


def run(out_dir: Path) -> list[Row]:
    """fp32 ladder (TF32 off), WMMA bf16/fp16, TF32; roofline, % of cuBLAS chart, ptxas table into out_dir."""
    ext = load("09", "cuda")
    copy = copy_bandwidth()
    rows = _bench_dtype(ext, FP32, torch.float32, "fp32", copy, out_dir, rtol=1e-5)
    rows += _bench_dtype(ext, HALF, torch.bfloat16, "bf16", copy, out_dir, rtol=1e-2)
    rows += _bench_dtype(ext, HALF, torch.float16, "fp16", copy, out_dir, rtol=2e-3)
    rows += _bench_dtype(ext, ["matmul11"], torch.float32, "tf32", copy, out_dir, rtol=2e-3, use_tf32=True)
    points = {r.variant: (load_intensity(r.variant), r.tflops) for r in rows if r.variant in FP32 and r.tflops}
    roofline(points, fp32_peak_tflops(), copy, out_dir / "lesson09_roofline.png", show=False)
    percent_of_cublas_chart(rows, out_dir / "lesson09_percent_of_cublas.png", show=False)
    labelled = [dataclasses.replace(r, variant=f"{r.bench}: {r.variant}") for r in rows]
    plot(labelled, copy, out_dir / "lesson09_all.png", show=False)
    print(table(labelled, copy))
    usage = resource_table(resource_usage("09"))
    (out_dir / "lesson09_ptxas.txt").write_text(usage + "\n")
    print(usage)
    return rows


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32}
RTOL = {"fp32": 1e-5, "bf16": 1e-2, "fp16": 2e-3, "tf32": 2e-3}


def _dtypes_of(name: str, half_dtypes: list[str]) -> list[str]:
    """The dtypes a variant runs in: the fp32 ladder in fp32, matmul11 in TF32, the WMMA variants in half_dtypes."""
    if name in FP32:
        return ["fp32"]
    if name == "matmul11":
        return ["tf32"]
    if name in HALF:
        return half_dtypes
    raise ValueError(f"unknown variant {name!r}: expected one of {', '.join(FP32 + HALF + ['matmul11'])}")


def quick(names: list[str], half_dtypes: list[str], sweep: bool = False, size: int = SIZE) -> list[str]:
    """One line per variant and dtype: TFLOP/s at size^3 and the fraction of cuBLAS in that dtype, after a check."""
    wanted = [(name, label) for name in names for label in _dtypes_of(name, half_dtypes)  # a typo fails before the build
              if runnable([name], NEEDS.get, DTYPES[label])]
    ext = load("09", "cuda", extra_cflags=["-DMATMUL12_SWEEP"] if sweep else None)
    runs = [(name, label, getattr(ext, name)) for name, label in wanted]
    if sweep:
        configs = list(ext.matmul12_sweep_configs())
        runs += [(f"matmul12 [{cfg}]", label, lambda a, b, c, i=i: ext.matmul12_sweep(a, b, c, i))
                 for i, cfg in enumerate(configs) for label in half_dtypes]
    flops = 2 * size**3
    lines, cublas = [], {}
    for name, label, fn in runs:
        a = torch.randn(size, size, device="cuda", dtype=DTYPES[label])
        b = torch.randn(size, size, device="cuda", dtype=DTYPES[label])
        c = torch.empty(size, size, device="cuda", dtype=DTYPES[label])
        with tf32(label == "tf32"):
            if label not in cublas:
                cublas[label] = flops / time_ms(lambda: torch.matmul(a, b), rep_ms=100) / 1e9
                lines.append(f"cuBLAS {label}: {cublas[label]:.1f} TFLOP/s")
                print(lines[-1])
            fn(a, b, c)
            ok = _close(c, a.double() @ b.double(), RTOL[label])
            tflops = flops / time_ms(lambda: fn(a, b, c), rep_ms=100) / 1e9
        lines.append(f"{name} {label}: {tflops:.1f} TFLOP/s, {tflops / cublas[label]:.3f} of cuBLAS"
                     + ("" if ok else "  WRONG RESULT"))
        print(lines[-1])
        del a, b, c
    return lines


def main(argv: list[str] | None = None) -> int:
    """Command line: --quick NAMES [--dtypes ...] [--sweep] prints quick figures; without --quick, the full run."""
    p = argparse.ArgumentParser(prog="python -m kernels.benchmarks.lesson09", description=__doc__.splitlines()[0])
    p.add_argument("--quick", nargs="*", metavar="VARIANT", help="time only these variants (e.g. matmul10 matmul12)")
    p.add_argument("--dtypes", nargs="+", default=["bf16", "fp16"], choices=["bf16", "fp16"],
                   help="dtypes for the WMMA variants (default: bf16 fp16)")
    p.add_argument("--sweep", action="store_true", help="also time every tile configuration of matmul12")
    p.add_argument("--out", type=Path, default=None, help="the full run's output folder (default: build/bench)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("lesson 09's benchmark needs an NVIDIA GPU: PyTorch sees none")
        return 1
    if args.quick is not None:
        quick(args.quick, args.dtypes, args.sweep)
        return 0
    from . import OUT

    out = args.out or OUT
    out.mkdir(parents=True, exist_ok=True)
    run(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
