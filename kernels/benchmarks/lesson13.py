"""Lesson 13 on the GPU: every Hopper matmul variant against cuBLAS (torch.matmul) and torch.compile, in one run.

bf16 at 4096^3, 8192^3 and 4000^3 (a size that is no multiple of the tiles: ragged edges in M, N and K, and 512
tiles of 128 x 256 for 132 SMs, the last of four waves not full), fp16 at 4096^3. FLOPs are 2 M N K; `vs eager` is
the fraction of cuBLAS in the same dtype. torch.compile is compiled with mode="max-autotune-no-cudagraphs": for a
plain matmul Inductor then times its Triton templates against cuBLAS and keeps the faster, so it is the strongest
PyTorch baseline there is.
The variants run where this GPU has what they need (kernels/lessons/lesson13.py: matmul13_1 from 8.0, the others on
9.0); the benchmark checks each one's result against a float64 product before and after the timing.
Beside them, the routes a practitioner would take instead of writing PTX: lesson 11's Triton matmul (tl.dot in a loop
over K, autotuned over its tile configurations, 128 x 256 x 64 with 3 or 4 stages among them) and CUTLASS 3
(kernels/benchmarks/cutlass13.cu: the collective builders' warp-specialised kernel with a cluster of 2 and TMA
multicast; it needs CUTLASS's headers, `pip install nvidia-cutlass`, and is left out with a line that says so
without them).

Then nn.Linear's layout in bf16 at 4096^3 (w: [N, K], so B = w.t() is column-major), taken apart: x @ w.t() (cuBLAS
against matmul13_5 on w.t()); F.linear with its bias (cuBLAS's addmm against linear13 with no activation); and
gelu(x @ w.T + bias) (eager: addmm, then a GELU kernel; torch.compile with max-autotune, which may fuse the GELU into
a Triton template's epilogue; matmul13_5 on w.t() followed by PyTorch's bias and GELU; linear13 with the bias and the
GELU in matmul13_5's epilogue).

Then fp8 at 4096^3 and 8192^3: e4m3 operands (B column-major) with per-tensor scales and a bf16 result: eager
torch._scaled_mm (cuBLASLt's fp8 matmul, which adds the tensor cores' partial sums in fp32) and, the like-for-like
baseline, its use_fast_accum=True form (which keeps the sums in the tensor cores' accumulators all along K, as
scaled_mm13 does) against scaled_mm13. The README's table divides by the first; the text beside it gives both.

`python -m kernels.benchmarks.lesson13 --quick` times the rows with bars (matmul13_5 at each bf16 size against
cuBLAS) and prints PASS or MISS for each; it writes no CSV.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from ..bench import Row, bench, compile_static, copy_bandwidth, plot, table
from ..build import load
from ..gates import runnable
from ..lessons import lesson11_triton, lesson13, op_gates
from ..paths import reference_file
from . import Bar, print_quick, quick_main

# (M, N, K, dtype): the lesson's sizes
SIZES = ((4096, 4096, 4096, torch.bfloat16), (8192, 8192, 8192, torch.bfloat16), (4000, 4000, 4000, torch.bfloat16),
         (4096, 4096, 4096, torch.float16))
VARIANTS = [v.name for v in lesson13.VARIANTS]
# The lesson's kernel with every layout and the fused epilogue: the bars, nn.Linear's rows and fp8 are its.
# matmul13_6 (clusters of 2 sharing B by multicast) is timed beside it on the row-major sizes.
FINAL = "matmul13_5"
assert FINAL in VARIANTS
NEEDS = op_gates(reference_file("13"))
RTOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3}  # relative Frobenius error of the result against float64


def _name(m: int, n: int, k: int, dtype: torch.dtype) -> str:
    size = f"{m}^3" if m == n == k else f"{m}x{n}x{k}"
    return f"matmul {size} {str(dtype).replace('torch.', '').replace('bfloat16', 'bf16').replace('float16', 'fp16')}"


# The lesson's bars: the final variant against cuBLAS, 0.9x where the tiles divide C, 0.8x at 4000^3 (ragged edges).
BARS = [Bar(_name(4096, 4096, 4096, torch.bfloat16), FINAL, "vs_eager", 0.9),
        Bar(_name(8192, 8192, 8192, torch.bfloat16), FINAL, "vs_eager", 0.9),
        Bar(_name(4000, 4000, 4000, torch.bfloat16), FINAL, "vs_eager", 0.8)]


def _close(got: torch.Tensor, want: torch.Tensor, rtol: float) -> bool:
    return ((got.double() - want).norm() / want.norm()).item() < rtol


TRITON = "Triton (lesson 11)"
CUTLASS = "CUTLASS 3 (cluster 2x1)"
CUTLASS_SOURCE = Path(__file__).with_name("cutlass13.cu")


def cutlass_headers() -> tuple[list[Path], str]:
    """CUTLASS's include folders, from the nvidia-cutlass package (found, not imported: its Python needs more), or
    ([], why not)."""
    spec = importlib.util.find_spec("cutlass_library")
    roots = list(spec.submodule_search_locations or []) if spec else []
    folders = [Path(roots[0]) / "source" / sub for sub in ("include", "tools/util/include")] if roots else []
    if not folders or not all((f / "cutlass").is_dir() for f in folders):
        return [], (f"{CUTLASS} left out: CUTLASS's headers are not installed (`pip install nvidia-cutlass` brings "
                    "them, 6 MB, nothing compiled)")
    return folders, ""


def others() -> dict[str, object]:
    """The practical routes that run here, by row name: a function (a, b, c) -> None writing a @ b into c (bf16 or
    fp16)."""
    out = {}
    if not lesson11_triton.missing():
        out[TRITON] = lambda a, b, c: lesson11_triton.matmul_launch(a, b, c)
    folders, why = cutlass_headers()
    if why or torch.cuda.get_device_capability() != (9, 0):
        print(why or f"{CUTLASS} left out: it is built for sm_90a, which only a 9.0 GPU (H100, H200) runs")
    else:  # minutes to build the first time, cached after
        out[CUTLASS] = load(CUTLASS_SOURCE, "cuda", extra_include_paths=folders).cutlass13
    return out


def time_size(ext, m: int, n: int, k: int, dtype: torch.dtype, names: list[str], out_dir: Path | None,
              copy: float, routes: dict | None = None) -> list[Row]:
    """Every variant in `names` on one size and dtype, beside cuBLAS, max-autotuned torch.compile and `routes`
    (others(): Triton, CUTLASS)."""
    names = runnable(names, NEEDS.get, dtype)  # what this GPU lacks is left out, with a line that says why
    a, b = torch.randn(m, k, device="cuda", dtype=dtype), torch.randn(k, n, device="cuda", dtype=dtype)
    c = torch.empty(m, n, device="cuda", dtype=dtype)
    want = a.double() @ b.double()
    fns = {name: getattr(ext, name) for name in names}
    for name, fn in (routes or {}).items():  # a route that gives a wrong answer is left out, not the lesson's rows
        c.fill_(float("nan"))
        fn(a, b, c)  # (the Triton matmul autotunes on its first call: here, not in the timing)
        if _close(c, want, RTOL[dtype]):
            fns[name] = fn
        else:
            print(f"{_name(m, n, k, dtype)}: {name} left out: its result differs from the float64 product")

    def all_correct() -> bool:
        results = []
        for name, fn in fns.items():
            c.fill_(float("nan"))
            fn(a, b, c)
            results.append(_close(c, want, RTOL[dtype]))
            if not results[-1]:
                print(f"{_name(m, n, k, dtype)}: {name}'s result differs from the float64 product")
        return all(results)

    if not all_correct():  # a wrong kernel is not timed
        raise RuntimeError(f"{_name(m, n, k, dtype)}: a variant's result differs from the float64 product")
    compiled = compile_static(torch.matmul, mode="max-autotune-no-cudagraphs")
    compiled(a, b)  # the autotuning happens here, not in the timing
    variants = {"torch.compile": lambda: compiled(a, b)}
    variants.update({name: (lambda f=fn: f(a, b, c)) for name, fn in fns.items()})
    rows = bench(_name(m, n, k, dtype), variants, flops=2 * m * n * k, torch_fn=torch.matmul, args=(a, b),
                 compile=False, copy_gbps=copy, check=all_correct, routes=[r for r in routes or () if r in fns],
                 csv_path=out_dir / "lesson13.csv" if out_dir else None, show=False)
    del a, b, c, want
    torch.cuda.empty_cache()
    return rows


LINEAR_SIZE = (4096, 4096, 4096)


def linear_gelu(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.gelu(F.linear(x, w, bias))


def _timed(name: str, torch_fn, args: tuple, fns: dict, want: torch.Tensor, flops: int, out_dir: Path | None,
           copy: float, routes: tuple[str, ...] = ()) -> list[Row]:
    """fns (each checked against `want` before and after the timing) beside eager torch_fn and its max-autotuned
    compile."""
    def all_correct() -> bool:
        return all(_close(fn(), want, RTOL[torch.bfloat16]) for fn in fns.values())

    if not all_correct():
        raise RuntimeError(f"{name}: a variant's result differs from the float64 result")
    compiled = compile_static(torch_fn, mode="max-autotune-no-cudagraphs")
    compiled(*args)
    variants = {"torch.compile": lambda: compiled(*args), **fns}
    return bench(name, variants, flops=flops, torch_fn=torch_fn, args=args, compile=False, copy_gbps=copy,
                 check=all_correct, csv_path=out_dir / "lesson13.csv" if out_dir else None, show=False, routes=routes)


def linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.linear(x, w, bias)


def matmul_wt(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x @ w.t()


def _linear(ext, out_dir: Path | None, copy: float, size: tuple[int, int, int] = LINEAR_SIZE) -> list[Row]:
    """nn.Linear's layout in bf16, three benchmarks that take its cost apart: the product with a column-major B
    (x @ w.t(): cuBLAS against matmul13_5 on w.t()); with the bias (F.linear: cuBLAS's addmm against linear13 with no
    activation); with the bias and a GELU (against matmul13_5 followed by PyTorch's bias and GELU, and linear13)."""
    if not runnable([FINAL], NEEDS.get, torch.bfloat16):
        return []
    m, n, k = size
    shown = f"{m}x{n}x{k} bf16"
    x, w = (torch.randn(rows, k, device="cuda", dtype=torch.bfloat16) for rows in (m, n))
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    product = x.double() @ w.double().t()
    y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)

    def final_on_wt():
        getattr(ext, FINAL)(x, w.t(), y)  # w.t(): a column-major B, read as it lies
        return y

    def unfused():
        return F.gelu(final_on_wt().add_(bias))

    flops = 2 * m * n * k
    rows = _timed(f"matmul x @ w.t() {shown}", matmul_wt, (x, w), {f"{FINAL} on w.t()": final_on_wt}, product,
                  flops, out_dir, copy)
    rows += _timed(f"linear {shown}", linear, (x, w, bias), {"linear13": lambda: ext.linear13(x, w, bias, "none")},
                   product + bias.double(), flops, out_dir, copy)
    rows += _timed(f"linear+GELU {shown}", linear_gelu, (x, w, bias),
                   {f"{FINAL} + PyTorch's bias and GELU": unfused, "linear13": lambda: ext.linear13(x, w, bias, "gelu")},
                   F.gelu(product + bias.double()), flops, out_dir, copy)
    del x, w, bias, product, y
    torch.cuda.empty_cache()
    return rows


