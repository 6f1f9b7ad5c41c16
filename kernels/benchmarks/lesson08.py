"""Lesson 08 on the GPU: every layernorm variant against eager PyTorch and torch.compile, in one run.

Shapes 8192x8192 (square), 65536x1024 (many short rows) and 2048x65536 (long rows), float32 and
bfloat16. GB/s count the fewest bytes a layernorm must move: x read once and y written once (weight,
bias, mean and rstd are a row's or a column's worth: left out); a variant that reads x two or three
times shows it as a lower GB/s. The thread-per-row variants (layernorm1 to 3) are left out at
2048x65536: 2048 threads striding through 512 MiB take seconds per call.
Then the backward at 8192x8192 (x and dy read, dx written; dweight and dbias are one row), both ways
of summing dweight and dbias (atomics, and per-block partials with a second pass), and a training-style
step, forward and backward through autograd, against eager autograd and torch.compile.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from ..bench import Row, bench, copy_bandwidth, plot, table
from ..build import load
from ..exercises.lesson08 import EPS, register_layernorm

SHAPES = ((8192, 8192), (65536, 1024), (2048, 65536))
DTYPES = (torch.float32, torch.bfloat16)
SHORT = {torch.float32: "fp32", torch.bfloat16: "bf16"}
VARIANTS = [f"layernorm{k}" for k in range(1, 7)]
THREAD_PER_ROW = ("layernorm1", "layernorm2", "layernorm3")


def _torch_layernorm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), w, b, EPS)


def _torch_backward(dy, x, w, b, mean, rstd):
    return torch.ops.aten.native_layer_norm_backward(dy, x, [x.shape[-1]], mean[:, None], rstd[:, None], w, b,
                                                     [True, True, True])


def _close(got: torch.Tensor, want: torch.Tensor) -> bool:
    tol = 1e-4 if got.dtype == torch.float32 else 2e-2
    return torch.allclose(got.float(), want.float(), rtol=tol, atol=tol)


def _params(c: int, dt: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    return (1 + 0.1 * torch.randn(c, device="cuda")).to(dt), (0.1 * torch.randn(c, device="cuda")).to(dt)


def _forward_benches(ext, copy: float, out_dir: Path) -> list[Row]:
    csv = out_dir / "lesson08.csv"
    rows = []
    for dt in DTYPES:
        for r, c in SHAPES:
            x = torch.randn(r, c, device="cuda", dtype=dt)
            w, b = _params(c, dt)
            out = torch.empty_like(x)
            mean = torch.empty(r, device="cuda")
            rstd = torch.empty_like(mean)
            want = _torch_layernorm(x.float(), w.float(), b.float())
            names = [v for v in VARIANTS if not (v in THREAD_PER_ROW and c > 8192)]

            def all_correct(names=names) -> bool:
                results = []
                for name in names:
                    getattr(ext, name)(x, w, b, EPS, out, mean, rstd)
                    results.append(_close(out, want))
                return all(results)

            variants = {name: (lambda f=getattr(ext, name): f(x, w, b, EPS, out, mean, rstd)) for name in names}
            rows += bench(f"layernorm {r}x{c} {SHORT[dt]}", variants, bytes=2 * x.nbytes, torch_fn=_torch_layernorm,
                          args=(x, w, b), copy_gbps=copy, check=all_correct, csv_path=csv,
                          plot_path=out_dir / f"lesson08_layernorm_{r}x{c}_{SHORT[dt]}.png", show=False)
            del x, out, want
            torch.cuda.empty_cache()
    return rows


def _train_step(fn: Callable, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor,
                grad: torch.Tensor) -> Callable[[], object]:
    return lambda: torch.autograd.grad(fn(x, w, b), (x, w, b), grad)


def _backward_benches(ext, copy: float, out_dir: Path) -> list[Row]:
    csv = out_dir / "lesson08.csv"
    rows = []
    r, c = 8192, 8192
    for dt in DTYPES:
        s = SHORT[dt]
        x = torch.randn(r, c, device="cuda", dtype=dt)
        w, b = _params(c, dt)
        _, mean, rstd = ext.layernorm(x, w, b, EPS)
        dy = torch.randn_like(x)
        want = _torch_backward(dy.float(), x.float(), w.float(), b.float(), mean, rstd)

        def backward_ok() -> bool:
            return all(_close(got, ref) for name in ("layernorm_backward1", "layernorm_backward2")
                       for got, ref in zip(getattr(ext, name)(dy, x, w, mean, rstd), want))

        variants = {name: (lambda f=getattr(ext, name): f(dy, x, w, mean, rstd))
                    for name in ("layernorm_backward1", "layernorm_backward2")}
        rows += bench(f"layernorm backward {r}x{c} {s}", variants, bytes=3 * x.nbytes, torch_fn=_torch_backward,
                      args=(dy, x, w, b, mean, rstd), copy_gbps=copy, check=backward_ok, csv_path=csv,
                      plot_path=out_dir / f"lesson08_backward_{s}.png", show=False)
        xg, wg, bg = (t.clone().requires_grad_() for t in (x, w, b))
        compiled = torch.compile(_torch_layernorm)

        def ours(x, w, b):
            return ext.layernorm(x, w, b, EPS)[0]

        variants = {"torch.compile": _train_step(compiled, xg, wg, bg, dy),
                    "layernorm op": _train_step(ours, xg, wg, bg, dy)}
        # forward: x read, y written; backward: x and dy read, dx written
        rows += bench(f"layernorm fwd+bwd {r}x{c} {s}", variants, bytes=5 * x.nbytes,
                      torch_fn=_train_step(_torch_layernorm, xg, wg, bg, dy), args=(), compile=False, copy_gbps=copy,
                      csv_path=csv, plot_path=out_dir / f"lesson08_train_{s}.png", show=False)
        del x, dy, xg, want
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
