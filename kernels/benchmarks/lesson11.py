"""Lesson 11 on the GPU: the same ops by every route, in one run.

- softmax 8192x8192 fp32: the Triton kernel against lesson 07's final kernel (softmax6), eager and
  torch.compile (the bar: Triton >= 0.9x softmax6).
- bias + GELU 8192x8192 fp32: the .cu op through kernels.load, the same source through kernels.load_inline,
  CuPy's zero-copy launch of its kernel, the Triton kernel and lesson 05's vectorised bias_gelu3.
- CuPy per call at 1 MiB and 256 MiB: zero copy through DLPack against the round trip through the CPU.
- matmul bf16 at 4096^3 and at the ragged 4000^3 (no multiple of a tile): the autotuned Triton matmul against
  lesson 09's matmul12, cuBLAS (eager torch.matmul) and torch.compile; then matmul + bias + GELU at 4096^3,
  the epilogue fused into the Triton matmul against the same matmul followed by the Triton bias + GELU, and
  against eager (cuBLAS, then the elementwise ops) and torch.compile of the three ops (its own fusion).
- first build and cached load of each route, each timed in a fresh process with an empty cache
  (rows of the bench "build: first and cached", no byte count: they stay out of the README table).
GB/s count x read once and the output written once (bias is a row, read from cache); the matmuls count
TFLOP/s, 2 M N K FLOPs (the epilogue's few FLOPs per element of C not counted).
"""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from ..bench import Row, bench, copy_bandwidth, plot, table, write_csv
from ..build import load, load_inline
from ..gates import runnable
from ..lessons import op_gates
from ..paths import ROOT, reference_file
from ..check import close
from ..lessons.lesson11 import bias_gelu_ref
from .lesson09 import _close as close_by_norm  # lesson 09's check: |got - want| / |want| (Frobenius) below rtol

BUILD_BENCH = "build: first and cached"
N = 8192
FUSED, UNFUSED = "triton, fused epilogue", "triton matmul, then bias_gelu"  # the epilogue bench's two Triton rows
MATMUL_SIZES = (4096, 4000)  # 4000 = 31.25 tiles of 128: every program on the last row and column of C is masked


def _softmax(copy: float, out_dir: Path) -> list[Row]:
    from ..lessons import lesson11_triton as triton_ops

    ext7 = load("07", "cuda")
    ops = triton_ops.register("cuda")
    x = torch.randn(N, N, device="cuda")
    out = torch.empty_like(x)
    want = torch.softmax(x, dim=-1)

    def correct() -> bool:
        ext7.softmax6(x, out)
        return close(out, want) and close(ops.softmax(x), want)

    # "triton kernel" launches into `out` as softmax6 does; "triton op" is the registered op (allocation and
    # the op's Python dispatch included)
    return bench(f"softmax {N}x{N} fp32", {"softmax6 (lesson 07)": lambda: ext7.softmax6(x, out),
                                          "triton kernel": lambda: triton_ops.softmax_launch(x, out),
                                          "triton op": lambda: ops.softmax(x)},
                 bytes=2 * x.nbytes, torch_fn=lambda t: torch.softmax(t, dim=-1), args=(x,), copy_gbps=copy,
                 check=correct, csv_path=out_dir / "lesson11.csv", plot_path=out_dir / "lesson11_softmax.png",
                 show=False)