FP8_SIZES = ((4096, 4096, 4096), (8192, 8192, 8192))


def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor) -> torch.Tensor:
    return torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16)


# the like-for-like baseline of scaled_mm13, which keeps its sums in the wgmma accumulators all along K, as this
# form does (the default adds the tensor cores' partial sums in fp32 outside: more exact, slower)
FAST_ACCUM = "torch._scaled_mm(use_fast_accum=True)"


def _fp8(ext, out_dir: Path | None, copy: float) -> list[Row]:
    """e4m3 in, per-tensor scales, bf16 out (torch._scaled_mm: cuBLASLt's fp8 matmul) against scaled_mm13, B
    column-major as both need."""
    if not runnable([FINAL], NEEDS.get, torch.bfloat16):
        return []
    rows = []
    for m, n, k in FP8_SIZES:
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        w = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
        sa, sb = torch.tensor(0.5, device="cuda"), torch.tensor(3.0, device="cuda")
        want = a.double() @ w.double().t() * 1.5  # the scales' product: a kernel that drops one fails the check
        size = f"{m}^3" if m == n == k else f"{m}x{n}x{k}"
        fast = lambda: torch._scaled_mm(a, w.t(), sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True)  # noqa: E731
        rows += _timed(f"scaled_mm {size} e4m3 -> bf16", scaled_mm, (a, w.t(), sa, sb),
                       {FAST_ACCUM: fast, "scaled_mm13": lambda: ext.scaled_mm13(a, w.t(), sa, sb)}, want,
                       2 * m * n * k, out_dir, copy, routes=(FAST_ACCUM,))
        del a, w, want
        torch.cuda.empty_cache()
    return rows


def run(out_dir: Path) -> list[Row]:
    """Every size and dtype; a chart of all rows and the bars into out_dir."""
    ext = load("13", "cuda")
    copy = copy_bandwidth()
    routes = others()
    rows = [r for m, n, k, dtype in SIZES for r in time_size(ext, m, n, k, dtype, VARIANTS, out_dir, copy, routes)]
    rows += _linear(ext, out_dir, copy)
    rows += _fp8(ext, out_dir, copy)
    labelled = [dataclasses.replace(r, variant=f"{r.bench}: {r.variant}") for r in rows]
    plot(labelled, copy, out_dir / "lesson13_all.png", show=False)
    print(table(labelled, copy))
    from . import bar_report

    print(bar_report(rows, BARS))
    return rows


def quick() -> list[Row]:
    """The rows with bars: the final variant at each bf16 size, beside cuBLAS and torch.compile."""
    ext = load("13", "cuda")
    copy = copy_bandwidth()
    rows = [r for m, n, k, dtype in SIZES if dtype == torch.bfloat16
            for r in time_size(ext, m, n, k, dtype, [FINAL], None, copy)]
    print_quick(rows, copy, BARS)
    return rows


if __name__ == "__main__":
    sys.exit(quick_main(quick))
