"""Lesson 08 on the GPU: every layernorm variant against eager PyTorch and torch.compile, in one run.

Shapes 8192x8192 (square), 65536x1024 (many short rows) and 2048x65536 (long rows), float32 and
bfloat16. GB/s count the fewest bytes a layernorm must move: x read once and y written once (weight,
bias, mean and rstd are a row's or a column's worth: left out); a variant that reads x two or three
times shows it as a lower GB/s. The thread-per-row variants (layernorm1 to 3) are left out at
2048x65536: 2048 threads striding through 512 MiB take seconds per call.
Then the backward at 8192x8192 (x and dy read, dx written; dweight and dbias are one row), both ways
of summing dweight and dbias (atomics, and per-block partials with a second pass), and a training-style
step, forward and backward through autograd, against eager autograd and torch.compile.
`python -m kernels.benchmarks.lesson08 --quick` times only the rows that carry the lesson's bars
(layernorm6 at every bar shape and its layouts at 8192 columns, the backwards and their layouts, the
training step; about a minute), adds two rows that split the training step's time between the GPU
(the same kernels without autograd) and the CPU (the step on a 64x64 input), and prints PASS or MISS
for each bar. It writes no CSV: `make bench` records figures.
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from ..bench import Row, bench, compile_static, copy_bandwidth, plot, table
from ..build import load
from . import Bar, print_quick, quick_main
from ..check import close
from ..lessons import lesson08
from ..lessons.lesson08 import EPS, TOLERANCE_LN, register_layernorm

SHAPES = ((8192, 8192), (65536, 1024), (2048, 65536))
DTYPES = (torch.float32, torch.bfloat16)
SHORT = {torch.float32: "fp32", torch.bfloat16: "bf16"}
VARIANTS = lesson08.FORWARD  # layernorm1-6, as the lesson declares them
THREAD_PER_ROW = ("layernorm1", "layernorm2", "layernorm3")


def _torch_layernorm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), w, b, EPS)


def _torch_backward(dy, x, w, b, mean, rstd):
    return torch.ops.aten.native_layer_norm_backward(dy, x, [x.shape[-1]], mean[:, None], rstd[:, None], w, b,
                                                     [True, True, True])


def _params(c: int, dt: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    return (1 + 0.1 * torch.randn(c, device="cuda")).to(dt), (0.1 * torch.randn(c, device="cuda")).to(dt)


# The lesson's bars for the final kernels (H100, side by side in one run).
BARS = [
    *(Bar(f"layernorm {r}x{c} {s}", "layernorm6", "vs_compile", 1.1 if c == 65536 else 1.0)
      for s in ("fp32", "bf16") for r, c in SHAPES),
    *(Bar(f"layernorm 8192x8192 {s}", "layernorm6", "vs_eager", 1.5) for s in ("fp32", "bf16")),
    *(Bar(f"layernorm backward 8192x8192 {s}", "layernorm_backward2", "vs_compile", 1.0) for s in ("fp32", "bf16")),
    *(Bar(f"layernorm fwd+bwd 8192x8192 {s}", "layernorm op", "vs_eager", 1.5) for s in ("fp32", "bf16")),
]
# The layouts the quick run compares at 8192 columns: threads per row for layernorm6_layout and threads
# per block for layernorm_backward2_layout.
FORWARD_LAYOUTS = (256, 512, 1024)
BACKWARD_LAYOUTS = (256, 512, 1024)


def _compiled(f: Callable[[], object]) -> bool:
    """False when f raises the extension's error for a layout it has no kernel for (the layout is skipped)."""
    try:
        f()
        return True
    except RuntimeError:
        return False


def _files(out_dir: Path | None, plot_name: str) -> dict:
    """bench()'s CSV and plot paths in out_dir; none for the quick run."""
    if out_dir is None:
        return {}
    return {"csv_path": out_dir / "lesson08.csv", "plot_path": out_dir / f"lesson08_{plot_name}.png"}


def _forward_benches(ext, copy: float, out_dir: Path | None, quick: bool = False) -> list[Row]:
    rows = []
    for dt in DTYPES:
        for r, c in SHAPES:
            x = torch.randn(r, c, device="cuda", dtype=dt)
            w, b = _params(c, dt)
            out = torch.empty_like(x)
            mean = torch.empty(r, device="cuda")
            rstd = torch.empty_like(mean)
            want = _torch_layernorm(x.float(), w.float(), b.float())
            names = ["layernorm6"] if quick else [v for v in VARIANTS if not (v in THREAD_PER_ROW and c > 8192)]
            variants = {name: (lambda f=getattr(ext, name): f(x, w, b, EPS, out, mean, rstd)) for name in names}
            for threads in FORWARD_LAYOUTS if quick and c == 8192 else ():
                f = (lambda t=threads: ext.layernorm6_layout(x, w, b, EPS, out, mean, rstd, t))
                if _compiled(f):
                    variants[f"layernorm6 {threads}t"] = f

            def all_correct(variants=variants) -> bool:
                results = []
                for f in variants.values():
                    out.fill_(float("nan"))
                    f()
                    results.append(close(out, want, TOLERANCE_LN))
                return all(results)

            rows += bench(f"layernorm {r}x{c} {SHORT[dt]}", variants, bytes=2 * x.nbytes, torch_fn=_torch_layernorm,
                          args=(x, w, b), copy_gbps=copy, check=all_correct, show=False,
                          **_files(out_dir, f"layernorm_{r}x{c}_{SHORT[dt]}"))
            del x, out, want
            torch.cuda.empty_cache()
    return rows