def _bias_gelu(copy: float, out_dir: Path) -> list[Row]:
    from ..lessons import lesson11_cupy as cupy_route, lesson11_triton as triton_ops

    ext = load("11", "cuda")
    inline = load_inline("bias_gelu_inline", cupy_route.SOURCE.read_text(), "cuda")
    ext5 = load("05", "cuda")
    ops = triton_ops.register("cuda")
    x, b = torch.randn(N, N, device="cuda"), torch.randn(N, device="cuda")
    out = torch.empty_like(x)
    want = bias_gelu_ref(x, b)
    variants = {"load (.cu)": lambda: ext.bias_gelu(x, b), "load_inline": lambda: inline.bias_gelu(x, b),
                "triton kernel": lambda: triton_ops.bias_gelu_launch(x, b, out), "triton op": lambda: ops.bias_gelu(x, b),
                "bias_gelu3 (lesson 05)": lambda: ext5.bias_gelu(x, b, True)}
    if not cupy_route.missing():
        variants["cupy zero-copy"] = lambda: cupy_route.bias_gelu(x, b)

    def correct() -> bool:
        triton_ops.bias_gelu_launch(x, b, out)
        return close(out, want) and all(close(fn(), want) for name, fn in variants.items() if name != "triton kernel")

    def eager(t, bias):
        return torch.nn.functional.gelu(t + bias, approximate="tanh")

    return bench(f"bias + GELU {N}x{N} fp32", variants, bytes=2 * x.nbytes, torch_fn=eager, args=(x, b),
                 copy_gbps=copy, check=correct, csv_path=out_dir / "lesson11.csv",
                 plot_path=out_dir / "lesson11_bias_gelu.png", show=False)


