"""Lesson 07 on the GPU: every softmax variant against eager PyTorch and torch.compile, in one run.

Shapes 8192x8192 (square), 65536x1024 (many short rows) and 2048x65536 (long rows), float32 and
bfloat16. GB/s count the fewest bytes a softmax must move: x read once and y written once; a
variant that reads x two or three times shows it as a lower GB/s. softmax1 (a thread per row) is
left out at 2048x65536: 2048 threads striding through 512 MiB take seconds per call.
The fused scale + causal mask + softmax (softmax7), at 8192x8192 and on attention-shaped scores (64 heads of
1024x1024, lesson 10's rows), counts the kept half read and the whole output written. Then both backward variants at 8192x8192 and 65536x1024 (y and dy read, dx written) and a
training-style step, forward and backward through autograd, against eager autograd and torch.compile.
`python -m kernels.benchmarks.lesson07 --quick` times only the rows that carry the lesson's bars
(softmax6 at every bar shape, softmax7, the backwards and the training step; about a minute), adds two
rows that split the training step's time between the GPU (the same kernels without autograd) and the
CPU (the step on a 64x64 input), and prints PASS or MISS for each bar. It writes no CSV: `make bench`
records figures.
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Callable

import torch

from ..check import close
from ..bench import Row, bench, compile_static, copy_bandwidth, plot, table
from ..build import load
from . import Bar, print_quick, quick_main
from ..lessons import lesson07
from ..lessons.lesson07 import register_softmax

SHAPES = ((8192, 8192), (65536, 1024), (2048, 65536))
DTYPES = (torch.float32, torch.bfloat16)
SHORT = {torch.float32: "fp32", torch.bfloat16: "bf16"}
VARIANTS = lesson07.FORWARD  # softmax1-6, as the lesson declares them
BACKWARDS = ["softmax_backward1", "softmax_backward2"]  # the op's softmax_backward runs the second


def _torch_softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def _torch_backward(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    return torch._softmax_backward_data(dy, y, -1, y.dtype)


def _files(out_dir: Path | None, plot_name: str) -> dict:
    """bench()'s CSV and plot paths in out_dir; none for the quick run."""
    if out_dir is None:
        return {}
    return {"csv_path": out_dir / "lesson07.csv", "plot_path": out_dir / f"lesson07_{plot_name}.png"}


def _forward_benches(ext, copy: float, out_dir: Path | None, quick: bool = False) -> list[Row]:
    rows = []
    for dt in DTYPES:
        for r, c in SHAPES:
            x = torch.randn(r, c, device="cuda", dtype=dt)
            out = torch.empty_like(x)
            want = _torch_softmax(x.float())
            names = ["softmax6"] if quick else [v for v in VARIANTS if not (v == "softmax1" and c > 8192)]

            def all_correct(names=names) -> bool:
                results = []
                for name in names:
                    out.fill_(float("nan"))
                    getattr(ext, name)(x, out)
                    results.append(close(out, want))
                return all(results)

            variants = {name: (lambda f=getattr(ext, name): f(x, out)) for name in names}
            rows += bench(f"softmax {r}x{c} {SHORT[dt]}", variants, bytes=2 * x.nbytes, torch_fn=_torch_softmax,
                          args=(x,), copy_gbps=copy, check=all_correct, show=False,
                          **_files(out_dir, f"softmax_{r}x{c}_{SHORT[dt]}"))
            del x, out, want
            torch.cuda.empty_cache()
    return rows


CAUSAL_SHAPES = ((8192, 8192, 8192), (65536, 1024, 1024))  # (rows, cols, q_len): one square matrix; 64 heads of 1024


def _causal_benches(ext, copy: float, out_dir: Path | None) -> list[Row]:
    """softmax7 on one 8192x8192 score matrix and on attention-shaped scores (64 heads of 1024 queries x 1024 keys,
    lesson 10's rows), against eager's multiply, masked_fill and softmax and torch.compile of them."""
    scale = 0.125
    rows = []
    for r, c, q in CAUSAL_SHAPES:
        keep = torch.ones(q, c, device="cuda", dtype=torch.bool).tril()

        def eager(x, keep=keep, q=q):
            s = (x.view(-1, q, x.shape[1]) * scale).masked_fill(~keep, float("-inf"))
            return torch.softmax(s, dim=-1).view(x.shape)

        for dt in DTYPES:
            x = torch.randn(r, c, device="cuda", dtype=dt)
            out = torch.empty_like(x)

            def causal_ok() -> bool:
                ext.softmax7(x, scale, q, out)
                return close(out, eager(x.float()))

            rows += bench(f"scale + causal mask + softmax {r}x{c} {SHORT[dt]}",
                          {"softmax7": lambda: ext.softmax7(x, scale, q, out)}, bytes=x.nbytes // 2 + x.nbytes,
                          torch_fn=eager, args=(x,), copy_gbps=copy, check=causal_ok, show=False,
                          **_files(out_dir, f"causal_{r}x{c}_{SHORT[dt]}"))
            del x, out
            torch.cuda.empty_cache()
    return rows


def _train_step(fn: Callable, x: torch.Tensor, grad: torch.Tensor) -> Callable[[], object]:
    return lambda: torch.autograd.grad(fn(x), (x,), grad)


def _function(ext) -> Callable:
    """The same kernels behind a plain torch.autograd.Function: the CPU cost of the op's registration
    (torch.library's autograd) shows as the difference."""
    class Softmax(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = ext.softmax(x)
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, grad):
            (y,) = ctx.saved_tensors
            return ext.softmax_backward(y, grad.contiguous())

    return Softmax.apply