def _train_step(fn: Callable, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor,
                grad: torch.Tensor) -> Callable[[], object]:
    return lambda: torch.autograd.grad(fn(x, w, b), (x, w, b), grad)


def _function(ext) -> Callable:
    """The same kernels behind a plain torch.autograd.Function: the CPU cost of the op's registration
    (torch.library's autograd) shows as the difference."""
    class LayerNorm(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, b):
            y, mean, rstd = ext.layernorm(x, w, b, EPS)
            ctx.save_for_backward(x, w, mean, rstd)
            return y

        @staticmethod
        def backward(ctx, grad):
            x, w, mean, rstd = ctx.saved_tensors
            return ext.layernorm_backward(grad.contiguous(), x, w, mean, rstd)

    return LayerNorm.apply


def _step_benches(ext, copy: float, out_dir: Path | None, quick: bool, x, w, b, dy, s: str) -> list[Row]:
    """The training-style step. The quick run adds rows that say where its time goes: the same kernels
    without autograd (the GPU's share), behind a plain autograd.Function, and the step on a 64x64 input
    (the CPU's share per step)."""
    r, c = x.shape
    xg, wg, bg = (t.clone().requires_grad_() for t in (x, w, b))
    compiled = compile_static(_torch_layernorm)

    def ours(x, w, b):
        return ext.layernorm(x, w, b, EPS)[0]

    def kernels_only():
        _, mean, rstd = ext.layernorm(x, w, b, EPS)
        return ext.layernorm_backward(dy, x, w, mean, rstd)

    variants = {"torch.compile": _train_step(compiled, xg, wg, bg, dy), "layernorm op": _train_step(ours, xg, wg, bg, dy)}
    if quick:
        variants.update({"autograd.Function": _train_step(_function(ext), xg, wg, bg, dy),
                         "kernels, no autograd": kernels_only})
    # forward: x read, y written; backward: x and dy read, dx written
    rows = bench(f"layernorm fwd+bwd {r}x{c} {s}", variants, bytes=5 * x.nbytes,
                 torch_fn=_train_step(_torch_layernorm, xg, wg, bg, dy), args=(), compile=False, copy_gbps=copy,
                 show=False, **_files(out_dir, f"train_{s}"))
    if quick:
        sx, sw, sb, sdy = (t[:64, :64].contiguous() if t.dim() == 2 else t[:64].clone() for t in (x, w, b, dy))
        sx, sw, sb = (t.requires_grad_() for t in (sx, sw, sb))
        rows += bench(f"layernorm fwd+bwd 64x64 {s} (CPU)",
                      {"layernorm op": _train_step(ours, sx, sw, sb, sdy),
                       "autograd.Function": _train_step(_function(ext), sx, sw, sb, sdy)},
                      torch_fn=_train_step(_torch_layernorm, sx, sw, sb, sdy), args=(), compile=False, copy_gbps=copy,
                      show=False)
    return rows


def _backward_benches(ext, copy: float, out_dir: Path | None, quick: bool = False) -> list[Row]:
    rows = []
    r, c = 8192, 8192
    for dt in DTYPES:
        s = SHORT[dt]
        x = torch.randn(r, c, device="cuda", dtype=dt)
        w, b = _params(c, dt)
        _, mean, rstd = ext.layernorm(x, w, b, EPS)
        dy = torch.randn_like(x)
        want = _torch_backward(dy.float(), x.float(), w.float(), b.float(), mean, rstd)
        variants = {name: (lambda f=getattr(ext, name): f(dy, x, w, mean, rstd))
                    for name in ("layernorm_backward1", "layernorm_backward2")}
        for threads in BACKWARD_LAYOUTS if quick else ():
            f = (lambda t=threads: ext.layernorm_backward2_layout(dy, x, w, mean, rstd, t))
            if _compiled(f):
                variants[f"backward2 {threads}t"] = f

        def backward_ok(variants=variants) -> bool:
            return all(close(got, ref, TOLERANCE_LN) for f in variants.values() for got, ref in zip(f(), want))

        rows += bench(f"layernorm backward {r}x{c} {s}", variants, bytes=3 * x.nbytes, torch_fn=_torch_backward,
                      args=(dy, x, w, b, mean, rstd), copy_gbps=copy, check=backward_ok, show=False,
                      **_files(out_dir, f"backward_{s}"))
        rows += _step_benches(ext, copy, out_dir, quick, x, w, b, dy, s)
        del x, dy, want
        torch.cuda.empty_cache()
    return rows


def run(out_dir: Path) -> list[Row]:
    """Every forward variant, both backwards and the training step, fp32 and bf16; CSV and plots into out_dir."""
    ext = load("08", "cuda")
    register_layernorm(ext)
    copy = copy_bandwidth()
    rows = _forward_benches(ext, copy, out_dir)
    rows += _backward_benches(ext, copy, out_dir)
    labelled = [dataclasses.replace(r, variant=f"{r.bench}: {r.variant}") for r in rows]
    plot(labelled, copy, out_dir / "lesson08_all.png", show=False)
    print(table(labelled, copy))
    return rows


def quick() -> list[Row]:
    """The rows that carry the bars, in about a minute: layernorm6 (and its layouts at 8192 columns) against
    eager and compile at every bar shape, the backwards (and their layouts) and the training step at 8192x8192."""
    ext = load("08", "cuda")
    register_layernorm(ext)
    copy = copy_bandwidth()
    rows = _forward_benches(ext, copy, None, quick=True) + _backward_benches(ext, copy, None, quick=True)
    print_quick(rows, copy, BARS)
    return rows


if __name__ == "__main__":
    sys.exit(quick_main(quick))