def _matmul(copy: float, out_dir: Path) -> list[Row]:
    """The Triton matmul (autotuned on first use of each shape) against matmul12, cuBLAS and torch.compile, bf16."""
    from ..lessons import lesson11_triton as triton_ops

    ext9 = load("09", "cuda")  # lesson 09's ladder, as its benchmark builds it; matmul12(a, b, c) writes c
    theirs = runnable(["matmul12"], op_gates(reference_file("09")).get, torch.bfloat16)  # [] below its gate
    ops = triton_ops.register("cuda")
    rows = []
    for size in MATMUL_SIZES:
        a, b = (torch.randn(size, size, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        c = torch.empty_like(a)
        want = a.double() @ b.double()
        ops.matmul(a, b)  # the autotuner times its configs here, not inside the timed loop

        def correct() -> bool:
            for name in theirs:
                getattr(ext9, name)(a, b, c)
            return close_by_norm(ops.matmul(a, b), want, 1e-2) and (not theirs or close_by_norm(c, want, 1e-2))

        variants = {"triton (autotuned)": lambda: ops.matmul(a, b),
                    **{f"{name} (lesson 09)": (lambda f=getattr(ext9, name): f(a, b, c)) for name in theirs}}
        rows += bench(f"matmul {size}^3 bf16", variants,
                      flops=2 * size**3, torch_fn=torch.matmul, args=(a, b), copy_gbps=copy, check=correct,
                      csv_path=out_dir / "lesson11.csv", plot_path=out_dir / f"lesson11_matmul_{size}.png", show=False)
        del a, b, c, want
    torch.cuda.empty_cache()
    return rows


def _matmul_epilogue(copy: float, out_dir: Path) -> list[Row]:
    """matmul + bias + GELU, bf16 4096^3: the epilogue fused into the Triton matmul, or run as a second kernel."""
    from ..lessons import lesson11_triton as triton_ops

    ops = triton_ops.register("cuda")
    size = MATMUL_SIZES[0]
    a, b = (torch.randn(size, size, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    bias = torch.randn(size, device="cuda", dtype=torch.bfloat16)
    want = torch.nn.functional.gelu(a.double() @ b.double() + bias.double(), approximate="tanh")
    ops.matmul(a, b, bias, True)

    def unfused():
        return ops.bias_gelu(ops.matmul(a, b), bias)

    def eager(x, y, bias):
        return torch.nn.functional.gelu(x @ y + bias, approximate="tanh")

    def correct() -> bool:
        return close_by_norm(ops.matmul(a, b, bias, True), want, 1e-2) and close_by_norm(unfused(), want, 1e-2)

    return bench(f"matmul {size}^3 bf16 + bias + GELU", {FUSED: lambda: ops.matmul(a, b, bias, True),
                                                         UNFUSED: unfused},
                 flops=2 * size**3, torch_fn=eager, args=(a, b, bias), copy_gbps=copy, check=correct,
                 csv_path=out_dir / "lesson11.csv", plot_path=out_dir / "lesson11_matmul_epilogue.png", show=False)


def _cupy_overhead(copy: float, out_dir: Path) -> list[Row]:
    from ..lessons import lesson11_cupy as cupy_route

    if cupy_route.missing():
        print(f"cupy per-call overhead skipped: {cupy_route.missing()}")
        return []
    ext = load("11", "cuda")
    rows = []
    for mib in (1, 256):
        cols = 1024
        x = torch.randn(mib * 2**20 // 4 // cols, cols, device="cuda")
        b = torch.randn(cols, device="cuda")
        want = bias_gelu_ref(x, b)

        def correct() -> bool:
            return close(cupy_route.bias_gelu(x, b), want) and close(cupy_route.bias_gelu_round_trip(x, b), want)

        rows += bench(f"cupy per call, {mib} MiB fp32", {
            "load (.cu)": lambda: ext.bias_gelu(x, b),
            "cupy zero-copy": lambda: cupy_route.bias_gelu(x, b),
            "cupy round trip": lambda: cupy_route.bias_gelu_round_trip(x, b),
        }, bytes=2 * x.nbytes, torch_fn=lambda t, bias: torch.nn.functional.gelu(t + bias, approximate="tanh"),
            args=(x, b), compile=False, copy_gbps=copy, check=correct, csv_path=out_dir / "lesson11.csv",
            plot_path=out_dir / f"lesson11_cupy_{mib}mib.png", show=False)
    return rows


# What each route's fresh process runs: the import, then `first` timed; the same in a second process
# with the cache the first one filled gives the cached load.
_BUILDS = {
    "load (.cu)": ("from kernels import load", "load('11', 'cuda', quiet=True)", "KERNELS_BUILD_DIR"),
    "load_inline": ("from kernels import load_inline; from kernels.lessons.lesson11_cupy import SOURCE; s = SOURCE.read_text()",
                    "load_inline('bias_gelu_inline', s, 'cuda', quiet=True)", "KERNELS_BUILD_DIR"),
    "triton": ("import torch; from kernels import triton_ops; ops = triton_ops.register('cuda'); "
               "x = torch.randn(64, 1024, device='cuda'); torch.cuda.synchronize()",
               "ops.softmax(x); ops.bias_gelu(x, x[0]); torch.cuda.synchronize()", "TRITON_CACHE_DIR"),
    "cupy": ("import torch; from kernels import cupy_route; x = torch.randn(64, 1024, device='cuda'); "
             "torch.cuda.synchronize()", "cupy_route.bias_gelu(x, x[0]); torch.cuda.synchronize()", "CUPY_CACHE_DIR"),
}


def _seconds_in_fresh_process(setup: str, timed: str, env: dict) -> float:
    code = (f"import sys, time; sys.path.insert(0, {str(ROOT)!r}); {setup}\n"
            f"t = time.perf_counter(); {timed}; print('SECONDS', time.perf_counter() - t)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith("SECONDS")]
    if run.returncode or not lines:
        raise RuntimeError(f"timing a build failed:\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}")
    return float(lines[-1].split()[1])


def _builds(copy: float, out_dir: Path) -> list[Row]:
    """Each route's first build (an empty cache) and cached load (the cache the first filled), in fresh processes."""
    from ..lessons import lesson11_cupy as cupy_route

    rows = []
    for route, (setup, timed, cache_var) in _BUILDS.items():
        if route == "cupy" and cupy_route.missing():
            continue
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, cache_var: cache}
            for when in ("first build", "cached load"):
                s = _seconds_in_fresh_process(setup, timed, env)
                rows.append(Row(BUILD_BENCH, f"{route}: {when}", 1000 * s, None, None, None, None, None))
                print(f"{route:<12} {when:<12} {s:8.2f} s")
    write_csv(rows, out_dir / "lesson11.csv", copy)
    return rows


def run(out_dir: Path) -> list[Row]:
    """Softmax (Triton vs lesson 07), bias + GELU by every route, CuPy's per-call overhead, the Triton matmul
    (vs matmul12, cuBLAS, torch.compile; its fused epilogue), build times."""
    copy = copy_bandwidth()
    rows = _softmax(copy, out_dir)
    rows += _bias_gelu(copy, out_dir)
    rows += _cupy_overhead(copy, out_dir)
    rows += _matmul(copy, out_dir)
    rows += _matmul_epilogue(copy, out_dir)
    labelled = [dataclasses.replace(r, variant=f"{r.bench}: {r.variant}") for r in rows]
    plot(labelled, copy, out_dir / "lesson11_all.png", show=False)
    print(table(labelled, copy))
    return rows + _builds(copy, out_dir)


# ---------------------------------------------------------------------------------------------
# The comparison the lesson shows (from the recorded CSV on a machine without a GPU).

def code_lines(text: str) -> int:
    """Lines of code in C++ or Python text: blank lines, comment lines and docstring lines not counted."""
    count, in_doc = 0, False
    for line in text.splitlines():
        s = line.strip()
        if in_doc:
            in_doc = not (s.endswith('"""') or s.endswith("'''"))
            continue
        if s.startswith(('"""', "'''")):
            in_doc = not (len(s) > 3 and s.endswith(s[:3]))
            continue
        if s and not s.startswith(("//", "#")) or s.startswith("#include"):
            count += 1
    return count


def route_lines() -> dict[str, int]:
    """Lines of code each route needs for bias + GELU forward (kernel, launcher, registration; the shared
    helpers and the learner's own call not counted)."""
    import inspect

    from ..lessons import lesson11_cupy as cupy_route, lesson11_triton as triton_ops

    cu = cupy_route.SOURCE.read_text()
    kernels = cupy_route.kernel_source()
    backward = cu[cu.index("// bias_gelu_backward_kernel1"):cu.index("// ----", cu.index("// bias_gelu_backward_kernel1"))]
    forward_cu = cu.replace(backward, "")
    forward_cu = forward_cu[:forward_cu.index("at::Tensor bias_gelu_backward")] + forward_cu[forward_cu.index("// ----", forward_cu.index("at::Tensor bias_gelu_backward")):]
    cupy_code = kernels.replace(backward, "") + "".join(inspect.getsource(f) for f in (
        cupy_route.raw_kernel, cupy_route.as_cupy, cupy_route.torch_stream, cupy_route.launch, cupy_route.bias_gelu))
    triton_code = "".join(inspect.getsource(f) for f in (triton_ops._bias_gelu_kernel, triton_ops.bias_gelu_launch))
    return {"load (.cu)": code_lines(forward_cu), "load_inline": code_lines(forward_cu) + 1,
            "cupy": code_lines(cupy_code), "triton": code_lines(triton_code) + 5}  # + the op's 5 lines in register()


CAN = {  # what each route can and cannot do, as the lesson shows it
    "load (.cu)": "everything CUDA C++ can: shared memory, warp shuffles, templates, any launch; ops with autograd, "
                  "torch.compile and the simulator; an nvcc build per change (cached)",
    "load_inline": "the same as load, with the source in a Python string: handy in a notebook, but no editor "
                   "support, and an edit in one process cannot redefine an op (restart)",
    "cupy": "CUDA C++ kernels compiled at run time (NVRTC, seconds), no PyTorch headers: raw pointers, your own "
            "launch; no op registration, autograd by hand, GPU only",
    "triton": "Python kernels over blocks of values; the compiler picks the memory moves and autotunes; no explicit "
              "shared memory or warp shuffles; NVIDIA and AMD GPUs, a CPU interpreter for tests",
}


def matmul_figures(recorded_dir: Path | None = None) -> list[dict]:
    """The recorded matmul rows (Triton, matmul12, cuBLAS, torch.compile; the epilogue fused or not) as a table
    of TFLOP/s and the fraction of cuBLAS (the `eager` row of the same bench); [] when none are recorded."""
    import csv

    from . import RECORDED

    path = (recorded_dir or RECORDED) / "lesson11.csv"
    records = [r for r in (csv.DictReader(path.open()) if path.exists() else []) if r["bench"].startswith("matmul")]
    if not records:
        print("The Triton matmul's GPU figures are not recorded yet (they come from `make bench LESSON=11 RECORD=1`).")
        return []
    out = []
    for r in records:
        tflops = float(r["tflops"]) if r["tflops"] else None
        vs = float(r["vs_eager"]) if r["vs_eager"] else None
        out.append({"bench": r["bench"], "variant": r["variant"], "ms": float(r["ms"]), "tflops": tflops,
                    "of cuBLAS": vs})
    print(f"{'bench':<34}{'variant':<32}{'ms':>8}{'TFLOP/s':>9}{'of cuBLAS':>11}")
    for r in out:
        variant = "cuBLAS (eager)" if r["variant"] == "eager" else r["variant"]
        print(f"{r['bench']:<34}{variant:<32}{r['ms']:8.3f}{r['tflops'] or 0:9.1f}"
              f"{'' if r['of cuBLAS'] is None else format(r['of cuBLAS'], '.2f'):>11}")
    print(f"(recorded on {records[0]['device']}, {records[0]['date']}, torch {records[0]['torch']}; in the "
          "+ bias + GELU bench `eager` is cuBLAS, then the elementwise ops)")
    epilogue_saving(out)
    return out


def epilogue_saving(figures: list[dict]) -> None:
    """Print what fusing bias + GELU into the Triton matmul saved against the second kernel, in microseconds,
    next to the napkin figure: the second kernel's 64 MiB of extra traffic at the recorded copy bandwidth."""
    ms = {(r["bench"], r["variant"]): r["ms"] for r in figures}
    for bench_name, _ in ms:
        fused, unfused = ms.get((bench_name, FUSED)), ms.get((bench_name, UNFUSED))
        plain = ms.get((bench_name.replace(" + bias + GELU", ""), "triton (autotuned)"))
        if fused is None or unfused is None or plain is None:
            continue
        print(f"fused epilogue: {(unfused - fused) * 1e3:.1f} us saved against the second kernel, which took "
              f"{(unfused - plain) * 1e3:.1f} us after the plain matmul; the fused kernel took "
              f"{(fused - plain) * 1e3:.1f} us more than the plain matmul")
        return


def comparison(recorded_dir: Path | None = None, plot_it: bool = True) -> list[dict]:
    """A table (and a plot) of the routes: lines of code, first build and cached load, bias + GELU GB/s,
    from the recorded GPU run; one dict per route."""
    import csv

    from . import RECORDED

    path = (recorded_dir or RECORDED) / "lesson11.csv"
    records = list(csv.DictReader(path.open())) if path.exists() else []
    if not records:
        print("No recorded GPU figures for lesson 11 yet (they come from `make bench RECORD=1` on a GPU).")
    ms = {(r["bench"], r["variant"]): float(r["ms"]) for r in records}
    gbps = {r["variant"]: float(r["gbps"]) for r in records if r["bench"].startswith("bias + GELU") and r["gbps"]}
    speed_of = {"load (.cu)": "load (.cu)", "load_inline": "load_inline", "cupy": "cupy zero-copy",
                "triton": "triton op"}
    out = []
    for route, lines in route_lines().items():
        first, cached = (ms.get((BUILD_BENCH, f"{route}: {w}")) for w in ("first build", "cached load"))
        out.append({"route": route, "lines": lines, "first build s": first and first / 1000,
                    "cached load s": cached and cached / 1000, "bias+GELU GB/s": gbps.get(speed_of[route])})
    fmt = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
    print(f"{'route':<13}{'lines':>6}{'first build':>13}{'cached load':>13}{'bias+GELU':>11}")
    for r in out:
        print(f"{r['route']:<13}{r['lines']:>6}{fmt(r['first build s'], '.1f'):>11} s{fmt(r['cached load s'], '.2f'):>11} s"
              f"{fmt(r['bias+GELU GB/s'], '.0f'):>7} GB/s")
    if records:
        print(f"(recorded on {records[0]['device']}, {records[0]['date']}, torch {records[0]['torch']})")
    if plot_it:
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 3, figsize=(11, 3))
        names = [r["route"] for r in out]
        for ax, key, title in zip(axes, ("lines", "first build s", "bias+GELU GB/s"),
                                  ("lines of code", "first build (s, GPU machine)", "bias + GELU 8192^2 (GB/s)")):
            ax.bar(names, [r[key] or 0 for r in out], color="#3b7dd8")
            ax.set_title(title, fontsize=10)
            plt.setp(ax.get_xticklabels(), rotation=25, ha="right")
        fig.tight_layout()
        plt.show()
    return out