def _backward_only(ext, copy: float, out_dir: Path | None, r: int, c: int, dt: torch.dtype) -> list[Row]:
    """Both backward variants (out-variants into one dx) against eager and compiled autograd's kernel."""
    s = SHORT[dt]
    y = _torch_softmax(torch.randn(r, c, device="cuda", dtype=dt))
    dy = torch.randn_like(y)
    dx = torch.empty_like(y)
    want = _torch_backward(y.float(), dy.float())

    def backward_ok() -> bool:
        results = []
        for name in BACKWARDS:
            dx.fill_(float("nan"))
            getattr(ext, name)(y, dy, dx)
            results.append(close(dx, want))
        return all(results) and close(ext.softmax_backward(y, dy), want)

    variants = {name: (lambda f=getattr(ext, name): f(y, dy, dx)) for name in BACKWARDS}
    return bench(f"softmax backward {r}x{c} {s}", variants, bytes=3 * y.nbytes, torch_fn=_torch_backward,
                 args=(y, dy), copy_gbps=copy, check=backward_ok, show=False,
                 **_files(out_dir, f"backward_{r}x{c}_{s}"))


def _step_benches(ext, copy: float, out_dir: Path | None, quick: bool, dt: torch.dtype) -> list[Row]:
    """The training-style step. The quick run adds rows that say where its time goes: the same kernels
    without autograd (the GPU's share), behind a plain autograd.Function, and the step on a 64x64 input
    (the CPU's share per step)."""
    r = c = 8192
    s = SHORT[dt]
    dy = torch.randn(r, c, device="cuda", dtype=dt)
    x = torch.randn(r, c, device="cuda", dtype=dt, requires_grad=True)
    compiled = compile_static(_torch_softmax)
    variants = {"torch.compile": _train_step(compiled, x, dy), "softmax op": _train_step(ext.softmax, x, dy)}
    if quick:
        xd = x.detach()
        variants.update({"autograd.Function": _train_step(_function(ext), x, dy),
                         "kernels, no autograd": lambda: ext.softmax_backward(ext.softmax(xd), dy)})
    # forward: x read, y written; backward: y and dy read, dx written
    rows = bench(f"softmax fwd+bwd {r}x{c} {s}", variants, bytes=5 * dy.nbytes,
                 torch_fn=_train_step(_torch_softmax, x, dy), args=(), compile=False, copy_gbps=copy, show=False,
                 **_files(out_dir, f"train_{s}"))
    if quick:
        sx = x.detach()[:64, :64].clone().requires_grad_()
        sdy = dy[:64, :64].contiguous()
        rows += bench(f"softmax fwd+bwd 64x64 {s} (CPU)",
                      {"softmax op": _train_step(ext.softmax, sx, sdy),
                       "autograd.Function": _train_step(_function(ext), sx, sdy)},
                      torch_fn=_train_step(_torch_softmax, sx, sdy), args=(), compile=False, copy_gbps=copy,
                      show=False)
    return rows


def _backward_benches(ext, copy: float, out_dir: Path | None, quick: bool = False) -> list[Row]:
    rows = []
    for dt in DTYPES:
        # square rows, and many short ones (a warp per row); the bar is at 8192x8192
        for shape in ((8192, 8192),) if quick else ((8192, 8192), (65536, 1024)):
            rows += _backward_only(ext, copy, out_dir, *shape, dt)
            torch.cuda.empty_cache()
        rows += _step_benches(ext, copy, out_dir, quick, dt)
        torch.cuda.empty_cache()
    return rows


def run(out_dir: Path) -> list[Row]:
    """Every forward variant, the fused causal softmax, the backward and the training step, fp32 and bf16; CSV and plots into out_dir."""
    ext = load("07", "cuda")
    register_softmax(ext)
    copy = copy_bandwidth()
    rows = _forward_benches(ext, copy, out_dir)
    rows += _causal_benches(ext, copy, out_dir)
    rows += _backward_benches(ext, copy, out_dir)
    labelled = [dataclasses.replace(r, variant=f"{r.bench}: {r.variant}") for r in rows]
    plot(labelled, copy, out_dir / "lesson07_all.png", show=False)
    print(table(labelled, copy))
    return rows


# The lesson's bars for the final kernels (H100, side by side in one run).
BARS = [
    *(Bar(f"softmax {r}x{c} {s}", "softmax6", "vs_compile", 1.1 if c == 65536 else 1.0)
      for s in ("fp32", "bf16") for r, c in SHAPES),
    *(Bar(f"softmax 8192x8192 {s}", "softmax6", "vs_eager", 1.5) for s in ("fp32", "bf16")),
    *(Bar(f"scale + causal mask + softmax {r}x{c} {s}", "softmax7", "vs_compile", 1.0)
      for r, c, _ in CAUSAL_SHAPES for s in ("fp32", "bf16")),
    *(Bar(f"softmax backward 8192x8192 {s}", "softmax_backward2", "vs_compile", 1.0) for s in ("fp32", "bf16")),
    *(Bar(f"softmax fwd+bwd 8192x8192 {s}", "softmax op", "vs_eager", 1.5) for s in ("fp32", "bf16")),
]


def quick() -> list[Row]:
    """The rows that carry the bars, in about a minute: softmax6 against eager and compile at every bar shape,
    softmax7, the backwards and the training step at 8192x8192."""
    ext = load("07", "cuda")
    register_softmax(ext)
    copy = copy_bandwidth()
    rows = (_forward_benches(ext, copy, None, quick=True) + _causal_benches(ext, copy, None)
            + _backward_benches(ext, copy, None, quick=True))
    print_quick(rows, copy, BARS)
    return rows


if __name__ == "__main__":
    sys.exit(quick_main(quick))
